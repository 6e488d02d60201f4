"""One page run reads one version of the databases: with an import committing beside the page, the
sidebar said "211 session(s)" above a Sessions metric of 215 (each query took the files' signature
when it ran). Real DuckDB over a real SQLite file, a real writer process, Streamlit's AppTest."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard.data import DB_PATHS_ENV_VAR
from engine.settings import SETTINGS_ENV_VAR
from engine.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
WRITE_ONE_SESSION = (
    "import sys; from engine.store import SessionStore; SessionStore(sys.argv[1]).create_session(title='new')"
)


def _page(pinned: bool) -> None:
    """A run that reads the overview, then (as an import does beside it) a session is committed, then
    reads the overview again. AppTest runs this body alone: it imports what it uses."""
    import subprocess
    import sys

    import streamlit as st

    from dashboard import state

    if pinned:
        state.pin_signature()
    before = len(state.overview())
    db = str(state.paths()[0])
    subprocess.run(
        [sys.executable, "-c", st.session_state["writer"], db], check=True, cwd=st.session_state["root"]
    )
    st.text(f"{before} {len(state.overview())}")


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    db = tmp_path / "live.db"
    with SessionStore(db) as store:
        store.create_session(title="first")
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return db


@pytest.mark.parametrize("pinned", [True, False], ids=["pinned", "unpinned"])
def test_a_run_reads_the_overview_once_whatever_is_committed_meanwhile(served: Path, pinned: bool) -> None:
    at = AppTest.from_function(_page, args=(pinned,), default_timeout=60)
    at.session_state["writer"] = WRITE_ONE_SESSION
    at.session_state["root"] = str(ROOT)
    main = sys.modules["__main__"]
    try:
        at.run()
    finally:  # AppTest leaves its script as __main__: a later spawned process would run it again
        sys.modules["__main__"] = main
    assert not at.exception, [e.value for e in at.exception]
    before, after = at.text[0].value.split()
    assert (before == after) is pinned, (before, after)  # unpinned: the second read sees the new session
    assert int(before) == 1
