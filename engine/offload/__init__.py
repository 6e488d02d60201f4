"""Result offloading: a tool output over its size limit is stored whole, and the context gets a reference.

``plan_offload`` is the pure decision (size against limit, :mod:`.decision`). ``ResultStore``
stores outputs in the session database and serves the ``read_result`` tool (:mod:`.results`,
reads rendered by :mod:`.reading`); ``offload_or_inline`` is what the session manager calls: if
the store fails, the output stays inline and a ``degraded`` event says why.
"""

from engine.offload.decision import (
    DEFAULT_THRESHOLD_BYTES,
    EXACT_TOKEN_COUNT_MAX_BYTES,
    HEAD_BYTES,
    PREVIEW_BINARY_BYTES,
    PREVIEW_CHARS,
    OffloadDecision,
    describe_reference,
    estimate_inline_tokens,
    inline_text,
    plan_offload,
    utf8_size,
)
from engine.offload.reading import (
    DEFAULT_READ_CHARS,
    MAX_CONTEXT_LINES,
    MAX_LINE_CHARS,
    MAX_PATTERN_MATCHES,
    MAX_READ_BINARY_BYTES,
    MAX_READ_CHARS,
    READ_RESULT_TOOL,
)
from engine.offload.results import OffloadResult, ResultStore, offload_or_inline, run_read_result_tool

__all__ = [
    "DEFAULT_READ_CHARS",
    "DEFAULT_THRESHOLD_BYTES",
    "EXACT_TOKEN_COUNT_MAX_BYTES",
    "HEAD_BYTES",
    "MAX_CONTEXT_LINES",
    "MAX_LINE_CHARS",
    "MAX_PATTERN_MATCHES",
    "MAX_READ_BINARY_BYTES",
    "MAX_READ_CHARS",
    "PREVIEW_BINARY_BYTES",
    "PREVIEW_CHARS",
    "READ_RESULT_TOOL",
    "OffloadDecision",
    "OffloadResult",
    "ResultStore",
    "describe_reference",
    "estimate_inline_tokens",
    "inline_text",
    "offload_or_inline",
    "plan_offload",
    "run_read_result_tool",
    "utf8_size",
]
