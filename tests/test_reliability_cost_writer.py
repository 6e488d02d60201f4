"""The cost row of a request event is written in steps that do not grow with the session: every
query ``record_event`` runs for it is an index search (m005 indexes the calls that wrote the
cache), so a long session's run_turn does not walk back over its earlier calls."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.store.cost_writer import LAST_CACHE_WRITER_SQL
from engine.tokens import get_tokenizer


def _request(seq: int, total: int, *, cache_write: int = 0) -> ContextEvent:
    return ContextEvent(
        kind="request", trigger="user_input", outcome="ok", provider="anthropic",
        model="claude-sonnet-4-5", turn_index=seq // 2, projected_tokens=total,
        components=ComponentTokens(system=10, conversation=total),
        usage=ProviderUsage(input_tokens=total, output_tokens=5, cache_creation_input_tokens=cache_write),
        message_seq=seq,
    )  # fmt: skip


def _session(path: Path, calls: int) -> tuple[SessionStore, str]:
    store = SessionStore(path)
    sid = store.create_session(model="claude-sonnet-4-5", provider="anthropic")
    pairs = [m for i in range(calls) for m in (user(f"q{i}"), assistant(f"a{i}"))]
    rows = store.append_messages(sid, pairs, tokenizer=get_tokenizer("chars/4"))
    store.record_event(sid, _request(rows[1].seq, 100, cache_write=100))  # the one cache writer, first
    for row in rows[3::2]:
        store.record_event(sid, ContextEvent(kind="guard", trigger="turn_preflight", outcome="ok"))
        store.record_event(sid, _request(row.seq, 100 + row.seq))
    return store, sid


def test_every_query_of_a_cost_row_is_an_index_search(tmp_path: Path) -> None:
    store, sid = _session(tmp_path / "s.db", 300)
    (row,) = store.append_messages(sid, [assistant("last")], tokenizer=get_tokenizer("chars/4"))
    statements: list[str] = []
    with store.transaction() as conn:  # the cost row is written once this commits, on the same connection
        conn.set_trace_callback(statements.append)
        store.record_event(sid, _request(row.seq, 999))
    conn.set_trace_callback(None)
    reads = [s for s in statements if s.lstrip().upper().startswith("SELECT") and "sqlite_master" not in s]
    assert any("request_costs" in s for s in reads), statements  # the cost writer ran
    # planned on the store's own connection: the write transaction's totals read its temp tables
    plans = {s: [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {s}")] for s in reads}
    # a table scan, apart from the one constant row of a select of subqueries and the transaction's own
    # scratch table of the sessions it touched (temp._session_rollups_touched: those rows only)
    scans = {
        s: p
        for s, p in plans.items()
        if any(
            step.startswith("SCAN")
            and step not in ("SCAN CONSTANT ROW", "SCAN temp._session_rollups_touched")
            for step in p
        )
    }
    assert scans == {}
    costs = store.list_events(sid, kind="request")
    store.close()
    assert len(costs) == 301


def test_the_last_cache_writer_is_found_through_its_partial_index(tmp_path: Path) -> None:
    store, sid = _session(tmp_path / "s.db", 50)
    store.close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        plan = " ".join(r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {LAST_CACHE_WRITER_SQL}", (sid,)))
        found = conn.execute(LAST_CACHE_WRITER_SQL, (sid,)).fetchall()
        calls = conn.execute("SELECT count(*) FROM request_costs WHERE session_id = ?", (sid,)).fetchone()
    assert "request_costs_cache_writes" in plan
    assert found == [(0,)]  # the first call wrote the cache (5-minute TTL): none of the 49 after it
    assert calls == (50,)
