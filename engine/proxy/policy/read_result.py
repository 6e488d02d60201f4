"""The ``read_result`` tool the proxy adds when it has offloaded tool results, and answers itself:
its definition (Anthropic's shape; each wire API offers it in its own, :mod:`engine.proxy.wire`), the note an
offloaded result leaves in the context, and the answer to one call over the stored text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

#: The tool the proxy adds when it has offloaded results, and answers itself.
READ_RESULT_NAME = "read_result"
READ_RESULT_TOOL: dict[str, Any] = {
    "name": READ_RESULT_NAME,
    "description": (
        "Read a tool result that ctxdesk stored because it was too large. Pass the ref_id from the "
        "note. Returns `limit` characters (default 20,000) from character `offset`, or with `pattern` "
        "(a case-insensitive regular expression) the matching lines with their line numbers."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "ref_id": {"type": "string", "description": "The stored result's reference."},
            "offset": {"type": "integer", "minimum": 0, "description": "Character offset to start at."},
            "limit": {"type": "integer", "minimum": 1, "description": "Characters to read."},
            "pattern": {"type": "string", "description": "Return only the lines matching this."},
        },
        "required": ["ref_id"],
    },
}
#: Characters of an offloaded result kept inline as its preview.
OFFLOAD_PREVIEW_CHARS = 1_500


def offload_note(name: str | None, text: str, ref: str) -> str:
    """An offloaded result in the context: its start, then where the rest is."""
    size = len(text.encode("utf-8"))
    return (
        f"{text[:OFFLOAD_PREVIEW_CHARS]}\n[Tool result stored by ctxdesk ({name or 'tool'}, {size:,} bytes): "
        f'this is its start. Call read_result with ref_id="{ref}" (offset and limit, or pattern) to read the rest.]'
    )


def read_stored(text: str, tool_input: Mapping[str, Any]) -> str:
    """Answer one read_result call over a stored text (errors as ``Error: ...`` for the model)."""
    pattern = tool_input.get("pattern")
    if isinstance(pattern, str) and pattern:
        try:
            regex = re.compile(pattern, re.IGNORECASE)
        except re.error as exc:
            return f"Error: invalid pattern ({exc})"
        hits = [f"{n}: {line}" for n, line in enumerate(text.splitlines(), 1) if regex.search(line)]
        return "\n".join(hits[:500]) or "(no matching lines)"
    offset = tool_input.get("offset") or 0
    limit = tool_input.get("limit") or 20_000
    if not isinstance(offset, int) or not isinstance(limit, int) or offset < 0 or limit < 1:
        return "Error: offset must be >= 0 and limit >= 1"
    end = min(len(text), offset + min(limit, 100_000))
    more = f"next offset={end}" if end < len(text) else "end of result"
    return f"[characters {offset:,} to {end:,} of {len(text):,}; {more}]\n{text[offset:end]}"
