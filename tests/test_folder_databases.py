"""A folder import finds an agent's SQLite session database (OpenCode's ``opencode.db``, Kilo
CLI's ``kilo.db``): ``ctxdesk import ~/.local/share/opencode`` imported nothing while
``engine.importers.locations.folder_files`` skipped every ``.db``. Other ``.db`` files (a ctxdesk
session database, a file that is not SQLite) stay out."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from engine.importers import import_files
from engine.importers.locations import folder_files
from engine.store import SessionStore

REAL = Path(__file__).resolve().parent / "fixtures" / "real_agents"


@pytest.mark.parametrize(
    ("app", "scenario", "sessions"),
    [
        pytest.param("opencode", "tools-resume", 1, id="opencode"),
        pytest.param("kilo", "tools-resume", 1, id="kilo"),
        pytest.param("opencode", "subagent", 2, id="opencode with a sub-agent"),
    ],
)
def test_a_folder_import_of_an_agents_data_folder_imports_its_database(
    tmp_path: Path, app: str, scenario: str, sessions: int
) -> None:
    data = tmp_path / "share" / app
    shutil.copytree(REAL / app / scenario / "data" / app, data)
    (data / "cache.db").write_bytes(b"not a database at all")  # a .db that is not SQLite
    with SessionStore(data / "ctxdesk.db"):  # a ctxdesk session database: SQLite, not an agent's
        pass
    assert [p.name for p in folder_files(data)] == [f"{app}.db"]
    with SessionStore(tmp_path / "sessions.db") as store:
        import_files(folder_files(data), store)
        imported = store.list_sessions()
        assert len(imported) == sessions
        assert all(store.list_events(s.id, kind="request") for s in imported)


def test_a_db_that_is_empty_a_folder_or_a_fifo_is_left_out_of_the_walk(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "named.db").mkdir()  # a folder named like a database: walked into, not read
    (folder / "empty.db").write_bytes(b"")
    os.mkfifo(folder / "pipe.db")  # reading it would block the walk forever
    assert folder_files(folder) == []
