"""Lossless converters between provider message shapes and the canonical :class:`Message`.

``from_anthropic`` / ``from_openai`` parse a list of messages (dicts, or SDK objects with
``model_dump()``); ``to_anthropic`` / ``to_openai`` render messages as plain request dicts.
What a provider's shape holds that the canonical model does not (``cache_control``, an
arguments string's own formatting, ``content: null``) is kept in ``Message.meta[provider]``
as a patch against our own rendering, applied only while the message is unchanged, so
``to_X(from_X(d)) == d``. Malformed input raises MessageFormatError naming index and field.

One concept over ~400 lines: both directions of both wire formats share the block rules and the
patch that makes them lossless, so they stay in one module.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel
from pydantic import ValidationError as PydanticValidationError

from engine.errors import MessageFormatError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

__all__ = ["anthropic_error_detail", "from_anthropic", "from_openai", "to_anthropic", "to_openai"]

ANTHROPIC = "anthropic"
OPENAI = "openai"

_SYSTEM_ROLES = ("system", "developer")
_SYSTEM_HINT = (
    "a system prompt is not part of the message history; pass it to the prompt builder "
    "(engine.prompt) instead"
)

#: Fields of each Anthropic block type the canonical model holds; any other field goes to the patch.
_ANTHROPIC_FIELDS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "thinking": ("thinking", "signature"),
    "redacted_thinking": ("data",),
    "tool_use": ("id", "name", "input"),
    "tool_result": ("tool_use_id", "content", "is_error"),
    "image": ("source",),
    "document": ("source", "title"),
}
_TOOL_RESULT_ITEM_TYPES = ("text", "image", "document")
_BLOCK_MODELS: dict[str, type[BaseModel]] = {
    "text": TextBlock,
    "thinking": ThinkingBlock,
    "redacted_thinking": ThinkingBlock,
    "tool_use": ToolUseBlock,
    "tool_result": ToolResultBlock,
    "image": ImageBlock,
    "document": DocumentBlock,
}

#: Top-level fields of an OpenAI chat message the canonical model holds; others are kept verbatim.
_OPENAI_FIELDS = ("role", "content", "tool_calls", "tool_call_id", "reasoning_content")


# -- public API -----------------------------------------------------------------------------


def from_anthropic(messages: Iterable[Any] | Mapping[str, Any] | Any) -> list[Message]:
    """Parse Anthropic Messages API messages (dicts or SDK models) into canonical messages.

    A response message's fields beyond role and content (``id``, ``model``, ``usage``,
    ``stop_reason``...) are kept in ``meta["anthropic"]["response"]`` (``id`` also becomes
    ``Message.id``) and are not rendered back: ``to_anthropic`` produces request params.
    """
    return [_from_anthropic_message(raw, i) for i, raw in enumerate(_as_list(messages))]


def to_anthropic(messages: Iterable[Message] | Message) -> list[dict[str, Any]]:
    """Render messages as Anthropic request params (``{"role", "content"}`` dicts).

    Consecutive ``tool``-role messages become one user message of tool_result blocks, since
    Anthropic expects every result of a parallel call in the message after the tool_use.
    """
    out: list[dict[str, Any]] = []
    previous_was_tool = False
    for index, message in enumerate(_as_messages(messages)):
        if message.role == "tool":
            results = [_anthropic_block_dict(b) for b in _tool_results(message, index)]
            if previous_was_tool:
                out[-1]["content"].extend(copy.deepcopy(results))
            else:
                out.append({"role": "user", "content": copy.deepcopy(results)})
            previous_was_tool = True
            continue
        previous_was_tool = False
        out.append(_with_meta(_anthropic_message_dict(message), message.meta.get(ANTHROPIC), index))
    return out


def from_openai(messages: Iterable[Any] | Mapping[str, Any] | Any) -> list[Message]:
    """Parse OpenAI chat-completions messages (dicts or SDK models) into canonical messages.

    ``tool`` messages become role ``tool`` messages holding one ToolResultBlock; assistant
    ``tool_calls`` become ToolUseBlocks with their JSON arguments parsed (an empty arguments
    string counts as ``{}``); ``reasoning_content`` becomes a leading ThinkingBlock.
    Fields the model does not hold (``name``, ``refusal``...) are kept in ``meta["openai"]``.
    """
    return [_from_openai_message(raw, i) for i, raw in enumerate(_as_list(messages))]


def to_openai(messages: Iterable[Message] | Message) -> list[dict[str, Any]]:
    """Render messages as OpenAI chat-completions messages.

    A user message holding tool_result blocks becomes one ``tool`` message per result, then a
    user message for its remaining content (and any media the results held, which ``tool``
    messages cannot carry). Redacted thinking, signatures and ``is_error`` have no OpenAI
    equivalent and are left out.
    """
    out: list[dict[str, Any]] = []
    for index, message in enumerate(_as_messages(messages)):
        rendered = _openai_message_dicts(message, index)
        if len(rendered) == 1:
            out.append(_with_meta(rendered[0], message.meta.get(OPENAI), index))
        else:
            out.extend(copy.deepcopy(rendered))
    return out


# -- input normalisation --------------------------------------------------------------------


def anthropic_error_detail(body: Any, fallback: str) -> str:
    """``type: message`` of an Anthropic error body (``{"error": {"type", "message"}}``, or the
    error object itself), else ``fallback`` (the SDK's text). One format for every caller."""
    if isinstance(body, Mapping):
        error = body.get("error", body)
        if isinstance(error, Mapping) and isinstance(error.get("message"), str) and error["message"]:
            return f"{error.get('type', 'error')}: {error['message']}"
    return fallback


def _as_list(messages: Any) -> list[Any]:
    if isinstance(messages, Mapping | BaseModel) or hasattr(messages, "model_dump"):
        return [messages]
    if isinstance(messages, str | bytes):
        raise MessageFormatError("expected a list of messages, got a string")
    try:
        return list(messages)
    except TypeError as exc:
        raise MessageFormatError(f"expected a list of messages, got {type(messages).__name__}") from exc


def _as_messages(messages: Iterable[Message] | Message) -> list[Message]:
    items = [messages] if isinstance(messages, Message) else list(messages)
    for index, item in enumerate(items):
        if not isinstance(item, Message):
            raise MessageFormatError(
                f"expected an engine.messages.Message, got {type(item).__name__}", index=index
            )
    return items


def _plain(raw: Any, index: int, field: str | None = None) -> dict[str, Any]:
    """A deep copy of ``raw`` as a dict; SDK models lose their unset (None) fields."""
    if isinstance(raw, Message):
        raise MessageFormatError(
            "already a canonical Message (from_* parses provider-shape messages)", index=index, field=field
        )
    if isinstance(raw, Mapping):
        return copy.deepcopy(dict(raw))
    if hasattr(raw, "model_dump"):
        dumped = raw.model_dump(mode="json")
        if isinstance(dumped, dict):
            return _drop_sdk_nones(dumped)
    what = "a message" if field is None else "a content block"
    raise MessageFormatError(
        f"{what} must be a dict or an SDK model, got {type(raw).__name__}", index=index, field=field
    )


def _drop_sdk_nones(data: dict[str, Any]) -> dict[str, Any]:
    """SDK models dump every optional field; None there means "not set" (content excepted)."""
    out = {k: v for k, v in data.items() if v is not None or k == "content"}
    content = out.get("content")
    if isinstance(content, list):
        out["content"] = [_drop_sdk_nones(b) if isinstance(b, dict) else b for b in content]
    return out


def _plain_content(content: list[Any], index: int, field: str) -> list[Any]:
    """Content blocks as dicts (SDK block objects dumped), tool_result content included."""
    out: list[Any] = []
    for j, block in enumerate(content):
        if not isinstance(block, Mapping) and hasattr(block, "model_dump"):
            block = _plain(block, index, f"{field}[{j}]")
        if isinstance(block, Mapping) and block.get("type") == "tool_result":
            inner = block.get("content")
            if isinstance(inner, list):
                block = {**block, "content": _plain_content(inner, index, f"{field}[{j}].content")}
        out.append(block)
    return out


def _role(data: dict[str, Any], index: int, allowed: tuple[str, ...]) -> str:
    if "role" not in data:
        raise MessageFormatError("missing role", index=index, field="role")
    role = data["role"]
    if role in _SYSTEM_ROLES:
        raise MessageFormatError(_SYSTEM_HINT, index=index, field="role", value=role)
    if role not in allowed:
        raise MessageFormatError(
            f"role must be one of {', '.join(allowed)}, got {role!r}", index=index, field="role", value=role
        )
    return str(role)


def _validate(model: type[BaseModel], fields: dict[str, Any], index: int, field: str) -> Any:
    try:
        return model.model_validate(fields, strict=True)
    except PydanticValidationError as exc:
        error = exc.errors()[0]
        loc = ".".join(str(part) for part in error["loc"])
        raise MessageFormatError(
            error["msg"], index=index, field=f"{field}.{loc}" if loc else field, value=error.get("input")
        ) from exc


# -- Anthropic ------------------------------------------------------------------------------


def _from_anthropic_message(raw: Any, index: int) -> Message:
    data = _plain(raw, index)
    role = _role(data, index, ("user", "assistant"))
    if "content" not in data:
        raise MessageFormatError("missing content", index=index, field="content")
    content = data["content"]
    if isinstance(content, list):
        content = _plain_content(content, index, "content")
        blocks: str | list[Any] = [_anthropic_block(b, index, f"content[{j}]") for j, b in enumerate(content)]
    elif isinstance(content, str):
        blocks = content
    else:
        raise MessageFormatError(
            f"content must be a string or a list of blocks, got {type(content).__name__}",
            index=index,
            field="content",
        )
    response = {k: v for k, v in data.items() if k not in ("role", "content")}
    message_id = response.pop("id") if isinstance(response.get("id"), str) else None
    message = Message(role=role, content=blocks, id=message_id)
    meta = _patch({"role": role, "content": content}, _anthropic_message_dict(message))
    if response:
        meta["response"] = response
    if not meta:
        return message
    return Message(role=role, content=blocks, id=message_id, meta={ANTHROPIC: meta})


def _item_type(raw: Any, allowed: tuple[str, ...], item: str, kind_name: str, index: int, field: str) -> str:
    """The ``type`` of one content item (``raw`` at ``field``), checked to be an object of an
    ``allowed`` type; a MessageFormatError naming the ``item`` otherwise."""
    if not isinstance(raw, Mapping):
        raise MessageFormatError(
            f"a {item} must be an object, got {type(raw).__name__}", index=index, field=field
        )
    kind = raw.get("type")
    if kind not in allowed:
        raise MessageFormatError(
            f"unknown {kind_name} {kind!r} (expected one of {', '.join(allowed)})",
            index=index,
            field=f"{field}.type",
            value=kind,
        )
    return kind


def _anthropic_block(raw: Any, index: int, field: str, *, in_tool_result: bool = False) -> Any:
    allowed = _TOOL_RESULT_ITEM_TYPES if in_tool_result else tuple(_ANTHROPIC_FIELDS)
    kind = _item_type(raw, allowed, "content block", "block type", index, field)
    fields = {k: raw[k] for k in _ANTHROPIC_FIELDS[kind] if raw.get(k) is not None}
    if kind == "redacted_thinking":
        if "data" not in fields:
            raise MessageFormatError("redacted_thinking needs data", index=index, field=f"{field}.data")
        fields["redacted"] = True
    if kind == "tool_result" and isinstance(fields.get("content"), list):
        fields["content"] = [
            _anthropic_block(item, index, f"{field}.content[{j}]", in_tool_result=True)
            for j, item in enumerate(fields["content"])
        ]
    return _validate(_BLOCK_MODELS[kind], fields, index, field)


def _anthropic_message_dict(message: Message) -> dict[str, Any]:
    if isinstance(message.content, str):
        return {"role": message.role, "content": message.content}
    return {"role": message.role, "content": [_anthropic_block_dict(b) for b in message.content]}


def _anthropic_block_dict(block: Any) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ThinkingBlock):
        if block.redacted:
            return {"type": "redacted_thinking", "data": block.data or ""}
        out: dict[str, Any] = {"type": "thinking", "thinking": block.thinking}
        if block.signature is not None:
            out["signature"] = block.signature
        return out
    if isinstance(block, ToolUseBlock):
        return {"type": "tool_use", "id": block.id, "name": block.name, "input": block.input}
    if isinstance(block, ToolResultBlock):
        content = (
            block.content
            if isinstance(block.content, str)
            else [_anthropic_block_dict(b) for b in block.content]
        )
        out = {"type": "tool_result", "tool_use_id": block.tool_use_id, "content": content}
        if block.is_error:
            out["is_error"] = True
        return out
    if isinstance(block, ImageBlock):
        return {"type": "image", "source": block.source}
    if isinstance(block, DocumentBlock):
        out = {"type": "document", "source": block.source}
        if block.title is not None:
            out["title"] = block.title
        return out
    raise MessageFormatError(f"cannot render block of type {type(block).__name__}")


def _tool_results(message: Message, index: int) -> list[ToolResultBlock]:
    if isinstance(message.content, str):
        raise MessageFormatError(
            "a tool message must hold tool_result blocks, not a string", index=index, field="content"
        )
    for j, block in enumerate(message.content):
        if not isinstance(block, ToolResultBlock):
            raise MessageFormatError(
                f"a tool message may only hold tool_result blocks, got {block.type}",
                index=index,
                field=f"content[{j}]",
            )
    return list(message.content)  # type: ignore[arg-type]


# -- OpenAI ---------------------------------------------------------------------------------


def _from_openai_message(raw: Any, index: int) -> Message:
    data = _plain(raw, index)
    role = _role(data, index, ("user", "assistant", "tool"))
    if role == "user":
        message = Message(role="user", content=_openai_user_content(data, index))
    elif role == "assistant":
        message = Message(role="assistant", content=_openai_assistant_content(data, index))
    else:
        message = Message(role="tool", content=[_openai_tool_result(data, index)])
    modeled = {k: v for k, v in data.items() if k in _OPENAI_FIELDS}
    meta = _patch(modeled, _openai_message_dicts(message, index)[0])
    extra = {k: v for k, v in data.items() if k not in _OPENAI_FIELDS}
    if extra:
        meta["extra"] = extra
    if not meta:
        return message
    return Message(role=message.role, content=message.content, meta={OPENAI: meta})


def _openai_user_content(data: dict[str, Any], index: int) -> str | list[Any]:
    content = data.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return _openai_parts(content, index, ("text", "image_url", "file"))
    raise MessageFormatError(
        f"user content must be a string or a list of parts, got {type(content).__name__}",
        index=index,
        field="content",
    )


def _openai_assistant_content(data: dict[str, Any], index: int) -> str | list[Any]:
    content = data.get("content")
    reasoning = data.get("reasoning_content")
    calls = data.get("tool_calls")
    if reasoning is not None and not isinstance(reasoning, str):
        raise MessageFormatError("reasoning_content must be a string", index=index, field="reasoning_content")
    if calls is not None and not isinstance(calls, list):
        raise MessageFormatError("tool_calls must be a list", index=index, field="tool_calls")
    if isinstance(content, str) and reasoning is None and not calls:
        return content
    blocks: list[Any] = [ThinkingBlock(thinking=reasoning)] if reasoning is not None else []
    if isinstance(content, str):
        blocks.append(TextBlock(text=content))
    elif isinstance(content, list):
        blocks.extend(_openai_parts(content, index, ("text",)))
    elif content is not None:
        raise MessageFormatError(
            f"assistant content must be a string, a list of parts or null, got {type(content).__name__}",
            index=index,
            field="content",
        )
    blocks.extend(_openai_tool_use(call, index, f"tool_calls[{i}]") for i, call in enumerate(calls or []))
    return blocks


def _openai_tool_use(call: Any, index: int, field: str) -> ToolUseBlock:
    if not isinstance(call, Mapping):
        raise MessageFormatError("a tool call must be an object", index=index, field=field)
    if call.get("type", "function") != "function":
        raise MessageFormatError(
            f"unsupported tool call type {call.get('type')!r}", index=index, field=f"{field}.type"
        )
    function = call.get("function")
    if not isinstance(function, Mapping):
        raise MessageFormatError("missing function", index=index, field=f"{field}.function")
    arguments = function.get("arguments")
    if not isinstance(arguments, str):
        raise MessageFormatError(
            "arguments must be a JSON string", index=index, field=f"{field}.function.arguments"
        )
    try:
        parsed = json.loads(arguments) if arguments.strip() else {}
    except json.JSONDecodeError as exc:
        raise MessageFormatError(
            f"arguments are not valid JSON ({exc})",
            index=index,
            field=f"{field}.function.arguments",
            value=arguments,
        ) from exc
    if not isinstance(parsed, dict):
        raise MessageFormatError(
            f"arguments must be a JSON object, got {type(parsed).__name__}",
            index=index,
            field=f"{field}.function.arguments",
            value=arguments,
        )
    fields = {"id": call.get("id"), "name": function.get("name"), "input": parsed}
    try:
        return ToolUseBlock.model_validate(fields, strict=True)
    except PydanticValidationError as exc:
        loc = str(exc.errors()[0]["loc"][0])
        where = f"{field}.id" if loc == "id" else f"{field}.function.{loc}"
        raise MessageFormatError(exc.errors()[0]["msg"], index=index, field=where) from exc


def _openai_tool_result(data: dict[str, Any], index: int) -> ToolResultBlock:
    tool_call_id = data.get("tool_call_id")
    if not isinstance(tool_call_id, str) or not tool_call_id:
        raise MessageFormatError(
            "a tool message needs a non-empty tool_call_id", index=index, field="tool_call_id"
        )
    content = data.get("content")
    if isinstance(content, list):
        content = _openai_parts(content, index, ("text",))
    elif not isinstance(content, str):
        raise MessageFormatError(
            f"tool content must be a string or a list of text parts, got {type(content).__name__}",
            index=index,
            field="content",
        )
    return ToolResultBlock(tool_use_id=tool_call_id, content=content)


def _openai_parts(parts: list[Any], index: int, allowed: tuple[str, ...]) -> list[Any]:
    return [_openai_part(part, index, f"content[{j}]", allowed) for j, part in enumerate(parts)]


def _openai_part(part: Any, index: int, field: str, allowed: tuple[str, ...]) -> Any:
    kind = _item_type(part, allowed, "content part", "content part type", index, field)
    if kind == "text":
        return _validate(TextBlock, {"text": part.get("text")}, index, field)
    if kind == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, Mapping) else None
        if not isinstance(url, str):
            raise MessageFormatError("image_url needs a url", index=index, field=f"{field}.image_url.url")
        return ImageBlock(source=_source_from_url(url))
    file = part.get("file")
    if not isinstance(file, Mapping):
        raise MessageFormatError("missing file", index=index, field=f"{field}.file")
    if isinstance(file.get("file_id"), str):
        source: dict[str, Any] = {"type": "file", "file_id": file["file_id"]}
    elif isinstance(file.get("file_data"), str) and file["file_data"].startswith("data:"):
        source = _source_from_url(file["file_data"])
    else:
        raise MessageFormatError(
            "a file part needs file_id or file_data as a data: URL", index=index, field=f"{field}.file"
        )
    title = file.get("filename")
    return DocumentBlock(source=source, title=title if isinstance(title, str) else None)


def _source_from_url(url: str) -> dict[str, Any]:
    if url.startswith("data:") and ";base64," in url:
        media_type, data = url[len("data:") :].split(";base64,", 1)
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _openai_message_dicts(message: Message, index: int) -> list[dict[str, Any]]:
    if message.role == "tool":
        return _openai_results(_tool_results(message, index), [], index)
    if isinstance(message.content, str):
        return [{"role": message.role, "content": message.content}]
    if message.role == "assistant":
        return [_openai_assistant(message.content, index)]
    results = [b for b in message.content if isinstance(b, ToolResultBlock)]
    if not results:
        return [{"role": "user", "content": _openai_user_parts(message.content, index)}]
    rest = [(j, b) for j, b in enumerate(message.content) if not isinstance(b, ToolResultBlock)]
    return _openai_results(results, rest, index)


def _openai_results(
    results: list[ToolResultBlock], rest: list[tuple[int, Any]], index: int
) -> list[dict[str, Any]]:
    """One ``tool`` message per result, then a user message for the rest and any result media."""
    out: list[dict[str, Any]] = []
    media: list[dict[str, Any]] = []
    for block in results:
        if isinstance(block.content, str):
            content: str | list[dict[str, Any]] = block.content
        else:
            content = [{"type": "text", "text": b.text} for b in block.content if isinstance(b, TextBlock)]
            media.extend(
                _openai_part_dict(b, index, "content") for b in block.content if not isinstance(b, TextBlock)
            )
        out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": content})
    parts = [_openai_part_dict(b, index, f"content[{j}]") for j, b in rest] + media
    if parts:
        out.append({"role": "user", "content": parts})
    return out


def _openai_user_parts(blocks: list[Any], index: int) -> list[dict[str, Any]]:
    return [_openai_part_dict(b, index, f"content[{j}]") for j, b in enumerate(blocks)]


def _openai_part_dict(block: Any, index: int, field: str) -> dict[str, Any]:
    if isinstance(block, TextBlock):
        return {"type": "text", "text": block.text}
    if isinstance(block, ImageBlock | DocumentBlock):
        source = block.source
        kind = source.get("type")
        if kind == "base64":
            url = f"data:{source.get('media_type', '')};base64,{source.get('data', '')}"
        else:
            url = source.get("url", "")
        if isinstance(block, ImageBlock) and kind in ("base64", "url"):
            return {"type": "image_url", "image_url": {"url": url}}
        if isinstance(block, DocumentBlock) and kind == "text" and isinstance(source.get("data"), str):
            return {"type": "text", "text": source["data"]}
        if isinstance(block, DocumentBlock) and kind in ("base64", "file"):
            file = {"file_data": url} if kind == "base64" else {"file_id": source.get("file_id", "")}
            if block.title is not None:
                file["filename"] = block.title
            return {"type": "file", "file": file}
        raise MessageFormatError(
            f"a {block.type} with a {kind!r} source has no OpenAI chat form",
            index=index,
            field=f"{field}.source.type",
            value=kind,
        )
    raise MessageFormatError(
        f"a {block.type} block cannot be sent in an OpenAI user message", index=index, field=field
    )


def _openai_assistant(blocks: list[Any], index: int) -> dict[str, Any]:
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, block in enumerate(blocks):
        if isinstance(block, TextBlock):
            texts.append(block.text)
        elif isinstance(block, ThinkingBlock):
            if not block.redacted:
                reasoning.append(block.thinking)
        elif isinstance(block, ToolUseBlock):
            calls.append(_openai_tool_call(block, index, f"content[{j}]"))
        else:
            raise MessageFormatError(
                f"a {block.type} block cannot be sent in an OpenAI assistant message",
                index=index,
                field=f"content[{j}]",
            )
    out: dict[str, Any] = {"role": "assistant"}
    if len(texts) == 1:
        out["content"] = texts[0]
    else:
        out["content"] = [{"type": "text", "text": t} for t in texts] if texts else None
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    if calls:
        out["tool_calls"] = calls
    return out


def _openai_tool_call(block: ToolUseBlock, index: int, field: str) -> dict[str, Any]:
    try:
        arguments = json.dumps(block.input, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise MessageFormatError(
            f"tool input is not JSON-serialisable ({exc})", index=index, field=f"{field}.input"
        ) from exc
    return {"id": block.id, "type": "function", "function": {"name": block.name, "arguments": arguments}}


# -- the patch: provider formatting the canonical model does not hold -----------------------


def _patch(original: dict[str, Any], rendered: dict[str, Any]) -> dict[str, Any]:
    """``{"fingerprint", "patch"}`` turning ``rendered`` back into ``original``; {} if equal."""
    ops = _diff(original, rendered, [])
    return {"fingerprint": _fingerprint(rendered), "patch": ops} if ops else {}


def _diff(original: Any, rendered: Any, path: list[Any]) -> list[dict[str, Any]]:
    if isinstance(original, dict) and isinstance(rendered, dict):
        ops: list[dict[str, Any]] = []
        for key, value in original.items():
            if key in rendered:
                ops.extend(_diff(value, rendered[key], [*path, key]))
            else:
                ops.append({"path": [*path, key], "value": value})
        ops.extend({"path": [*path, key], "remove": True} for key in rendered if key not in original)
        return ops
    if isinstance(original, list) and isinstance(rendered, list) and len(original) == len(rendered):
        return [
            op
            for i, (a, b) in enumerate(zip(original, rendered, strict=True))
            for op in _diff(a, b, [*path, i])
        ]
    # Type-strict: True == 1 and 1 == 1.0 in Python, but not in the JSON a provider sent.
    if type(original) is type(rendered) and original == rendered:
        return []
    return [{"path": list(path), "value": original}]


def _fingerprint(rendered: dict[str, Any]) -> str:
    text = json.dumps(rendered, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=repr)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _with_meta(rendered: dict[str, Any], meta: Any, index: int) -> dict[str, Any]:
    """A copy of ``rendered`` with the provider patch applied (if the message is unchanged)."""
    out = copy.deepcopy(rendered)
    if not isinstance(meta, dict):
        return out
    ops = meta.get("patch")
    if ops and meta.get("fingerprint") == _fingerprint(rendered):
        for op in ops:
            _apply(out, op, index)
    for key, value in (meta.get("extra") or {}).items():
        out.setdefault(key, copy.deepcopy(value))
    return out


def _apply(document: dict[str, Any], op: dict[str, Any], index: int) -> None:
    try:
        *parents, last = op["path"]
        target: Any = document
        for key in parents:
            target = target[key]
        if op.get("remove"):
            del target[last]
        else:
            target[last] = copy.deepcopy(op["value"])
    except (KeyError, IndexError, TypeError, ValueError) as exc:
        raise MessageFormatError(
            f"provider patch does not fit the message ({exc!r})", index=index, field="meta"
        ) from exc


def sent_system_text(body: dict[str, Any]) -> str | None:
    """The system prompt text a Messages API body sends (its text blocks joined by a blank line), None without one."""
    system = body.get("system")
    if system is None:
        return None
    if isinstance(system, str):
        return system
    return "\n\n".join(str(b.get("text", "")) for b in system if isinstance(b, dict))
