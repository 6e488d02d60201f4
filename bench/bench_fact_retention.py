"""Fact retention: how many planted facts survive each compaction strategy at the same budget.

Long synthetic agent sessions (the benchmark corpus) get facts planted at turn boundaries
spread over the whole session: decisions (assistant text), file paths (edit tool inputs),
error messages (failing tool results) and user constraints (user text). Each session is
compacted to the same target (a quarter of its tokens) by every strategy with the offline
summarizer; a fact counts as kept when its probe string is still in the compacted context
(summary + kept messages, tool inputs and results included).

    python -m bench.bench_fact_retention [--quick]
    python bench/bench_fact_retention.py [--quick]

Prints a markdown table and writes bench/results/fact_retention.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import generate_history
from bench.report import Table, render_table
from engine.compaction import STRATEGY_NAMES, CompactionResult, OfflineSummarizer, compact
from engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)
from engine.tokens import get_tokenizer
from engine.turns import parse_turn_boundaries

RESULTS = Path(__file__).resolve().parent / "results" / "fact_retention.md"
TOKENIZER_ID = "o200k_base"
#: Every strategy gets the same budget: this share of the session's tokens.
TARGET_SHARE = 0.25
FACTS_PER_KIND = 6
KINDS = ("decision", "file path", "error", "constraint")
FULL = {"sessions": 4, "messages": 360}
QUICK = {"sessions": 1, "messages": 160}

_LIBS = ("msgpack", "orjson", "zstandard", "argon2id", "tenacity", "structlog", "pyarrow", "httpx", "alembic")
_AREAS = (
    "cache serialization",
    "event log compression",
    "password hashing",
    "retry policy",
    "request logging",
    "parquet export",
    "outbound webhooks",
    "schema migrations",
    "rate limiter state",
)
_ALTERNATIVES = ("pickle", "gzip", "bcrypt", "a hand-rolled loop", "print statements", "csv", "requests")
_PACKAGES = ("billing", "ledger", "tenants", "webhooks", "exports", "auth", "scheduler", "search")
_MODULES = ("reconcile", "invoice_renderer", "quota_guard", "retry_budget", "token_bucket", "audit_trail")
_ERRORS = (
    ("IntegrityError", 'duplicate key value violates unique constraint "ix_tenant_{n}"'),
    ("KeyError", "'tenant_region_{n}'"),
    ("ValueError", "invoice total mismatch {n}.20 != {n}.02"),
    ("TimeoutError", "webhook delivery to hook_{n} exceeded 30s"),
    ("PermissionError", "[Errno 13] Permission denied: '/var/lib/app/spool_{n}'"),
    ("ZeroDivisionError", "division by zero in quota_ratio_{n}"),
)
_CONSTRAINTS = (
    "never commit directly to the release-{n} branch",
    "always keep the public v{n} API signatures backwards compatible",
    "do not add new runtime dependencies beyond the {n} pinned ones",
    "never log customer emails in the audit stream {n}",
    "keep every migration reversible down to revision {n}",
    "only use UTC timestamps in the ledger table {n}",
    "never run the backfill job {n} during business hours",
    "always gate the {n} feature behind the beta flag",
)


@dataclass(frozen=True)
class Fact:
    kind: str
    probe: str
    messages: tuple[Message, ...]


def plant_facts(rng: random.Random, session: int) -> list[Fact]:
    """FACTS_PER_KIND unique facts of each kind, each as a small turn of its own."""
    facts: list[Fact] = []
    for lib, area in zip(rng.sample(_LIBS, FACTS_PER_KIND), rng.sample(_AREAS, FACTS_PER_KIND), strict=True):
        probe = f"use {lib} for the {area}"
        facts.append(Fact("decision", probe, (
            user(f"What should we do about the {area}?"),
            assistant(f"I compared the options. We decided to {probe} instead of {rng.choice(_ALTERNATIVES)}."),
        )))  # fmt: skip
    for k in range(FACTS_PER_KIND):
        path = f"src/{rng.choice(_PACKAGES)}/{rng.choice(_MODULES)}_{session}{k}{rng.randint(100, 999)}.py"
        tid = f"fact_edit_{session}_{k}"
        facts.append(Fact("file path", path, (
            user("Please apply the change we discussed."),
            assistant("Applying it.", tool_use(tid, "edit_file", path=path, old_str="pass", new_str="return total")),
            tool_result(tid, "The file has been updated."),
            assistant("Done."),
        )))  # fmt: skip
    for k, (kind, message) in enumerate(rng.sample(_ERRORS, FACTS_PER_KIND)):
        line = f"{kind}: {message.format(n=rng.randint(1000, 9999))}"
        tid = f"fact_err_{session}_{k}"
        trace = f'Traceback (most recent call last):\n  File "app/main.py", line {rng.randint(10, 400)}, in run\n{line}\n'
        facts.append(Fact("error", line, (
            user("Run the nightly job locally."),
            assistant("", tool_use(tid, "bash", command=f"python -m app.jobs.nightly --shard {k}")),
            tool_result(tid, trace, is_error=True),
            assistant("The failure came from stale fixtures; I fixed it by regenerating them."),
        )))  # fmt: skip
    for template in rng.sample(_CONSTRAINTS, FACTS_PER_KIND):
        constraint = template.format(n=rng.randint(10, 99))
        facts.append(Fact("constraint", constraint, (
            user(f"One more rule for this project: {constraint}."),
            assistant("Understood, I will follow that."),
        )))  # fmt: skip
    rng.shuffle(facts)
    return facts


def build_session(seed: int, n_messages: int) -> tuple[list[Message], list[Fact]]:
    """The corpus session with facts inserted at turn boundaries spread evenly across it."""
    rng = random.Random(seed)
    filler = generate_history(n_messages, seed=seed)
    facts = plant_facts(rng, seed)
    starts = parse_turn_boundaries(filler)[1:]
    # Spread over the session, oldest to newest (several may share a boundary); the last tenth
    # stays filler so a strategy cannot keep every fact by keeping the tail.
    slots = sorted(rng.choices(starts[: max(1, int(len(starts) * 0.9))], k=len(facts)))
    out: list[Message] = []
    previous = 0
    for slot, fact in zip(slots, facts, strict=True):
        out.extend(filler[previous:slot])
        out.extend(fact.messages)
        previous = slot
    out.extend(filler[previous:])
    return out, facts


def context_text(result: CompactionResult) -> str:
    """Everything the model would see after compaction, lower-cased."""
    parts = [result.summary or ""]
    for message in result.messages:
        for block in message.blocks:
            if isinstance(block, TextBlock | ToolResultBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts.append(json.dumps(block.input, ensure_ascii=False))
    return "\n".join(parts).lower()


def run(quick: bool = False) -> Table:
    sizes = QUICK if quick else FULL
    tokenizer = get_tokenizer(TOKENIZER_ID)
    summarizer = OfflineSummarizer(tokenizer)
    sessions = [build_session(seed, sizes["messages"]) for seed in range(sizes["sessions"])]
    table = Table(
        title="Fact retention by compaction strategy",
        columns=[
            "strategy",
            "facts kept %",
            *(f"{k}s %" for k in KINDS),
            "tokens / target %",
            "fit target",
            "ms per compaction",
        ],
        baseline="the uncompacted session keeps every fact at 400% of the target",
    )
    table.add("none (uncompacted)", 100.0, 100.0, 100.0, 100.0, 100.0, 100.0 / TARGET_SHARE, "—", None)
    for strategy in STRATEGY_NAMES:
        kept = dict.fromkeys(KINDS, 0)
        total = dict.fromkeys(KINDS, 0)
        ratios: list[float] = []
        fits = 0
        elapsed = 0.0
        for messages, facts in sessions:
            target = int(tokenizer.count_messages(messages) * TARGET_SHARE)
            started = time.perf_counter()
            result = compact(
                messages, strategy=strategy, target_tokens=target, summarizer=summarizer, tokenizer=tokenizer
            )
            elapsed += time.perf_counter() - started
            text = context_text(result)
            for fact in facts:
                total[fact.kind] += 1
                kept[fact.kind] += fact.probe.lower() in text
            ratios.append(100.0 * result.after_tokens / target)
            fits += result.fits
        share = {k: 100.0 * kept[k] / total[k] for k in KINDS}
        table.add(
            strategy,
            100.0 * sum(kept.values()) / sum(total.values()),
            *(share[k] for k in KINDS),
            sum(ratios) / len(ratios),
            f"{fits}/{len(sessions)}",
            1000.0 * elapsed / len(sessions),
        )
    n_tokens = sum(tokenizer.count_messages(m) for m, _ in sessions) // len(sessions)
    table.notes += [
        f"{len(sessions)} synthetic session(s) of ~{sizes['messages']} corpus messages (~{n_tokens:,} tokens) with "
        f"{FACTS_PER_KIND} facts of each kind planted at turn boundaries over the first 90% of the session.",
        f"Every strategy compacts to the same target: {TARGET_SHARE:.0%} of the session's tokens "
        f"({TOKENIZER_ID}), default settings, offline summarizer (no API).",
        "A fact is kept when its probe (decision phrase, file path, exception line, constraint) is in the "
        "summary or the kept messages, tool inputs and results included.",
        "Facts sit in message text, tool inputs and failing outputs; facts buried inside successful tool "
        "outputs are not planted, so clear_tool_results (which keeps an error line) loses none here.",
        "emergency ignores the target by design (it drops ~half the turns after a provider error); "
        "sliding_window keeps a fixed number of messages.",
    ]
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one short session (smoke-test size)")
    args = parser.parse_args(argv)
    text = render_table(run(quick=args.quick))
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
