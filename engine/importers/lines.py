"""Reading a transcript file as a stream: JSON Lines one line at a time, each line decoded and
parsed on its own, and no line (nor a whole JSON document) longer than a cap.

Memory is bounded by the largest line accepted (plus the values parsed): a line past
:data:`MAX_LINE_BYTES` is refused from its first ``cap + 1`` bytes, naming its line, instead of
being read whole. Lines split on ``\\n`` only, as JSON Lines does (a raw U+2028 inside a string
is text, not a line break). Whole lines are decoded a few hundred at a time (:class:`_Batch`: their
keys and repeated short values shared), each still exactly the one object it is alone, or reported
as it is alone.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from engine.importers.parsing.parsed import SourceProblem
from engine.textfmt import article

#: The most one line (or one JSON document) of a transcript may hold: far above any real line
#: (a Claude Code line with a large image is a few MB), far below what would exhaust memory.
MAX_LINE_BYTES = 128 * 1024 * 1024
#: The buffer a transcript is read through: a long line (a tool output, a Codex turn) is taken in
#: a few reads, not one per 8 KB (the default), and the line reads cost half the CPU.
READ_BUFFER_BYTES = 1 << 20
_BOM = b"\xef\xbb\xbf"

#: A JSON escape of half a UTF-16 surrogate pair (valid JSON, not storable text).
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)
#: Any surrogate escape: one quick scan before the slow one (whose lookbehind is tried at every
#: character: twice the cost of parsing the JSON).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def has_lone_surrogate(text: str) -> bool:
    return _SURROGATE_ESCAPE.search(text) is not None and _LONE_SURROGATE.search(text) is not None


def without_lone_surrogates(text: str) -> str:
    """``text`` with each half surrogate pair escaped as U+FFFD (SQLite cannot store half a character)."""
    return _LONE_SURROGATE.sub(r"\\ufffd", text)


def too_long(what: str, cap: int) -> str:
    return f"{what} is longer than {cap:,} bytes, the most one line or JSON document may hold"


@dataclass
class LineRead:
    """What :func:`read_lines` consumed: the parsed lines, the byte offset after the last complete
    line read (``end``), the last physical line number read, whether it read to the end of the file
    (``complete``: False when ``live`` left an unfinished last line), and whether a line had a lone
    surrogate replaced (``rewritten``: the parsed values are not the bytes on disk)."""

    lines: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    end: int = 0
    physical: int = 0
    complete: bool = True
    rewritten: bool = False


def read_lines(
    fh: BinaryIO,
    *,
    start: int = 0,
    first_number: int = 1,
    live: bool = False,
    continuing: bool = False,
    max_line_bytes: int = MAX_LINE_BYTES,
) -> LineRead:
    """The JSON Lines of ``fh`` from byte ``start`` (its physical line ``first_number``).

    ``live``: the file may be being written: an unfinished last line (no newline, not valid JSON,
    or a character cut in two) is left for the next read. ``continuing``: lines were read before
    (a followed file's appended part), so a first bad line is a malformed line, not a sign that
    the file is not JSON Lines.
    """
    out = LineRead(end=start, physical=first_number - 1)
    fh.seek(start)
    offset, number = start, first_number - 1
    batch = _Batch(out, continuing)
    while True:
        raw = next_line(fh, max_line_bytes)
        if raw is None:
            batch.flush()  # the lines before it first: a bad one among them is reported first
            raise SourceProblem(too_long(f"line {number + 1}", max_line_bytes), line=number + 1)
        if not raw:
            batch.flush()
            return out
        number += 1
        ended = raw.endswith(b"\n")
        if offset == 0 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
            offset += len(_BOM)
        if ended and len(raw) <= _BATCH_LINE_BYTES:  # a whole line (most): decoded with its neighbours
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                batch.flush()
                raise SourceProblem(f"not UTF-8 text (byte {offset + exc.start})", line=number) from exc
            if text and not text.isspace():  # text.strip() without its copy of the line
                batch.add(number, text)  # its lone surrogates replaced with its batch's (_Batch.flush)
            offset += len(raw)
            out.end, out.physical = offset, number
            continue
        batch.flush()
        if live and not ended and continuing:
            out.complete = False  # appended and still being written: the next read takes it whole
            return out
        unfinished = live and not ended and bool(out.lines)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            if unfinished:
                out.complete = False
                return out
            raise SourceProblem(f"not UTF-8 text (byte {offset + exc.start})", line=number) from exc
        if text and not text.isspace():
            if has_lone_surrogate(text):
                text, out.rewritten = without_lone_surrogates(text), True
            value = _line_value(text, number, out, continuing=continuing, unfinished=unfinished)
            if value is _UNFINISHED:
                out.complete = False
                return out
            out.lines.append((number, value))
        offset += len(raw)
        if ended:
            out.end, out.physical = offset, number


_UNFINISHED = object()


def _line_value(text: str, number: int, out: LineRead, *, continuing: bool, unfinished: bool) -> Any:
    """The object of one line, or _UNFINISHED (a live file's last line, not yet whole); raises
    SourceProblem naming the line and what is wrong."""
    try:
        value = _loads(text)
    except json.JSONDecodeError as exc:
        if unfinished:
            return _UNFINISHED
        if not out.lines and not continuing:
            raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
        raise SourceProblem(f"malformed JSON line ({exc.msg}, column {exc.colno})", line=number) from exc
    except RecursionError as exc:
        raise SourceProblem("JSON nested too deeply to read", line=number) from exc
    if not isinstance(value, dict):
        if not out.lines and not continuing:
            raise SourceProblem(
                f"not JSON or JSON Lines (line {number} holds a {type(value).__name__}, not an object)",
                line=number,
            )
        raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
    return value


#: Lines decoded together: at most this many, this many characters, each line at most this long.
_BATCH_LINES = 256
_BATCH_CHARS = 1 << 20
_BATCH_LINE_BYTES = 1 << 18
#: Between two lines decoded together: a string no file holds (a random one, made per process),
#: with a newline either side (no JSON string holds a raw newline).
_TOKEN = secrets.token_hex(16)
_SEPARATOR = f'\n,"{_TOKEN}",\n'


class _Batch:
    """Whole lines decoded as one JSON array, every two lines apart by :data:`_SEPARATOR`: a
    line's keys are then the same strings as its neighbours' (the decoder keeps one copy of each
    key per document; per line, a session's line objects held a copy of every key of every line:
    a third of their memory), and one decoder call reads many lines.

    The array is the lines' objects only when it alternates object, separator, object, ... with
    every separator at its top: a separator inside a value means a line did not end its value
    (a separator no line can write cannot be matched by one). Anything else (a bad line, a value
    that is not an object, a line too deep) is decoded line by line, which reports it as ever.
    """

    def __init__(self, out: LineRead, continuing: bool) -> None:
        self.out = out
        self.continuing = continuing
        self.numbers: list[int] = []
        self.texts: list[str] = []
        self.chars = 0

    def add(self, number: int, text: str) -> None:
        self.numbers.append(number)
        self.texts.append(text)
        self.chars += len(text)
        if len(self.texts) >= _BATCH_LINES or self.chars >= _BATCH_CHARS:
            self.flush()

    def flush(self) -> None:
        if not self.texts:
            return
        joined = _SEPARATOR.join(self.texts)
        if _SURROGATE_ESCAPE.search(joined) is not None:  # one scan a batch (no separator has one)
            for k, text in enumerate(self.texts):
                if has_lone_surrogate(text):
                    self.texts[k], self.out.rewritten = without_lone_surrogates(text), True
            joined = _SEPARATOR.join(self.texts)
        values = _decoded_together(self.texts, joined)
        if values is not None:
            share_repeated_values(values)
            self.out.lines.extend(zip(self.numbers, values, strict=True))
        else:
            for number, text in zip(self.numbers, self.texts, strict=True):
                value = _line_value(text, number, self.out, continuing=self.continuing, unfinished=False)
                self.out.lines.append((number, value))
        self.numbers, self.texts, self.chars = [], [], 0


#: Strings up to this long are shared between the lines decoded together (share_repeated_values).
_SHARED_VALUE_CHARS = 64


def share_repeated_values(values: list[dict[str, Any]]) -> None:
    """Equal short strings of ``values`` (at their top and one level down) made one object, in
    place: the decoder shares keys only, and a Claude Code line repeats a dozen values of its
    neighbours (its session id, version, cwd, type, role, model): a third of what a session's
    decoded lines hold, and the parse holds them all (100k lines: 52 MB of its 432 MB peak)."""
    memo: dict[str, str] = {}
    for obj in values:
        for key, value in obj.items():
            kind = type(value)
            if kind is str:
                if len(value) <= _SHARED_VALUE_CHARS:
                    obj[key] = memo.setdefault(value, value)
            elif kind is dict:
                for inner, item in value.items():
                    if type(item) is str and len(item) <= _SHARED_VALUE_CHARS:
                        value[inner] = memo.setdefault(item, item)


def _decoded_together(texts: list[str], joined: str) -> list[dict[str, Any]] | None:
    """Each text's object, decoded as one array (``joined``: the texts, each two apart by the
    separator); None unless each text is exactly one object."""
    if len(texts) == 1:
        return None
    try:
        values = _loads("[" + joined + "]")
    except (ValueError, RecursionError):
        return None
    if len(values) != 2 * len(texts) - 1:
        return None
    separators, objects = values[1::2], values[0::2]
    if separators.count(_TOKEN) != len(separators) or not all(type(v) is dict for v in objects):
        return None
    return objects


_SCAN = json.JSONDecoder().scan_once
_WHITESPACE = re.compile(r"[ \t\n\r]*")


def _loads(text: str) -> Any:
    """``json.loads(text)``, its value read by the scanner itself (json.loads' checks and calls
    around it cost a sixth of a short line's reading); anything else goes through json.loads,
    which raises what it always did."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:  # leading whitespace, or not JSON: json.loads says which
        return json.loads(text)
    if end != len(text) and _WHITESPACE.match(text, end).end() != len(text):
        return json.loads(text)  # extra data after the value
    return value


#: How much of a line is read at a time: a line past the cap is refused holding no more than the
#: cap (its pieces), never the cap and a joined copy of it.
_PIECE_BYTES = 1 << 20


def next_line(fh: BinaryIO, max_line_bytes: int = MAX_LINE_BYTES) -> bytes | None:
    """The next line (with its newline; b"" at the end of the file), or None when it is longer
    than ``max_line_bytes``."""
    first = fh.readline(min(_PIECE_BYTES, max_line_bytes + 1))
    if not first or first.endswith(b"\n"):
        return first  # a line in one piece: most lines
    pieces = [first]
    size = len(first)
    if size > max_line_bytes:
        return None
    while True:
        piece = fh.readline(min(_PIECE_BYTES, max_line_bytes + 1 - size))
        if not piece:
            break
        pieces.append(piece)
        size += len(piece)
        if piece.endswith(b"\n"):
            break
        if size > max_line_bytes:
            return None
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def first_character(fh: BinaryIO, *, max_line_bytes: int = MAX_LINE_BYTES) -> str | None:
    """The file's first character that is not whitespace (a BOM skipped), None for a blank file;
    reads at most ``max_line_bytes`` of leading whitespace."""
    fh.seek(0)
    seen = 0
    while seen <= max_line_bytes:
        chunk = fh.read(64 * 1024)
        if not chunk:
            return None
        if seen == 0 and chunk.startswith(_BOM):
            chunk = chunk[len(_BOM) :]
        stripped = chunk.lstrip()
        if stripped:
            return chr(stripped[0]) if stripped[0] < 0x80 else stripped[:4].decode("utf-8", "replace")[0]
        seen += len(chunk)
    raise SourceProblem(too_long("the whitespace at the start of the file", max_line_bytes), line=1)


def read_whole(fh: BinaryIO, size: int, *, max_line_bytes: int = MAX_LINE_BYTES) -> tuple[str, bool]:
    """The whole file as text (a JSON document, an Aider log), refused past the cap before it is
    read; (text, a lone surrogate was replaced)."""
    if size > max_line_bytes:
        raise SourceProblem(too_long(f"{article(size)} {size:,}-byte document", max_line_bytes), line=1)
    fh.seek(0)
    raw = fh.read(max_line_bytes + 1)
    if len(raw) > max_line_bytes:  # grew since it was measured
        raise SourceProblem(too_long("the document", max_line_bytes), line=1)
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
    if has_lone_surrogate(text):
        return without_lone_surrogates(text), True
    return text, False
