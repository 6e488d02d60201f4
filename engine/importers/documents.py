"""Reading a transcript file: JSON (one document), JSON Lines (one object a line) or a text
format (Aider's Markdown), with growing files re-read from where the last read stopped.

A malformed line is reported with its number; a large file that cannot be a transcript is
refused from its first bytes; a file that belongs beside a transcript (a companion) says
what to import instead.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.model import SourceProblem

#: A JSON escape of half a UTF-16 surrogate pair (valid JSON, not storable text).
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


#: Any surrogate escape: one quick scan before the slow one (whose lookbehind is tried at every
#: character: twice the cost of parsing the JSON).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(text: str) -> bool:
    return _SURROGATE_ESCAPE.search(text) is not None and _LONE_SURROGATE.search(text) is not None


#: Text formats recognised by how they start (before any JSON parsing).
AIDER_HEAD = "# aider chat started at"
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

    def read(self, path: Path, *, live: bool) -> Document | None:
        cached = self.files.get(str(path))
        if cached is None:
            return None
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < cached.size:
                    return None
                fh.seek(cached.size - len(cached.check))
                if fh.read(len(cached.check)) != cached.check:
                    return None  # rewritten, not appended to: read it whole
                new = fh.read()
        except OSError:
            return None
        try:
            text = new.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if _has_lone_surrogate(text):
            return None  # rewritten on reading: read it whole
        added, consumed_chars, physical = _decode_lines(
            text, first_number=cached.physical_lines + 1, live=live
        )
        cached.lines.extend(added)
        self._advance(cached, path, cached.size + len(text[:consumed_chars].encode("utf-8")), physical)
        self.appended_reads += 1
        return Document(path, lines=tuple(cached.lines), size=size)

    def keep(self, path: Path, raw: bytes, lines: tuple[tuple[int, Any], ...]) -> None:
        try:
            recent = time.time() - path.stat().st_mtime < self.recent_s
        except OSError:
            recent = False
        if not recent:
            return  # not being written: nothing to gain
        end = len(raw) if raw.endswith((b"\n", b"\r")) else raw.rfind(b"\n") + 1
        physical = raw[:end].count(b"\n")
        numbered = [(n, v) for n, v in lines if n <= physical]
        entry = _Consumed(size=0, check=b"", physical_lines=0, lines=numbered)
        self.files[str(path)] = entry
        self._advance(entry, path, end, physical, raw=raw)

    def _advance(
        self, entry: _Consumed, path: Path, size: int, physical: int, *, raw: bytes | None = None
    ) -> None:
        if raw is None:
            with path.open("rb") as fh:
                fh.seek(max(0, size - self.CHECK_BYTES))
                entry.check = fh.read(min(size, self.CHECK_BYTES))
        else:
            entry.check = raw[max(0, size - self.CHECK_BYTES) : size]
        entry.size = size
        entry.physical_lines = max(entry.physical_lines, physical)


def _decode_lines(text: str, *, first_number: int, live: bool) -> tuple[list[tuple[int, Any]], int, int]:
    """(lines, characters consumed, last physical line number consumed) of appended text."""
    out: list[tuple[int, Any]] = []
    consumed = 0
    number = first_number - 1
    for line in text.splitlines(keepends=True):
        complete = line.endswith(("\n", "\r"))
        if not complete and live:
            break  # still being written
        number += 1
        consumed += len(line)
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceProblem(f"malformed JSON line ({exc.msg}, column {exc.colno})", line=number) from exc
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        out.append((number, value))
    return out, consumed, number


def read_document(path: Path, *, live: bool = False, cache: LineCache | None = None) -> Document:
    """The file parsed. ``live``: the file may be being written, so an unfinished last line (no
    newline after it, not valid JSON) is left for the next read instead of being an error.
    ``cache``: a JSON Lines file read before through it decodes only its appended lines."""
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
        appended = cache.read(path, live=live)
        if appended is not None:
            return appended
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceProblem(f"cannot read file ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
    if not text.strip():
        raise SourceProblem("empty file")
    rewritten = False
    if _has_lone_surrogate(text):
        text = _LONE_SURROGATE.sub(r"\\ufffd", text)  # SQLite cannot store half a character
        rewritten = True
    if text.lstrip().startswith(AIDER_HEAD):
        return Document(path, text=text, size=len(raw))
    try:
        return Document(path, value=json.loads(text), size=len(raw))
    except json.JSONDecodeError as whole_error:
        lines = _read_lines(text, whole_error, live=live)
        if cache is not None and not rewritten:
            cache.keep(path, raw, lines)
        return Document(path, lines=lines, size=len(raw))
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
    if not stripped or stripped[0] in "{[" or stripped.startswith(AIDER_HEAD):
        return
    number = text[: len(text) - len(stripped)].count("\n") + 1
    first, newline, _ = stripped.partition("\n")
    try:
        json.loads(first) if newline else None
    except json.JSONDecodeError as exc:
        raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
    raise SourceProblem("not JSON or JSON Lines (no JSON object or array at its start)", line=number)


def _read_lines(
    text: str, whole_error: json.JSONDecodeError, *, live: bool = False
) -> tuple[tuple[int, Any], ...]:
    lines: list[tuple[int, Any]] = []
    split = text.splitlines()
    # A file being written may end in a line not finished yet: left for the next import.
    unfinished = len(split) if live and split and not text.endswith(("\n", "\r")) else None
    for number, line in enumerate(split, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == unfinished and lines:
                break
            if not lines:
                raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
            raise SourceProblem(f"malformed JSON line ({exc.msg}, column {exc.colno})", line=number) from exc
        if not isinstance(value, dict):
            if not lines:
                raise SourceProblem(
                    f"not JSON or JSON Lines ({whole_error.msg} at line {whole_error.lineno})",
                    line=whole_error.lineno,
                )
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        lines.append((number, value))
    return tuple(lines)
