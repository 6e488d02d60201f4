"""import_file / detect_format: the importers' entry points for one file (``batch.import_files`` for many).

Each file is imported in one transaction: a file that fails to parse, or fails midway,
leaves nothing behind. Re-importing a file adds only what is new: an unchanged file is
skipped unread, a grown one adds its new messages (snapshots and compactions made on its
sessions stay). A file with nothing to import is an error saying why.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from stat import S_ISDIR, S_ISFIFO, S_ISREG
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from engine.errors import ImportFormatError, NotFoundError
from engine.importers.collector import collector_paused
from engine.importers.detect import LineCache, classify, detect, read_document
from engine.importers.formats import ImportFormat
from engine.importers.lineages import Lineages
from engine.importers.parsing.parsed import ImportedSession, ImportResult, ParsedSession, SourceProblem
from engine.importers.registry import REGISTRY
from engine.importers.writer import claim_session_id, repair_tool_pairing, write_session
from engine.settings import Settings
from engine.store import SessionStore

#: on_progress(done, total, label): sessions written of a file, or files done of a batch.
ProgressCallback = Callable[[int, int, str], None]


def detect_format(path: str | os.PathLike[str]) -> str:
    """The format of a transcript file: claude-code, openai, swe-agent, openhands or anthropic.

    Raises ImportFormatError (naming the file, and the line for JSON Lines) when it is none.
    """
    path = Path(path)
    try:
        return classify(read_document(path))
    except SourceProblem as exc:
        raise ImportFormatError(str(exc), path=str(path), line=exc.line) from exc
    except _SHAPE_ERRORS as exc:
        raise ImportFormatError(f"not a transcript: {_shape_problem(exc)}", path=str(path)) from exc


def parse_file(
    path: str | os.PathLike[str],
    *,
    model: str | None = None,
    live: bool = False,
    cache: LineCache | None = None,
) -> tuple[str, list[ParsedSession]]:
    """(format, parsed sessions) of a file, without writing anything, every tool_use paired with
    its result (:func:`~engine.importers.writer.repair_tool_pairing`). ``live``: the file may be
    being written (an unfinished last line waits for the next import)."""
    path = Path(path)
    fmt = "unknown"
    try:
        with collector_paused():
            doc = read_document(path, live=live, cache=cache)
            found = detect(doc)
            fmt = found.name
            sessions = found.parse(doc, _file_key(fmt, path))
    except SourceProblem as exc:
        raise ImportFormatError(str(exc), path=str(path), line=exc.line) from exc
    except _SHAPE_ERRORS as exc:
        # A field of an unexpected type that no parser check caught: still a typed, located error.
        raise ImportFormatError(
            f"cannot read this {fmt} file: {_shape_problem(exc)}", path=str(path)
        ) from exc
    for session in sessions:
        # here, not when written: a worker process does it (engine.importers.parallel)
        session.notes.extend(repair_tool_pairing(session.messages))
        if model and not session.model:
            session.model = model
            session.tokenizer_model = None  # the model given wins over a name's hint
    return fmt, sessions


def import_file(
    path: str | os.PathLike[str],
    store: SessionStore,
    *,
    on_progress: ProgressCallback | None = None,
    model: str | None = None,
    known: dict[str, dict[str, Any]] | None = None,
    live: bool = False,
    cache: LineCache | None = None,
    settings: Settings | None = None,
    lineages: Lineages | None = None,
) -> ImportResult:
    """Import one transcript file into ``store``; ``model`` names the model when the file does not.
    ``settings``: the user's settings, whose window for a model wins over the file's and the model
    table's (:func:`engine.settings.limit_for_model`); None: none. ``lineages``: the store's forks
    and origins (:class:`~engine.importers.lineages.Lineages`), when the caller imports a batch.

    A file imported before is continued: unchanged (same size and modification time) it is
    skipped without being read; grown, only its new messages are added (its sessions keep
    their snapshots, manual compactions and other events). ``known`` is
    :func:`imported_files` of the store, when the caller has it already.
    """
    path = Path(path)
    # first: a symlink loop or a FIFO is refused before anything reads it
    state, unchanged = current_state(path, known if known is not None else imported_files(store))
    if unchanged is not None:
        return unchanged
    with collector_paused():  # one pause from parse to write (engine.importers.collector)
        fmt, parsed = parse_file(path, model=model, live=live, cache=cache)
        result = write_parsed(
            path, store, fmt, parsed, state, settings=settings, lineages=lineages, on_progress=on_progress
        )
        del parsed
    return result


def current_state(
    path: Path, known: dict[str, dict[str, Any]], folders: dict[str, str] | None = None
) -> tuple[dict[str, Any], ImportResult | None]:
    """(the file's :func:`file_state`, its ``unchanged`` result or None when it must be read):
    a stat, and the companions of the format it was imported as (asking every format's, each
    listing folders, made a re-import of thousands of unchanged files take seconds).
    ``folders``: :func:`source_path`'s memo of resolved folders, kept for one batch."""
    source = source_path(path, folders)
    previous = known.get(source)
    state = file_state(path, fmt=previous.get("format") if previous is not None else None)
    return state, unchanged_result(path, state, known, source=source)


def source_path(path: Path, folders: dict[str, str] | None = None) -> str:
    """``str(path.resolve())``, the key of a file's import state. ``folders`` memoizes resolved
    folders over a batch: a file that is no symlink then costs one lstat, not one per component
    of its path (Path.resolve of each of thousands of files took most of an unchanged re-import)."""
    # os.path.realpath, not Path.resolve: a symlink loop is then the file's own error when it is
    # read (a typed one), not a RuntimeError here
    if folders is None:
        return os.path.realpath(path)
    try:
        if os.path.islink(path):
            return os.path.realpath(path)
    except OSError:
        return os.path.realpath(path)
    folder = os.path.dirname(path)  # as given: ".." after a symlinked folder is resolved, not dropped
    resolved = folders.get(folder)
    if resolved is None:
        resolved = folders[folder] = os.path.realpath(folder or ".")
    return os.path.join(resolved, path.name)


def unchanged_result(
    path: Path, state: dict[str, Any], known: dict[str, dict[str, Any]], *, source: str | None = None
) -> ImportResult | None:
    """The result of a file the store holds as it is now (same size, time and companions), or
    None when it must be read. ``source``: its :func:`source_path`, when the caller has it."""
    previous = known.get(source if source is not None else str(path.resolve()))
    if (
        previous is not None
        and previous.get("bytes") == state["bytes"]
        and previous.get("mtime_ns") == state["mtime_ns"]
        and previous.get("companions") == state.get("companions")  # files kept beside it (sub-agents)
    ):
        return ImportResult(
            path=str(path), format=str(previous.get("format") or "unknown"), sessions=(), status="unchanged"
        )
    return None


def write_parsed(
    path: Path,
    store: SessionStore,
    fmt: str,
    parsed: list[ParsedSession],
    state: dict[str, Any],
    *,
    settings: Settings | None = None,
    lineages: Lineages | None = None,
    on_progress: ProgressCallback | None = None,
) -> ImportResult:
    """Write a parsed file's sessions in one transaction (``state``: its :func:`file_state`
    taken before it was read)."""
    source_path = str(path.resolve())
    if not any(session.messages for session in parsed):
        raise ImportFormatError(f"nothing to import: the {fmt} file holds no messages", path=str(path))
    state["format"] = fmt
    ids: dict[str, str] = {}
    written: list[ImportedSession] = []
    notes: list[str] = []
    updated = False
    try:
        with collector_paused():
            updated = _write_file(
                store, parsed, fmt, source_path, state, ids, written, notes, on_progress, settings=settings,
                lineages=lineages if lineages is not None else Lineages(store),
            )  # fmt: skip
    except (*_SHAPE_ERRORS, PydanticValidationError) as exc:  # rolled back: nothing of the file stays
        raise ImportFormatError(
            f"cannot store a value of this {fmt} file: {_shape_problem(exc)}", path=str(path)
        ) from exc
    return ImportResult(
        path=str(path), format=fmt, sessions=tuple(written), notes=tuple(notes),
        status="updated" if updated else "imported",
    )  # fmt: skip


def _write_file(
    store: SessionStore,
    parsed: list[ParsedSession],
    fmt: str,
    source_path: str,
    state: dict[str, Any],
    ids: dict[str, str],
    written: list[ImportedSession],
    notes: list[str],
    on_progress: ProgressCallback | None,
    *,
    settings: Settings | None = None,
    lineages: Lineages | None = None,
) -> bool:
    """Write a file's sessions in one transaction; True when one was imported from it before."""
    updated = False
    projects: dict[str, str] = {}
    with store.transaction():
        for done, session in enumerate(parsed, start=1):
            if not session.messages:
                notes.append(f"{session.key}: skipped, no messages")
                continue
            session_id, existing = claim_session_id(
                store, session.key, source_path, shared=session.shared_key
            )
            updated = updated or existing
            ids[session.key] = session_id
            parent_id = _parent_id(store, session, ids)
            project = (
                session.metadata.get("project")
                or session.metadata.get("cwd")
                or projects.get(session.parent_key or "")  # a sub-agent works in its parent's project
            )
            if project:
                session.metadata["project"] = projects[session.key] = project
            written.append(
                write_session(
                    store, session, session_id=session_id, parent_id=parent_id,
                    source=f"import:{fmt}", source_path=source_path, existing=existing, import_state=state,
                    settings=settings,
                )
            )  # fmt: skip
            if lineages is not None:
                lineages.link(session, session_id)
            notes.extend(f"{session_id}: {note}" for note in dict.fromkeys(session.notes))
            if on_progress is not None:
                on_progress(done, len(parsed), written[-1].title or session_id)
    return updated


def _parent_id(store: SessionStore, session: ParsedSession, ids: dict[str, str]) -> str | None:
    """The parent's session id: written from this file, or (a sub-agent file read alone) the
    session the agent's own id names, when it was imported from its own file."""
    if not session.parent_key:
        return None
    if session.parent_key in ids:
        return ids[session.parent_key]
    if not session.shared_key:
        return None
    try:
        return store.get_session(session.parent_key).id
    except NotFoundError:
        return None  # imported later: linked then


def imported_files(store: SessionStore) -> dict[str, dict[str, Any]]:
    """{resolved source path: its import state (bytes, mtime_ns, lines, format)} of every file
    the store has sessions from."""
    states: dict[str, dict[str, Any]] = {}
    for session in store.import_sources():
        source, state = session.source_path, session.import_state
        if isinstance(state, dict) and source:
            states[source] = state
        also = session.also_from  # other files of the same session (writer)
        if isinstance(also, dict):
            states.update({path: s for path, s in also.items() if isinstance(s, dict) and path not in states})
    return states


def file_state(path: Path, fmt: str | None = None) -> dict[str, Any]:
    """Size and time of a regular file (what tells a re-import it changed), with the state of the
    files its format keeps beside it; ``fmt``: the format it was imported as (only its companions
    are asked), None: every format's. A path that is no regular file (a symlink loop, a FIFO that
    would block the read forever, a device) is refused."""
    try:
        stat = path.stat()
    except OSError as exc:  # a symlink loop: "Too many levels of symbolic links"
        raise ImportFormatError(f"cannot read file ({exc.strerror or exc})", path=str(path)) from exc
    if not S_ISREG(stat.st_mode):
        kind = (
            "a FIFO" if S_ISFIFO(stat.st_mode) else "a folder" if S_ISDIR(stat.st_mode) else "a special file"
        )
        raise ImportFormatError(f"not a regular file ({kind}): skipped", path=str(path))
    state: dict[str, Any] = {"bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    for candidate in _companion_formats(fmt):  # files kept beside a session (Claude Code: subagents/)
        companions = candidate.companions(path) if candidate.companions is not None else None
        if companions is not None:
            state["companions"] = companions
            break
    return state


def _companion_formats(fmt: str | None) -> tuple[ImportFormat, ...]:
    """The formats whose companions a file's state holds: its own when known (a format no longer
    registered: every format, as for a new file)."""
    if fmt is not None:
        own = tuple(f for f in REGISTRY if f.name == fmt)
        if own:
            return own
    return REGISTRY


#: What reading a field of an unexpected type raises inside a parser.
_SHAPE_ERRORS = (TypeError, AttributeError, KeyError, ValueError, IndexError, RecursionError, OverflowError)


def _shape_problem(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return "nested too deeply"
    return f"a field has an unexpected type or value ({type(exc).__name__}: {str(exc)[:200]})"


def _file_key(fmt: str, path: Path) -> str:
    """A stable session id for a file without ids of its own: format, name, and a path hash."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    return f"{fmt}:{path.stem}:{digest}"
