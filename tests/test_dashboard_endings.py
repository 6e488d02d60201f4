"""How each session ended, as the Sessions page reads it (dashboard.data.why.ended): every session once,
then only the sessions a change touched. While ``ctxdesk dashboard --from`` imported, every commit made
the page read all of them again in the worker (3 ms a session, each second), its table left behind the
metrics above it. Real SQLite, real DuckDB, the real worker process and real agents' transcripts."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from dashboard import actions, data, resident
from dashboard.analysis import why as why_view
from dashboard.data import why as why_data
from engine.events import ContextEvent
from engine.explain import explain_store
from engine.importers import import_file
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
FIRST = ("compact_auto", "interrupt")
LATER = "compact_reactive"


def _transcripts(scenario: str) -> list[Path]:
    return sorted((CLAUDE / scenario / "transcripts").glob("*.jsonl"))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, set[str]]]]:
    """Each worker call's sessions explained, by database path (the real worker runs)."""
    calls: list[dict[str, set[str]]] = []
    real = resident.endings

    def spy(asks: dict[str, actions.EndingsAsk]) -> dict[str, actions.EndingsReply]:
        replies = real(asks)
        calls.append({path: set(reply.explained) for path, reply in replies.items()})
        return replies

    monkeypatch.setattr(resident, "endings", spy)
    why_data._READ.clear()
    why_data._FRAMES.clear()
    yield calls
    why_data._READ.clear()
    why_data._FRAMES.clear()


def _read(db: Path) -> pd.DataFrame:
    """The endings frame as the page gets it: the database's label and path, its fresh overview."""
    con = data.connect([db])
    try:
        overview = data.sessions_overview(con)
    finally:
        con.close()
    return _sorted(why_data.ended({db.stem: db}, overview))


def _truth(db: Path) -> pd.DataFrame:
    """Every session explained from scratch, in this process."""
    with SessionStore(db, read_only=True) as store:
        return _sorted(why_view.ended_frame({db.stem: explain_store(store, detail=False)}))


def _sorted(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.sort_values(["db", "session_id"]).reset_index(drop=True)


def _ids(db: Path) -> set[str]:
    with SessionStore(db, read_only=True) as store:
        return {s.id for s in store.list_sessions()}


def test_only_the_sessions_a_change_touched_are_read_again(
    tmp_path: Path, asked: list[dict[str, set[str]]]
) -> None:
    db = tmp_path / "agents.db"
    with SessionStore(db) as store:
        for scenario in FIRST:
            for path in _transcripts(scenario):
                import_file(path, store)
    first_ids = _ids(db)
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): first_ids}

    assert len(_read(db)) == len(first_ids) and len(asked) == 1  # nothing changed: no worker at all

    with SessionStore(db) as store:  # an agent goes on in one session
        [going_on] = sorted(sid for sid in first_ids if ":" not in sid)[:1]
        store.append_messages(
            going_on, [user("one more thing"), assistant("done")], tokenizer=get_tokenizer("gpt-4o")
        )
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): {going_on}}

    with SessionStore(db) as store:  # an import goes on: new sessions
        for path in _transcripts(LATER):
            import_file(path, store)
    new_ids = _ids(db) - first_ids
    assert new_ids
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): new_ids}

    with SessionStore(db) as store:  # an event alone: the guard forced the final turn
        store.record_event(
            going_on, ContextEvent(kind="guard", trigger="turn_preflight", outcome="forced_final")
        )
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): {going_on}}

    with SessionStore(db) as store:  # an older transcript cut short: rows deleted, none written
        cut = sorted(sid for sid in first_ids if sid != going_on and ":" not in sid)[0]
        store.truncate_messages(cut, 1, event_source="import:")
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): {cut}}

    with SessionStore(db) as store:
        store.delete_session(cut)
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert cut not in set(_read(db)["session_id"])


def test_the_newest_rows_deleted_read_the_database_afresh(
    tmp_path: Path, asked: list[dict[str, set[str]]]
) -> None:
    """Ids are never used twice, so marks that fell mean the newest rows went (or another file)."""
    db = tmp_path / "agents.db"
    with SessionStore(db) as store:
        for path in [*_transcripts(FIRST[0]), *_transcripts(LATER)]:
            import_file(path, store)
    _read(db)
    with SessionStore(db) as store:
        [last] = [s.id for s in store.list_sessions() if s.source_path and LATER in s.source_path][-1:]
        store.truncate_messages(last, 1, event_source="import:")
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): _ids(db)}


def test_a_database_file_replaced_is_read_afresh(tmp_path: Path, asked: list[dict[str, set[str]]]) -> None:
    db, other = tmp_path / "agents.db", tmp_path / "other.db"
    for target, scenario in ((db, FIRST[0]), (other, FIRST[1])):
        with SessionStore(target) as store:
            for path in _transcripts(scenario):
                import_file(path, store)
    _read(db)
    shutil.copy(other, tmp_path / "swap.db")
    (tmp_path / "swap.db").replace(db)  # another file at the same path (a new inode)
    pd.testing.assert_frame_equal(_read(db), _truth(db))
    assert asked[-1] == {str(db): _ids(other)}
