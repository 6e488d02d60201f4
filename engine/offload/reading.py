"""The ``read_result`` tool: its definition for the model, and the text a read returns (a slice
with a header, matching lines with their numbers, or a hex dump of binary data)."""

from __future__ import annotations

import re
from typing import Any

from engine.errors import ResultStoreError

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


def hexdump(ref_id: str, data: bytes, offset: int, limit: int) -> str:
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


def text_slice(ref_id: str, text: str, offset: int, limit: int, *, is_utf8: bool) -> str:
    """``limit`` characters (at most MAX_READ_CHARS) of a stored text from ``offset``, under a
    header with the range, the total and the next offset."""
    if offset >= len(text) and not (offset == 0 and not text):
        raise ResultStoreError(
            f"offset {offset:,} is beyond the end of {ref_id!r} ({len(text):,} characters)", ref_id=ref_id
        )
    end = min(offset + min(limit, MAX_READ_CHARS), len(text))
    notes = [] if is_utf8 else ["non-UTF-8 text, decoded with replacement"]
    if limit > MAX_READ_CHARS:
        notes.append(f"limit capped at {MAX_READ_CHARS:,}")
    notes.append(f"next offset={end}" if end < len(text) else "end of result")
    header = f'[ref_id="{ref_id}": characters {offset:,} to {end:,} of {len(text):,}; {"; ".join(notes)}]'
    return f"{header}\n{text[offset:end]}"


def grep_text(ref_id: str, text: str | None, pattern: str, context_lines: int, *, is_utf8: bool) -> str:
    """The lines of a stored text matching ``pattern`` (case-insensitive), 1-based, with
    ``context_lines`` around each; at most MAX_PATTERN_MATCHES, the rest counted."""
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
    kind = "" if is_utf8 else " (non-UTF-8 text, decoded with replacement)"
    summary = f"{len(matches):,} of {len(lines):,} lines match /{pattern}/ (case-insensitive){kind}"
    if len(matches) > len(shown):
        summary += f"; showing the first {len(shown)}, {len(matches) - len(shown):,} more not shown"
    return "\n".join([f'[ref_id="{ref_id}": {summary}]', *out])
