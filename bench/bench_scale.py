"""Issue #22's scale figures, each beside a baseline measured in the same run, in fresh processes.

- ``report --format json`` of a 200k-message engine-written session (100k calls): peak RSS of the
  child (its own VmHWM, bench.child_peak) against the same command on a 2k-message session, and against the database
  file's size (the report is written while it is read: engine.report.stream);
- offloading a 200 MB tool output: peak growth against its size (target <= 2x; m004 put the blob
  column last, so SQLite no longer materializes the zeroblob);
- the cost row of one request event (``record_event``) in a session of N calls none of which wrote
  the cache: median ms with the m005 index beside the same database without it (as before m005),
  and beside a 100-call session (O(1) per event: ratio ~1);
- ``run_turn`` at 100k messages on a session whose calls have cost rows (bench_run_turn with
  ``seed_calls``): overhead beside the guard alone.
``--quick`` shrinks every size (20k / 1k messages, 20 MB, 5k calls, 10k messages).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.bench_reliability import MB, cli_peak, make_session, offload_row, python_peak, run_turn_row
from bench.report import Table

SIZES = {"messages": 200_000, "small": 2_000, "offload": 200 * MB, "calls": 50_000, "turns": 100_000}
QUICK = {"messages": 20_000, "small": 1_000, "offload": 20 * MB, "calls": 5_000, "turns": 10_000}
#: record_event calls timed per cost-writer figure (the median is reported).
COST_EVENTS = 15


def report_row(folder: Path, messages: int, small: int) -> list[Any]:
    big, little = folder / "big.db", folder / "small.db"
    make_session(big, messages)
    make_session(little, small)
    code, err, peak, seconds = cli_peak(
        "report", str(big), "--format", "json", "--out", str(folder / "r.json")
    )
    if code != 0:
        raise RuntimeError(f"report failed: {err[-800:]}")
    _, _, base, base_s = cli_peak("report", str(little), "--format", "json", "--out", str(folder / "s.json"))
    written = (folder / "r.json").stat().st_size
    db_size = big.stat().st_size
    return [
        f"report --format json, {messages:,}-message session ({written / MB:,.0f} MB written, database "
        f"{db_size / MB:,.0f} MB, peak {peak / db_size:.1f}x the database)",
        "MB peak",
        round(peak / MB),
        round(base / MB),
        f"same, {small:,} messages ({base_s:.1f} s)",
        round(peak / base, 2),
        "streamed: flat in the size",
        round(seconds, 1),
    ]


def cost_writer_ms(db: Path, session_id: str, events: int) -> float:
    """Median ms of ``record_event`` for one request event (its cost row included)."""
    code = textwrap.dedent(f"""
        import json, statistics, time
        from engine.events import ComponentTokens, ContextEvent, ProviderUsage
        from engine.messages import assistant
        from engine.store import SessionStore
        from engine.tokens import get_tokenizer
        tok = get_tokenizer("chars/4")
        times = []
        with SessionStore({str(db)!r}) as store:
            for i in range({events}):
                (row,) = store.append_messages({session_id!r}, [assistant(f"extra {{i}}")], tokenizer=tok)
                event = ContextEvent(kind="request", trigger="user_input", outcome="ok", provider="openai",
                    model="gpt-4.1", turn_index=row.seq // 2, projected_tokens=100,
                    components=ComponentTokens(conversation=100),
                    usage=ProviderUsage(input_tokens=100, output_tokens=3), message_seq=row.seq)
                t0 = time.perf_counter()
                store.record_event({session_id!r}, event)
                times.append(time.perf_counter() - t0)
        print(json.dumps({{"ms": statistics.median(times) * 1000}}))
    """)
    figures, _, _ = python_peak(code)
    return float(figures["ms"])


def cost_writer_rows(folder: Path, calls: int) -> list[list[Any]]:
    big, small = folder / "calls.db", folder / "calls-small.db"
    big_id, small_id = make_session(big, calls * 2), make_session(small, 200)
    indexed = cost_writer_ms(big, big_id, COST_EVENTS)
    small_ms = cost_writer_ms(small, small_id, COST_EVENTS)
    with sqlite3.connect(big) as conn:  # the database as it was before m005
        conn.execute("DROP INDEX request_costs_cache_writes")
    unindexed = cost_writer_ms(big, big_id, COST_EVENTS)
    return [
        [
            f"cost row of one request event, session of {calls:,} calls (no cache writes)",
            "ms/event",
            round(indexed, 2),
            round(small_ms, 2),
            "same, 100 calls",
            round(indexed / small_ms, 2),
            "~1 (O(1) per event)",
            round(indexed / 1000, 5),
        ],
        [
            f"same, {calls:,} calls, without the m005 index (as before)",
            "ms/event",
            round(unindexed, 2),
            round(indexed, 2),
            "with the index",
            round(unindexed / indexed, 1),
            "-",
            round(unindexed / 1000, 5),
        ],
    ]


#: #33: the Sessions page at a year of history (sessions, messages per session), and its target.
PAGE_SIZES, PAGE_QUICK, PAGE_GOAL_MS = (10_000, 200), (500, 40), 300.0


def sessions_page_row(folder: Path, sessions: int, per_session: int) -> list[Any]:
    """#33: ``sessions_overview`` (the Sessions page's one query: the per-session totals the store
    keeps, ``_session_rollups``) on a store of ``sessions`` x ``per_session`` messages
    (bench_dashboard.build_store), warm best of 3, beside the baseline of a plain count of the
    messages per session through the same DuckDB connection (one full scan: about what the page
    cost when it aggregated the rows itself)."""
    from bench.bench_dashboard import build_store
    from bench.report import timed
    from dashboard import data

    path = folder / "sessions-page.db"
    counts = build_store(path, sessions, per_session)
    con = data.connect([path])
    try:
        overview = data.sessions_overview(con)
        if len(overview) != counts["sessions"] or int(overview["messages"].sum()) != counts["messages"]:
            raise AssertionError("the Sessions page query does not cover the store")
        page = timed(lambda: data.sessions_overview(con), repeat=3)
        scan = timed(
            lambda: con.execute("SELECT session_id, count(*) FROM messages GROUP BY 1").fetchall(), repeat=3
        )
    finally:
        con.close()
    return [
        f"Sessions page, {counts['sessions']:,} sessions / {counts['messages']:,} messages (#33)", "ms",
        round(page * 1e3), round(scan * 1e3), "count(*) of messages per session, same connection",
        round(page / scan, 2), f"≤ {PAGE_GOAL_MS:g} ms", round(page, 3),
    ]  # fmt: skip


def run(quick: bool = False) -> Table:
    sizes = QUICK if quick else SIZES
    table = Table(
        title="Scale (#22): streamed report, offload, cost writer, run_turn (fresh processes)",
        columns=["measure", "unit", "ctxdesk", "baseline", "baseline is", "ratio", "target", "seconds"],
        baseline="each row's own, measured in the same run",
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-scale-") as name:
        folder = Path(name)
        table.add(*report_row(folder, sizes["messages"], sizes["small"]))
        table.add(*offload_row(sizes["offload"], folder))
        for row in cost_writer_rows(folder, sizes["calls"]):
            table.add(*row)
        table.add(*run_turn_row(sizes["turns"], folder, seed_calls=True))
        table.add(*sessions_page_row(folder, *(PAGE_QUICK if quick else PAGE_SIZES)))
    table.notes.append(
        f"peak RSS of each child (its own VmHWM); sessions written as bench_reliability.make_session writes them "
        f"(one request event per reply, cost rows included); {time.perf_counter() - started:.0f} s in all"
    )
    return table


if __name__ == "__main__":
    from bench.report import render_table

    if "--json" in sys.argv:
        print(json.dumps(run(quick="--quick" in sys.argv).as_dict(), indent=2))
    else:
        print(render_table(run(quick="--quick" in sys.argv)))
