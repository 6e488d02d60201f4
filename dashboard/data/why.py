"""The "Why did it stop?" explanations the pages read: engine.explain over a database, computed in the
dashboard's worker process (dashboard.actions: the store's sqlite3 never shares a process with
DuckDB's SQLite) and kept until the database changes (its files' signature is the cache key)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from dashboard import actions
from dashboard.analysis import why as why_view
from dashboard.data.files import files_signature
from engine.explain.explanations import SessionExplanation, WhyReport


@functools.lru_cache(maxsize=256)
def _report(db_path: str, session_ids: tuple[str, ...] | None, detail: bool, signature: tuple) -> WhyReport:
    # ``signature`` (the database file and its WAL) is only the cache key.
    return actions.why(db_path, list(session_ids) if session_ids is not None else None, detail=detail)


def explanation(db_path: str | Path, session_id: str) -> SessionExplanation:
    """How one session ended, its compactions (what each kept and dropped) and failed calls."""
    [why] = _report(str(db_path), (session_id,), True, files_signature([Path(db_path)])).sessions
    return why


@functools.lru_cache(maxsize=16)
def _endings(db_paths: tuple[str, ...], signature: tuple) -> dict[str, WhyReport]:
    return actions.endings(list(db_paths))


def ended(db_paths: Mapping[str, str | Path]) -> pd.DataFrame:
    """How every session of the loaded databases ended (``why_view.ENDED_COLUMNS``): one worker
    process reads them all (about 3 ms a session), again only once a database changes."""
    paths = tuple(str(p) for p in db_paths.values())
    reports = _endings(paths, files_signature([Path(p) for p in paths]))
    return why_view.ended_frame({db: reports[str(path)] for db, path in db_paths.items()})
