"""``ResultStore`` keeps a session's offloaded outputs in its database and serves ``read_result``;
``offload_or_inline`` is what the session manager calls: if the store fails, the output stays
inline and a ``degraded`` event says why."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.errors import NotFoundError, ResultStoreError, StoreError
from engine.events import ContextEvent, degraded_event
from engine.offload.decision import (
    DEFAULT_THRESHOLD_BYTES,
    HEAD_BYTES,
    PREVIEW_CHARS,
    describe_reference,
    estimate_inline_tokens,
    inline_text,
    looks_binary,
    plan_offload,
)
from engine.offload.reading import DEFAULT_READ_CHARS, READ_RESULT_TOOL, grep_text, hexdump, text_slice
from engine.tokens import Tokenizer, get_tokenizer

if TYPE_CHECKING:  # the store is the session manager's to open; this module only calls it
    from engine.store import BlobRecord, SessionStore


@dataclass(frozen=True)
class OffloadResult:
    """What replaced one offloaded output: the reference text for the context, and its event."""

    ref_id: str
    text: str
    record: BlobRecord
    event: ContextEvent


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
            return grep_text(ref_id, text, pattern, context_lines, is_utf8=record.is_text)
        if text is None:
            return hexdump(ref_id, data, offset, limit)
        return text_slice(ref_id, text, offset, limit, is_utf8=record.is_text)

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
            text = None if looks_binary(data[:HEAD_BYTES]) else data.decode("utf-8", errors="replace")
        self._cached = (record.ref_id, data, text)
        return data, text

    @contextmanager
    def _store_errors(self) -> Iterator[None]:
        # The store lets some sqlite3 errors through (closed connection, read-only file).
        try:
            yield
        except sqlite3.Error as exc:
            raise StoreError(f"result store failed ({exc})", path=str(self.store.path)) from exc


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
