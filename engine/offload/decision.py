"""The pure side of offloading: whether a tool output goes to the store (size against limit),
the reference text that replaces it in the context, and what it would have cost inline."""

from __future__ import annotations

from dataclasses import dataclass

from engine.errors import ValidationError
from engine.tokens import Tokenizer

#: Outputs larger than this many bytes (UTF-8) are offloaded unless the tool sets its own limit.
DEFAULT_THRESHOLD_BYTES = 4096
#: Characters of the output shown in the reference text.
PREVIEW_CHARS = 200
#: Bytes of a binary output shown (as hex) in the reference text.
PREVIEW_BINARY_BYTES = 32
#: Bytes of the head of an output decoded for its preview (4 per character at most, plus a
#: character split at the cut) and checked to tell binary data from non-UTF-8 text.
HEAD_BYTES = PREVIEW_CHARS * 4 + 4
#: Inline token counts of outputs larger than this are extrapolated from their head, so a
#: 100 MB output is not run through the tokenizer just to report what it would have cost.
EXACT_TOKEN_COUNT_MAX_BYTES = 1 << 20


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


def looks_binary(head: bytes) -> bool:
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
    elif not looks_binary(raw):
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
