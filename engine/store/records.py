"""Typed rows of the session database, and the JSON form of messages stored in it."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic import ValidationError as PydanticValidationError

from engine.errors import StoreError
from engine.events import ComponentTokens, ProviderUsage
from engine.messages import Block, Message

_content_adapter: TypeAdapter[str | list[Block]] = TypeAdapter(str | list[Block])


def content_to_json(message: Message) -> str:
    if isinstance(message.content, str):
        return json.dumps(message.content, ensure_ascii=False)
    return json.dumps(
        [b.model_dump(mode="json", exclude_none=True) for b in message.content], ensure_ascii=False
    )


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
    usage: ProviderUsage | None
    message_seq: int | None
    details: dict[str, Any]
    created_utc: str


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
