"""``written_since``: which sessions a store's rows past earlier marks belong to (the dashboard reads
how those sessions ended again, not every session). SQLite and a real PostgreSQL server."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.events import ContextEvent
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.store.factory import open_store
from engine.store.records import WriteMarks
from engine.tokens import get_tokenizer
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

TOKENIZER = get_tokenizer("o200k_base")


def test_sqlite_reports_exactly_the_sessions_written_since_the_marks(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        a, b, c = (store.create_session(title=t) for t in "abc")
        start, nothing = store.written_since(None)
        assert start == WriteMarks(messages=0, events=0) and nothing == frozenset()
        store.append_messages(a, [user("hi"), assistant("hello")], tokenizer=TOKENIZER)
        marks, written = store.written_since(start)
        assert written == {a} and marks == WriteMarks(messages=2, events=0)
        assert store.written_since(marks) == (marks, frozenset())
        store.record_event(b, ContextEvent(kind="guard", trigger="turn_preflight", outcome="forced_final"))
        store.append_messages(c, [user("x")], tokenizer=TOKENIZER)
        later, written = store.written_since(marks)
        assert written == {b, c} and marks <= later and not later <= marks


@pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
def test_postgresql_reports_every_session_as_its_ids_commit_out_of_order() -> None:
    """Two transactions draw ids 1 and 2 and commit 2 first: marks read then would hide row 1."""
    with open_store(fresh_url()) as store:
        a, b = store.create_session(title="a"), store.create_session(title="b")
        store.append_messages(a, [user("hi")], tokenizer=TOKENIZER)
        marks, _ = store.written_since(None)
        assert store.written_since(marks) == (marks, frozenset({a, b}))
