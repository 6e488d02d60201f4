"""Dashboard queries on a large store: ``python -m bench.bench_dashboard [--quick]``.

Builds a session database in the real schema (1,000 sessions / 200,000 messages; ``--quick``:
50 / 5,000) with bulk ``executemany`` (the per-session totals the store keeps back-filled, as
migration m008 does), then times what the dashboard does (attach through DuckDB's
sqlite scanner, the Sessions page aggregate, one session's timeline and the messages a turn sent)
against a baseline measured in the same run: a naive pandas read of every row through sqlite3,
then the same aggregates in pandas; and the first paint in a real browser (bench/first_paint.py).
Writes bench/results/dashboard.md.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

from bench import first_paint
from bench.common import RESULTS_DIR
from bench.report import Table, ms, ratio, render_markdown, timed
from dashboard import data
from engine.store.schema import apply_migrations
from engine.store.sqlite_rollups import backfill

FULL = (1_000, 200)  # sessions, messages per session
QUICK = (50, 100)
MESSAGES_PER_TURN = 4
MODELS = ("claude-sonnet-4-20250514", "gpt-4o", "gpt-4.1-mini")
NOW = "2026-01-01T00:00:00.000000Z"


def build_store(path: Path, sessions: int, per_session: int, seed: int = 0) -> dict[str, int]:
    """A realistic store: per session ``per_session`` messages, a request event per turn with its
    components and usage, a compaction and a forced final turn in some, offloaded blobs."""
    rng = random.Random(seed)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    apply_migrations(conn)
    conn.execute("BEGIN")
    session_rows, message_rows, event_rows, blob_rows = [], [], [], []
    for s in range(sessions):
        sid = f"s{s:05d}"
        model = MODELS[s % len(MODELS)]
        session_rows.append(
            (sid, f"Session {s}: task {rng.randint(1, 10_000)}", model, "anthropic" if "claude" in model else "openai",
             "o200k_base", 0, "engine", "final" if s % 7 == 0 else "ended", NOW, NOW)
        )  # fmt: skip
        conversation = tool_results = 0
        event_seq = 0
        for seq in range(per_session):
            turn = seq // MESSAGES_PER_TURN
            phase = seq % MESSAGES_PER_TURN
            kind, role = (("user_input", "user"), ("tool_use", "assistant"), ("tool_result", "user"), ("assistant", "assistant"))[phase]  # fmt: skip
            body = f"message {seq} of {sid}: " + "lorem ipsum dolor sit amet " * rng.randint(4, 40)
            tokens = len(body) // 4
            result_tokens = tokens if kind == "tool_result" else 0
            message_rows.append(
                (sid, seq, turn, role, kind, json.dumps(body), body[:200], "bash" if kind == "tool_use" else None,
                 tokens, result_tokens, "o200k_base", NOW)
            )  # fmt: skip
            conversation += tokens - result_tokens
            tool_results += result_tokens
            if phase == MESSAGES_PER_TURN - 1:
                total = 1200 + 300 + 800 + conversation + tool_results
                event_rows.append(
                    (sid, event_seq, turn, "request", None, None, model, 200_000, 8_000, 256, 191_744, total,
                     191_744 - total, 1200, 300, 800, 0, conversation, tool_results, 0,
                     total // 10, 120, total - total // 10, 200, seq, None, NOW)
                )  # fmt: skip
                event_seq += 1
        if s % 5 == 0:
            event_rows.append(
                (sid, event_seq, per_session // MESSAGES_PER_TURN // 2, "compaction", "compact_threshold", "compacted",
                 model, None, None, None, None, None, None, None, None, None, None, None, None, None,
                 None, None, None, None, None, json.dumps({"removed_message_seqs": list(range(10))}), NOW)
            )  # fmt: skip
            event_seq += 1
        if s % 7 == 0:
            event_rows.append(
                (sid, event_seq, (per_session - 1) // MESSAGES_PER_TURN, "guard", "tool_preflight", "forced_final",
                 model, 200_000, 8_000, 256, 191_744, 191_000, 744, 1200, 300, 800, 0, 1000, 187_700, 0,
                 None, None, None, None, per_session - 2, json.dumps({"sources": {"context_window": "builtin"}}), NOW)
            )  # fmt: skip
        if s % 3 == 0:
            content = (f"offloaded output of {sid}\n" * 200).encode()
            blob_rows.append(
                (f"res_{sid}", sid, "toolu_x", "bash", len(content), 1, 200, "0" * 64, content[:200].decode(), content, 1500, NOW)
            )  # fmt: skip
    conn.executemany(
        "INSERT INTO sessions (id, title, model, provider, tokenizer, tokens_exact, source, status, created_utc,"
        " updated_utc) VALUES (?,?,?,?,?,?,?,?,?,?)",
        session_rows,
    )
    conn.executemany(
        "INSERT INTO messages (session_id, seq, turn_index, role, kind, content_json, text_preview, tool_names,"
        " tokens, tool_result_tokens, tokenizer, created_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        message_rows,
    )
    conn.executemany(
        "INSERT INTO context_events (session_id, seq, turn_index, kind, trigger, outcome, model, context_window,"
        " max_output_tokens, buffer_tokens, limit_tokens, projected_tokens, remaining_tokens, system_tokens,"
        " skills_tokens, tools_tokens, summary_tokens, conversation_tokens, tool_results_tokens, offloaded_bytes,"
        " provider_input_tokens, provider_output_tokens, provider_cache_read_tokens, provider_cache_creation_tokens,"
        " message_seq, details_json, created_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        event_rows,
    )
    conn.executemany(
        "INSERT INTO tool_result_blobs (ref_id, session_id, tool_use_id, tool_name, size_bytes, is_text, line_count,"
        " sha256, preview, content, tokens, created_utc) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
        blob_rows,
    )
    backfill(conn)  # the per-session totals the store keeps (these inserts bypass its transaction), as m008
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {"sessions": len(session_rows), "messages": len(message_rows), "events": len(event_rows)}


# -- the baseline: read everything with pandas, aggregate in pandas ----------------------------


def pandas_load(path: Path) -> dict[str, pd.DataFrame]:
    conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)
    try:
        return {
            t: pd.read_sql(f"SELECT * FROM {t}", conn)
            for t in ("sessions", "messages", "context_events", "tool_result_blobs")
        }
    finally:
        conn.close()


def pandas_sessions(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    m = frames["messages"].groupby("session_id").agg(messages=("seq", "size"), turns=("turn_index", "max"))
    ev = frames["context_events"]
    req = ev[ev["kind"] == "request"]
    e = (
        req.assign(pct=req["projected_tokens"] * 100.0 / req["limit_tokens"])
        .groupby("session_id")
        .agg(peak_usage_pct=("pct", "max"), peak_tokens=("projected_tokens", "max"))
    )
    comp = ev[(ev["kind"] == "compaction") & (ev["outcome"] == "compacted")].groupby("session_id").size()
    final = ev[(ev["kind"] == "guard") & (ev["outcome"] == "forced_final")].groupby("session_id").size()
    blobs = frames["tool_result_blobs"].groupby("session_id")["size_bytes"].sum()
    out = frames["sessions"].set_index("id").join(m).join(e)
    return out.assign(compactions=comp, forced_final=final, offloaded_bytes=blobs).fillna(0)


def pandas_timeline(frames: dict[str, pd.DataFrame], session_id: str) -> pd.DataFrame:
    ev = frames["context_events"]
    req = ev[(ev["session_id"] == session_id) & (ev["kind"] == "request")]
    return req.sort_values("seq").groupby("turn_index").tail(1)


# -- run -----------------------------------------------------------------------------------------


def run(quick: bool = False) -> list[Table]:
    sessions, per_session = QUICK if quick else FULL
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-dashboard-") as tmp:
        path = Path(tmp) / "store.db"
        t0 = time.perf_counter()
        counts = build_store(path, sessions, per_session)
        build_s = time.perf_counter() - t0
        size_mb = path.stat().st_size / 1e6
        target = f"s{sessions // 2:05d}"
        repeat = 3 if quick else 2

        def ours_cold() -> None:
            con = data.connect([path])
            data.sessions_overview(con)
            con.close()

        def base_cold() -> None:
            pandas_sessions(pandas_load(path))

        con = data.connect([path])
        frames = pandas_load(path)
        label = data.db_labels([path])[0]
        overview = data.sessions_overview(con)
        if len(overview) != counts["sessions"] or int(overview["messages"].sum()) != counts["messages"]:
            raise AssertionError("the Sessions page query does not cover the store")
        turn = per_session // MESSAGES_PER_TURN - 1
        rows = [
            ("open + Sessions page (cold)", timed(ours_cold, repeat=repeat), timed(base_cold, repeat=repeat)),
            (
                "Sessions page query (warm)",
                timed(lambda: data.sessions_overview(con), repeat=repeat),
                timed(lambda: pandas_sessions(frames), repeat=repeat),
            ),
            (
                "timeline of one session",
                timed(lambda: data.timeline(con, label, target), repeat=repeat),
                timed(lambda: pandas_timeline(frames, target), repeat=repeat),
            ),
            (
                "messages one turn sent",
                timed(lambda: data.sent_messages(con, label, target, turn), repeat=repeat),
                timed(
                    lambda: frames["messages"][
                        (frames["messages"]["session_id"] == target)
                        & (frames["messages"]["turn_index"] <= turn)
                    ].sort_values("tokens", ascending=False),
                    repeat=repeat,
                ),
            ),
        ]
        con.close()
    table = Table(
        title=f"Dashboard queries ({counts['sessions']:,} sessions / {counts['messages']:,} messages)",
        columns=[
            "step",
            "ctxdesk DuckDB (ms)",
            "pandas read of all rows (ms, baseline)",
            "baseline / ctxdesk",
        ],
        baseline="pandas.read_sql of every row through sqlite3, then the same aggregates in pandas",
        notes=[
            "Cold: attach (ctxdesk) or read every row (baseline), then the Sessions page aggregate.",
            "Warm rows: ctxdesk queries SQLite through the scanner each time (nothing held in memory);"
            " the baseline aggregates frames it already holds, which needed the cold read first.",
        ],
    )
    for step, ours, base in rows:
        table.add(step, ms(ours), ms(base), ratio(base, ours))
    store = Table(
        title="Dashboard benchmark store",
        columns=["sessions", "messages", "events", "file (MB)", "bulk build (s)"],
        baseline="built with sqlite3 executemany into the real schema",
    )
    store.add(counts["sessions"], counts["messages"], counts["events"], round(size_mb, 1), round(build_s, 2))
    if not first_paint.is_available():
        store.notes.append("First paint not measured: chromium or Playwright is not installed.")
        return [table, store]
    return [table, store, first_paint.first_paint_table(runs=1 if quick else 3)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.bench_dashboard", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="50 sessions / 5,000 messages")
    parser.add_argument("--out", type=Path, default=RESULTS_DIR / "dashboard.md")
    args = parser.parse_args(argv)
    tables = run(quick=args.quick)
    text = render_markdown(tables, header=[f"{'Quick' if args.quick else 'Full'} sizes."])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text, encoding="utf-8")
    sys.stdout.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
