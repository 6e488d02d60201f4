"""Dashboard work that opens a session database with Python's sqlite3, run in a child process.

DuckDB's sqlite scanner bundles its own SQLite. When it closes a file, the POSIX advisory
locks that Python's sqlite3 holds on that file *in the same process* are released
(sqlite.org/howtocorrupt.html, 2.2.1), so a transaction there could run unprotected while an
agent writes the file. The dashboard reads through DuckDB in its own process, so everything
that needs sqlite3 (compaction preview and apply, snapshot restore, findings) runs here, in
a short-lived child process that never loads DuckDB. Results are plain picklable values.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.store.records import WriteMarks

from engine.errors import ContextDeskError

#: Longest an action may take before the dashboard gives up waiting (a big LLM summary).
ACTION_TIMEOUT_S = 600.0
#: Directory holding the ``dashboard`` and ``engine`` packages (the child must import them
#: even when the app runs from another directory without ctxdesk installed).
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), env.get("PYTHONPATH", "")) if p)
    return env


class ActionError(ContextDeskError):
    """An engine error raised in the worker process, carried back by type name and message."""

    def __init__(self, message: str, *, kind: str = "ContextDeskError") -> None:
        self.kind = kind
        super().__init__(message)


def _run(name: str, *args: Any, **kwargs: Any) -> Any:
    """Run ``_do_<name>`` in a fresh ``python -m dashboard.actions`` and return its result."""
    request = pickle.dumps((name, args, kwargs))
    try:
        done = subprocess.run(
            [sys.executable, "-m", "dashboard.actions"],
            input=request,
            capture_output=True,
            timeout=ACTION_TIMEOUT_S,
            env=_child_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise ActionError(f"{name} took longer than {ACTION_TIMEOUT_S:.0f} s and was stopped") from exc
    if done.returncode != 0:
        tail = done.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        raise ActionError(f"the worker process failed during {name}: {tail[0]}")
    # The payload comes from our own child process, never from the database or the network.
    return reply_of(pickle.loads(done.stdout))


def reply_of(reply: tuple[str, Any]) -> Any:
    """A worker's ``(status, payload)``: the payload, or its error raised as an ActionError."""
    status, payload = reply
    if status == "error":
        kind, message = payload
        raise ActionError(message, kind=kind)
    return payload


def _in_worker(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, Any]:
    """Runs in the child: call one of this module's ``_do_*`` functions, errors as values."""
    function: Callable[..., Any] = globals()[f"_do_{name}"]
    try:
        return "ok", function(*args, **kwargs)
    except ContextDeskError as exc:
        return "error", (type(exc).__name__, str(exc))


# -- what runs in the worker ---------------------------------------------------------------------


def _do_pid() -> int:
    return os.getpid()


def _do_compact(db_path: str, session_id: str, dry_run: bool, params: dict[str, Any]) -> Any:
    from engine.compaction import force_compact
    from engine.store.factory import open_store

    with open_store(db_path, read_only=dry_run) as store:
        return force_compact(store, session_id, dry_run=dry_run, **params)


def _do_restore(db_path: str, session_id: str, snapshot_id: int) -> Any:
    from engine.compaction import restore_snapshot
    from engine.store.factory import open_store

    with open_store(db_path) as store:
        return restore_snapshot(store, session_id, snapshot_id)


def _do_restore_full(db_path: str, session_id: str) -> Any:
    """Undo every compaction: a snapshot holding the whole transcript (no summary) and a
    ``restore`` event, in one transaction, so the session resumes from everything it said."""
    from engine.events import ContextEvent
    from engine.store.factory import open_store

    with open_store(db_path) as store:
        stored = store.load_messages(session_id)
        store.get_session(session_id)
        through = stored[-1].seq if stored else -1
        tokens = sum(m.tokens for m in stored)
        with store.transaction():
            new_id = store.write_snapshot(
                session_id, [m.message for m in stored], through_seq=through, summary=None,
                tokens=tokens, strategy="restore",
            )  # fmt: skip
            event_id = store.record_event(
                session_id,
                ContextEvent(
                    kind="restore", trigger="manual", outcome="restored", reason="restored the full transcript",
                    message_seq=through,
                    details={"restored_snapshot_id": None, "snapshot_id": new_id, "full_transcript": True,
                             "after_count": len(stored), "after_tokens": tokens},
                ),
            )  # fmt: skip
            store.link_snapshot_event(new_id, event_id)
        return store.get_snapshot(new_id)


def _do_findings(db_path: str, session_id: str, settings_file: str | None) -> Any:
    from engine.findings import find_waste
    from engine.settings import load_settings
    from engine.store.factory import open_store

    settings = load_settings(settings_file) if settings_file and Path(settings_file).is_file() else None
    with open_store(db_path, read_only=True) as store:
        return find_waste(store, session_id, settings=settings)


def _do_why(db_path: str, session_ids: list[str] | None, detail: bool) -> Any:
    from engine.explain import explain_store
    from engine.store.factory import open_store

    with open_store(db_path, read_only=True) as store:
        return explain_store(store, session_ids, detail=detail)


def _do_endings(asks: dict[str, EndingsAsk]) -> dict[str, EndingsReply]:
    """How the sessions of each database ended (no compaction detail), in one worker for all of them:
    those the asker has not read, those written since its marks, and those it names as stale."""
    from engine.explain import explain_store
    from engine.store.factory import open_store

    replies = {}
    for path, ask in asks.items():
        with open_store(path, read_only=True) as store:
            marks, written = store.written_since(ask.marks)  # first: a later write is seen next time
            ids = tuple(s.id for s in store.list_sessions())
            # Ids are never used twice: marks that fell mean the newest rows went (or another file is there).
            fell = ask.marks is not None and not ask.marks <= marks
            known = frozenset() if fell else ask.known
            wanted = [sid for sid in ids if sid not in known or sid in written or sid in ask.stale]
            report = explain_store(store, wanted, detail=False)
        replies[path] = EndingsReply(marks, ids, {s.session_id: s for s in report.sessions})
    return replies


def _do_replay(db_path: str, session_id: str, variants: list[Any], resolved: Any) -> Any:
    from engine.replay import load_recorded_session, replay_session
    from engine.store.factory import open_store
    from engine.tokens import get_tokenizer

    with open_store(db_path, read_only=True) as store:
        recorded = load_recorded_session(store, session_id)
    tokenizer = get_tokenizer(resolved.tokenizer if resolved is not None else recorded.model or "o200k_base")
    return replay_session(recorded, variants, tokenizer=tokenizer, resolved=resolved)


# -- what the pages call ---------------------------------------------------------------------------


def worker_pid() -> int:
    """PID of the worker process (tests check it is not the dashboard's own)."""
    return int(_run("pid"))


def preview_compaction(db_path: str | os.PathLike[str], session_id: str, **params: Any) -> Any:
    """force_compact(dry_run=True) in the worker: nothing is written."""
    return _run("compact", str(db_path), session_id, True, params)


def apply_compaction(db_path: str | os.PathLike[str], session_id: str, **params: Any) -> Any:
    """force_compact in the worker: snapshot + event in one transaction, transcript untouched."""
    return _run("compact", str(db_path), session_id, False, params)


def restore(db_path: str | os.PathLike[str], session_id: str, snapshot_id: int) -> Any:
    """restore_snapshot in the worker."""
    return _run("restore", str(db_path), session_id, int(snapshot_id))


def restore_full_transcript(db_path: str | os.PathLike[str], session_id: str) -> Any:
    """A snapshot of the whole transcript (undoes every compaction), in the worker."""
    return _run("restore_full", str(db_path), session_id)


def findings(
    db_path: str | os.PathLike[str], session_id: str, settings_file: str | os.PathLike[str] | None = None
) -> Any:
    """find_waste over one session in the worker (its database opened read-only there)."""
    return _run("findings", str(db_path), session_id, str(settings_file) if settings_file else None)


def why(db_path: str | os.PathLike[str], session_ids: list[str] | None = None, *, detail: bool = True) -> Any:
    """engine.explain.explain_store in the worker (its database opened read-only there)."""
    return _run("why", str(db_path), session_ids, detail)


@dataclass(frozen=True)
class EndingsAsk:
    """What the dashboard already knows of one database's endings: the write marks it read them at
    (None: nothing yet), the sessions it holds explanations of, and those it knows are stale."""

    marks: WriteMarks | None = None
    known: frozenset[str] = frozenset()
    stale: frozenset[str] = frozenset()


@dataclass(frozen=True)
class EndingsReply:
    """One database's answer: its write marks (read before anything else), every session id in the
    store's order, and the explanations (without detail) of the sessions that needed one."""

    marks: WriteMarks
    session_ids: tuple[str, ...]
    explained: dict[str, Any]  # session id -> engine.explain.SessionExplanation


def replay(
    db_path: str | os.PathLike[str], session_id: str, variants: list[Any], resolved: Any = None
) -> Any:
    """engine.replay.replay_session of one stored session under ``variants`` (the what-if), its database
    opened read-only in the worker; the tokenizer of ``resolved`` (ResolvedModelSettings), else the model's."""
    return _run("replay", str(db_path), session_id, list(variants), resolved)


def _worker_main() -> None:
    request = sys.stdin.buffer.read()
    name, args, kwargs = pickle.loads(request)  # written by _run in the parent
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the engine prints must not corrupt the reply
    out.write(pickle.dumps(_in_worker(name, args, kwargs)))
    out.flush()


if __name__ == "__main__":
    _worker_main()
