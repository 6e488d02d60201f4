"""Anthropic Messages API logs: a request ({model, system, messages, tools}), optionally with its
``response`` ({content, usage}), or a list of such exchanges.

Exchanges whose messages extend the transcript so far (the previous request's messages plus
its response) continue one session; any other starts a new one. Each exchange is one call,
estimated from exactly what its request sent (its own system prompt and tools).
"""

from __future__ import annotations

from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, objects_of
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import anthropic_message, anthropic_usage, provider_of, system_text


def parse_anthropic_exchanges(value: Any, *, key: str, lines: list[int] | None = None) -> list[ParsedSession]:
    exchanges = value if isinstance(value, list) else [value]
    sessions: list[ParsedSession] = []
    current: ParsedSession | None = None
    for index, exchange in enumerate(exchanges):
        line = lines[index] if lines else None
        where = f"line {line}" if line else f"exchange {index}"
        try:
            current = _add_exchange(exchange, current, sessions, key=key, where=where)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=line) from exc
    return sessions


def _add_exchange(
    exchange: Any, current: ParsedSession | None, sessions: list[ParsedSession], *, key: str, where: str
) -> ParsedSession:
    if not isinstance(exchange, dict):
        raise SourceProblem(f"{where}: exchange is {type(exchange).__name__}, not an object")
    request = exchange["request"] if isinstance(exchange.get("request"), dict) else exchange
    response = exchange.get("response") if isinstance(exchange.get("response"), dict) else None
    raw_messages = request.get("messages")
    if not isinstance(raw_messages, list) or not raw_messages:
        raise SourceProblem(f"{where}: request has no messages")
    sent = [anthropic_message(m, where=f"{where} messages[{i}]") for i, m in enumerate(raw_messages)]
    model = (response or {}).get("model") or request.get("model")
    system = system_text(request.get("system"))
    tools = [t for t in request.get("tools") or [] if isinstance(t, dict)]

    known = [pm.message.content_hash for pm in current.messages] if current else []
    if current is None or [m.content_hash for m in sent[: len(known)]] != known or len(sent) < len(known):
        current = ParsedSession(
            key=key if not sessions else f"{key}-{len(sessions) + 1}",
            messages=[],
            model=model,
            provider=provider_of(model) or "anthropic",
            system_prompt=system,
            tools=tools,
            metadata={"max_tokens": request.get("max_tokens")} if request.get("max_tokens") else {},
        )
        sessions.append(current)
        known = []
    current.messages.extend(ParsedMessage(m) for m in sent[len(known) :])
    call = CallInfo(
        usage=anthropic_usage((response or {}).get("usage")),
        model=model,
        system_prompt=system or "",
        tools=tools,
        details={"response_id": (response or {}).get("id")} if response else {"response": None},
    )
    if response is not None and response.get("content") is not None:
        reply = anthropic_message(
            {"role": "assistant", "content": response["content"]},
            where=f"{where} response",
            id=response.get("id"),
            meta={k: response[k] for k in ("stop_reason", "model") if response.get(k)},
        )
        current.messages.append(ParsedMessage(reply, call=call))
    else:
        current.messages[-1].pending_calls.append(call)
    return current


def parse_anthropic_messages(items: list[Any], *, key: str, model: str | None = None) -> ParsedSession:
    """A plain Anthropic Messages list ([{role, content}, ...], what Cline keeps): one session,
    every assistant message one call (the list keeps no usage)."""
    if not items:
        raise SourceProblem("the message list is empty")
    session = ParsedSession(key=key, messages=[], model=model, provider=provider_of(model) or "anthropic")
    for index, raw in enumerate(items):
        message = anthropic_message(raw, where=f"messages[{index}]")
        call = CallInfo(model=model) if message.role == "assistant" else None
        session.messages.append(ParsedMessage(message, call=call))
    return session


_ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})


def is_exchange(value: Any) -> bool:
    """An API request (``messages``), optionally with its ``response``, or {request, response}."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("request"), dict):
        return isinstance(value["request"].get("messages"), list)
    return isinstance(value.get("messages"), list)


def looks_anthropic(exchange: dict[str, Any]) -> bool:
    request = exchange.get("request") if isinstance(exchange.get("request"), dict) else exchange
    response = exchange.get("response")
    if "system" in request or "anthropic_version" in request:
        return True
    if "claude" in str(request.get("model", "")).lower():
        return True
    if isinstance(response, dict) and "input_tokens" in (response.get("usage") or {}):
        return True
    messages = request.get("messages") or []
    if any(isinstance(m, dict) and m.get("role") in ("system", "tool", "developer") for m in messages):
        return False
    return any(has_anthropic_blocks(m) for m in messages)


def has_anthropic_blocks(message: Any) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return False
    for block in content:
        if isinstance(block, dict):
            if block.get("type") in _ANTHROPIC_ONLY_BLOCKS:
                return True
            if block.get("type") == "image" and "source" in block:
                return True
    return False


def sniff(doc: Document) -> bool:
    if isinstance(doc.value, dict):
        return is_exchange(doc.value) and looks_anthropic(doc.value)
    objects = objects_of(doc)
    if not objects:
        return False
    if all("role" in v for v in objects):  # a message list: Anthropic when it has Anthropic-only blocks
        return any(has_anthropic_blocks(v) for v in objects)
    return all(is_exchange(v) for v in objects) and any(looks_anthropic(v) for v in objects)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    objects = objects_of(doc)
    if doc.lines is None and objects is not None and all("role" in v for v in objects):
        return [parse_anthropic_messages(objects, key=key)]
    if doc.lines is not None:
        return parse_anthropic_exchanges([v for _, v in doc.lines], key=key, lines=[n for n, _ in doc.lines])
    return parse_anthropic_exchanges(doc.value, key=key)


FORMAT = ImportFormat(
    name="anthropic",
    agent="Anthropic Messages",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="message lists, or request/response logs (`.json` / `.jsonl`)",
)
