"""What a call left out below its bound (``context_events.messages_excluded``, migration m007) on
both backends: it reads back as recorded, an older database gains the column without losing a
row, a read-only open of an older file reads its events, and :func:`engine.sent.sent_seqs` is the
bound less what was left out."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.events import ContextEvent
from engine.sent import sent_seqs
from engine.store import SessionStore
from engine.store import schema as schema_module
from engine.store.factory import open_store
from tests.old_schema import opened_without
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgresql", id="postgresql", marks=pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
    ),
]


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return str(tmp_path / "sessions.db") if request.param == "sqlite" else fresh_url()


@pytest.fixture
def store(target: str) -> Iterator[SessionStore]:
    with open_store(target) as s:
        yield s


def _stored(store: SessionStore, event_id: int) -> object:
    with store.transaction() as conn:
        row = conn.execute(
            f"SELECT messages_excluded FROM context_events WHERE id = {store.P}", (event_id,)
        ).fetchone()
    return row[0]


@pytest.mark.parametrize(
    ("excluded", "stored"),
    [
        pytest.param((), None, id="a prefix: NULL"),
        pytest.param((4,), "[4]", id="the prompt typed before an auto-compaction"),
        pytest.param((5, 6, 7), "[5, 6, 7]", id="the segment a manual compaction keeps"),
    ],
)
def test_what_a_call_left_out_is_recorded_and_read_back(
    store: SessionStore, excluded: tuple[int, ...], stored: object
) -> None:
    sid = store.create_session()
    event_id = store.record_event(
        sid, ContextEvent(kind="request", details={"messages_sent": 8}, messages_excluded=excluded)
    )
    assert _stored(store, event_id) == stored
    (read,) = store.list_events(sid)
    assert read.messages_excluded == excluded
    assert read.details["messages_sent"] == 8


def _pre_m007(monkeypatch: pytest.MonkeyPatch, target: str) -> str:
    """A database migrated only up to m006 holding one request event."""
    with opened_without(monkeypatch, target, "m007_messages_excluded") as old:
        sid = old.create_session(session_id="old")
        with old.transaction() as conn:
            conn.execute(
                "INSERT INTO context_events (session_id, seq, kind, details_json, created_utc)"
                f" VALUES ({old.P}, 0, 'request', {old.P}, {old.P})",
                (sid, '{"messages_sent": 3}', "2026-11-28T00:00:00.000000Z"),
            )
            names = [r[0] for r in conn.execute("SELECT name FROM _migrations")]
    assert "m007_messages_excluded" not in names
    return sid


def test_an_older_database_gains_the_column_and_keeps_its_events(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid = _pre_m007(monkeypatch, target)
    with open_store(target) as store:
        (old,) = store.list_events(sid)
        assert (old.details, old.messages_excluded) == ({"messages_sent": 3}, ())
        new_id = store.record_event(sid, ContextEvent(kind="request", messages_excluded=(1,)))
        assert _stored(store, new_id) == "[1]"
        with store.transaction() as conn:
            applied = sorted(r[0] for r in conn.execute("SELECT name FROM _migrations"))
        assert applied == sorted(name for name, _ in schema_module.MIGRATIONS)


def test_a_read_only_open_of_an_older_file_reads_its_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    sid = _pre_m007(monkeypatch, str(path))
    with SessionStore(path, read_only=True) as store:
        (old,) = store.list_events(sid)
    assert old.messages_excluded == ()


@pytest.mark.parametrize(
    ("first", "end", "excluded", "sent"),
    [
        pytest.param(0, 4, (), [0, 1, 2, 3], id="a prefix"),
        pytest.param(0, 5, (4,), [0, 1, 2, 3], id="without the last prompt"),
        pytest.param(2, 8, (5, 6), [2, 3, 4, 7], id="after a compaction, without a kept segment"),
        pytest.param(0, 3, (7,), [0, 1, 2], id="a seq beyond the bound changes nothing"),
    ],
)
def test_sent_seqs_is_the_bound_less_what_was_left_out(
    first: int, end: int, excluded: tuple[int, ...], sent: list[int]
) -> None:
    assert sent_seqs(first, end, excluded) == sent


@given(st.integers(0, 30), st.integers(0, 30), st.sets(st.integers(0, 40)))
def test_sent_seqs_are_ordered_within_the_bound_and_never_excluded(
    first: int, end: int, excluded: set[int]
) -> None:
    seqs = sent_seqs(first, end, excluded)
    assert seqs == sorted(seqs) and all(first <= s < end and s not in excluded for s in seqs)
    assert len(seqs) == max(0, end - first) - sum(1 for s in excluded if first <= s < end)
