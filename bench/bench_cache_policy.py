"""Cache-aware clearing of tool results (#17): cache-read share and input cost per session.

The same scripted tool sessions are sent through the proxy's ``plan_edits`` with
clear_tool_results off (the baseline, measured in the same run), eager (clear past the trigger
each call), batched by ``clear_at_least``, and ``cache_aware`` (engine.prompt.cache_policy: clear only
batches that pay for the cache rebuild). A provider's prefix cache is modelled as the messages
each request shares with the previous one (a cache breakpoint on the last message, as Claude
Code and OpenAI's automatic caching give). ``python -m bench.bench_cache_policy [--quick]``.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from bench.report import Table, render_table


def tool_session(
    rounds: int, *, seed: int, sizes: tuple[int, int], model: str, marker: bool
) -> list[dict[str, Any]]:
    """One growing history per call: each round a tool call and a result of a random size; with
    ``marker`` the last message carries a cache_control breakpoint, as Claude Code sends it."""
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing parser test."}]
    bodies = []
    for i in range(rounds):
        lines = rng.randint(*sizes)
        text = "\n".join(f"src/parser_{i}.py:{n}: value_{i}_{n} = compute({n}, {i})" for n in range(lines))
        messages = [
            *messages,
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"n": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
        ]  # fmt: skip
        sent = messages
        if marker:
            last = {**sent[-1]["content"][-1], "cache_control": {"type": "ephemeral"}}
            sent = [*sent[:-1], {**sent[-1], "content": [*sent[-1]["content"][:-1], last]}]
        bodies.append(
            {"model": model, "max_tokens": 4096, "system": "You are a coding agent.", "messages": sent}
        )
    return bodies


def _unmarked(value: Any) -> Any:
    """A message without cache_control markers: they are not part of what a cache matches."""
    if isinstance(value, dict):
        return {k: _unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(v) for v in value]
    return value


def shared_prefix(previous: list[str] | None, texts: list[str]) -> int:
    """Messages a request shares with the previous one from the start: what a prefix cache reads."""
    shared = 0
    while (
        previous is not None and shared < min(len(previous), len(texts)) and previous[shared] == texts[shared]
    ):
        shared += 1
    return shared


def replay(bodies: list[dict[str, Any]], policy: Any, *, breakpoints: bool) -> dict[str, float]:
    """Tokens sent, read from the cache, newly appended and rebuilt over one session.

    ``breakpoints`` (Anthropic): the cache holds the previous request at its last-message
    breakpoint and is read only when this request extends it unchanged (an edit further back
    than the 20-block lookback misses); otherwise (OpenAI) any shared message prefix is read."""
    from engine.proxy.policies import Policies, SessionPolicyState, plan_edits
    from engine.settings import resolve_model_settings
    from engine.tokens import get_tokenizer

    tokenizer = get_tokenizer("anthropic")
    resolved = resolve_model_settings(bodies[0]["model"], "anthropic" if breakpoints else "openai")
    state = SessionPolicyState()
    previous: list[str] | None = None
    total = cached = new = clearings = 0
    for body in bodies:
        if policy is not None:
            outcome = plan_edits("anthropic_messages", body, Policies(clear_tool_results=policy),
                                 tokenizer=tokenizer, resolved=resolved, state=state)  # fmt: skip
            clearings += any(any(c.get("new") for c in e.changes) for e in outcome.edits)
            body = outcome.body or body
        texts = [json.dumps(_unmarked(m), sort_keys=True) for m in body["messages"]]
        tokens = [tokenizer.count(t) for t in texts]
        shared = shared_prefix(previous, texts)
        if breakpoints and previous is not None and shared < len(previous):
            shared = 0
        total += sum(tokens)
        cached += sum(tokens[:shared])
        new += sum(tokens[len(previous or []) :])  # appended since the previous call: never cached
        previous = texts
    return {"total": total, "cached": cached, "new": new, "clearings": clearings}


def run(quick: bool = False) -> list[Table]:
    from engine.cost import prices_for
    from engine.proxy.policies import ClearToolResultsPolicy

    sessions = [("30 calls, ~1k-token results", 30, (20, 40))]
    if not quick:
        sessions.append(("80 calls, 0.2k-4k-token results", 80, (5, 160)))
    caches = [
        ("Anthropic breakpoints", "claude-sonnet-4-6", True),
        ("OpenAI automatic prefix cache", "gpt-5", False),
    ]
    configs = [
        ("off", None),
        ("trigger 20k, keep 2 (eager)", ClearToolResultsPolicy(trigger=20_000, keep=2)),
        ("trigger 20k, keep 2, clear_at_least 15k", ClearToolResultsPolicy(trigger=20_000, keep=2, clear_at_least=15_000)),
        ("trigger 20k, keep 2, cache_aware", ClearToolResultsPolicy(trigger=20_000, keep=2, cache_aware=True)),
        ("trigger 10k, keep 2, cache_aware", ClearToolResultsPolicy(trigger=10_000, keep=2, cache_aware=True)),
    ]  # fmt: skip
    tables = []
    for cache, model, breakpoints in caches:
        prices = prices_for(model)
        read = prices.cache_read / prices.input if prices else 0.1
        write = prices.cache_write_5m / prices.input if prices and prices.cache_write_5m else 1.0
        for label, rounds, sizes in sessions:
            bodies = tool_session(rounds, seed=17, sizes=sizes, model=model, marker=breakpoints)
            table = Table(
                f"Cache-aware clear_tool_results, {cache} ({model}): {label}",
                [
                    "policy",
                    "clearings",
                    "prompt tokens sent",
                    "saved %",
                    "cache-read share",
                    "history hit rate",
                    "rebuilt tokens",
                    "input cost vs off",
                ],
                baseline="the same requests forwarded unchanged, in the same run",
            )
            base_cost = base_total = None
            for name, policy in configs:
                m = replay(bodies, policy, breakpoints=breakpoints)
                uncached = m["total"] - m["cached"]
                cost = uncached * write + m["cached"] * read  # uncached input is written to the cache
                base_cost = base_cost or cost
                base_total = base_total or m["total"]
                history = m["total"] - m["new"]
                table.add(
                    name, m["clearings"], m["total"], round(100 * (1 - m["total"] / base_total), 1),
                    round(m["cached"] / m["total"], 3), round(m["cached"] / history, 3) if history else 1.0,
                    uncached - m["new"], round(cost / base_cost, 3),
                )  # fmt: skip
            table.notes.append(
                f"Prices of {model} from the model table as ratios to uncached input: cache read x{read:.2f}, "
                f"write x{write:.2f}. history hit rate: cached tokens over the tokens the previous call already "
                "sent (1.0 unedited); rebuilt tokens: uncached tokens beyond the newly appended ones (0 unedited)."
            )
            tables.append(table)
    tables[-1].notes.append(
        "cache-read share = cached / prompt tokens: the newly appended tool output is uncached with or "
        "without a policy, and clearing shrinks the prompt it is divided by, so any saving lowers this ratio "
        "even with no rebuild at all; history hit rate and rebuilt tokens isolate what the policy costs the cache. "
        "Anthropic: an edit older than the 20-block lookback rebuilds every message (system and tools stay "
        "cached), which cache_aware prices in (engine.prompt.cache_policy.rebuild_start)."
    )
    return tables


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(render_table(t))
