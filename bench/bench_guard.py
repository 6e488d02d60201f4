"""Per-turn guard evaluation as history grows: incremental accounting versus recounting.

At each history size, a turn is one new message counted and one guard evaluation. ctxdesk
counts the new message (per-message cache) and adds it to the guard's running total; the
baseline recounts the whole history with the same exact tokenizer and an empty cache; LangChain's
``trim_messages`` runs in bench/.venv. The incremental total must equal the recount at every size.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

from bench.common import EXACT_ID, ROOT, fresh_copies, fresh_tokenizer, history, prefix
from bench.corpus import generate_history
from bench.report import Table, ms, ratio, timed
from engine.budget import HistoryTotals, measure_components
from engine.events import ComponentTokens
from engine.guard import ContextGuard, GuardTarget
from engine.settings import Settings, resolve_model_settings

SIZES = (100, 1_000, 10_000, 100_000)
QUICK_SIZES = (100, 500)
TURNS = 50
QUICK_TURNS = 20
#: Turns timed on the SessionManager's path (running history totals, a fresh guard per call).
MANAGER_TURNS = 10
MODEL = "gpt-4.1"
#: A window no corpus size reaches, so every size is evaluated as an ordinary turn (a real
#: session would have compacted long before 100,000 messages; the cost is the same).
BENCH_WINDOW = 1_000_000_000
#: What LangChain's trim keeps: a 200k window less a 32k reply reserve.
TRIM_LIMIT = 168_000
LANGCHAIN_TIMEOUT_S = 1_800


def bench_target() -> GuardTarget:
    settings = Settings.from_dict({"models": {MODEL: {"context_window": BENCH_WINDOW}}})
    return GuardTarget.from_settings(resolve_model_settings(MODEL, settings=settings))


def recount_repeats(size: int, quick: bool = False) -> int:
    if quick:
        return 2
    return 5 if size <= 1_000 else 2 if size <= 10_000 else 1


def session_manager_turns(
    messages: list[Any], turns: list[Any], tokenizer: Any, target: GuardTarget
) -> float:
    """Median per-call time of the SessionManager's accounting: the new message added to its
    running history totals (engine.budget.HistoryTotals, as SessionManager._append does), the
    request's components from those totals, and a fresh guard evaluating them. The totals are
    checked against a cold full measure_components of the same history afterwards."""
    totals = HistoryTotals(tokenizer, messages)  # what the manager holds after a resume
    added: list[Any] = []
    per_turn: list[float] = []
    for message in fresh_copies(turns):
        t0 = time.perf_counter()
        totals.extend([message])
        components = ComponentTokens(conversation=totals.conversation, tool_results=totals.tool_results)
        guard = ContextGuard(tokenizer, current=components.total)
        guard.evaluate_request([target], components=components)
        per_turn.append(time.perf_counter() - t0)
        added.append(message)
    recount = measure_components(tokenizer=fresh_tokenizer(EXACT_ID), messages=[*messages, *added])
    if (totals.conversation, totals.tool_results) != (recount.conversation, recount.tool_results):
        raise AssertionError(
            f"running totals ({totals.conversation:,}, {totals.tool_results:,}) differ from a full "
            f"recount ({recount.conversation:,}, {recount.tool_results:,})"
        )
    per_turn.sort()
    return per_turn[len(per_turn) // 2]


def measure_size(
    size: int, *, largest: int, turns: list[Any], target: GuardTarget, quick: bool = False
) -> dict[str, Any]:
    """Time ctxdesk's incremental turns, then the recount baseline over the same final history."""
    tokenizer = fresh_tokenizer(EXACT_ID)
    messages = list(prefix(size, largest=largest))
    started = time.perf_counter()
    guard = ContextGuard(tokenizer, current=tokenizer.count_messages(messages))
    build_s = time.perf_counter() - started

    per_turn: list[float] = []
    for message in fresh_copies(turns):
        t0 = time.perf_counter()
        guard.add_new(tokenizer.count_message(message), message_seq=len(messages))
        guard.evaluate_request([target])
        guard.commit_turn()
        per_turn.append(time.perf_counter() - t0)
        messages.append(message)
    per_turn.sort()
    incremental_s = per_turn[len(per_turn) // 2]

    totals: list[int] = []

    def recount() -> None:
        fresh = fresh_tokenizer(EXACT_ID)
        total = fresh.count_messages(messages)
        check = ContextGuard(fresh, current=total)
        check.evaluate_request([target])
        totals.append(total)

    recount_s = timed(recount, repeat=recount_repeats(size, quick))
    exact = all(t == guard.counters.current for t in totals)
    if not exact:
        raise AssertionError(
            f"{size:,} messages: incremental total {guard.counters.current:,} != recount {totals[0]:,}"
        )
    manager_s = session_manager_turns(messages, turns[:MANAGER_TURNS], tokenizer, target)
    return {
        "size": size,
        "tokens": guard.counters.current,
        "build_s": build_s,
        "incremental_s": incremental_s,
        "recount_s": recount_s,
        "manager_s": manager_s,
        "exact": exact,
    }


def run_langchain(
    sizes: tuple[int, ...], python: str | None, skip_reason: str | None, *, quick: bool = False
) -> dict[str, Any]:
    """LangChain timings from bench/.venv's python, or ``{"skipped": why}``."""
    if python is None:
        return {"skipped": skip_reason or "bench/.venv not available"}
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    try:
        done = subprocess.run(
            [
                python,
                "-m",
                "bench.langchain_trim",
                "--sizes",
                ",".join(map(str, sizes)),
                "--limit",
                str(TRIM_LIMIT),
                *(["--quick"] if quick else []),
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=LANGCHAIN_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return {"skipped": f"LangChain run exceeded {LANGCHAIN_TIMEOUT_S} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {"skipped": f"LangChain run failed: {tail}"}
    return json.loads(done.stdout)


def run(quick: bool = False, *, venv_python: str | None = None, venv_note: str | None = None) -> Table:
    sizes = QUICK_SIZES if quick else SIZES
    largest = max(sizes)
    turns = generate_history(QUICK_TURNS if quick else TURNS, seed=1)
    target = bench_target()
    history(largest)  # generate once, before any timing
    results = []
    for size in sizes:
        results.append(measure_size(size, largest=largest, turns=turns, target=target, quick=quick))
        print(f"guard: {size:,} messages done", file=sys.stderr, flush=True)
    lc = run_langchain(sizes, venv_python, venv_note, quick=quick)

    table = Table(
        title="Per-turn guard evaluation as history grows (ms per turn)",
        columns=[
            "messages",
            "history tokens",
            "ctxdesk incremental",
            "exact recount (baseline)",
            "recount ÷ ctxdesk",
            "SessionManager path",
            "LangChain trim, approx",
            "LangChain trim, exact o200k",
            "LangChain approx ÷ ctxdesk",
            "incremental = recount",
        ],
        baseline=(
            f"recounting the whole history each turn with the same exact tokenizer ({EXACT_ID}), "
            "empty cache, measured in this run."
        ),
    )
    lc_sizes = lc.get("sizes", {})
    for r in results:
        row = lc_sizes.get(str(r["size"]), {})
        approx, exact = row.get("approx_s"), row.get("exact_s")
        skipped = lc.get("skipped")
        table.add(
            r["size"],
            r["tokens"],
            ms(r["incremental_s"]),
            ms(r["recount_s"]),
            ratio(r["recount_s"], r["incremental_s"]),
            ms(r["manager_s"]),
            ms(approx) if approx is not None else ("skipped" if skipped else None),
            ms(exact) if exact is not None else ("skipped" if skipped else None),
            ratio(approx, r["incremental_s"]),
            r["exact"],
        )
    first, last = results[0], results[-1]
    growth = ratio(last["incremental_s"], first["incremental_s"])
    table.notes += [
        f"A turn: one new message counted and one ContextGuard.evaluate_request; median of {len(turns)} turns "
        "of the same traffic at every size (fresh message objects, empty per-message cache for them).",
        f"ctxdesk's running total per turn at {last['size']:,} messages is {growth:.2f}x its cost at "
        f"{first['size']:,}: it does not grow with history. The SessionManager path is "
        f"{ratio(last['manager_s'], first['manager_s']):.2f}x: it keeps running totals too.",
        "ctxdesk incremental: ContextGuard's running total (add_new, evaluate_request, commit_turn). "
        "SessionManager path: the manager's accounting per model call: the new message added to its running "
        "history totals (HistoryTotals; recounted only when a compaction or resume replaces the history), the "
        f"components taken from them, then a fresh ContextGuard (median of {MANAGER_TURNS} turns); the totals "
        "are checked equal to a cold full measure_components afterwards.",
        "Corpus: bench/corpus.py (prose, code, JSON tool arguments, long logs, non-ASCII), seed 0.",
    ]
    if lc.get("skipped"):
        table.notes.append(f"LangChain skipped: {lc['skipped']}.")
    else:
        table.notes.append(
            f"LangChain: langchain-core {lc['langchain_core']} trim_messages(strategy='last', start_on='human', "
            f"max_tokens={TRIM_LIMIT:,}) in bench/.venv; its trim also chooses what to keep, ctxdesk's guard only "
            "measures (choosing is compaction, timed separately)."
        )
    return table
