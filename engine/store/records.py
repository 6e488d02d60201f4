"""Typed rows of the session database, the JSON form of messages stored in it, and the row
converters both stores (and the cost writer) share."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from engine.components import trusted
from engine.errors import StoreError
from engine.events import ComponentTokens, ProviderUsage
from engine.limit import recorded_limit
from engine.messages import Block, Message, ToolUseBlock
from engine.redact import holds_no_secret, redact_row, redact_secrets

_content_adapter: TypeAdapter[str | list[Block]] = TypeAdapter(str | list[Block])
_blocks_adapter: TypeAdapter[list[Block]] = TypeAdapter(list[Block])


def _encoder(default: Callable[[Any], Any] | None) -> Callable[[Any], str]:
    """``json.JSONEncoder(ensure_ascii=False, default=default).encode``, without the Python layers
    (encode, iterencode) it runs before the C encoder each call: 3.9 -> 3.4 µs for a request event's
    details, an import writes three such texts per call (about 1% of its CPU). The C encoder is
    still made per value, with its own markers: a circular value fails as in ``json.dumps``."""
    encoder = json.JSONEncoder(ensure_ascii=False, **({} if default is None else {"default": default}))
    make = json.encoder.c_make_encoder
    if make is None:  # no C accelerator: the encoder's own path
        return encoder.encode
    args = (encoder.default, json.encoder.encode_basestring, None, ": ", ", ", False, False, True)

    def encode(value: Any) -> str:
        return "".join(make({}, *args)(value, 0))

    return encode


#: ``json.dumps(value, ensure_ascii=False[, default=str])`` (:func:`_encoder`).
_JSON = _encoder(None)
_JSON_ANY = _encoder(str)


def content_to_json(message: Message) -> str:
    if isinstance(message.content, str):
        return _JSON(message.content)
    # each block as its model_dump(mode="json", exclude_none=True), the list dumped in one call
    return _JSON(_blocks_adapter.dump_python(message.content, mode="json", exclude_none=True))


def json_text(value: Any) -> str | None:
    """A JSON column's text: ``json.dumps(value, ensure_ascii=False, default=str)``; None stays NULL."""
    return None if value is None else _JSON_ANY(value)


def stored_form(message: Message) -> tuple[Message, str]:
    """``message`` as the store keeps it, secrets redacted (:func:`engine.redact.redact_secrets` over
    its content JSON and its meta), with that content JSON; the message itself when nothing is."""
    stored, content_json, _ = stored_texts(message)
    return stored, content_json


def stored_texts(message: Message) -> tuple[Message, str, str | None]:
    """:func:`stored_form` and its meta as JSON text (None when it has none): the ``meta_json``
    column, serialized once (a redacted meta read back serializes to the redacted text)."""
    text = content_to_json(message)
    redacted = redact_secrets(text)
    meta, meta_text = message.meta, None
    if meta:
        meta_text = json.dumps(meta, ensure_ascii=False, default=str)
        if (meta_redacted := redact_secrets(meta_text)) is not meta_text:
            meta, meta_text = json.loads(meta_redacted), meta_redacted
    if redacted is text and meta is message.meta:
        return message, text, meta_text
    content = (
        content_from_json(redacted, where="a redacted message") if redacted is not text else message.content
    )
    return message.model_copy(update={"content": content, "meta": meta}), redacted, meta_text


def stored_row_texts(message: Message, preview_chars: int) -> tuple[Message, tuple[str | None, ...]]:
    """``message`` as the store keeps it (:func:`stored_texts`) and the texts of its ``messages`` row,
    redacted: ``(message_uid, content_json, text_preview, tool_names, meta_json)``. Each text is made
    once and the five are scanned for credentials together (:func:`engine.redact.holds_no_secret`):
    only a row that holds one is redacted text by text."""
    content_json = content_to_json(message)
    meta_json = _JSON_ANY(message.meta) if message.meta else None
    texts = (message.id, content_json, message.text[:preview_chars], _tool_names(message), meta_json)
    if holds_no_secret(texts):
        return message, texts
    message, content_json, meta_json = stored_texts(message)
    uid, preview, tool_names = redact_row((message.id, message.text[:preview_chars], _tool_names(message)))
    return message, (uid, content_json, preview, tool_names, meta_json)


def _tool_names(message: Message) -> str | None:
    """The ``tool_names`` column: the names of the message's tool_use blocks, comma-separated."""
    if isinstance(message.content, str):
        return None
    return ",".join(b.name for b in message.content if isinstance(b, ToolUseBlock)) or None


def redact_message(message: Message) -> Message:
    """``message`` as the store keeps it (compare a source's message with a stored one by this)."""
    return stored_form(message)[0]


def message_to_json(message: Message) -> dict[str, Any]:
    # Content as content_to_json writes it: exclude_defaults would drop each block's ``type``.
    data = message.model_dump(mode="json", exclude_defaults=True, exclude={"content"})
    return data | {"role": message.role, "content": json.loads(content_to_json(message))}


def message_from_json(data: dict[str, Any], *, where: str = "") -> Message:
    try:
        return Message.model_validate(data)
    except PydanticValidationError as exc:
        raise StoreError(f"malformed stored message {where}: {exc.errors()[0]['msg']}") from exc


def messages_from_json_text(text: str, *, where: str = "") -> list[Message]:
    try:
        items = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(f"malformed JSON in {where}: {exc}") from exc
    if not isinstance(items, list):
        raise StoreError(f"malformed JSON in {where}: expected a list of messages")
    return [message_from_json(item, where=f"{where}[{i}]") for i, item in enumerate(items)]


def content_from_json(text: str, *, where: str = "") -> str | list[Any]:
    try:
        return _content_adapter.validate_json(text)
    except PydanticValidationError as exc:
        raise StoreError(f"malformed stored content in {where}: {exc.errors()[0]['msg']}") from exc


class _Row(BaseModel):
    model_config = ConfigDict(frozen=True)


class SessionRecord(_Row):
    id: str
    title: str | None = None
    model: str | None = None
    provider: str | None = None
    tokenizer: str | None = None
    tokens_exact: bool = False
    source: str = "engine"
    source_path: str | None = None
    parent_session_id: str | None = None
    status: str = "active"
    settings: dict[str, Any] = {}
    metadata: dict[str, Any] = {}
    created_utc: str
    updated_utc: str


class StoredMessage(_Row):
    id: int
    session_id: str
    seq: int
    turn_index: int
    kind: str
    tokens: int
    tool_result_tokens: int
    tokenizer: str
    message: Message
    usage: ProviderUsage | None = None
    created_utc: str


class StoredEvent(_Row):
    id: int
    session_id: str
    seq: int
    turn_index: int | None
    kind: str
    trigger: str | None
    outcome: str | None
    reason: str | None
    provider: str | None
    model: str | None
    context_window: int | None
    max_output_tokens: int | None
    buffer_tokens: int | None
    limit_tokens: int | None
    projected_tokens: int | None
    remaining_tokens: int | None
    components: ComponentTokens | None
    #: exact | reconciled | estimate (``engine.events.ComponentsBasis``); None before m006
    components_basis: str | None = None
    usage: ProviderUsage | None
    message_seq: int | None
    details: dict[str, Any]
    created_utc: str
    #: transcript seqs below ``details["messages_sent"]`` the request did not send; () before m007
    messages_excluded: tuple[int, ...] = ()

    @property
    def effective_limit(self) -> int | None:
        """The limit this call is measured against (:func:`engine.limit.recorded_limit`)."""
        return recorded_limit(self)


class Snapshot(_Row):
    id: int
    session_id: str
    through_seq: int
    messages: list[Message]
    summary: str | None
    message_count: int
    tokens: int
    strategy: str
    event_id: int | None
    created_utc: str


class BlobRecord(_Row):
    ref_id: str
    session_id: str
    tool_use_id: str | None
    tool_name: str | None
    size_bytes: int
    is_text: bool
    line_count: int | None
    sha256: str
    preview: str | None
    tokens: int | None
    created_utc: str
    content: bytes | None = None


class ContextState(_Row):
    id: int
    session_id: str
    strategy: str
    level: int
    range_start: int
    range_end: int
    summary: str
    summary_tokens: int
    summarizer: str
    created_utc: str


class ToolRecord(_Row):
    name: str
    category: str = "builtin"
    server: str | None = None
    tokens: int = 0
    definition: dict[str, Any] = {}


class WriteMarks(_Row):
    """Where a store's rows ended when read: its highest message id and highest event id."""

    messages: int
    events: int

    def __le__(self, later: object) -> bool:
        """True when ``later`` is where the same store's rows end after these (ids only grow)."""
        if not isinstance(later, WriteMarks):
            return NotImplemented
        return self.messages <= later.messages and self.events <= later.events


# -- row converters shared by the stores ---------------------------------------------------------


def utc_now() -> str:
    """Now, as the ``*_utc`` columns store it (ISO-8601, microseconds, ``Z``): the text of
    ``datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")``, its seconds formatted once per second
    (an import stamps each of its events)."""
    global _second
    seconds, micros = divmod(time.time_ns() // 1000, 1_000_000)
    second = _second
    if second[0] != seconds:
        second = _second = (seconds, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)))
    return f"{second[1]}.{micros:06d}Z"


#: (epoch second, its text) of the last :func:`utc_now`.
_second: tuple[int, str] = (-1, "")


def loads_json(text: str | None, where: str) -> Any:
    """Parse a stored JSON column; malformed JSON is a StoreError naming ``where``."""
    if text is None:
        return {}
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(f"malformed JSON in {where}: {exc}") from exc


def usage_from_row(d: dict[str, Any], *, construct: bool = False) -> ProviderUsage | None:
    """The provider usage columns of a messages/context_events row (None when all are NULL);
    ``construct``: values the store itself just wrote, not validated again."""
    values = [d.get(f"provider_{k}_tokens") for k in ("input", "output", "cache_read", "cache_creation")]
    if all(v is None for v in values):
        return None
    i, o, r, c = (v or 0 for v in values)
    make = ProviderUsage.model_construct if construct else ProviderUsage
    return make(input_tokens=i, output_tokens=o, cache_read_input_tokens=r, cache_creation_input_tokens=c)


_M = TypeVar("_M", bound=BaseModel)

#: One set of field names per (model class, fields given), shared by every row read with it.
_FIELDS_SETS: dict[tuple[type, frozenset[str]], set[str]] = {}


def intern_columns(row: dict[str, Any], *names: str) -> dict[str, Any]:
    """``row`` with these text columns interned: values repeated on every row (session id, kind,
    model) are held once however many rows a reader keeps."""
    for name in names:
        if isinstance(row.get(name), str):
            row[name] = sys.intern(row[name])
    return row


def share_fields_set(model: _M) -> _M:
    """``model`` with its set of given fields replaced by one shared with every equal instance.

    Pydantic keeps that set per instance (2 KB for an event's 21 fields, more than the values):
    a report reading 100k events and 200k messages held gigabytes of identical sets. The models
    are frozen and every field is given, so nothing adds to the shared set (``model_copy``
    copies it before updating).
    """
    given = model.__pydantic_fields_set__
    shared = _FIELDS_SETS.setdefault((type(model), frozenset(given)), set(given))
    object.__setattr__(model, "__pydantic_fields_set__", shared)
    return model


def constructed(cls: type[_M], values: dict[str, Any]) -> _M:
    """What ``cls.model_construct(**values)`` gives when ``values`` holds every field of ``cls`` in
    field order (values this store just made from a valid model), without its per-field loop:
    an import's cost pass holds three such models per call (its set of given fields shared, as
    :func:`share_fields_set` makes it)."""
    given = _CONSTRUCTED_SETS.get(cls)
    if given is None:
        given = _CONSTRUCTED_SETS[cls] = _FIELDS_SETS.setdefault((cls, frozenset(values)), set(values))
    return trusted(cls, values, given)


#: Each class's shared set of given fields (:func:`constructed`: every field given).
_CONSTRUCTED_SETS: dict[type, set[str]] = {}


def _seqs(text: str | None, event_id: int) -> tuple[int, ...]:
    """``context_events.messages_excluded`` (a JSON list of seqs, or NULL) as a tuple."""
    value = loads_json(text, f"context_events row {event_id} messages_excluded") if text else None
    return tuple(value) if isinstance(value, list) else ()


def event_from_row(r: Any) -> StoredEvent:
    """A ``context_events`` row (sqlite3.Row or the PostgreSQL store's row) as a StoredEvent."""
    d = intern_columns(dict(r), "session_id", "kind", "trigger", "outcome", "provider", "model")
    # .get: a read-only open does not migrate, and a file from before m006 lacks the residual columns
    has_components = d["system_tokens"] is not None
    components = (
        ComponentTokens(
            system=d["system_tokens"] or 0, skills=d["skills_tokens"] or 0, tools=d["tools_tokens"] or 0,
            summary=d["summary_tokens"] or 0, conversation=d["conversation_tokens"] or 0,
            tool_results=d["tool_results_tokens"] or 0, offloaded_bytes=d["offloaded_bytes"] or 0,
            unattributed=d.get("unattributed_tokens") or 0,
        )
        if has_components
        else None
    )  # fmt: skip
    event = StoredEvent(
        id=d["id"], session_id=d["session_id"], seq=d["seq"], turn_index=d["turn_index"], kind=d["kind"],
        trigger=d["trigger"], outcome=d["outcome"], reason=d["reason"], provider=d["provider"], model=d["model"],
        context_window=d["context_window"], max_output_tokens=d["max_output_tokens"],
        buffer_tokens=d["buffer_tokens"], limit_tokens=d["limit_tokens"], projected_tokens=d["projected_tokens"],
        remaining_tokens=d["remaining_tokens"], components=components,
        components_basis=d.get("components_basis"), usage=usage_from_row(d),
        message_seq=d["message_seq"], details=loads_json(d["details_json"], f"context_events row {d['id']}") or {},
        created_utc=d["created_utc"], messages_excluded=_seqs(d.get("messages_excluded"), d["id"]),
    )  # fmt: skip
    for part in (components, event.usage):
        if part is not None:
            share_fields_set(part)
    return share_fields_set(event)
