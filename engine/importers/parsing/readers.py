"""Tolerant readers of provider-shaped pieces: content blocks, messages, usage, tool names.

Sources carry fields our canonical blocks do not (``cache_control``, ``citations``, ...);
these readers keep what the model saw and drop the rest. A piece that cannot be read at all
raises :class:`SourceProblem` naming what was wrong.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from engine.events import ProviderUsage
from engine.importers.parsing.parsed import SourceProblem
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_user_input,
)
from engine.store.records import constructed, share_fields_set

TITLE_CHARS = 80
_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?>")
_SPACE = re.compile(r"\s+")


def as_json_text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def build_message(role: str, content: Any, *, where: str, **fields: Any) -> Message:
    """A message of the source, validated; its (and its blocks') set of given fields shared with
    every alike instance (:func:`engine.store.records.share_fields_set`: a parsed session holds all
    its messages until written, and each set cost more than the values of a short message)."""
    try:
        message = Message(role=role, content=content, **fields)  # type: ignore[arg-type]
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise SourceProblem(f"{where}: cannot read message ({loc}: {first['msg']})") from exc
    if not isinstance(message.content, str):
        for block in message.content:
            share_fields_set(block)
    return share_fields_set(message)


#: The blocks :func:`anthropic_block` (and every reader here) makes: valid as they are.
_BLOCK_TYPES = frozenset({TextBlock, ThinkingBlock, ToolUseBlock, ToolResultBlock, ImageBlock, DocumentBlock})
#: Given fields of a text block, of a message made with id and meta (shared); a usage's fields in order.
_TEXT_GIVEN = share_fields_set(TextBlock(text="")).__pydantic_fields_set__
_GIVEN = share_fields_set(Message(role="user", content="", id=None, meta={})).__pydantic_fields_set__
_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def unvalidated(cls: Any, fields: dict[str, Any], given: set[str], private: dict[str, Any] | None) -> Any:
    """``cls`` with these valid values in field order, as validation makes it, without validating."""
    model = cls.__new__(cls)
    object.__setattr__(model, "__dict__", fields)
    object.__setattr__(model, "__pydantic_fields_set__", given)
    object.__setattr__(model, "__pydantic_extra__", None)
    object.__setattr__(model, "__pydantic_private__", private)
    return model


def text_block(text: str) -> TextBlock:
    """``TextBlock(text=text)`` of a ``str`` (always valid), not validated: most blocks are text."""
    return unvalidated(TextBlock, {"type": "text", "text": text}, _TEXT_GIVEN, None)


def message_of(role: str, content: Any, *, id: Any, meta: Any, where: str, owned: bool = False) -> Message:
    """:func:`build_message` (``id`` and ``meta`` given), not validated when the pieces are valid (a
    role, text or our blocks, a text or None id, a dict of text keys: a third of the time; ``owned``:
    the caller's new list and dict, kept, not copied); anything else validated by build_message."""
    if (
        role in ("user", "assistant", "tool")
        and (id is None or type(id) is str)
        and type(meta) is dict
        and all(type(k) is str for k in meta)
        and (
            type(content) is str or (type(content) is list and all(type(b) in _BLOCK_TYPES for b in content))
        )
    ):
        # what validation makes of valid pieces: a new list of the same blocks, a new meta dict
        fields = {"role": role, "content": content if owned or type(content) is str else list(content)}
        fields.update(id=id, pinned=False, meta=meta if owned else dict(meta))
        for block in fields["content"] if type(content) is list else ():
            if block.__pydantic_fields_set__ is not _TEXT_GIVEN:  # text_block's are shared already
                share_fields_set(block)
        return unvalidated(Message, fields, _GIVEN, None)  # no private dict until hashed (content_hash)
    return build_message(role, content, where=where, id=id, meta=meta)


# -- Anthropic shapes ------------------------------------------------------------------------


def anthropic_block(raw: Any, *, where: str) -> Any:
    """One Anthropic content block; unknown block types are kept as their JSON text."""
    if isinstance(raw, str):
        return TextBlock(text=raw)
    if not isinstance(raw, dict):
        raise SourceProblem(f"{where}: content block is {type(raw).__name__}, not an object")
    kind = raw.get("type")
    try:
        if kind == "text":
            return text_block(str(raw.get("text") or ""))
        if kind == "thinking":
            return ThinkingBlock(thinking=str(raw.get("thinking") or ""), signature=raw.get("signature"))
        if kind == "redacted_thinking":
            return ThinkingBlock(redacted=True, data=raw.get("data"))
        if kind in ("tool_use", "server_tool_use"):
            arguments = raw.get("input")
            return ToolUseBlock(
                id=str(raw.get("id") or ""),
                name=str(raw.get("name") or ""),
                input=arguments if isinstance(arguments, dict) else {"input": arguments},
            )
        if kind == "tool_result":
            return ToolResultBlock(
                tool_use_id=str(raw.get("tool_use_id") or ""),
                content=tool_result_content(raw.get("content"), where=where),
                is_error=bool(raw.get("is_error")),
            )
        if kind == "image":
            return ImageBlock(source=dict(raw.get("source") or {}))
        if kind == "document":
            return DocumentBlock(source=dict(raw.get("source") or {}), title=raw.get("title"))
    except PydanticValidationError as exc:
        first = exc.errors()[0]
        raise SourceProblem(f"{where}: {kind} block: {first['loc'][0]}: {first['msg']}") from exc
    return TextBlock(text=as_json_text(raw))


def _plain_text(raw: Any) -> str | None:
    """Content that is not a list of parts, as text (None -> ""); None for a list."""
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    return None if isinstance(raw, list) else as_json_text(raw)


def tool_result_content(raw: Any, *, where: str) -> str | list[Any]:
    text = _plain_text(raw)
    if text is not None:
        return text
    parts: list[Any] = []
    for item in raw:
        block = anthropic_block(item, where=where)
        parts.append(
            block
            if isinstance(block, TextBlock | ImageBlock | DocumentBlock)
            else TextBlock(text=as_json_text(item))
        )
    return parts


def anthropic_content(raw: Any, *, where: str) -> str | list[Any]:
    if isinstance(raw, str):
        return raw
    if raw is None:
        return ""
    if not isinstance(raw, list):
        raise SourceProblem(
            f"{where}: content is {type(raw).__name__}, expected a string or a list of blocks"
        )
    return [anthropic_block(b, where=f"{where}[{i}]") for i, b in enumerate(raw)]


def anthropic_message(raw: Any, *, where: str, **fields: Any) -> Message:
    if not isinstance(raw, dict):
        raise SourceProblem(f"{where}: message is {type(raw).__name__}, not an object")
    role = raw.get("role")
    if role not in ("user", "assistant"):
        raise SourceProblem(f"{where}: role {role!r} is not user or assistant")
    return build_message(role, anthropic_content(raw.get("content"), where=where), where=where, **fields)


def system_text(raw: Any) -> str | None:
    """An Anthropic ``system`` parameter (string or text blocks) as one string."""
    if raw is None or raw == "":
        return None
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):
        return "\n\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in raw)
    return as_json_text(raw)


def anthropic_usage(raw: Any) -> ProviderUsage | None:
    if not isinstance(raw, dict):
        return None
    return constructed(ProviderUsage, {k: _count(raw.get(k)) for k in _USAGE_FIELDS})  # each valid: as_count


# -- OpenAI shapes ---------------------------------------------------------------------------

_OPENAI_KEYS = {"role", "content", "tool_calls", "tool_call_id", "tool_call_ids", "function_call", "usage"}


def openai_usage(raw: Any) -> ProviderUsage | None:
    """OpenAI / LiteLLM usage. ``prompt_tokens`` includes cache reads and (LiteLLM for Claude)
    cache writes, so the uncached input is what remains."""
    if not isinstance(raw, dict) or raw.get("prompt_tokens") is None:
        return None
    details = raw.get("prompt_tokens_details") or {}
    cache_read = _count(
        raw.get("cache_read_input_tokens")
        or raw.get("cache_read_tokens")
        or (details.get("cached_tokens") if isinstance(details, dict) else 0)
    )
    cache_write = _count(raw.get("cache_creation_input_tokens") or raw.get("cache_write_tokens"))
    return ProviderUsage.from_prompt_total(
        _count(raw.get("prompt_tokens")),
        _count(raw.get("completion_tokens")),
        cache_read=cache_read,
        cache_write=cache_write,
    )


def openai_text(raw: Any, *, where: str) -> str | list[Any]:
    """OpenAI message content: a string, or parts (text, image_url, anything else as JSON)."""
    text = _plain_text(raw)
    if text is not None:
        return text
    blocks: list[Any] = []
    for part in raw:
        if isinstance(part, str):
            blocks.append(TextBlock(text=part))
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            blocks.append(TextBlock(text=str(part.get("text") or "")))
        elif isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            url = image.get("url") if isinstance(image, dict) else image
            blocks.append(ImageBlock(source={"type": "url", "url": str(url or "")}))
        else:
            blocks.append(TextBlock(text=as_json_text(part)))
    if all(isinstance(b, TextBlock) for b in blocks):
        return "\n".join(b.text for b in blocks)
    return blocks


def tool_arguments(raw: Any) -> dict[str, Any]:
    """Function-call arguments: a JSON object string (or object); anything else is kept as text."""
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = json.loads(raw) if raw.strip() else {}
        except json.JSONDecodeError:
            return {"arguments": raw}
        return parsed if isinstance(parsed, dict) else {"arguments": parsed}
    return {} if raw is None else {"arguments": raw}


def openai_tool_uses(raw: dict[str, Any], *, where: str, index: int) -> list[ToolUseBlock]:
    uses: list[ToolUseBlock] = []
    for j, call in enumerate(raw.get("tool_calls") or []):
        if not isinstance(call, dict):
            raise SourceProblem(f"{where}: tool_calls[{j}] is {type(call).__name__}, not an object")
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = function.get("name") or call.get("name")
        call_id = call.get("id")
        if not name or not call_id:
            raise SourceProblem(f"{where}: tool_calls[{j}] has no id or function name")
        uses.append(
            ToolUseBlock(id=str(call_id), name=str(name), input=tool_arguments(function.get("arguments")))
        )
    legacy = raw.get("function_call")
    if isinstance(legacy, dict) and legacy.get("name"):
        uses.append(
            ToolUseBlock(
                id=f"call_{index}", name=str(legacy["name"]), input=tool_arguments(legacy.get("arguments"))
            )
        )
    return uses


def openai_message(raw: Any, *, where: str, index: int) -> Message:
    """One OpenAI chat message as a canonical message (``tool`` -> a user tool_result message).

    Source fields we do not model (``agent``, ``action``, ``is_demo``...) are kept in ``meta``;
    ``thought`` is dropped because it repeats the content.
    """
    if not isinstance(raw, dict):
        raise SourceProblem(f"{where}: message is {type(raw).__name__}, not an object")
    role = raw.get("role")
    meta = {k: v for k, v in raw.items() if k not in _OPENAI_KEYS and k != "thought"}
    content = openai_text(raw.get("content"), where=where)
    if role == "assistant":
        uses = openai_tool_uses(raw, where=where, index=index)
        if uses:
            text_blocks = (
                [TextBlock(text=content)] if isinstance(content, str) and content else
                (content if isinstance(content, list) else [])
            )  # fmt: skip
            return build_message("assistant", [*text_blocks, *uses], where=where, meta=meta)
        return build_message("assistant", content, where=where, meta=meta)
    if role in ("tool", "function"):
        ids = raw.get("tool_call_ids") or [raw.get("tool_call_id")]
        tool_use_id = ids[0] if ids and ids[0] else None
        if not tool_use_id:
            raise SourceProblem(f"{where}: {role} message has no tool_call_id")
        if isinstance(content, list):
            content = [b for b in content if isinstance(b, TextBlock | ImageBlock | DocumentBlock)]
        meta = {"openai_role": role, **meta}
        if len(ids) > 1:
            meta["tool_call_ids"] = ids
        result = ToolResultBlock(tool_use_id=str(tool_use_id), content=content)
        return build_message("user", [result], where=where, meta=meta)
    if role in ("user", "system", "developer"):
        if role != "user":
            meta = {"openai_role": role, **meta}
        return build_message("user", content, where=where, meta=meta)
    raise SourceProblem(f"{where}: unknown role {role!r}")


# -- names -----------------------------------------------------------------------------------


#: Context an agent sends as a user message before the user's own words (never a title).
_AGENT_CONTEXT = (
    "<environment_context", "<session_context", "<user_instructions", "<permissions", "<environment_details",
    "<skills_instructions", "# AGENTS.md", "<INSTRUCTIONS>",
)  # fmt: skip


_CONTEXT_BLOCK = re.compile(r"<(environment_details|environment_context|system-reminder)>.*?</\1>", re.S)


def title_of(messages: list[Message]) -> str | None:
    """The first user input's text, markup removed, whitespace collapsed, truncated; developer
    and system messages and an agent's own context blocks are not the user's words."""
    for message in messages:
        if is_user_input(message) and not message.meta.get("is_demo"):
            if message.meta.get("openai_role") in ("developer", "system") or message.text.lstrip().startswith(
                _AGENT_CONTEXT
            ):
                continue
            text = _SPACE.sub(" ", _TAG.sub(" ", _CONTEXT_BLOCK.sub(" ", message.text))).strip()
            if text:
                return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"
    return None


_PROVIDER_PREFIXES = {
    "anthropic", "openai", "openrouter", "azure", "bedrock", "vertex_ai", "gemini", "mistral", "groq",
    "together_ai", "ollama", "deepseek", "fireworks_ai", "xai", "cohere",
}  # fmt: skip


def provider_of(model: str | None) -> str | None:
    """Provider of a model name: a LiteLLM-style ``provider/`` prefix, else the model family."""
    if not model:
        return None
    name = model.lower()
    prefix = name.split("/", 1)[0] if "/" in name else ""
    if prefix in _PROVIDER_PREFIXES:
        return prefix
    bare = name.rsplit("/", 1)[-1]
    if "claude" in bare:
        return "anthropic"
    if bare.startswith(("gpt-", "gpt4", "o1", "o3", "o4", "chatgpt", "text-davinci")):
        return "openai"
    if bare.startswith("gemini"):
        return "gemini"
    return None


def tool_category(name: str) -> tuple[str, str | None]:
    """(category, server): ``mcp__server__tool`` names are MCP tools of ``server``."""
    if name.startswith("mcp__"):
        parts = name.split("__")
        return "mcp", parts[1] if len(parts) > 2 and parts[1] else None
    return "builtin", None


#: The largest token count taken from a source (beyond it a value is nonsense, and SQLite's
#: INTEGER could not store it): larger ones are clamped.
MAX_COUNT = 10**12


def as_count(value: Any) -> int:
    """A token count from a source: a non-negative int (at most MAX_COUNT), 0 for anything unreadable."""
    if type(value) is int and 0 <= value <= MAX_COUNT:
        return value  # most counts: as they are
    try:
        return min(MAX_COUNT, max(0, int(value or 0)))
    except (TypeError, ValueError, OverflowError):
        return 0


_count = as_count
