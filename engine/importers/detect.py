"""Telling which format a transcript file is, from its content alone (the file is read by
:mod:`engine.importers.documents`, whose names are re-exported here).

A well-formed file that matches no format is reported with what it holds, so the user sees
why it was refused.
"""

from __future__ import annotations

from typing import Any

from engine.importers.claude_web import is_claude_web_export
from engine.importers.codex import ITEM_TYPES as RESPONSES_ITEM_TYPES
from engine.importers.codex import is_codex_line
from engine.importers.documents import (  # noqa: F401  (reading a file: re-exported from here as before)
    AIDER_HEAD,
    COMPANION_FILES,
    Document,
    LineCache,
    read_document,
)
from engine.importers.gemini import is_gemini_chat, is_gemini_line
from engine.importers.model import SourceProblem

#: Claude Code line types (message lines and bookkeeping lines the importer skips).
CLAUDE_LINE_TYPES = frozenset({"user", "assistant", "summary", "system", "progress", "file-history-snapshot"})
_ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})
_SNIFF_LINES = 20


def classify(doc: Document) -> str:
    """The format name of a parsed document; raises SourceProblem when it is none of them."""
    if doc.text is not None:
        return "aider"
    candidates = [v for _, v in doc.lines] if doc.lines is not None else doc.value
    companion = _prompt_history(candidates[:_SNIFF_LINES]) if isinstance(candidates, list) else None
    if companion:
        raise SourceProblem(f"not a transcript: {companion}")
    if doc.lines is not None:
        values = [v for _, v in doc.lines]
        if any(is_claude_code_line(v) for v in values[:_SNIFF_LINES]):
            return "claude-code"
        if any(is_codex_line(v) for v in values[:_SNIFF_LINES]):
            return "codex"
        if any(is_gemini_line(v) for v in values[:_SNIFF_LINES]):
            return "gemini"
        if is_openhands_record(values[0]) or is_openhands_legacy(values[0]):
            return "openhands"
        return _classify_value(values, where="JSON Lines")
    if doc.path.name == "api_conversation_history.json" and isinstance(doc.value, list):
        return "cline"
    return _classify_value(doc.value, where="JSON")


def _classify_value(value: Any, *, where: str) -> str:
    if isinstance(value, dict):
        if is_claude_code_line(value):
            return "claude-code"
        if is_codex_line(value):
            return "codex"
        if is_gemini_chat(value):
            return "gemini"
        if is_letta_agent(value):
            return "letta"
        if is_openhands_legacy(value):
            return "openhands"
        if isinstance(value.get("history"), list) and ("trajectory" in value or "info" in value):
            return "swe-agent"
        if is_openhands_record(value):
            return "openhands"
        if is_exchange(value):
            if looks_anthropic(value):
                return "anthropic"
            if "request" not in value:
                return "openai"
        keys = ", ".join(sorted(map(str, value))[:8]) or "none"
        raise SourceProblem(f"not a transcript: a {where} object with keys {keys}")
    if isinstance(value, list):
        if not value:
            raise SourceProblem(f"not a transcript: an empty {where} list")
        if not all(isinstance(v, dict) for v in value):
            raise SourceProblem(f"not a transcript: a {where} list of {_kinds(value)}")
        if is_claude_web_export(value):
            return "claude-web"
        if is_langchain_list(value):
            return "langchain"
        if is_responses_item_list(value):
            return "openai-responses"
        if all("role" in v for v in value):
            return "anthropic" if any(_has_anthropic_blocks(v) for v in value) else "openai"
        if is_cline_ui_messages(value):
            raise SourceProblem(f"not a transcript: {COMPANION_FILES['ui_messages.json']}")
        if sum(is_openhands_event(v) for v in value[:_SNIFF_LINES]) >= min(2, len(value)):
            return "openhands"
        if all(is_exchange(v) for v in value) and any(looks_anthropic(v) for v in value):
            return "anthropic"
        keys = ", ".join(sorted({str(k) for v in value[:_SNIFF_LINES] for k in v})[:8])
        raise SourceProblem(f"not a transcript: a {where} list of objects with keys {keys}")
    raise SourceProblem(f"not a transcript: a {where} {type(value).__name__}")


def _kinds(values: list[Any]) -> str:
    return "/".join(sorted({type(v).__name__ for v in values}))


def is_claude_code_line(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and str_in(value.get("type"), CLAUDE_LINE_TYPES)
        and any(k in value for k in ("uuid", "leafUuid", "sessionId"))
    )


def is_openhands_record(value: Any) -> bool:
    """An OpenHands evaluation output line: ``history`` events plus instance or metrics."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and ("instance_id" in value or "metrics" in value)
        and all(isinstance(e, dict) for e in value["history"][:_SNIFF_LINES])
        and not any("role" in e for e in value["history"][:_SNIFF_LINES])
    )


def is_openhands_event(value: Any) -> bool:
    return isinstance(value, dict) and ("action" in value or "observation" in value) and "source" in value


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
    return any(_has_anthropic_blocks(m) for m in messages)


def _has_anthropic_blocks(message: Any) -> bool:
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


def str_in(value: Any, names: Any) -> bool:
    """``value`` is one of the string ``names`` (an unhashable value is none of them)."""
    return isinstance(value, str) and value in names


def is_letta_agent(value: Any) -> bool:
    """A Letta agent file (``.af``): one agent with messages, or ``{"agents": [...]}``."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("agents"), list) and value["agents"]:
        return all(isinstance(a, dict) and "messages" in a for a in value["agents"][:3]) or "blocks" in value
    return isinstance(value.get("messages"), list) and (
        "agent_type" in value or "core_memory" in value or "llm_config" in value
    )


def is_openhands_legacy(value: Any) -> bool:
    """OpenHands resolver output of old: ``history`` of [action, observation] pairs."""
    if not isinstance(value, dict) or not isinstance(value.get("history"), list) or not value["history"]:
        return False
    first = value["history"][0]
    return isinstance(first, list | tuple) and len(first) == 2 and all(isinstance(e, dict) for e in first)


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


def is_responses_item_list(values: list[Any]) -> bool:
    """An OpenAI Responses ``input`` list: typed items (function_call, ...) beside role messages."""
    typed = [v for v in values if isinstance(v, dict) and str_in(v.get("type"), RESPONSES_ITEM_TYPES)]
    if not typed:
        return False
    return all(
        isinstance(v, dict)
        and (v.get("type") in RESPONSES_ITEM_TYPES or ("role" in v and "tool_calls" not in v))
        for v in values
    ) and any(v.get("type") != "message" for v in typed) | any(
        isinstance(v.get("content"), list)
        and any(
            isinstance(p, dict) and str_in(p.get("type"), ("input_text", "output_text")) for p in v["content"]
        )
        for v in typed
    )


def is_cline_ui_messages(values: list[Any]) -> bool:
    return all(
        isinstance(v, dict) and "ts" in v and v.get("type") in ("say", "ask") for v in values[:_SNIFF_LINES]
    )


#: Prompt logs agents keep beside their transcripts (what the user typed, not what the model saw).
_PROMPT_LOGS = (
    (
        {"display", "timestamp"},
        "Claude Code's prompt history (~/.claude/history.jsonl): import the session files under "
        "~/.claude/projects/<project>/ instead (or ctxdesk import --from claude-code)",
    ),
    (
        {"session_id", "ts", "text"},
        "Codex's prompt history (~/.codex/history.jsonl): import the rollouts under ~/.codex/sessions/ instead "
        "(or ctxdesk import --from codex)",
    ),
    (
        {"sessionId", "messageId", "type", "message"},
        "Gemini CLI's prompt log (~/.gemini/tmp/<project>/logs.json): import chats/session-*.json(l) beside it "
        "instead (or ctxdesk import --from gemini)",
    ),
)


def _prompt_history(values: list[Any]) -> str | None:
    for keys, what in _PROMPT_LOGS:
        if values and all(isinstance(v, dict) and keys <= set(v) for v in values):
            return what
    return None
