"""Events held by a batched write (engine/store/event_batch.py) and inserted together are the rows
``record_event`` writes one at a time: same ids, seqs, columns, exact requests and cost rows, on
real agents' files; a read inside the batch sees them; a missing session loses nothing stored."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest

import engine.store.event_batch as event_batch_module
import engine.store.sql_store as store_module
from engine.errors import NotFoundError
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.importers import import_files
from engine.messages import user
from engine.store import SessionStore
from engine.store.event_batch import HELD_ROWS
from engine.store.records import event_from_row
from engine.tokens import get_tokenizer

FIXTURES = Path(__file__).parent / "fixtures" / "real_agents"
CLAUDE = FIXTURES / "claude-code"
#: A codex rollout, Claude Code with an auto-compaction, with exact requests and failed calls, a fork.
SOURCES = {
    "codex": [next((FIXTURES / "codex").rglob("rollout-*.jsonl"))],
    "claude_compact_auto": sorted((CLAUDE / "compact_auto" / "transcripts").rglob("*.jsonl")),
    "claude_provider_error": sorted((CLAUDE / "provider_error" / "transcripts").rglob("*.jsonl")),
    "claude_fork": sorted((CLAUDE / "fork_session" / "transcripts").rglob("*.jsonl")),
}
UNSTABLE = {"created_utc", "updated_utc", "computed_utc"}


def _tables(db: Path) -> dict[str, list[tuple[object, ...]]]:
    conn = sqlite3.connect(db)
    try:
        out = {}
        for (table,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name != '_migrations'"
        ):
            if table.startswith("sqlite_"):
                continue
            columns = [r[1] for r in conn.execute(f"PRAGMA table_info({table})") if r[1] not in UNSTABLE]
            out[table] = sorted(map(repr, conn.execute(f"SELECT {', '.join(columns)} FROM {table}")))
        return out
    finally:
        conn.close()


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_a_batched_import_writes_the_rows_of_an_event_by_event_one(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = SOURCES[name]
    assert files, name
    with SessionStore(tmp_path / "batched.db") as store:
        import_files(files, store)
    monkeypatch.setattr(SessionStore, "batched_costs", lambda self: contextlib.nullcontext())
    with SessionStore(tmp_path / "one_by_one.db") as store:
        import_files(files, store)
    batched, one_by_one = _tables(tmp_path / "batched.db"), _tables(tmp_path / "one_by_one.db")
    assert batched["context_events"] and batched["messages"]
    for table in one_by_one:
        assert batched[table] == one_by_one[table], table


def _event(i: int, *, usage: bool = True, components: bool = True) -> ContextEvent:
    return ContextEvent(
        kind="request", provider="anthropic", model="claude-sonnet-4-5", turn_index=i, message_seq=i,
        projected_tokens=100 + i, components=ComponentTokens(system=10, conversation=90 + i) if components else None,
        usage=ProviderUsage(input_tokens=100 + i, output_tokens=5) if usage else None,
        details={"n": i, "note": "x-api-key sk-ant-api03-0123456789abcdefghij"}, messages_excluded=(0,) if i else (),
    )  # fmt: skip


def test_events_held_by_a_batch_are_what_a_read_gives_and_a_read_inside_sees_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store_module, "utc_now", lambda: "2026-01-01T00:00:00.000000Z")
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(session_id="s")
        first = store.record_event(sid, _event(0))  # one at a time, before the batch
        with store.batched_costs():
            ids = [
                store.record_event(sid, _event(i, usage=i % 2 == 0, components=i % 3 != 0)) for i in (1, 2, 3)
            ]
            held = list(store._event_batch.rows)  # type: ignore[union-attr]
            seen = store.list_events(sid)  # a read inside the batch writes what it holds first
            later = store.record_event(sid, _event(4))
        assert ids == [first + 1, first + 2, first + 3] and later == first + 4
        assert [e.id for e in seen] == [first, *ids]
        stored = {e.id: e for e in store.list_events(sid)}
        assert [e.seq for e in stored.values()] == [0, 1, 2, 3, 4]
        for row in held:  # as the cost writer gets them: equal to the rows read back
            assert store._event_batch is None
            built = store_module.EventBatch(store, None).stored(row)
            assert (
                built
                == stored[row[0]]
                == event_from_row(dict(zip(("id", *store_module.EVENT_COLUMNS), row, strict=True)))
            )
            assert "sk-ant-api03" not in str(built.details)
        assert len(store.list_events(sid)) == 5
        costs = store._read("SELECT event_id FROM request_costs ORDER BY event_id")
        assert [r[0] for r in costs] == [first, ids[1], later]  # the calls with usage


def test_a_batch_for_a_missing_session_fails_typed_and_keeps_what_was_stored(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(session_id="s")
        store.record_event(sid, _event(0))
        with pytest.raises(NotFoundError, match="nope"), store.batched_costs():
            store.record_event(sid, _event(1))
            store.record_event("nope", _event(2))
        assert [e.seq for e in store.list_events(sid)] == [0]
        assert store.record_event(sid, _event(3)) == store.list_events(sid)[-1].id


def _record_many(db: Path, events: int, messages: int) -> list[int]:
    """Two sessions' events interleaved and one long transcript, as an import of a huge session writes them."""
    with SessionStore(db) as store:
        sessions = [store.create_session(session_id=name) for name in ("a", "b")]
        store.append_messages(
            "a", [user(f"step {i}") for i in range(messages)], tokenizer=get_tokenizer("gpt-4.1")
        )
        with store.batched_costs():
            ids = [store.record_event(sessions[i % 2], _event(i, usage=i % 7 != 0)) for i in range(events)]
    return ids


def test_a_batch_of_more_rows_than_it_holds_writes_what_event_by_event_recording_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Rows are inserted every HELD_ROWS inside the one transaction: memory stays bounded, nothing changes
    for module in (store_module, event_batch_module):  # a call's time is its event's when no message has one
        monkeypatch.setattr(module, "utc_now", lambda: "2026-01-01T00:00:00.000000Z")
    # and each session's cost rows are written HELD_ROWS calls at a time, each chunk continuing the last
    events, messages = HELD_ROWS * 3 + 17, HELD_ROWS + 5
    batched = _record_many(tmp_path / "batched.db", events, messages)
    monkeypatch.setattr(SessionStore, "batched_costs", lambda self: contextlib.nullcontext())
    one_by_one = _record_many(tmp_path / "one_by_one.db", events, messages)
    assert batched == one_by_one == list(range(1, events + 1))
    got, want = _tables(tmp_path / "batched.db"), _tables(tmp_path / "one_by_one.db")
    assert len(got["context_events"]) == events and len(got["messages"]) == messages
    assert len(got["request_costs"]) == sum(1 for i in range(events) if i % 7 != 0) > HELD_ROWS * 2
    assert got == want
    with SessionStore(tmp_path / "batched.db") as store:
        assert [e.seq for e in store.list_events("b")] == list(range(events // 2))
        assert [m.seq for m in store.load_messages("a")] == list(range(messages))
