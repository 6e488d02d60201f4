"""The canonical message model every other module speaks.

A message is a role (user / assistant / tool) and content: a string or a list of blocks
discriminated by ``type`` (text, thinking, tool_use, tool_result, image, document).
A session's history never holds the system prompt; it is assembled at request time.
Messages are immutable; their ``content_hash`` keys the token-count cache.
"""

from __future__ import annotations

import hashlib
import json
from json.encoder import encode_basestring as _json_string  # json.dumps' own, for ensure_ascii=False
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

Role = Literal["user", "assistant", "tool"]


class _Block(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TextBlock(_Block):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(_Block):
    """Model reasoning. ``redacted`` blocks keep their opaque ``data`` instead of text."""

    type: Literal["thinking"] = "thinking"
    thinking: str = ""
    signature: str | None = None
    redacted: bool = False
    data: str | None = None


class ToolUseBlock(_Block):
    type: Literal["tool_use"] = "tool_use"
    id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    input: dict[str, Any] = Field(default_factory=dict)


class ImageBlock(_Block):
    """An image; ``source`` is kept verbatim (base64 data, url or file id)."""

    type: Literal["image"] = "image"
    source: dict[str, Any] = Field(default_factory=dict)


class DocumentBlock(_Block):
    """A document (PDF, text file); ``source`` is kept verbatim."""

    type: Literal["document"] = "document"
    source: dict[str, Any] = Field(default_factory=dict)
    title: str | None = None


MediaBlock = Annotated[ImageBlock | DocumentBlock, Field(discriminator="type")]
ToolResultContent = Annotated[TextBlock | ImageBlock | DocumentBlock, Field(discriminator="type")]


class ToolResultBlock(_Block):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str = Field(min_length=1)
    content: str | list[ToolResultContent] = ""
    is_error: bool = False

    @property
    def text(self) -> str:
        """The textual part of the result, joined (media is left out)."""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))


Block = Annotated[
    TextBlock | ThinkingBlock | ToolUseBlock | ToolResultBlock | ImageBlock | DocumentBlock,
    Field(discriminator="type"),
]


class Message(BaseModel):
    """One message of a conversation.

    ``id`` is a stable identifier when the source has one (store row ids are separate).
    ``pinned`` marks content that every compaction strategy must keep.
    ``meta`` carries provider-specific extras (kept for lossless round trips, never counted).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    content: str | list[Block]
    id: str | None = None
    pinned: bool = False
    meta: dict[str, Any] = Field(default_factory=dict)

    # (role, content object, digest): keyed on the content object so a model_copy(update=...)
    # that swaps content or role recomputes instead of reusing a stale digest.
    _hash: tuple[str, Any, str] | None = PrivateAttr(default=None)

    def __eq__(self, other: object) -> bool:
        # Fields only: pydantic would also compare the private hash cache, so a message whose
        # content_hash was computed would differ from an identical one whose hash was not.
        if not isinstance(other, Message):
            return NotImplemented
        return self.__dict__ == other.__dict__

    # -- views ---------------------------------------------------------------
    @property
    def blocks(self) -> list[Any]:
        """Content as a list of blocks (a string becomes one text block)."""
        if isinstance(self.content, str):
            return [TextBlock(text=self.content)] if self.content else []
        return list(self.content)

    @property
    def text(self) -> str:
        """All text and tool-result text of the message, joined by newlines."""
        if isinstance(self.content, str):
            return self.content
        parts: list[str] = []
        for block in self.content:
            if isinstance(block, TextBlock | ToolResultBlock):
                parts.append(block.text)
        return "\n".join(parts)

    @property
    def tool_use_ids(self) -> list[str]:
        # the content itself, not `blocks`: text content holds no calls (and becomes no block)
        if isinstance(self.content, str):
            return []
        return [b.id for b in self.content if isinstance(b, ToolUseBlock)]

    @property
    def tool_result_ids(self) -> list[str]:
        if isinstance(self.content, str):
            return []
        return [b.tool_use_id for b in self.content if isinstance(b, ToolResultBlock)]

    @property
    def content_hash(self) -> str:
        """sha256 of role + content: the key of the per-message token cache."""
        # The private dict read directly: pydantic's __getattr__ for a private attribute costs more than
        # the check itself, on a path every token count takes.
        private = self.__pydantic_private__
        cached = private.get("_hash") if private is not None else None
        if cached is not None and cached[0] == self.role and cached[1] is self.content:
            return cached[2]
        payload = hashed_json(self.role, self.content)
        digest = hashlib.sha256(payload.encode("utf-8", "surrogatepass")).hexdigest()
        if (
            private is None
        ):  # a parser's message holds no private dict until it is hashed (readers.message_of)
            object.__setattr__(self, "__pydantic_private__", {"_hash": (self.role, self.content, digest)})
        else:
            private["_hash"] = (self.role, self.content, digest)
        return digest

    def with_content(self, content: str | list[Any]) -> Message:
        """A copy with new content (same role, id, pin and meta)."""
        return Message(role=self.role, content=content, id=self.id, pinned=self.pinned, meta=dict(self.meta))


def hashed_json(role: str, content: str | list[Any]) -> str:
    """The text :attr:`Message.content_hash` hashes: role and content as compact JSON, keys sorted.
    Text (a string, or text blocks only: most of a transcript) is written directly, the same text
    ``json.dumps`` writes, without dumping each block's model first."""
    if isinstance(content, str):
        return f'{{"content":{_json_string(content)},"role":{_json_string(role)}}}'
    if all(type(b) is TextBlock for b in content):
        blocks = ",".join(f'{{"text":{_json_string(b.text)},"type":"text"}}' for b in content)
        return f'{{"content":[{blocks}],"role":{_json_string(role)}}}'
    return json.dumps(
        {"role": role, "content": _plain(content)}, sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


def _plain(content: str | list[Any]) -> Any:
    if isinstance(content, str):
        return content
    return [b.model_dump(mode="json") for b in content]


# -- tiny builders, used by tests, the demo and users' own code -----------------------------


def user(text: str, *, pinned: bool = False, id: str | None = None) -> Message:
    return Message(role="user", content=text, pinned=pinned, id=id)


def assistant(text: str = "", *tool_uses: ToolUseBlock, id: str | None = None) -> Message:
    blocks: list[Any] = [TextBlock(text=text)] if text else []
    blocks.extend(tool_uses)
    return Message(role="assistant", content=blocks if tool_uses else text, id=id)


def tool_use(id: str, name: str, **input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=id, name=name, input=input)


def tool_result(tool_use_id: str, content: str, *, is_error: bool = False) -> Message:
    """An Anthropic-style user-role message that only returns a tool result."""
    return Message(
        role="user",
        content=[ToolResultBlock(tool_use_id=tool_use_id, content=content, is_error=is_error)],
    )


def is_tool_result_only(message: Message) -> bool:
    """True for a message that only returns tool results (it never starts a turn)."""
    if message.role == "tool":
        return True
    if isinstance(message.content, str) or not message.content:
        return False
    return all(isinstance(b, ToolResultBlock) for b in message.content)


def is_user_input(message: Message) -> bool:
    """True for a user message that carries the user's own input (it starts a turn)."""
    return message.role == "user" and not is_tool_result_only(message)
