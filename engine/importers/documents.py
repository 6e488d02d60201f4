"""Reading a transcript file: JSON (one document), JSON Lines (one object a line, streamed by
:mod:`engine.importers.lines` under a per-line cap) or a text format (Aider's Markdown), with
growing files re-read from where the last read stopped.

A malformed line is reported with its number, a line past the cap too (before it is read whole);
a large file that cannot be a transcript is refused from its first bytes; a file that belongs
beside a transcript (a companion) says what to import instead.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.lines import (
    MAX_LINE_BYTES,
    READ_BUFFER_BYTES,
    LineRead,
    first_character,
    read_lines,
    read_whole,
    too_long,
)
from engine.importers.parsing.parsed import SourceProblem
from engine.textfmt import article

#: Text formats recognised by how they start (before any JSON parsing).
AIDER_HEAD = "# aider chat started at"
_AIDER_SESSION_START = re.compile(r"^# aider chat started at", re.MULTILINE)


def is_aider_log(text: str) -> bool:
    """An Aider chat log: not JSON, with a session header at the start of some line (lines before
    the first header happen: a log cut at its head, notes a user added)."""
    stripped = text.lstrip()
    return bool(stripped) and stripped[0] not in "{[" and _AIDER_SESSION_START.search(text) is not None


#: Files that belong to a transcript without being one: what they are, what to import instead.
COMPANION_FILES = {
    "ui_messages.json": "a Cline / Roo Code task's UI log (per-request metrics, not the conversation): "
    "import api_conversation_history.json from the same task folder instead",
    "task_metadata.json": "a Cline / Roo Code task's metadata (files in context, model usage): "
    "import api_conversation_history.json from the same task folder instead",
    ".aider.input.history": "Aider's prompt history (what you typed, not the conversation): "
    "import .aider.chat.history.md instead",
}


@dataclass(frozen=True)
class Document:
    """A parsed file: ``lines`` holds (line number, value) for JSON Lines, ``value`` for JSON,
    ``text`` the raw text of a text format (Aider's Markdown); ``size`` its bytes. ``database``:
    a SQLite file (OpenCode keeps its sessions in one), left for its format to read."""

    path: Path
    value: Any = None
    lines: tuple[tuple[int, Any], ...] | None = None
    text: str | None = None
    size: int = 0
    database: bool = False


@dataclass
class _Consumed:
    size: int  # bytes read through the last complete line
    check: bytes  # the bytes just before ``size``: the file was appended to only if they are the same
    physical_lines: int
    lines: list[tuple[int, Any]]


class LineCache:
    """The decoded lines of JSON Lines files an agent is writing, so that reading one again
    decodes only what was appended (when the bytes already read are unchanged). Files last
    modified more than ``recent_s`` ago are not kept (they are not being written)."""

    CHECK_BYTES = 512

    def __init__(self, recent_s: float = 3_600.0) -> None:
        self.recent_s = recent_s
        self.files: dict[str, _Consumed] = {}
        self.appended_reads = 0

    def read(self, path: Path, *, live: bool, max_line_bytes: int = MAX_LINE_BYTES) -> Document | None:
        cached = self.files.get(str(path))
        if cached is None:
            return None
        try:
            with path.open("rb", buffering=READ_BUFFER_BYTES) as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < cached.size:
                    return None
                fh.seek(cached.size - len(cached.check))
                if fh.read(len(cached.check)) != cached.check:
                    return None  # rewritten, not appended to: read it whole
                added = read_lines(
                    fh, start=cached.size, first_number=cached.physical_lines + 1, live=live, continuing=True,
                    max_line_bytes=max_line_bytes,
                )  # fmt: skip
        except (OSError, SourceProblem):
            return None  # read it whole: a bad line is then reported as it is
        if added.rewritten:
            return None  # rewritten on reading: read it whole
        cached.lines.extend((n, v) for n, v in added.lines if n <= added.physical)
        self._advance(cached, path, added.end, added.physical)
        self.appended_reads += 1
        return Document(path, lines=tuple(cached.lines), size=size)

    def keep(self, path: Path, read: LineRead) -> None:
        """Keep what a whole read of ``path`` consumed (its complete lines) for the next read."""
        try:
            recent = time.time() - path.stat().st_mtime < self.recent_s
        except OSError:
            recent = False
        if not recent:
            return  # not being written: nothing to gain
        numbered = [(n, v) for n, v in read.lines if n <= read.physical]
        entry = _Consumed(size=0, check=b"", physical_lines=0, lines=numbered)
        self.files[str(path)] = entry
        self._advance(entry, path, read.end, read.physical)

    def _advance(self, entry: _Consumed, path: Path, size: int, physical: int) -> None:
        with path.open("rb") as fh:
            fh.seek(max(0, size - self.CHECK_BYTES))
            entry.check = fh.read(min(size, self.CHECK_BYTES))
        entry.size = size
        entry.physical_lines = max(entry.physical_lines, physical)


def read_document(
    path: Path, *, live: bool = False, cache: LineCache | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> Document:
    """The file parsed, streamed: JSON Lines one line at a time, no line (nor a JSON document)
    past ``max_line_bytes`` (refused naming its line, before it is read whole). ``live``: the file
    may be being written, so an unfinished last line (no newline after it, not valid JSON) is left
    for the next read instead of being an error. ``cache``: a JSON Lines file read before through
    it decodes only its appended lines."""
    companion = COMPANION_FILES.get(path.name)
    if companion:
        raise SourceProblem(f"not a transcript: {companion}")
    try:
        if is_sqlite(path):
            return Document(path, size=path.stat().st_size, database=True)
        _sniff_head(path)  # before anything reads the file whole (the line cache included)
    except OSError as exc:
        raise SourceProblem(f"cannot read file ({exc.strerror or exc})") from exc
    if cache is not None:
        appended = cache.read(path, live=live, max_line_bytes=max_line_bytes)
        if appended is not None:
            return appended
    try:
        with path.open("rb", buffering=READ_BUFFER_BYTES) as fh:
            size = os.fstat(fh.fileno()).st_size
            first = first_character(fh, max_line_bytes=max_line_bytes)
            if first is None:
                raise SourceProblem("empty file")
            if first == "{":  # JSON Lines, or one JSON object (on one line, or pretty-printed)
                try:
                    read = read_lines(fh, live=live, max_line_bytes=max_line_bytes)
                except SourceProblem as exc:
                    if not str(exc).startswith("not JSON or JSON Lines"):
                        raise
                    if size > max_line_bytes:  # maybe a pretty-printed object: too long to read whole
                        raise SourceProblem(
                            too_long(f"{article(size)} {size:,}-byte document", max_line_bytes), line=1
                        ) from exc
                    return _whole(path, fh, size, max_line_bytes, not_json=exc)  # a pretty-printed object
                if len(read.lines) == 1 and read.complete:
                    return Document(path, value=read.lines[0][1], size=size)
                if cache is not None and not read.rewritten:
                    cache.keep(path, read)
                return Document(path, lines=tuple(read.lines), size=size)
            return _whole(path, fh, size, max_line_bytes)
    except OSError as exc:
        raise SourceProblem(f"cannot read file ({exc.strerror or exc})") from exc


def _whole(
    path: Path, fh: Any, size: int, max_line_bytes: int, *, not_json: SourceProblem | None = None
) -> Document:
    """A file read whole: a JSON document (a list, a pretty-printed object) or an Aider log."""
    text, _ = read_whole(fh, size, max_line_bytes=max_line_bytes)
    if not text.strip():
        raise SourceProblem("empty file")
    if is_aider_log(text):
        return Document(path, text=text, size=size)
    try:
        return Document(path, value=json.loads(text), size=size)
    except json.JSONDecodeError as exc:
        if not_json is not None:
            raise not_json from exc
        stripped = text.lstrip()
        if stripped[0] in "{[":  # a list followed by more: "Extra data" where the second value starts
            raise SourceProblem(
                f"not JSON or JSON Lines ({exc.msg} at line {exc.lineno})", line=exc.lineno
            ) from exc
        number = text[: len(text) - len(stripped)].count("\n") + 1
        first_line = stripped.partition("\n")[0]
        try:
            json.loads(first_line)
        except json.JSONDecodeError as line_error:
            raise SourceProblem(f"not JSON or JSON Lines ({line_error.msg})", line=number) from exc
        raise SourceProblem(
            f"not JSON or JSON Lines ({exc.msg} at line {exc.lineno})", line=exc.lineno
        ) from exc
    except RecursionError as exc:
        raise SourceProblem("JSON nested too deeply to read") from exc


SQLITE_HEADER = b"SQLite format 3\x00"


def is_sqlite(path: Path) -> bool:
    """The file is a SQLite database (by its 16-byte header)."""
    with path.open("rb") as fh:
        return fh.read(len(SQLITE_HEADER)) == SQLITE_HEADER


#: How much of a large file is looked at before reading it whole (a 1 GB log is refused from this).
_HEAD_BYTES = 64 * 1024


def _sniff_head(path: Path) -> None:
    """Refuse a large file that cannot be a transcript from its first bytes alone: not UTF-8, or
    text that starts as neither JSON, JSON Lines nor an Aider chat log. Small files are left to the
    whole read (same messages as before)."""
    with path.open("rb") as fh:
        head = fh.read(_HEAD_BYTES + 1)
    if len(head) <= _HEAD_BYTES:
        return
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut at the end of the head
            raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
        text = head[: exc.start].decode("utf-8-sig")
    stripped = text.lstrip()
    if not stripped or stripped[0] in "{[" or is_aider_log(text):
        return
    number = text[: len(text) - len(stripped)].count("\n") + 1
    first, newline, _ = stripped.partition("\n")
    try:
        json.loads(first) if newline else None
    except json.JSONDecodeError as exc:
        raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
    raise SourceProblem("not JSON or JSON Lines (no JSON object or array at its start)", line=number)
