"""LangChain message lists: ``messages_to_dict`` (``{"type": "human", "data": {...}}``) and
``dumpd`` (``{"lc": 1, "type": "constructor", "id": [..., "AIMessage"], "kwargs": {...}}``).

Human / AI / system / tool messages map to ours: leading system messages are the system
prompt, an AI message's ``tool_calls`` are tool uses (its ``usage_metadata`` the call's usage,
``input_tokens`` including cache reads and writes; ``response_metadata.model_name`` its
model), a tool message is a tool result.
"""

from __future__ import annotations

from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, objects_of, str_in
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import (
    anthropic_content,
    as_count,
    build_message,
    openai_text,
    provider_of,
    tool_arguments,
)
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock

_CLASS_TYPES = {
    "HumanMessage": "human", "AIMessage": "ai", "AIMessageChunk": "ai", "SystemMessage": "system",
    "ToolMessage": "tool", "FunctionMessage": "function", "ChatMessage": "chat",
    "HumanMessageChunk": "human", "ToolMessageChunk": "tool",
}  # fmt: skip


def parse_langchain(items: list[Any], *, key: str) -> list[ParsedSession]:
    if not items:
        raise SourceProblem("the message list is empty")
    session = ParsedSession(key=key, messages=[])
    system: list[str] = []
    models: list[str] = []
    for index, raw in enumerate(items):
        where = f"messages[{index}]"
        kind, data = _unwrap(raw, where)
        content = data.get("content")
        if kind == "chat":
            kind = {"user": "human", "assistant": "ai"}.get(str(data.get("role")), "system")
        if kind == "system":
            if not session.messages:
                system.append(content if isinstance(content, str) else _plain(content, where))
                continue
            meta = {"openai_role": "system"}
            session.messages.append(
                ParsedMessage(build_message("user", _plain(content, where), where=where, meta=meta))
            )
        elif kind == "human":
            session.messages.append(
                ParsedMessage(build_message("user", _content(content, where), where=where))
            )
        elif kind == "ai":
            blocks = _blocks(_content(content, where))
            known = {b.id for b in blocks if isinstance(b, ToolUseBlock)}
            for call in data.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id") not in known:
                    blocks.append(
                        ToolUseBlock(id=str(call.get("id") or f"call_{index}"), name=str(call.get("name") or ""),
                                     input=tool_arguments(call.get("args")))
                    )  # fmt: skip
            response = (
                data.get("response_metadata") if isinstance(data.get("response_metadata"), dict) else {}
            )
            model = response.get("model_name") or response.get("model")
            if isinstance(model, str) and model:
                models.append(model)
            call_info = CallInfo(
                usage=_usage(data.get("usage_metadata")), model=model if isinstance(model, str) else None
            )
            reasoning = ((data.get("usage_metadata") or {}).get("output_token_details") or {}).get(
                "reasoning"
            )
            if reasoning:
                call_info.details["reasoning_tokens"] = int(reasoning)
            meta = {"id": data["id"]} if data.get("id") else {}
            session.messages.append(
                ParsedMessage(
                    build_message("assistant", blocks or "", where=where, meta=meta), call=call_info
                )
            )
        elif kind in ("tool", "function"):
            call_id = data.get("tool_call_id") or data.get("name")
            if not call_id:
                raise SourceProblem(f"{where}: tool message without a tool_call_id")
            result = ToolResultBlock(
                tool_use_id=str(call_id),
                content=_plain(content, where),
                is_error=data.get("status") == "error",
            )
            last = session.messages[-1] if session.messages else None
            if last is not None and last.message.role == "user" and last.message.tool_result_ids:
                last.message = last.message.with_content([*last.message.blocks, result])
            else:
                session.messages.append(ParsedMessage(build_message("user", [result], where=where)))
        else:
            raise SourceProblem(f"{where}: unknown LangChain message type {kind!r}")
    session.system_prompt = "\n\n".join(system) if system else None
    session.model = models[-1] if models else None
    session.provider = provider_of(session.model)
    return [session]


def _unwrap(raw: Any, where: str) -> tuple[str, dict[str, Any]]:
    if not isinstance(raw, dict):
        raise SourceProblem(f"{where}: message is {type(raw).__name__}, not an object")
    if raw.get("lc") == 1:
        ids = raw.get("id") if isinstance(raw.get("id"), list) else []
        name = str(ids[-1]) if ids else ""
        return _CLASS_TYPES.get(name, name), raw.get("kwargs") or {}
    data = raw.get("data") if isinstance(raw.get("data"), dict) else {}
    return str(raw.get("type")), data


def _content(content: Any, where: str) -> Any:
    if isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") in ("tool_use", "thinking") for p in content
    ):
        return anthropic_content(content, where=where)
    return openai_text(content, where=where)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    return list(content)


def _plain(content: Any, where: str) -> str:
    text = openai_text(content, where=where)
    return text if isinstance(text, str) else "\n".join(b.text for b in text if isinstance(b, TextBlock))


def _usage(raw: Any) -> ProviderUsage | None:
    if not isinstance(raw, dict) or raw.get("input_tokens") is None:
        return None
    details = raw.get("input_token_details") if isinstance(raw.get("input_token_details"), dict) else {}
    return ProviderUsage.from_prompt_total(
        as_count(raw.get("input_tokens")),
        as_count(raw.get("output_tokens")),
        cache_read=as_count(details.get("cache_read")),
        cache_write=as_count(details.get("cache_creation")),
    )


_LANGCHAIN_TYPES = frozenset({"human", "ai", "system", "tool", "function", "chat", "AIMessageChunk"})


def is_langchain_list(values: list[Any]) -> bool:
    """``messages_to_dict`` ({"type", "data"}) or ``dumpd`` ({"lc": 1, "type": "constructor", ...})."""
    return all(
        isinstance(v, dict)
        and (
            (str_in(v.get("type"), _LANGCHAIN_TYPES) and isinstance(v.get("data"), dict))
            or (v.get("lc") == 1 and v.get("type") == "constructor" and isinstance(v.get("kwargs"), dict))
        )
        for v in values
    )


def sniff(doc: Document) -> bool:
    objects = objects_of(doc)
    return objects is not None and is_langchain_list(objects)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_langchain(objects_of(doc) or [], key=key)


FORMAT = ImportFormat(
    name="langchain",
    agent="LangChain",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="JSON of `messages_to_dict()` / `dumpd()`",
)
