"""Fact retention on long sessions built from real agent transcripts, per strategy and category.

Six sessions (Claude Code, OpenHands, SWE-agent real; Cline, Codex, Gemini real where a real
client's fixture exists, else real transcripts rewritten into the dialect; see bench.real_facts)
get 40 facts each, 5 per category in varied phrasing (``dev``, ``held_out``, ``blind``, ``blind 2``, ``blind 3``), inserted in
the session's own dialect. Each session is compacted to 1/4 and 1/10 of its tokens by every
strategy with the offline summarizer; a fact is kept when all its match keys (fixed before any
run) are still in the summary or the kept messages.

    python -m bench.bench_real_facts [--quick]

Prints the tables and writes bench/results/real_facts.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.real_facts import CATEGORIES, SOURCES, SPLITS, build_session, context_text, is_kept
from bench.report import Table, render_table
from engine.compaction import STRATEGY_NAMES, OfflineSummarizer, compact
from engine.compaction.strategies import OVER_TARGET_REASONS
from engine.tokens import get_tokenizer
from engine.turns import has_orphans

RESULTS = Path(__file__).resolve().parent / "results" / "real_facts.md"
TOKENIZER_ID = "o200k_base"
RATIOS = (4, 10)


def run(quick: bool = False) -> list[Table]:
    tokenizer = get_tokenizer(TOKENIZER_ID)
    summarizer = OfflineSummarizer(tokenizer)
    sources = SOURCES[:2] if quick else SOURCES
    sessions = [(s.name, *build_session(s, seed)) for seed, s in enumerate(sources)]
    strategies = (
        (
            "chain",
            "summarize",
            "sandwich",
            "rolling_iterations",
            "tree_summary",
            "clear_tool_results",
            "truncate",
            "sliding_window",
            "emergency",
        )
        if not quick
        else ("chain", "truncate")
    )
    assert set(strategies) <= set(STRATEGY_NAMES)
    tables = []
    for ratio in RATIOS:
        table = Table(
            title=f"Fact retention on real transcripts at {ratio}× compression",
            columns=[
                "strategy",
                "all %",
                "dev %",
                "held-out %",
                "blind %",
                "blind 2 %",
                "blind 3 %",
                *(f"{c} %" for c in CATEGORIES),
                "tokens / target %",
                "fit target",
                "ms per compaction",
            ],
            baseline="the uncompacted session keeps every fact (at 100% of its own tokens)",
        )
        misses: dict[str, list[str]] = {}
        for strategy in strategies:
            kept = {c: 0 for c in (*CATEGORIES, *SPLITS)}
            total = dict.fromkeys(kept, 0)
            ratios: list[float] = []
            fits, elapsed = 0, 0.0
            for name, messages, facts in sessions:
                target = tokenizer.count_messages(messages) // ratio
                started = time.perf_counter()
                result = compact(
                    messages,
                    strategy=strategy,
                    target_tokens=target,
                    summarizer=summarizer,
                    tokenizer=tokenizer,
                )
                elapsed += time.perf_counter() - started
                if has_orphans(list(result.messages)):
                    raise AssertionError(f"{strategy} on {name} left an orphaned tool_use or tool_result")
                text = context_text(result.summary, result.messages)
                for fact in facts:
                    hit = is_kept(fact, text)
                    for key in (fact.category, fact.split):
                        total[key] += 1
                        kept[key] += hit
                ratios.append(100.0 * result.after_tokens / target)
                fits += result.fits
                if not result.fits:
                    misses.setdefault(strategy, []).append(name.split(" ")[0])
            n = sum(total[c] for c in CATEGORIES)
            table.add(
                strategy,
                100.0 * sum(kept[c] for c in CATEGORIES) / n,
                100.0 * kept["dev"] / total["dev"],
                100.0 * kept["held_out"] / total["held_out"],
                100.0 * kept["blind"] / total["blind"],
                100.0 * kept["blind 2"] / total["blind 2"],
                100.0 * kept["blind 3"] / total["blind 3"],
                *(100.0 * kept[c] / total[c] for c in CATEGORIES),
                sorted(ratios)[len(ratios) // 2],
                f"{fits}/{len(sessions)}",
                1000.0 * elapsed / len(sessions),
            )
        sizes = ", ".join(f"{name.split(' ')[0]} {tokenizer.count_messages(m):,}" for name, m, _ in sessions)
        table.notes += [
            f"Sessions (tokens, {TOKENIZER_ID}): {sizes}; {len(sessions[0][2])} facts each, 5 per category (dev, held-out, blind, blind 2, blind 3; see bench.real_facts).",
            "tokens / target is the median over sessions; a fact is kept when every one of its keys is in the "
            "summary or the kept messages (tool inputs and results included).",
            *(
                f"{s} missed the target on {', '.join(who)}: {OVER_TARGET_REASONS[s]}."
                for s, who in misses.items()
            ),
        ]
        tables.append(table)
    return tables


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="two sessions, two strategies (smoke-test size)")
    args = parser.parse_args(argv)
    text = "\n".join(render_table(t) for t in run(quick=args.quick))
    print(text)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
