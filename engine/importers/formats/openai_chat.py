"""OpenAI chat-completions message lists (SWE-agent trajectories' ``history`` is one too).

Leading system (or developer) messages become the session's system prompt: kept in metadata
``system_prompt`` and counted as the system component of every request, never stored as
transcript messages. Every assistant message is one model call; its ``usage`` is kept when
the message carries one.
"""

from __future__ import annotations

from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, objects_of
from engine.importers.formats.anthropic_api import has_anthropic_blocks, is_exchange, looks_anthropic
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import openai_message, openai_usage, provider_of

_SYSTEM_ROLES = ("system", "developer")


def parse_openai_messages(
    items: list[Any], *, model: str | None, where: str = "messages"
) -> tuple[str | None, list[ParsedMessage]]:
    """(system prompt, messages) of an OpenAI message list."""
    system_parts: list[str] = []
    start = 0
    while start < len(items) and isinstance(items[start], dict) and items[start].get("role") in _SYSTEM_ROLES:
        content = items[start].get("content")
        system_parts.append(content if isinstance(content, str) else _joined_text(content))
        start += 1
    parsed: list[ParsedMessage] = []
    for index in range(start, len(items)):
        raw = items[index]
        message = openai_message(raw, where=f"{where}[{index}]", index=index)
        call = None
        if message.role == "assistant":
            call = CallInfo(usage=openai_usage(raw.get("usage")), model=model)
        parsed.append(ParsedMessage(message, call=call))
    return ("\n\n".join(system_parts) if system_parts else None), parsed


def parse_openai_document(value: Any, *, key: str) -> list[ParsedSession]:
    """A JSON list of messages, or {"messages": [...], "model"?, "tools"?}."""
    if isinstance(value, list):
        items, model, tools = value, None, []
    else:
        items, model, tools = value["messages"], value.get("model"), value.get("tools") or []
    if not items:
        raise SourceProblem("the message list is empty")
    model = model or _model_in_messages(items)
    system, messages = parse_openai_messages(items, model=model)
    return [
        ParsedSession(
            key=key, messages=messages, model=model, provider=provider_of(model), system_prompt=system,
            tools=[t for t in tools if isinstance(t, dict)],
        )
    ]  # fmt: skip


def _model_in_messages(items: list[Any]) -> str | None:
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("model"), str):
            return item["model"]
    return None


def _joined_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def sniff(doc: Document) -> bool:
    value = doc.value
    if isinstance(value, dict):
        return is_exchange(value) and not looks_anthropic(value) and "request" not in value
    objects = objects_of(doc)
    return (
        bool(objects)
        and all("role" in v for v in objects)
        and not any(has_anthropic_blocks(v) for v in objects)
    )


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_openai_document(doc.value if doc.lines is None else objects_of(doc), key=key)


FORMAT = ImportFormat(
    name="openai",
    agent="OpenAI chat",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="message lists, or request/response logs (`.json` / `.jsonl`)",
)
