"""What the dashboard's server computes before the first page run asks (#36.12), shared with the pages.

The first run of app.py and the Sessions page imports pandas, DuckDB, plotly and the dashboard, opens
the DuckDB connection and starts a worker process to read how each session ended: seconds, cached
for every later run. dashboard/server.py runs :func:`warm_up` in a thread as soon as the server
listens, while the browser loads Streamlit's scripts. A page run that meets the same work half done
waits for it (Python's import lock, Streamlit's cache locks, :func:`session_endings`) rather than
doing it twice.

Kept because it shortens the wait where a user's machine has a spare core: at load ~4.5 on 2 CPUs,
from the browser's connection to the first metric took 3.0-3.3 s with it, 3.8-4.0 s without (3
alternated pairs). On a saturated machine (load 13+) the difference is below the noise: the same
work is done either way, only earlier.
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


def session_endings(db_paths: Mapping[str, str | Path]) -> pd.DataFrame:
    """``dashboard.data.why.ended``, one read at a time in this process: a run that asks while another
    (or the warm-up) reads them waits, then finds them cached, rather than starting a second worker."""
    from dashboard.data import why as why_data

    with _ENDINGS_LOCK:
        return why_data.ended(db_paths)


def warm_up() -> list[str]:
    """Import :data:`WARM_MODULES`, read the sessions overview (which opens the cached DuckDB
    connection) and, when the Sessions page reads them up front, how each session ended; the names
    of the modules that failed to import. A failure here only costs time: the page run meets it
    again and shows it."""
    failed = []
    for name in WARM_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # the page run meets it again and reports it
            failed.append(name)
    try:
        from dashboard import state
        from dashboard.analysis import why as why_view

        if len(state.overview()) <= why_view.ENDED_UP_FRONT:  # the Sessions page's own rule
            session_endings(state.database_paths())
    except Exception:  # e.g. no database: the page says so
        _LOG.debug("warm-up could not read the sessions", exc_info=True)
    return failed
