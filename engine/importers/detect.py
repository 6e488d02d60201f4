"""Reading a transcript file and telling which format it is, from its content alone.

A file is JSON (one document) or JSON Lines (one object a line). A malformed line is
reported with its number; a well-formed file that matches no format is reported with what
it holds, so the user sees why it was refused.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.model import SourceProblem

#: Claude Code line types (message lines and bookkeeping lines the importer skips).
CLAUDE_LINE_TYPES = frozenset({"user", "assistant", "summary", "system", "progress", "file-history-snapshot"})
_ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})
_SNIFF_LINES = 20


@dataclass(frozen=True)
class Document:
    """A parsed file: ``lines`` holds (line number, value) for JSON Lines, ``value`` for JSON."""

    path: Path
    value: Any = None
    lines: tuple[tuple[int, Any], ...] | None = None


def read_document(path: Path) -> Document:
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceProblem(f"cannot read file ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
    if not text.strip():
        raise SourceProblem("empty file")
    try:
        return Document(path, value=json.loads(text))
    except json.JSONDecodeError as whole_error:
        return Document(path, lines=_read_lines(text, whole_error))


def _read_lines(text: str, whole_error: json.JSONDecodeError) -> tuple[tuple[int, Any], ...]:
    lines: list[tuple[int, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if not lines:
                raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
            raise SourceProblem(f"malformed JSON line ({exc.msg}, column {exc.colno})", line=number) from exc
        if not isinstance(value, dict):
            if not lines:
                raise SourceProblem(
                    f"not JSON or JSON Lines ({whole_error.msg} at line {whole_error.lineno})",
                    line=whole_error.lineno,
                )
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        lines.append((number, value))
    return tuple(lines)


def classify(doc: Document) -> str:
    """The format name of a parsed document; raises SourceProblem when it is none of them."""
    if doc.lines is not None:
        values = [v for _, v in doc.lines]
        if any(is_claude_code_line(v) for v in values[:_SNIFF_LINES]):
            return "claude-code"
        if is_openhands_record(values[0]):
            return "openhands"
        return _classify_value(values, where="JSON Lines")
    return _classify_value(doc.value, where="JSON")


def _classify_value(value: Any, *, where: str) -> str:
    if isinstance(value, dict):
        if is_claude_code_line(value):
            return "claude-code"
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
        if all("role" in v for v in value):
            return "anthropic" if any(_has_anthropic_blocks(v) for v in value) else "openai"
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
        and value.get("type") in CLAUDE_LINE_TYPES
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
