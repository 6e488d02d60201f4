"""What the dashboard's server computes before the first page run asks (#36.12), shared with the pages.

The first run of app.py and the Sessions page imports pandas, DuckDB and the dashboard and opens the
DuckDB connection: about a second of processor time, cached for every later run. dashboard/server.py
runs :func:`warm_up` in a thread as soon as the server listens, while the browser loads Streamlit's
scripts; app.py calls :func:`wait_for_warm_up` before its own imports, so a page run never imports
a module the warm-up is half way through (two threads in one module's import: Python handed the
run a partly executed ``dashboard`` package once, and the page failed with "cannot import name
'state'").

How each session ended (a worker process, ~1 s of processor time) is not read here: the Sessions
page draws its metrics and table first and reads it after them; read during the browser's load,
it took a core from the browser and from the first page run (processor seconds until the first
metric 2.30 -> 2.13, median of 4 alternated pairs at load ~3).
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

#: What the first run of app.py and the Sessions page imports, in the order they need it.
WARM_MODULES = (
    "pandas",
    "duckdb",
    "engine",
    "dashboard.state",
    "dashboard.data",
    "dashboard.display",
    "dashboard.analysis",
    "dashboard.analysis.why",
    "dashboard.data.why",
    "dashboard.import_status",
    "dashboard.figures",
    "dashboard.table_columns",
)

_LOG = logging.getLogger("ctxdesk.dashboard.warm")
_ENDINGS_LOCK = threading.Lock()
#: Set when a warm-up starts in this process, and when it has imported and read what the first page
#: run needs (or failed to).
_STARTED = threading.Event()
_DONE = threading.Event()
#: Longest a page run waits for the warm-up (a stuck import must not hang every page).
WAIT_S = 60.0


def session_endings(db_paths: Mapping[str, str | Path], overview: pd.DataFrame) -> pd.DataFrame:
    """``dashboard.data.why.ended``, one read at a time in this process: a run that asks while another
    (a second browser tab) reads them waits, then finds them read, rather than starting a second worker."""
    from dashboard.data import why as why_data

    with _ENDINGS_LOCK:
        return why_data.ended(db_paths, overview)


def expect_warm_up() -> None:
    """Say that a warm-up will run in this process (dashboard/server.py, before the server listens):
    from now on a page run waits for it."""
    _STARTED.set()


def end_warm_up() -> None:
    """The warm-up is over (done, failed, or never to run: the server never listened): page runs stop
    waiting for it."""
    _DONE.set()


def wait_for_warm_up(timeout: float = WAIT_S) -> bool:
    """Wait until a warm-up started in this process has done its imports and read the overview; at
    once when none started (tests, ``streamlit run`` without dashboard/server.py). False on timeout."""
    return not _STARTED.is_set() or _DONE.wait(timeout)


def warm_up() -> list[str]:
    """Import :data:`WARM_MODULES` and read the sessions overview (which opens the cached DuckDB
    connection); the names of the modules that failed to import. A failure here only costs time:
    the page run meets it again and shows it."""
    expect_warm_up()
    try:
        return _warm()
    finally:
        end_warm_up()


def _warm() -> list[str]:
    failed = []
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the page run meets it again and reports it
            failed.append(name)
    try:
        from dashboard import state

        state.overview()
    except Exception:  # e.g. no database: the page says so
        _LOG.debug("warm-up could not read the sessions", exc_info=True)
    return failed
