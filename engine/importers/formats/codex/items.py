"""Codex's Responses items as canonical blocks: message parts, agent messages, tool calls and
their outputs, and the usage of a ``token_count`` event."""

from __future__ import annotations

from typing import Any

from engine.events import ProviderUsage
from engine.importers.parsing.readers import as_count, as_json_text, openai_text, text_block, tool_arguments
from engine.messages import TextBlock, ToolUseBlock


def tool_use_of(item: dict[str, Any], *, fallback_id: str) -> ToolUseBlock:
    """The tool_use block of a call item (``fallback_id`` when it has no id of its own)."""
    kind = item["type"]
    call_id = str(item.get("call_id") or item.get("id") or fallback_id)
    name = str(item.get("name") or "")
    if kind == "function_call":
        return ToolUseBlock(id=call_id, name=name or "function", input=tool_arguments(item.get("arguments")))
    if kind == "custom_tool_call":
        return ToolUseBlock(id=call_id, name=name or "custom_tool", input={"input": item.get("input") or ""})
    if kind == "local_shell_call":
        action = item.get("action") if isinstance(item.get("action"), dict) else {}
        return ToolUseBlock(id=call_id, name="local_shell", input=action)
    body = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
    body.pop("internal_chat_message_metadata_passthrough", None)
    return ToolUseBlock(id=call_id, name=kind.removesuffix("_call"), input=body)


def message_content(raw: Any, where: str) -> Any:
    """Message parts as sent: one text block per part (not joined), images and others kept."""
    if isinstance(raw, list) and len(raw) > 1:
        blocks: list[Any] = []
        for part in raw:
            if isinstance(part, dict) and part.get("type") in ("input_text", "output_text", "text"):
                blocks.append(text_block(str(part.get("text") or "")))  # a text part, read once
            else:
                blocks.extend(_blocks_of(openai_text([part], where=where)))
        return blocks
    return openai_text(raw, where=where)


def agent_message_text(raw: Any) -> list[TextBlock]:
    """An agent message's parts: its text and its ``encrypted_content`` (sent as it is)."""
    parts = raw if isinstance(raw, list) else [raw]
    blocks = []
    for part in parts:
        if isinstance(part, dict):
            text = part.get("text") if "text" in part else part.get("encrypted_content")
            blocks.append(TextBlock(text=str(text or "")))
        elif part is not None:
            blocks.append(TextBlock(text=str(part)))
    return blocks


def _blocks_of(content: Any) -> list[Any]:
    return [TextBlock(text=content)] if isinstance(content, str) else list(content)


def codex_usage(raw: dict[str, Any]) -> tuple[ProviderUsage, int]:
    """(usage, reasoning tokens) of Codex's ``last_token_usage``: input includes cached input,
    output includes reasoning."""
    total_input = as_count(raw.get("input_tokens"))
    cached = min(total_input, as_count(raw.get("cached_input_tokens")))
    usage = ProviderUsage(
        input_tokens=total_input - cached,
        output_tokens=as_count(raw.get("output_tokens")),
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=as_count(raw.get("cache_write_input_tokens")),
    )
    return usage, as_count(raw.get("reasoning_output_tokens"))


def output_text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict):
        content = raw.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in content)
    if isinstance(raw, list):
        return "\n".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in raw)
    return "" if raw is None else as_json_text(raw)
