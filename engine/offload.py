"""Result offloading: a tool output over its size limit is stored whole, and the context gets a reference.

``plan_offload`` is the pure decision (size against limit). ``ResultStore`` stores outputs in the
session database and serves the ``read_result`` tool; ``offload_or_inline`` is what the session
manager calls: if the store fails, the output stays inline and a ``degraded`` event says why.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import NotFoundError, ResultStoreError, StoreError, ValidationError
from engine.events import ContextEvent, degraded_event
from engine.tokens import Tokenizer, get_tokenizer

if TYPE_CHECKING:  # the store is the session manager's to open; this module only calls it
    from engine.store import BlobRecord, SessionStore

#: Outputs larger than this many bytes (UTF-8) are offloaded unless the tool sets its own limit.
DEFAULT_THRESHOLD_BYTES = 4096
#: Characters of the output shown in the reference text.
PREVIEW_CHARS = 200
#: Bytes of a binary output shown (as hex) in the reference text.
PREVIEW_BINARY_BYTES = 32
#: Bytes of the head of an output decoded for its preview (4 per character at most, plus a
#: character split at the cut) and checked to tell binary data from non-UTF-8 text.
HEAD_BYTES = PREVIEW_CHARS * 4 + 4
#: Characters read_result returns when no limit is given, and the most it returns at once.
DEFAULT_READ_CHARS = 4_000
MAX_READ_CHARS = 8_000
#: Bytes of a binary output one read_result call shows as a hex dump (4 output chars per byte).
MAX_READ_BINARY_BYTES = MAX_READ_CHARS // 4
#: read_result with a pattern: matching lines listed at most, context lines around each at most,
#: and characters of one listed line at most.
MAX_PATTERN_MATCHES = 50
MAX_CONTEXT_LINES = 5
MAX_LINE_CHARS = 400
#: Inline token counts of outputs larger than this are extrapolated from their head, so a
#: 100 MB output is not run through the tokenizer just to report what it would have cost.
EXACT_TOKEN_COUNT_MAX_BYTES = 1 << 20

READ_RESULT_TOOL: dict[str, Any] = {
    "name": "read_result",
    "description": (
        "Read a tool result that was too large for the context and was stored instead. "
        'Pass the ref_id from the "[Tool result stored ...]" note. Without a pattern, returns '
        f"`limit` characters (at most {MAX_READ_CHARS:,}) starting at character `offset`; the "
        "header says the range, the total and the next offset. With `pattern` (a regular "
        "expression, case-insensitive), returns the matching lines with their 1-based line "
        "numbers instead, optionally with `context_lines` lines around each."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ref_id": {"type": "string", "description": 'The stored result\'s reference, e.g. "res_1a2b3c".'},
            "offset": {
                "type": "integer",
                "minimum": 0,
                "default": 0,
                "description": "Character offset (0-based) to start reading at. Ignored with pattern.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_READ_CHARS,
                "default": DEFAULT_READ_CHARS,
                "description": "Characters to read. Ignored with pattern.",
            },
            "pattern": {
                "type": "string",
                "description": "Regular expression (case-insensitive): list the lines that match it.",
            },
            "context_lines": {
                "type": "integer",
                "minimum": 0,
                "maximum": MAX_CONTEXT_LINES,
                "default": 0,
                "description": "With pattern: lines of context to show before and after each match.",
            },
        },
        "required": ["ref_id"],
        "additionalProperties": False,
    },
}


@dataclass(frozen=True)
class OffloadDecision:
    """Whether one tool output goes to the store, its size, and the limit it was held against."""

    offload: bool
    tool_name: str
    size_bytes: int
    limit_bytes: int
    reason: str


def utf8_size(content: str | bytes) -> int:
    """Bytes of ``content`` in UTF-8, without copying ASCII text (``str.isascii`` is O(1))."""
    if isinstance(content, bytes | bytearray | memoryview):
        return len(content)
    return len(content) if content.isascii() else len(content.encode("utf-8", "surrogatepass"))


def plan_offload(
    content: str | bytes,
    *,
    tool_name: str,
    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
    tool_response_max_bytes: int | None = None,
) -> OffloadDecision:
    """Offload ``content`` when it is larger than its limit: ``threshold_bytes``, or the
    model's ``tool_response_max_bytes`` (largest response kept inline) when that is lower."""
    if threshold_bytes < 0:
        raise ValidationError(f"threshold_bytes must be >= 0, got {threshold_bytes}", field="threshold_bytes")
    if tool_response_max_bytes is not None and tool_response_max_bytes < 0:
        raise ValidationError(
            f"tool_response_max_bytes must be >= 0, got {tool_response_max_bytes}",
            field="tool_response_max_bytes",
        )
    size = utf8_size(content)
    if tool_response_max_bytes is not None and tool_response_max_bytes < threshold_bytes:
        limit, limit_name = tool_response_max_bytes, "tool_response_max_bytes"
    else:
        limit, limit_name = threshold_bytes, "offload threshold"
    offload = size > limit
    relation = ">" if offload else "<="
    return OffloadDecision(
        offload=offload,
        tool_name=tool_name,
        size_bytes=size,
        limit_bytes=limit,
        reason=f"{size:,} bytes {relation} {limit:,}-byte {limit_name}",
    )


@dataclass(frozen=True)
class OffloadResult:
    """What replaced one offloaded output: the reference text for the context, and its event."""

    ref_id: str
    text: str
    record: BlobRecord
    event: ContextEvent


def inline_text(content: str | bytes) -> str:
    """The output as it goes into the context when it is not offloaded."""
    if isinstance(content, str):
        return content
    return bytes(content).decode("utf-8", errors="replace")


def _escape_preview(text: str) -> str:
    # Newlines are escaped so the reference stays three lines and the preview's end is visible.
    return text.translate(_PREVIEW_ESCAPES)


_PREVIEW_ESCAPES = {i: f"\\x{i:02x}" for i in range(32)} | {
    ord("\n"): "\\n",
    ord("\r"): "\\r",
    ord("\t"): "\\t",
}


def _looks_binary(head: bytes) -> bool:
    """Binary data rather than text in a legacy encoding: NUL bytes or many control bytes."""
    if b"\x00" in head:
        return True
    controls = sum(1 for b in head if b < 32 and b not in (9, 10, 13))
    return controls > len(head) // 10


def describe_reference(
    ref_id: str, *, tool_name: str, size_bytes: int, is_text: bool, head: str | bytes
) -> tuple[str, str]:
    """(reference text for the context, content kind) for a stored output whose start is ``head``.

    Kinds: ``text``; ``non-utf8-text``, previewed decoded with replacement; ``binary``,
    previewed as hex.
    """
    raw = head if isinstance(head, bytes) else head.encode("utf-8", "surrogatepass")
    if is_text:
        kind, what = "text", ""
        preview = head if isinstance(head, str) else raw.decode("utf-8", errors="ignore")
    elif not _looks_binary(raw):
        kind, what = "non-utf8-text", " of non-UTF-8 text, decoded with replacement for preview,"
        preview = raw.decode("utf-8", errors="replace")
    else:
        kind, what = "binary", " of binary data"
        preview = ""
    if kind == "binary":
        shown = f"First {PREVIEW_BINARY_BYTES} bytes (hex): {raw[:PREVIEW_BINARY_BYTES].hex(' ')}"
    else:
        shown = f"First {PREVIEW_CHARS} chars: {_escape_preview(preview[:PREVIEW_CHARS])}"
    text = (
        f'[Tool result stored — {size_bytes:,} bytes{what} from "{tool_name}".\n'
        f"{shown}]\n"
        f'Use the "read_result" tool with ref_id="{ref_id}" to read specific portions.'
    )
    return text, kind


def estimate_inline_tokens(content: str | bytes, tokenizer: Tokenizer) -> tuple[int, bool]:
    """(tokens the output would cost inline, whether that is extrapolated from its head)."""
    size = utf8_size(content)
    if size <= EXACT_TOKEN_COUNT_MAX_BYTES:
        return tokenizer.count(inline_text(content)), False
    head = inline_text(content[:EXACT_TOKEN_COUNT_MAX_BYTES])
    head_bytes = utf8_size(head)
    return round(tokenizer.count(head) * size / max(head_bytes, 1)), True


class ResultStore:
    """Offloaded tool outputs of one session: stores them whole and serves ``read_result``.

    Python calls raise :class:`ResultStoreError` (bad ref, offset, pattern) or
    :class:`StoreError` (the database failed); ``run_read_result_tool`` turns both into text.
    """

    def __init__(self, store: SessionStore, session_id: str, *, tokenizer: Tokenizer | None = None) -> None:
        self.store = store
        self.session_id = session_id
        self.tokenizer = tokenizer or get_tokenizer("chars/4")
        self._cached: tuple[str, bytes, str | None] | None = None

    # -- writing ------------------------------------------------------------------------
    def offload(
        self,
        content: str | bytes,
        *,
        tool_name: str,
        tool_use_id: str | None = None,
        reason: str | None = None,
    ) -> OffloadResult:
        """Store ``content`` whole (bytes exactly as given, text as UTF-8) and describe it."""
        # Text goes to the store as text: it is encoded there a piece at a time, never copied whole.
        head: str | bytes = (
            content[:PREVIEW_CHARS] if isinstance(content, str) else bytes(content[:HEAD_BYTES])
        )
        tokens_inline, estimated = estimate_inline_tokens(content, self.tokenizer)
        preview = head if isinstance(head, str) else head.decode("utf-8", errors="replace")[:PREVIEW_CHARS]
        with self._store_errors():
            record = self.store.put_blob(
                self.session_id,
                content,
                tool_name=tool_name,
                tool_use_id=tool_use_id,
                tokens=tokens_inline,
                preview=preview,
            )
        text, kind = describe_reference(
            record.ref_id,
            tool_name=tool_name,
            size_bytes=record.size_bytes,
            is_text=record.is_text,
            head=head,
        )
        event = ContextEvent(
            kind="offload",
            trigger="tool_result",
            outcome="offloaded",
            reason=reason,
            details={
                "ref_id": record.ref_id,
                "tool_name": tool_name,
                "tool_use_id": tool_use_id,
                "size_bytes": record.size_bytes,
                "content_kind": kind,
                "tokens_inline": tokens_inline,
                "tokens_inline_estimated": estimated,
                "tokens_reference": self.tokenizer.count(text),
            },
        )
        return OffloadResult(ref_id=record.ref_id, text=text, record=record, event=event)

    # -- reading ------------------------------------------------------------------------
    def read(
        self,
        ref_id: str,
        offset: int = 0,
        limit: int = DEFAULT_READ_CHARS,
        pattern: str | None = None,
        context_lines: int = 0,
    ) -> str:
        """A slice of a stored output (with a header: range, total, next offset), or with
        ``pattern`` its matching lines with 1-based line numbers (offset and limit ignored).

        Text that is not UTF-8 is read decoded with replacement; binary data as a hex dump
        whose offset and limit count bytes.
        """
        record = self._record(ref_id)
        if pattern is None:
            if offset < 0:
                raise ResultStoreError(f"offset must be >= 0 for {ref_id!r}, got {offset}", ref_id=ref_id)
            if limit < 1:
                raise ResultStoreError(f"limit must be >= 1 for {ref_id!r}, got {limit}", ref_id=ref_id)
        data, text = self._load(record)
        if pattern is not None:
            return self._grep(record, text, pattern, context_lines)
        if text is None:
            return _hexdump(ref_id, data, offset, limit)
        if offset >= len(text) and not (offset == 0 and not text):
            raise ResultStoreError(
                f"offset {offset:,} is beyond the end of {ref_id!r} ({len(text):,} characters)", ref_id=ref_id
            )
        end = min(offset + min(limit, MAX_READ_CHARS), len(text))
        notes = [] if record.is_text else ["non-UTF-8 text, decoded with replacement"]
        if limit > MAX_READ_CHARS:
            notes.append(f"limit capped at {MAX_READ_CHARS:,}")
        notes.append(f"next offset={end}" if end < len(text) else "end of result")
        header = f'[ref_id="{ref_id}": characters {offset:,} to {end:,} of {len(text):,}; {"; ".join(notes)}]'
        return f"{header}\n{text[offset:end]}"

    def _record(self, ref_id: str) -> BlobRecord:
        if not isinstance(ref_id, str) or not ref_id:
            raise ResultStoreError(f"ref_id must be a non-empty string, got {ref_id!r}", ref_id=None)
        try:
            with self._store_errors():
                record = self.store.get_blob(ref_id, with_content=False)
        except NotFoundError as exc:
            raise ResultStoreError(
                f"unknown ref_id {ref_id!r}: no stored result has it", ref_id=ref_id
            ) from exc
        if record.session_id != self.session_id:
            raise ResultStoreError(
                f"ref_id {ref_id!r} belongs to another session, not {self.session_id!r}", ref_id=ref_id
            )
        return record

    def _load(self, record: BlobRecord) -> tuple[bytes, str | None]:
        """(bytes, text) of a stored output; text is None for binary data. The last one loaded
        is kept, so paging through a large output does not reload and re-decode it each time."""
        if self._cached is not None and self._cached[0] == record.ref_id:
            return self._cached[1], self._cached[2]
        with self._store_errors():
            data = self.store.get_blob(record.ref_id).content or b""
        if record.is_text:
            text: str | None = data.decode("utf-8")
        else:
            text = None if _looks_binary(data[:HEAD_BYTES]) else data.decode("utf-8", errors="replace")
        self._cached = (record.ref_id, data, text)
        return data, text

    def _grep(self, record: BlobRecord, text: str | None, pattern: str, context_lines: int) -> str:
        ref_id = record.ref_id
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            raise ResultStoreError(
                f"invalid regex pattern {pattern!r} for {ref_id!r}: {exc}", ref_id=ref_id
            ) from exc
        if not 0 <= context_lines <= MAX_CONTEXT_LINES:
            raise ResultStoreError(
                f"context_lines must be 0..{MAX_CONTEXT_LINES} for {ref_id!r}, got {context_lines}",
                ref_id=ref_id,
            )
        if text is None:
            raise ResultStoreError(
                f"{ref_id!r} is binary data: read it as a hex dump with offset and limit, not a pattern",
                ref_id=ref_id,
            )
        lines = text.split("\n")
        matches = [i for i, line in enumerate(lines) if regex.search(line)]
        matched = set(matches)
        shown = matches[:MAX_PATTERN_MATCHES]
        out: list[str] = []
        last = -1
        for i in shown:
            start, stop = max(i - context_lines, last + 1), min(i + context_lines + 1, len(lines))
            if context_lines and out and start > last + 1:
                out.append("--")
            for j in range(start, stop):
                sep = ":" if j in matched else "-"
                out.append(f"{j + 1}{sep}{_clip(lines[j].rstrip(chr(13)))}")
            last = max(last, stop - 1)
        kind = "" if record.is_text else " (non-UTF-8 text, decoded with replacement)"
        summary = f"{len(matches):,} of {len(lines):,} lines match /{pattern}/ (case-insensitive){kind}"
        if len(matches) > len(shown):
            summary += f"; showing the first {len(shown)}, {len(matches) - len(shown):,} more not shown"
        return "\n".join([f'[ref_id="{ref_id}": {summary}]', *out])

    @contextmanager
    def _store_errors(self) -> Iterator[None]:
        # The store lets some sqlite3 errors through (closed connection, read-only file).
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"result store failed ({exc})", path=str(self.store.path)) from exc


def _hexdump(ref_id: str, data: bytes, offset: int, limit: int) -> str:
    size = len(data)
    if offset >= size:
        raise ResultStoreError(
            f"offset {offset:,} is beyond the end of {ref_id!r} ({size:,} bytes of binary data)",
            ref_id=ref_id,
        )
    end = min(offset + min(limit, MAX_READ_BINARY_BYTES), size)
    chunks = [(i, data[i : min(i + 16, end)]) for i in range(offset, end, 16)]
    lines = [
        f"{i:08x}  {chunk.hex(' '):<47}  " + "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        for i, chunk in chunks
    ]
    more = f"next offset={end}" if end < size else "end of result"
    header = f'[ref_id="{ref_id}": bytes {offset:,} to {end:,} of {size:,} (binary data, hex dump); {more}]'
    return "\n".join([header, *lines])


def _clip(line: str) -> str:
    return (
        line
        if len(line) <= MAX_LINE_CHARS
        else line[:MAX_LINE_CHARS] + f"… (+{len(line) - MAX_LINE_CHARS:,} chars)"
    )


def _int_arg(tool_input: dict[str, Any], name: str, default: int) -> int:
    value = tool_input.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ResultStoreError(f"{name} must be an integer, got {value!r}", ref_id=tool_input.get("ref_id"))
    return value


def run_read_result_tool(result_store: ResultStore, tool_input: dict[str, Any]) -> str:
    """Handle a ``read_result`` call: the text for the model, errors as ``Error: ...``."""
    try:
        if not isinstance(tool_input, dict):
            raise ResultStoreError(f"read_result input must be an object, got {type(tool_input).__name__}")
        unknown = sorted(set(tool_input) - set(READ_RESULT_TOOL["input_schema"]["properties"]))
        if unknown:
            raise ResultStoreError(f"read_result got unknown arguments {unknown}")
        pattern = tool_input.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise ResultStoreError(f"pattern must be a string, got {pattern!r}")
        return result_store.read(
            tool_input.get("ref_id"),  # type: ignore[arg-type]  # _record checks it
            offset=_int_arg(tool_input, "offset", 0),
            limit=_int_arg(tool_input, "limit", DEFAULT_READ_CHARS),
            pattern=pattern,
            context_lines=_int_arg(tool_input, "context_lines", 0),
        )
    except (ResultStoreError, StoreError) as exc:
        return f"Error: {exc}"


def offload_or_inline(
    result_store: ResultStore,
    content: str | bytes,
    *,
    tool_name: str,
    tool_use_id: str | None = None,
    threshold_bytes: int = DEFAULT_THRESHOLD_BYTES,
    tool_response_max_bytes: int | None = None,
) -> tuple[str, list[ContextEvent]]:
    """(text for the context, events): the reference when offloaded, else the output itself.

    A store failure keeps the output inline and adds a ``degraded`` event naming the error.
    """
    decision = plan_offload(
        content,
        tool_name=tool_name,
        threshold_bytes=threshold_bytes,
        tool_response_max_bytes=tool_response_max_bytes,
    )
    if not decision.offload:
        return inline_text(content), []
    try:
        result = result_store.offload(
            content, tool_name=tool_name, tool_use_id=tool_use_id, reason=decision.reason
        )
    except StoreError as exc:
        event = degraded_event(
            "offload", exc, fallback="inline", tool_name=tool_name, size_bytes=decision.size_bytes
        )
        return inline_text(content), [event]
    return result.text, [result.event]
