"""Compaction planning time per strategy, offline summarizer (no LLM time), as history grows.

Each strategy plans ``compact()`` on the corpus with the session's tokenizer already warm (the
session manager has counted every message by then). The baseline is one cold exact count of
the same history. A planner whose measured growth would take longer than the time budget at
the next size is not run there; the table says what it would need.
"""

from __future__ import annotations

import math
import sys
import time
from typing import Any

from bench.common import EXACT_ID, fresh_tokenizer, history, prefix
from bench.report import Table, ms, ratio
from engine.compaction import STRATEGY_NAMES, OfflineSummarizer, compact
from engine.turns import has_orphans

SIZES = (5_000, 10_000, 100_000)
QUICK_SIZES = (200, 400)
#: What the planners aim at: 40% of a 200k window.
TARGET_TOKENS = 80_000
QUICK_TARGET_TOKENS = 20_000
#: A plan projected to take longer than this at a size is not run there.
BUDGET_S = 120.0
QUICK_BUDGET_S = 20.0


#: Messages appended before the re-plan that reuses the first plan's cached summary.
REPLAN_MESSAGES = 40


def plan_once(
    messages: list[Any], strategy: str, tokenizer: Any, target: int, cache: Any = ()
) -> tuple[float, Any]:
    summarizer = OfflineSummarizer(tokenizer)
    started = time.perf_counter()
    result = compact(
        messages,
        strategy=strategy,
        target_tokens=target,
        tokenizer=tokenizer,
        summarizer=summarizer,
        cache=cache,
    )
    return time.perf_counter() - started, result


def growth_exponent(points: list[tuple[int, float]]) -> float | None:
    """k in time ~ size**k, from the last two measured sizes."""
    if len(points) < 2:
        return None
    (n1, t1), (n2, t2) = points[-2], points[-1]
    if t1 <= 0 or t2 <= 0 or n1 == n2:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


def projected(points: list[tuple[int, float]], size: int) -> float | None:
    """Time at ``size`` if growth continues as measured (at least linear)."""
    if not points:
        return None
    k = max(growth_exponent(points) or 1.0, 1.0)
    n, t = points[-1]
    return t * (size / n) ** k


def run(quick: bool = False) -> Table:
    sizes = QUICK_SIZES if quick else SIZES
    target = QUICK_TARGET_TOKENS if quick else TARGET_TOKENS
    budget = QUICK_BUDGET_S if quick else BUDGET_S
    largest = max(sizes)
    history(largest + REPLAN_MESSAGES)
    table = Table(
        title="Compaction planning time per strategy (offline summarizer, warm token cache)",
        columns=[
            "strategy",
            "messages",
            "tokens before",
            "tokens after",
            "fits target",
            "plan ms",
            "cold exact count ms (baseline)",
            "plan ÷ count",
            "growth exponent",
        ],
        baseline=f"one cold exact count ({EXACT_ID}, empty cache) of the same history, this run.",
    )
    timings: dict[str, list[tuple[int, float]]] = {s: [] for s in STRATEGY_NAMES}
    for size in sizes:
        messages = prefix(size, largest=largest + REPLAN_MESSAGES)
        grown = prefix(size + REPLAN_MESSAGES, largest=largest + REPLAN_MESSAGES)
        counter = fresh_tokenizer(EXACT_ID)
        started = time.perf_counter()
        counter.count_messages(messages)
        count_s = time.perf_counter() - started
        tokenizer = fresh_tokenizer(EXACT_ID)
        tokenizer.count_messages(grown)
        for strategy in STRATEGY_NAMES:
            expected = projected(timings[strategy], size)
            if expected is not None and expected > budget:
                table.add(
                    strategy,
                    size,
                    None,
                    None,
                    None,
                    f"not run: ~{expected:,.0f} s projected",
                    ms(count_s),
                    None,
                    growth_exponent(timings[strategy]),
                )
                continue
            seconds, result = plan_once(messages, strategy, tokenizer, target)
            if has_orphans(result.messages):
                raise AssertionError(f"{strategy} at {size:,} messages left an orphaned tool_result")
            timings[strategy].append((size, seconds))
            table.add(
                strategy,
                size,
                result.before_tokens,
                result.after_tokens,
                result.fits,
                ms(seconds),
                ms(count_s),
                ratio(seconds, count_s),
                growth_exponent(timings[strategy]),
            )
            if strategy == "chain":  # the next plan, a turn later, reuses this one's summary
                again, replanned = plan_once(grown, strategy, tokenizer, target, cache=result.cache)
                table.add(
                    f"chain, re-planned {REPLAN_MESSAGES} messages later (cached summary)",
                    len(grown),
                    replanned.before_tokens,
                    replanned.after_tokens,
                    replanned.fits,
                    ms(again),
                    ms(count_s),
                    ratio(again, count_s),
                    None,
                )
        print(f"compaction: {size:,} messages done", file=sys.stderr, flush=True)
    table.notes += [
        f"Target {target:,} tokens. Growth exponent k: plan time ~ messages^k between the last two sizes "
        "measured (1 is linear).",
        f"A plan projected over {budget:.0f} s at a size (from its measured growth, at least linear) is not run there.",
        "Every plan is checked for orphaned tool_results.",
        f"The chain is planned again {REPLAN_MESSAGES} messages later with the first plan's cached summaries "
        "(result.cache; a session keeps them in context_states): only the new messages are summarized.",
    ]
    return table
