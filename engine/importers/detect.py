"""Reading a transcript file and telling which format it is, from its content alone.

A file is JSON (one document) or JSON Lines (one object a line). A malformed line is
reported with its number; a well-formed file that matches no format is reported with what
it holds, so the user sees why it was refused.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.claude_web import is_claude_web_export
from engine.importers.codex import ITEM_TYPES as RESPONSES_ITEM_TYPES
from engine.importers.codex import is_codex_line
from engine.importers.gemini import is_gemini_chat, is_gemini_line
from engine.importers.model import SourceProblem

#: Claude Code line types (message lines and bookkeeping lines the importer skips).
CLAUDE_LINE_TYPES = frozenset({"user", "assistant", "summary", "system", "progress", "file-history-snapshot"})
_ANTHROPIC_ONLY_BLOCKS = frozenset({"tool_use", "tool_result", "thinking", "redacted_thinking", "document"})
_SNIFF_LINES = 20
#: A JSON escape of half a UTF-16 surrogate pair (valid JSON, not storable text).
_LONE_SURROGATE = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


#: Any surrogate escape: one quick scan before the slow one (whose lookbehind is tried at every
#: character: twice the cost of parsing the JSON).
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _has_lone_surrogate(text: str) -> bool:
    return _SURROGATE_ESCAPE.search(text) is not None and _LONE_SURROGATE.search(text) is not None


#: Text formats recognised by how they start (before any JSON parsing).
AIDER_HEAD = "# aider chat started at"
#: Files that belong to a transcript without being one: what they are, what to import instead.
COMPANION_FILES = {
    "ui_messages.json": "a Cline / Roo Code task's UI log (per-request metrics, not the conversation): "
    "import api_conversation_history.json from the same task folder instead",
    "task_metadata.json": "a Cline / Roo Code task's metadata (files in context, model usage): "
    "import api_conversation_history.json from the same task folder instead",
    ".aider.input.history": "Aider's prompt history (what you typed, not the conversation): "
    "import .aider.chat.history.md instead",
}


@dataclass(frozen=True)
class Document:
    """A parsed file: ``lines`` holds (line number, value) for JSON Lines, ``value`` for JSON,
    ``text`` the raw text of a text format (Aider's Markdown); ``size`` its bytes."""

    path: Path
    value: Any = None
    lines: tuple[tuple[int, Any], ...] | None = None
    text: str | None = None
    size: int = 0


@dataclass
class _Consumed:
    size: int  # bytes read through the last complete line
    check: bytes  # the bytes just before ``size``: the file was appended to only if they are the same
    physical_lines: int
    lines: list[tuple[int, Any]]


class LineCache:
    """The decoded lines of JSON Lines files an agent is writing, so that reading one again
    decodes only what was appended (when the bytes already read are unchanged). Files last
    modified more than ``recent_s`` ago are not kept (they are not being written)."""

    CHECK_BYTES = 512

    def __init__(self, recent_s: float = 3_600.0) -> None:
        self.recent_s = recent_s
        self.files: dict[str, _Consumed] = {}
        self.appended_reads = 0

    def read(self, path: Path, *, live: bool) -> Document | None:
        cached = self.files.get(str(path))
        if cached is None:
            return None
        try:
            with path.open("rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < cached.size:
                    return None
                fh.seek(cached.size - len(cached.check))
                if fh.read(len(cached.check)) != cached.check:
                    return None  # rewritten, not appended to: read it whole
                new = fh.read()
        except OSError:
            return None
        try:
            text = new.decode("utf-8")
        except UnicodeDecodeError:
            return None
        if _has_lone_surrogate(text):
            return None  # rewritten on reading: read it whole
        added, consumed_chars, physical = _decode_lines(
            text, first_number=cached.physical_lines + 1, live=live
        )
        cached.lines.extend(added)
        self._advance(cached, path, cached.size + len(text[:consumed_chars].encode("utf-8")), physical)
        self.appended_reads += 1
        return Document(path, lines=tuple(cached.lines), size=size)

    def keep(self, path: Path, raw: bytes, lines: tuple[tuple[int, Any], ...]) -> None:
        try:
            recent = time.time() - path.stat().st_mtime < self.recent_s
        except OSError:
            recent = False
        if not recent:
            return  # not being written: nothing to gain
        end = len(raw) if raw.endswith((b"\n", b"\r")) else raw.rfind(b"\n") + 1
        physical = raw[:end].count(b"\n")
        numbered = [(n, v) for n, v in lines if n <= physical]
        entry = _Consumed(size=0, check=b"", physical_lines=0, lines=numbered)
        self.files[str(path)] = entry
        self._advance(entry, path, end, physical, raw=raw)

    def _advance(
        self, entry: _Consumed, path: Path, size: int, physical: int, *, raw: bytes | None = None
    ) -> None:
        if raw is None:
            with path.open("rb") as fh:
                fh.seek(max(0, size - self.CHECK_BYTES))
                entry.check = fh.read(min(size, self.CHECK_BYTES))
        else:
            entry.check = raw[max(0, size - self.CHECK_BYTES) : size]
        entry.size = size
        entry.physical_lines = max(entry.physical_lines, physical)


def _decode_lines(text: str, *, first_number: int, live: bool) -> tuple[list[tuple[int, Any]], int, int]:
    """(lines, characters consumed, last physical line number consumed) of appended text."""
    out: list[tuple[int, Any]] = []
    consumed = 0
    number = first_number - 1
    for line in text.splitlines(keepends=True):
        complete = line.endswith(("\n", "\r"))
        if not complete and live:
            break  # still being written
        number += 1
        consumed += len(line)
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SourceProblem(f"malformed JSON line ({exc.msg}, column {exc.colno})", line=number) from exc
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        out.append((number, value))
    return out, consumed, number


def read_document(path: Path, *, live: bool = False, cache: LineCache | None = None) -> Document:
    """The file parsed. ``live``: the file may be being written, so an unfinished last line (no
    newline after it, not valid JSON) is left for the next read instead of being an error.
    ``cache``: a JSON Lines file read before through it decodes only its appended lines."""
    companion = COMPANION_FILES.get(path.name)
    if companion:
        raise SourceProblem(f"not a transcript: {companion}")
    if cache is not None:
        appended = cache.read(path, live=live)
        if appended is not None:
            return appended
    try:
        _sniff_head(path)
        raw = path.read_bytes()
    except OSError as exc:
        raise SourceProblem(f"cannot read file ({exc.strerror or exc})") from exc
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
    if not text.strip():
        raise SourceProblem("empty file")
    rewritten = False
    if _has_lone_surrogate(text):
        text = _LONE_SURROGATE.sub(r"\\ufffd", text)  # SQLite cannot store half a character
        rewritten = True
    if text.lstrip().startswith(AIDER_HEAD):
        return Document(path, text=text, size=len(raw))
    try:
        return Document(path, value=json.loads(text), size=len(raw))
    except json.JSONDecodeError as whole_error:
        lines = _read_lines(text, whole_error, live=live)
        if cache is not None and not rewritten:
            cache.keep(path, raw, lines)
        return Document(path, lines=lines, size=len(raw))
    except RecursionError as exc:
        raise SourceProblem("JSON nested too deeply to read") from exc


#: How much of a large file is looked at before reading it whole (a 1 GB log is refused from this).
_HEAD_BYTES = 64 * 1024


def _sniff_head(path: Path) -> None:
    """Refuse a large file that cannot be a transcript from its first bytes alone: not UTF-8, or
    text that starts as neither JSON, JSON Lines nor an Aider chat log. Small files are left to the
    whole read (same messages as before)."""
    with path.open("rb") as fh:
        head = fh.read(_HEAD_BYTES + 1)
    if len(head) <= _HEAD_BYTES:
        return
    try:
        text = head.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # not a character cut at the end of the head
            raise SourceProblem(f"not UTF-8 text (byte {exc.start})") from exc
        text = head[: exc.start].decode("utf-8-sig")
    stripped = text.lstrip()
    if not stripped or stripped[0] in "{[" or stripped.startswith(AIDER_HEAD):
        return
    number = text[: len(text) - len(stripped)].count("\n") + 1
    first, newline, _ = stripped.partition("\n")
    try:
        json.loads(first) if newline else None
    except json.JSONDecodeError as exc:
        raise SourceProblem(f"not JSON or JSON Lines ({exc.msg})", line=number) from exc
    raise SourceProblem("not JSON or JSON Lines (no JSON object or array at its start)", line=number)


def _read_lines(
    text: str, whole_error: json.JSONDecodeError, *, live: bool = False
) -> tuple[tuple[int, Any], ...]:
    lines: list[tuple[int, Any]] = []
    split = text.splitlines()
    # A file being written may end in a line not finished yet: left for the next import.
    unfinished = len(split) if live and split and not text.endswith(("\n", "\r")) else None
    for number, line in enumerate(split, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            if number == unfinished and lines:
                break
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
