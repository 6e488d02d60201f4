"""Which sessions a report or diff reads: a session by id or prefix, a thread and its sub-agents,
``DB[:SESSION]`` targets, and transcripts imported into a temporary database."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine.errors import NotFoundError, ValidationError
from engine.store import SessionRecord, SessionStore, is_sqlite_file
from engine.store.factory import is_database_url, open_store, redact_url


def find_session(store: SessionStore, wanted: str) -> SessionRecord:
    """A session by id, or by a unique id prefix."""
    sessions = store.list_sessions()
    for s in sessions:
        if s.id == wanted:
            return s
    matches = [s for s in sessions if s.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFoundError(f"no session {wanted!r} in the database", path=str(store.path))
    raise ValidationError(
        f"session prefix {wanted!r} is ambiguous: {', '.join(s.id for s in matches[:5])}", field="session"
    )


def threads_of(store: SessionStore, wanted: str | None) -> list[str]:
    """The session asked for and its sub-agent threads, parents before children; without one, every
    top-level session of the database that way (the whole project)."""
    sessions = store.list_sessions()
    ids = {s.id for s in sessions}
    if wanted is not None:
        root = find_session(store, wanted).id
    else:
        roots = [s.id for s in sessions if s.parent_session_id not in ids]
        if not roots:
            raise NotFoundError("the database holds no sessions", path=str(store.path))
        if len(roots) > 1:  # the whole project: every session, each followed by its sub-agents
            return [sid for r in roots for sid in threads_of(store, r)]
        root = roots[0]
    order = [root]
    for sid in order:
        order.extend(s.id for s in sessions if s.parent_session_id == sid and s.id not in order)
    return order


def split_target(target: str) -> tuple[Path, str | None]:
    """``DB`` or ``DB:SESSION`` (session ids may hold colons: the longest existing file prefix wins)."""
    if Path(target).is_file():
        return Path(target), None
    for i in range(len(target) - 1, 0, -1):
        if target[i] == ":" and Path(target[:i]).is_file():
            return Path(target[:i]), target[i + 1 :] or None
    raise NotFoundError("no such file", path=target.split(":", 1)[0])


@contextmanager
def read_store(path: Path | str) -> Iterator[SessionStore]:
    """A read-only store on an existing session database or ``postgresql://`` URL (errors say
    what the file is instead)."""
    if is_database_url(str(path)):
        with open_store(str(path), read_only=True) as store:
            yield store
        return
    path = Path(path)
    if not path.is_file():
        raise NotFoundError("no such database file", path=str(path))
    if not is_sqlite_file(path):
        raise ValidationError(f"{path} is not a session database (import it first, or use `ctxdesk report`)")
    with SessionStore(path, read_only=True) as store:
        yield store


@contextmanager
def open_target(target: str | None, *, db: str | None) -> Iterator[tuple[SessionStore, list[str], str]]:
    """(store, session ids, label) for a transcript file, ``DB[:SESSION]`` or ``--db DB [SESSION]``.

    A transcript is imported into a temporary database that is removed afterwards; every
    session the import wrote (a Claude Code file: the main thread and each sub-agent) is reported.
    """
    if db is not None and is_database_url(db):  # a team's store on PostgreSQL
        with open_store(db, read_only=True) as store:
            yield store, threads_of(store, target), f"{redact_url(db)}{':' + target if target else ''}"
        return
    if db is not None:
        path, wanted = Path(db), target
    elif target is None:
        raise ValidationError("name a transcript file, DB[:SESSION], or --db DB", field="target")
    else:
        path, wanted = split_target(target)
    if not path.is_file():
        raise NotFoundError("no such database file", path=str(path))
    if is_sqlite_file(path):
        with SessionStore(path, read_only=True) as store:
            ids = threads_of(store, wanted)
            yield store, ids, f"{path}{':' + wanted if wanted else ''}"
        return
    if db is not None or wanted is not None:
        raise ValidationError(f"{path} is not a session database", field="db")
    from engine.importers import import_file

    with (
        tempfile.TemporaryDirectory(prefix="ctxdesk-report-") as tmp,
        SessionStore(Path(tmp) / "report.db") as store,
    ):
        result = import_file(path, store)
        yield store, result.session_ids, str(path)
