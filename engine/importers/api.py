"""import_file / import_files / detect_format: the importers' entry points.

Each file is imported in one transaction: a file that fails to parse, or fails midway,
leaves nothing behind. Re-importing a file replaces the sessions it wrote before.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from engine.errors import ImportFormatError
from engine.importers.anthropic_api import parse_anthropic_exchanges
from engine.importers.claude_code import parse_claude_code
from engine.importers.detect import Document, classify, read_document
from engine.importers.model import ImportedSession, ImportResult, ParsedSession, SourceProblem
from engine.importers.openai_chat import parse_openai_document, parse_swe_agent
from engine.importers.openhands import parse_openhands_events, parse_openhands_record
from engine.importers.writer import claim_session_id, write_session
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


def parse_file(path: str | os.PathLike[str], *, model: str | None = None) -> tuple[str, list[ParsedSession]]:
    """(format, parsed sessions) of a file, without writing anything."""
    path = Path(path)
    try:
        doc = read_document(path)
        fmt = classify(doc)
        sessions = _parse(doc, fmt, key=_file_key(fmt, path))
    except SourceProblem as exc:
        raise ImportFormatError(str(exc), path=str(path), line=exc.line) from exc
    if model:
        for session in sessions:
            if not session.model:
                session.model = model
    return fmt, sessions


def import_file(
    path: str | os.PathLike[str],
    store: SessionStore,
    *,
    on_progress: ProgressCallback | None = None,
    model: str | None = None,
) -> ImportResult:
    """Import one transcript file into ``store``; ``model`` names the model when the file does not."""
    fmt, parsed = parse_file(path, model=model)
    source_path = str(Path(path).resolve())
    ids: dict[str, str] = {}
    written: list[ImportedSession] = []
    notes: list[str] = []
    with store.transaction():
        for done, session in enumerate(parsed, start=1):
            session_id = claim_session_id(store, session.key, source_path)
            ids[session.key] = session_id
            parent_id = ids.get(session.parent_key) if session.parent_key else None
            written.append(
                write_session(
                    store, session, session_id=session_id, parent_id=parent_id,
                    source=f"import:{fmt}", source_path=source_path,
                )
            )  # fmt: skip
            notes.extend(f"{session_id}: {note}" for note in dict.fromkeys(session.notes))
            if on_progress is not None:
                on_progress(done, len(parsed), written[-1].title or session_id)
    return ImportResult(path=str(path), format=fmt, sessions=tuple(written), notes=tuple(notes))


def import_files(
    paths: Iterable[str | os.PathLike[str]],
    store: SessionStore,
    *,
    on_progress: ProgressCallback | None = None,
    model: str | None = None,
) -> list[ImportResult]:
    """Import several files, each in its own transaction; stops at the first file that fails
    (files before it stay imported) and raises its ImportFormatError."""
    paths = list(paths)
    results: list[ImportResult] = []
    for done, path in enumerate(paths, start=1):
        results.append(import_file(path, store, model=model))
        if on_progress is not None:
            on_progress(done, len(paths), Path(path).name)
    return results


def _parse(doc: Document, fmt: str, *, key: str) -> list[ParsedSession]:
    if fmt == "claude-code":
        lines = list(doc.lines) if doc.lines is not None else [(1, doc.value)]
        return parse_claude_code(lines, fallback_id=key)
    if fmt == "openai":
        return parse_openai_document(doc.value, key=key)
    if fmt == "swe-agent":
        return parse_swe_agent(doc.value, key=key, path=doc.path)
    if fmt == "openhands":
        return _parse_openhands(doc, key=key)
    if fmt == "anthropic":
        if doc.lines is not None:
            return parse_anthropic_exchanges(
                [v for _, v in doc.lines], key=key, lines=[n for n, _ in doc.lines]
            )
        return parse_anthropic_exchanges(doc.value, key=key)
    raise SourceProblem(f"no importer for format {fmt!r}")


def _parse_openhands(doc: Document, *, key: str) -> list[ParsedSession]:
    if doc.lines is None and isinstance(doc.value, list):
        return [parse_openhands_events(doc.value, key=key)]
    records = doc.lines if doc.lines is not None else ((1, doc.value),)
    sessions = []
    for line, record in records:
        instance = record.get("instance_id")
        try:
            sessions.append(parse_openhands_record(record, key=f"{key}:{instance or line}"))
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=line if doc.lines is not None else None) from exc
    return sessions


def _file_key(fmt: str, path: Path) -> str:
    """A stable session id for a file without ids of its own: format, name, and a path hash."""
    digest = hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:8]
    return f"{fmt}:{path.stem}:{digest}"
