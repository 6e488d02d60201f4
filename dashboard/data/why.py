"""The "Why did it stop?" explanations the pages read: engine.explain over a database, computed in the
dashboard's worker process (dashboard.actions: the store's sqlite3 never shares a process with
DuckDB's SQLite) and kept until the database changes (its files' signature is the cache key)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from dashboard import actions, resident
from dashboard.analysis import why as why_view
from dashboard.data.files import files_signature
from engine.explain.explanations import SessionExplanation, WhyReport
from engine.store.records import WriteMarks


@functools.lru_cache(maxsize=256)
def _report(db_path: str, session_ids: tuple[str, ...] | None, detail: bool, signature: tuple) -> WhyReport:
    # ``signature`` (the database file and its WAL) is only the cache key.
    return actions.why(db_path, list(session_ids) if session_ids is not None else None, detail=detail)


def explanation(db_path: str | Path, session_id: str) -> SessionExplanation:
    """How one session ended, its compactions (what each kept and dropped) and failed calls."""
    [why] = _report(str(db_path), (session_id,), True, files_signature([Path(db_path)])).sessions
    return why


@dataclass
class _Endings:
    """What this process has read of one database's endings: the write marks it read them at, and
    each session's explanation with the message count the Sessions overview gave it then."""

    marks: WriteMarks
    sessions: dict[str, tuple[int | None, SessionExplanation]] = field(default_factory=dict)


#: Database path -> its endings read so far (callers hold one lock: dashboard.warm.session_endings).
_READ: dict[str, _Endings] = {}
#: The databases' paths -> (their files' signature, the frame built for it): nothing to ask then.
_FRAMES: dict[tuple[str, ...], tuple[tuple[Any, ...], pd.DataFrame]] = {}


def ended(db_paths: Mapping[str, str | Path], overview: pd.DataFrame) -> pd.DataFrame:
    """How every session of the loaded databases ended (``why_view.ENDED_COLUMNS``), read in the
    worker process (about 3 ms a session): once per session, then again only for the sessions written
    since (rows past the marks of the last read) or whose message count in ``overview`` (the Sessions
    overview) changed (a tail replaced or cut), so a database being imported or followed costs its
    new sessions, not all of them, at each change."""
    paths = {db: str(p) for db, p in db_paths.items()}
    key = tuple(paths.values())
    signature = files_signature([Path(p) for p in key])
    if key in _FRAMES and _FRAMES[key][0] == signature:
        return _FRAMES[key][1]
    counts = {
        (str(db), str(sid)): None if pd.isna(n) else int(n)
        for db, sid, n in zip(overview["db"], overview["session_id"], overview["messages"], strict=True)
    }
    asks = {}
    for db, path in paths.items():
        known = _READ.get(path)
        sessions = known.sessions if known else {}
        stale = frozenset(sid for sid, (n, _) in sessions.items() if counts.get((db, sid)) != n)
        asks[path] = actions.EndingsAsk(known.marks if known else None, frozenset(sessions), stale)
    replies = resident.endings(asks)
    reports = {}
    for db, path in paths.items():
        reply, before = replies[path], _READ.get(path)
        read = _Endings(reply.marks)
        for sid in reply.session_ids:
            why = reply.explained.get(sid) or before.sessions[sid][1]  # type: ignore[union-attr]
            read.sessions[sid] = (counts.get((db, sid)), why)
        _READ[path] = read
        reports[db] = WhyReport(sessions=tuple(why for _, why in read.sessions.values()))
    frame = why_view.ended_frame(reports)
    _FRAMES[key] = (signature, frame)
    return frame
