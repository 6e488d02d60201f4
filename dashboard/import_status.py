"""The sidebar's word on an import running into a shown database (``ctxdesk dashboard --from``).

The importer keeps its progress beside the database (:mod:`engine.importers.progress`); this
reads it every two seconds, on its own, while the pages show what is imported so far.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import streamlit as st

from engine.importers import progress_line, read_status, status_path

#: A finished import is still mentioned this long after it ended.
FINISHED_SHOWN_S = 600.0


@dataclass(frozen=True)
class ImportShown:
    """One import as the sidebar shows it."""

    database: str
    share: float
    line: str
    state: str  # "running", "finished" or "stopped"


def imports_shown(paths: Sequence[Path], *, now: float | None = None) -> list[ImportShown]:
    """The imports into ``paths`` worth a word: running, stopped short, or finished a moment ago."""
    now = time.time() if now is None else now
    shown: list[ImportShown] = []
    for path in paths:
        status = read_status(path) if path.is_file() else None
        if status is None:
            continue
        state = _state(status)
        if state == "finished" and now - float(status.get("updated_unix") or 0) > FINISHED_SHOWN_S:
            continue
        total = status.get("bytes_total") or 0
        share = status["bytes_done"] / total if total else (1.0 if state == "finished" else 0.0)
        shown.append(ImportShown(path.name, min(1.0, share), progress_line(status, bar=False), state))
    return shown


def _state(status: dict[str, Any]) -> str:
    if status.get("finished"):
        return "finished"
    try:
        pid = int(status.get("pid") or 0)
        if pid <= 0:  # kill(0) would ask about this process group
            return "stopped"
        os.kill(pid, 0)
    except (OSError, ValueError):  # the importing process is gone without finishing
        return "stopped"
    return "running"


def import_progress(paths: Sequence[Path]) -> None:
    """A progress bar per import into a shown database, refreshed every two seconds while the page
    stays as it is; nothing (and no timer) when no shown database has an import's status beside it."""
    if any(status_path(p).is_file() for p in paths):
        _progress(paths)


@st.fragment(run_every=2)
def _progress(paths: Sequence[Path]) -> None:
    for shown in imports_shown(paths):
        if shown.state == "running":
            st.progress(shown.share, text=f"Importing into {shown.database}: {shown.line}")
        elif shown.state == "stopped":
            st.caption(f"The import into {shown.database} stopped at {shown.line}")
        else:
            st.caption(f"Imported into {shown.database}: {shown.line}")
