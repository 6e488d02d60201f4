"""The proxy's policies beside headroom (PyPI ``headroom-ai``) on the same real sessions (#17).

Each session of ``bench.real_facts`` (real agent transcripts with 40 facts planted in the
agent's own dialect, match keys fixed before any run) is replayed as the requests an agent
would send: one Anthropic Messages request per model call, the history up to that call. Every
request goes through each policy (``engine.proxy.policy.policies.plan_edits`` with the session's
sticky state, as the proxy runs it) and through ``headroom.compress`` (its library call, the
same per-request rewrite its proxy makes; once as is and once with ``frozen_message_count`` =
the previous request's messages, its cache-safe mode). Printed per policy: prompt tokens sent
and saved against the unedited requests (measured in the same run), the cache-read share a
prefix cache gives (each request's messages shared with the previous one sent), and facts kept:
planted facts whose keys are all in the last request sent (for offload also those readable
back through read_result). The model's window is set to ``WINDOW`` tokens so that the policies
have work to do on sessions of 25k-120k tokens (the quick run: the two shortest).

    python -m bench.bench_headroom [--quick]           # ctxdesk's policies only
    /tmp/hrvenv/bin/python -m bench.bench_headroom      # with headroom (a venv that has it)

headroom is not a dependency: make the venv with ``python -m venv --system-site-packages
/tmp/hrvenv && /tmp/hrvenv/bin/pip install headroom-ai``; its ML text compressor is used when
its model is available offline, else headroom runs without it (the row says which).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from bench.bench_cache_policy import shared_prefix
from bench.real_facts import SOURCES, Fact, build_session, is_kept
from bench.report import Table, render_table

MODEL = "claude-sonnet-4-5"
WINDOW = 32_000
MAX_OUTPUT = 4_000


def requests_of(messages: list[Any]) -> Iterator[dict[str, Any]]:
    """One request body per model call: the history before each assistant message."""
    from engine.convert import to_anthropic

    rendered = to_anthropic(messages)
    for i, message in enumerate(messages):
        if message.role == "assistant" and i and rendered[i - 1]["role"] == "user":
            yield {"model": MODEL, "max_tokens": MAX_OUTPUT, "system": "You are a coding agent.",
                   "messages": rendered[:i]}  # fmt: skip


def _strings(value: Any, out: list[str]) -> list[str]:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)
    return out


def facts_kept(facts: list[Fact], body: dict[str, Any], extra: str = "") -> int:
    text = ("\n".join(_strings(body.get("messages"), [])) + "\n" + extra).lower()
    return sum(is_kept(f, text) for f in facts)


Rewrite = Callable[[dict[str, Any], list[dict[str, Any]] | None], tuple[dict[str, Any], str]]


def ctxdesk_policy(policies: Any) -> Callable[[], Rewrite]:
    """A fresh per-session rewrite through the proxy's planner (sticky state kept between calls)."""

    def make() -> Rewrite:
        from engine.proxy.policy.policies import SessionPolicyState, plan_edits
        from engine.settings import Settings, resolve_model_settings
        from engine.tokens import get_tokenizer

        settings = Settings.from_dict(
            {
                "models": {
                    MODEL: {"context_window": WINDOW, "max_output_tokens": MAX_OUTPUT, "buffer_tokens": 0}
                }
            }
        )
        resolved = resolve_model_settings(MODEL, "anthropic", settings)
        tokenizer = get_tokenizer("anthropic")
        state = SessionPolicyState()
        stored: list[str] = []

        def rewrite(
            body: dict[str, Any], previous: list[dict[str, Any]] | None
        ) -> tuple[dict[str, Any], str]:
            outcome = plan_edits("anthropic_messages", body, policies, tokenizer=tokenizer, resolved=resolved,
                                 state=state)  # fmt: skip
            stored.extend(text for _, text, _ in outcome.blobs)
            return outcome.body or body, "\n".join(stored) if policies.offload is not None else ""

        return rewrite

    return make


def headroom_rewrite(frozen: bool) -> Callable[[], Rewrite]:
    def make() -> Rewrite:
        from headroom import compress
        from headroom.compress import CompressConfig

        def rewrite(
            body: dict[str, Any], previous: list[dict[str, Any]] | None
        ) -> tuple[dict[str, Any], str]:
            count = len(previous or []) if frozen else 0
            result = compress(body["messages"], model=MODEL, model_limit=WINDOW,
                              config=CompressConfig(frozen_message_count=count))  # fmt: skip
            return {**body, "messages": result.messages}, ""

        return rewrite

    return make


def kompress_available() -> bool:
    """Whether headroom's ML text compressor (its Kompress model) is in the local model cache."""
    from pathlib import Path

    home = Path.home() / ".cache" / "huggingface" / "hub"
    return (home / "models--chopratejas--kompress-v2-base").is_dir()


def headroom_status() -> str | None:
    """None when headroom imports, else why not."""
    try:
        import headroom
    except ImportError as exc:
        return f"headroom-ai not importable in this Python ({exc}); see the module docstring"
    return None if getattr(headroom, "__version__", None) else "headroom imported without a version"


def replay(
    bodies: list[dict[str, Any]], make: Callable[[], Rewrite] | None, facts: list[Fact]
) -> dict[str, Any]:
    from engine.tokens import get_tokenizer

    tokenizer = get_tokenizer("anthropic")
    rewrite = make() if make is not None else None
    previous_texts: list[str] | None = None
    previous_sent: list[dict[str, Any]] | None = None
    total = cached = 0
    sent: dict[str, Any] = bodies[-1]
    extra = ""
    started = time.perf_counter()
    for body in bodies:
        sent, extra = rewrite(body, previous_sent) if rewrite is not None else (body, "")
        texts = [json.dumps(m, ensure_ascii=False, sort_keys=True) for m in sent["messages"]]
        tokens = [tokenizer.count(t) for t in texts]
        shared = shared_prefix(previous_texts, texts)
        total += sum(tokens)
        cached += sum(tokens[:shared])
        previous_texts, previous_sent = texts, sent["messages"]
    final_tokens = sum(tokenizer.count(t) for t in previous_texts or [])
    return {
        "total": total, "cached": cached, "final": final_tokens, "kept": facts_kept(facts, sent),
        "retrievable": facts_kept(facts, sent, extra) if extra else None, "seconds": time.perf_counter() - started,
    }  # fmt: skip


def run(quick: bool = False) -> list[Table]:
    from engine.policy_settings import ClearToolResultsPolicy, CompactionPolicy, OffloadPolicy, Policies

    rows: list[tuple[str, Callable[[], Rewrite] | None]] = [
        ("unedited", None),
        ("ctxdesk clear_tool_results (trigger 20k, keep 3)",
         ctxdesk_policy(Policies(clear_tool_results=ClearToolResultsPolicy(trigger=20_000, keep=3)))),
        ("ctxdesk clear_tool_results (trigger 20k, keep 3, cache_aware)",
         ctxdesk_policy(Policies(clear_tool_results=ClearToolResultsPolicy(trigger=20_000, keep=3, cache_aware=True)))),
        ("ctxdesk offload (8 KB, read_result)", ctxdesk_policy(Policies(offload=OffloadPolicy(threshold_bytes=8_000)))),
        ("ctxdesk compaction (chain at 0.9)",
         ctxdesk_policy(Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.9)))),
    ]  # fmt: skip
    skipped = headroom_status()
    if skipped is None:
        rows += [("headroom compress", headroom_rewrite(False)),
                 ("headroom compress (frozen prefix)", headroom_rewrite(True))]  # fmt: skip
    sources = SOURCES[2:4] if quick else SOURCES
    table = Table(
        f"Proxy policies beside headroom on real sessions with planted facts ({WINDOW // 1000}k window)",
        [
            "policy",
            "sessions",
            "requests",
            "prompt tokens sent",
            "saved %",
            "cache-read share",
            "last request tokens",
            "facts kept %",
            "facts kept or readable %",
            "seconds",
        ],
        baseline="the same requests unedited, in the same run",
    )
    sessions = []
    for seed, source in enumerate(sources):
        messages, facts = build_session(source, seed)
        sessions.append((source.name, list(requests_of(messages)), facts))
    base_total = None
    per_session: dict[str, list[str]] = {}
    for label, make in rows:
        agg = {"total": 0, "cached": 0, "final": 0, "kept": 0, "retrievable": 0, "seconds": 0.0}
        facts_n = requests = 0
        for name, bodies, facts in sessions:
            m = replay(bodies, make, facts)
            requests += len(bodies)
            facts_n += len(facts)
            for key in ("total", "cached", "final", "kept", "seconds"):
                agg[key] += m[key]
            agg["retrievable"] += m["retrievable"] if m["retrievable"] is not None else m["kept"]
            per_session.setdefault(name, []).append(f"{label}: {m['kept']}/{len(facts)}")
        base_total = base_total or agg["total"]
        table.add(
            label, len(sessions), requests, agg["total"], round(100 * (1 - agg["total"] / base_total), 1),
            round(agg["cached"] / agg["total"], 3), agg["final"], round(100 * agg["kept"] / facts_n, 1),
            round(100 * agg["retrievable"] / facts_n, 1), round(agg["seconds"], 1),
        )  # fmt: skip
    if skipped:
        table.notes.append(f"headroom not run: {skipped}.")
    else:
        import headroom

        table.notes.append(
            f"headroom-ai {headroom.__version__} (`compress`, default config; the frozen-prefix row passes "
            "frozen_message_count = the previous request's message count, as its proxy does). "
            + ("Its Kompress model was in the local cache." if kompress_available() else
               "Offline, without its Kompress model (chopratejas/kompress-v2-base, not in the local cache and not "
               "downloaded here): its ML text compression did not run, its rule-based transforms did.")
        )  # fmt: skip
    table.notes.append(
        "facts kept: planted facts (bench.real_facts, 40 per session) whose match keys all survive in the last "
        "request sent; readable adds what offload stored and read_result returns. The unedited requests exceed "
        "the window by the end: they are the baseline for tokens, not a request a provider would accept."
    )
    table.notes.append("per session: " + "; ".join(f"{n} [{', '.join(v)}]" for n, v in per_session.items()))
    return [table]


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(render_table(t))
