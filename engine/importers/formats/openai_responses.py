"""OpenAI Responses API input lists (what the Agents SDK's ``to_input_list()`` returns, and the
``input`` of a Responses request): role messages beside typed items (``function_call``,
``function_call_output``, ``custom_tool_call``, ``reasoning``...).

Items read as in a Codex rollout (the same wire items); consecutive items the model produced
form one assistant message, each such message one model call (the list keeps no usage).
Leading ``system`` / ``developer`` messages are the session's system prompt.
"""

from __future__ import annotations

from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, objects_of, str_in
from engine.importers.formats.codex import ITEM_TYPES, RolloutReader
from engine.importers.parsing.parsed import ParsedSession, SourceProblem
from engine.importers.parsing.readers import provider_of


def parse_responses_items(items: list[Any], *, key: str, model: str | None = None) -> list[ParsedSession]:
    if not items:
        raise SourceProblem("the item list is empty")
    reader = RolloutReader(key)
    reader.model = model
    system: list[str] = []
    start = 0
    while (
        start < len(items)
        and isinstance(items[start], dict)
        and items[start].get("role") in ("system", "developer")
    ):
        content = items[start].get("content")
        system.append(content if isinstance(content, str) else _text(content))
        start += 1
    for index in range(start, len(items)):
        item = items[index]
        if not isinstance(item, dict):
            raise SourceProblem(f"items[{index}]: item is {type(item).__name__}, not an object")
        if "type" not in item and "role" in item:
            item = {**item, "type": "message"}
        try:
            reader.read_item(item)
        except SourceProblem as exc:
            raise SourceProblem(f"items[{index}]: {exc}") from exc
    session = reader.finish()
    session.system_prompt = "\n\n".join(system) if system else None
    session.provider = provider_of(session.model) or "openai"
    return [session]


def _text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)


def is_responses_item_list(values: list[Any]) -> bool:
    """An OpenAI Responses ``input`` list: typed items (function_call, ...) beside role messages."""
    typed = [v for v in values if isinstance(v, dict) and str_in(v.get("type"), ITEM_TYPES)]
    if not typed:
        return False
    return all(
        isinstance(v, dict) and (v.get("type") in ITEM_TYPES or ("role" in v and "tool_calls" not in v))
        for v in values
    ) and any(v.get("type") != "message" for v in typed) | any(
        isinstance(v.get("content"), list)
        and any(
            isinstance(p, dict) and str_in(p.get("type"), ("input_text", "output_text")) for p in v["content"]
        )
        for v in typed
    )


def sniff(doc: Document) -> bool:
    objects = objects_of(doc)
    return objects is not None and is_responses_item_list(objects)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_responses_items(objects_of(doc) or [], key=key)


FORMAT = ImportFormat(
    name="openai-responses",
    agent="OpenAI Agents SDK / Responses API",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="JSON of `to_input_list()` / a request's `input`",
)
