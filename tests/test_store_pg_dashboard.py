"""The dashboard's data layer over PostgreSQL (DuckDB's postgres extension, READ_ONLY) gives what
it gives over the same sessions in SQLite; its writes go through the engine (dashboard.actions)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from dashboard import actions, data
from dashboard.data import postgres
from dashboard.data.connection import alias_of
from engine.store.copy import copy_database
from engine.store.factory import open_store
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

pytestmark = pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
DEMO_DB = Path(__file__).resolve().parents[1] / "data" / "demo-coding-agent.db"
#: Row ids are renumbered by a copy; everything else must match.
ID_COLUMNS = {"id", "event_id", "snapshot_id"}


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any, str]]:
    """(SQLite connection, PostgreSQL connection, URL) over the same sessions."""
    folder = tmp_path_factory.mktemp("dash")
    sqlite_copy = folder / "demo.db"
    shutil.copy(DEMO_DB, sqlite_copy)
    url = fresh_url()
    with open_store(url) as store:
        copy_database(sqlite_copy, store)
    lite, pg = data.connect([sqlite_copy]), data.connect([url])
    yield lite, pg, url
    lite.close()
    pg.close()


def _same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    keep = [c for c in a.columns if c not in ID_COLUMNS and c != "db"]
    pd.testing.assert_frame_equal(
        a[keep].reset_index(drop=True), b[keep].reset_index(drop=True), check_dtype=False
    )


def test_a_url_is_attached_read_only_with_a_short_label(both: tuple[Any, Any, str]) -> None:
    _, pg, url = both
    [(db, path)] = data.database_paths(pg).items()
    assert (db, path) == (postgres.label(url), url)
    with pytest.raises(Exception, match=r"read-only|read only"):
        pg.execute(f"INSERT INTO {alias_of(pg, db)}.sessions (id) VALUES ('x')")


def test_sessions_page_and_timeline_match_sqlite(both: tuple[Any, Any, str]) -> None:
    lite, pg, _ = both
    lite_overview, pg_overview = data.sessions_overview(lite), data.sessions_overview(pg)
    assert len(pg_overview) > 0
    _same(lite_overview, pg_overview)
    for row in lite_overview.itertuples():
        lite_db, pg_db = row.db, pg_overview.db.iloc[0]
        for query in (data.timeline, data.requests, data.events, data.markers, data.compactions):
            _same(query(lite, lite_db, row.session_id), query(pg, pg_db, row.session_id))
        lite_blobs = data.blobs(lite, db=lite_db, session_id=row.session_id)
        pg_blobs = data.blobs(pg, db=pg_db, session_id=row.session_id)
        _same(lite_blobs, pg_blobs)
        for ref in lite_blobs.ref_id[:3]:
            assert data.blob_content(pg, pg_db, ref) == data.blob_content(lite, lite_db, ref)


def test_a_new_write_changes_the_signature(both: tuple[Any, Any, str]) -> None:
    _, _, url = both
    before = data.files_signature([url])
    with open_store(url) as store:
        store.create_session(session_id="late")
    assert data.files_signature([url]) != before
    assert data.loaded_paths([], env={"CTXDESK_DB": url}, default_dir=Path("/nonexistent")) == [url]


def test_compaction_from_the_dashboard_writes_through_the_engine(both: tuple[Any, Any, str]) -> None:
    _, pg, url = both
    overview = data.sessions_overview(pg)
    sid = str(overview.sort_values("messages").session_id.iloc[-1])
    with open_store(url, read_only=True) as store:
        before = len(store.list_snapshots(sid))
    report = actions.apply_compaction(url, sid, strategy="truncate")
    assert report is not None
    with open_store(url, read_only=True) as store:
        snapshots = store.list_snapshots(sid)
        assert len(snapshots) == before + 1
    restored = actions.restore(url, sid, snapshots[0].id)
    with open_store(url, read_only=True) as store:
        assert store.latest_snapshot(sid).id == restored.id  # type: ignore[union-attr]
        assert [e.kind for e in store.list_events(sid)][-1] == "restore"


def test_an_unreachable_server_is_a_typed_error_without_the_password() -> None:
    from engine.errors import NotADatabaseError

    with pytest.raises(NotADatabaseError) as caught:
        data.connect(["postgresql://bob:s3cret@127.0.0.1:1/team"])
    # the password went to the passfile before the attach: the message names the server without it
    assert "s3cret" not in str(caught.value) and "postgresql://bob@127.0.0.1:1/team" in str(caught.value)
