"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-*.json`` or ``.jsonl``).

The JSON form is one object ``{sessionId, projectHash, startTime, lastUpdated, messages}``.
The JSON Lines form starts with that header (without messages) and then appends: a message
object per line (``id`` + ``type``; a message written again under its id replaces the earlier
copy: the last one wins), and ``{"$set": {...}}`` lines updating header fields, where
``$set.messages`` replaces the whole list (a resumed run rewrites it). Messages: ``user``
(text or parts, incl. ``functionResponse``), ``gemini`` (content, ``thoughts``, ``toolCalls``
with their ``result`` parts, per-call ``tokens`` {input, output, cached, thoughts, tool, total}
and ``model``); ``info`` / ``error`` / ``warning`` lines are the CLI's own notices.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations, head_lines
from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import as_count, as_json_text, build_message, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

Line = tuple[int, Any]
MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
_NOTICE_TYPES = ("info", "error", "warning")
_CALL_FACTS = ("tokens", "model", "toolCalls", "thoughts")
_WORKSPACE = re.compile(
    r"Workspace Director(?:y|ies)[^\n]*\n\s*-\s*(/[^\n]+)|working directory is:?\s*(/[^\n]+)", re.I
)


def is_gemini_chat(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and "sessionId" in value
        and isinstance(value.get("messages"), list)
        and all(
            isinstance(m, dict) and isinstance(m.get("type"), str) and m["type"] in MESSAGE_TYPES
            for m in value["messages"][:20]
        )
    )


def is_gemini_line(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if "$set" in value and isinstance(value["$set"], dict):
        return True
    return "sessionId" in value and "projectHash" in value


def parse_gemini_document(value: dict[str, Any], *, key: str) -> list[ParsedSession]:
    return [_session(value, value["messages"], key=key)]


def parse_gemini_lines(lines: Sequence[Line], *, key: str) -> list[ParsedSession]:
    header: dict[str, Any] = {}
    order: list[str] = []
    by_id: dict[str, Any] = {}
    seen: dict[str, Any] = {}  # every message ever written, by id (a $set may drop what it knew)
    for number, value in lines:
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        if "$set" in value:
            update = value["$set"]
            if not isinstance(update, dict):
                raise SourceProblem("$set is not an object", line=number)
            if "messages" in update:
                if not isinstance(update["messages"], list):
                    raise SourceProblem("$set.messages is not a list", line=number)
                seen.update(by_id)
                order, by_id = [], {}
                for n, message in enumerate(update["messages"]):
                    _keep(message, order, by_id, fallback=f"{number}:{n}", earlier=seen)
            header.update({k: v for k, v in update.items() if k != "messages"})
        elif isinstance(value.get("type"), str) and value["type"] in MESSAGE_TYPES:
            _keep(value, order, by_id, fallback=str(number))
        elif "sessionId" in value:
            header.update({k: v for k, v in value.items() if k != "messages"})
        elif "$unset" not in value:
            raise SourceProblem(
                f"not a Gemini CLI chat line (keys {', '.join(sorted(value)[:6])})", line=number
            )
    return [_session(header, [by_id[i] for i in order], key=key)]


def _keep(
    message: Any,
    order: list[str],
    by_id: dict[str, Any],
    *,
    fallback: str,
    earlier: dict[str, Any] | None = None,
) -> None:
    if not isinstance(message, dict):
        raise SourceProblem(f"a message is {type(message).__name__}, not an object")
    message_id = str(message.get("id") or f"line-{fallback}")
    if message_id not in by_id:
        order.append(message_id)
    before = by_id.get(message_id) or (earlier or {}).get(message_id)
    if before is not None and before.get("type") == message.get("type"):
        # A message written again under its id: the last copy wins; a resumed run rewrites the
        # history without the per-call facts (tokens, model), which the earlier copy keeps.
        message = {**{k: before[k] for k in _CALL_FACTS if k in before}, **message}
    by_id[message_id] = message


def _session(header: dict[str, Any], raw_messages: list[Any], *, key: str) -> ParsedSession:
    session_id = header.get("sessionId")
    session = ParsedSession(key=str(session_id) if session_id else key, messages=[])
    answered: set[str] = set()
    notices = 0
    models: dict[str, int] = {}
    for index, raw in enumerate(raw_messages):
        where = f"messages[{index}]"
        if not isinstance(raw, dict):
            raise SourceProblem(f"{where}: message is {type(raw).__name__}, not an object")
        kind = raw.get("type")
        meta = {k: raw[k] for k in ("id", "timestamp") if raw.get(k)}
        if kind == "user":
            text_parts, results = _user_parts(raw.get("content"), where)
            results = [r for r in results if r.tool_use_id not in answered]
            answered.update(r.tool_use_id for r in results)
            blocks: list[Any] = [*results, *text_parts]
            if blocks:
                content: Any = text_parts[0].text if len(blocks) == 1 and text_parts else blocks
                session.messages.append(ParsedMessage(build_message("user", content, where=where, meta=meta)))
        elif kind == "gemini":
            model = raw.get("model") if isinstance(raw.get("model"), str) else None
            if model:
                models[model] = models.get(model, 0) + 1
            reply, results = _reply(raw, where)
            usage, thoughts = gemini_usage(raw.get("tokens"))
            call = CallInfo(usage=usage, model=model)
            if thoughts:
                call.details["reasoning_tokens"] = thoughts
            if raw.get("timestamp"):
                call.details["call_utc"] = raw["timestamp"]
            session.messages.append(
                ParsedMessage(build_message("assistant", reply, where=where, meta=meta), call=call)
            )
            if results:
                answered.update(r.tool_use_id for r in results)
                session.messages.append(
                    ParsedMessage(
                        build_message("user", results, where=where, meta={**meta, "from_tool_calls": True})
                    )
                )
        elif kind in _NOTICE_TYPES:
            notices += 1
        else:
            raise SourceProblem(f"{where}: unknown message type {kind!r}")
    if not session.messages:
        raise SourceProblem("a Gemini CLI chat with no user or model messages")
    session.model = max(models, key=lambda m: models[m]) if models else None
    session.provider = provider_of(session.model) or "gemini"
    session.unlogged_prefix_in = "system"  # the system instruction and tool declarations
    meta = {
        "gemini_session_id": session_id,
        "project_hash": header.get("projectHash"),
        "started_utc": header.get("startTime"),
        "last_updated_utc": header.get("lastUpdated"),
        "kind": header.get("kind"),
        "summary": header.get("summary"),
    }
    cwd = _workspace(session)
    if cwd:
        meta["cwd"] = cwd
    session.metadata.update({k: v for k, v in meta.items() if v})
    if notices:
        session.notes.append(f"skipped {notices} CLI notice message(s) (info/warning/error)")
    session.notes.append(
        "a Gemini CLI chat does not keep the system instruction and tool declarations it sent (their size "
        "is measured from the provider's count)"
    )
    return session


def _user_parts(content: Any, where: str) -> tuple[list[TextBlock], list[ToolResultBlock]]:
    if isinstance(content, str):
        return ([TextBlock(text=content)] if content else []), []
    if not isinstance(content, list):
        return ([TextBlock(text=as_json_text(content))] if content is not None else []), []
    texts: list[TextBlock] = []
    results: list[ToolResultBlock] = []
    for part in content:
        if isinstance(part, str):
            texts.append(TextBlock(text=part))
        elif isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
            results.append(_result(part["functionResponse"], where))
        elif isinstance(part, dict) and "text" in part:
            texts.append(TextBlock(text=str(part.get("text") or "")))
        elif part is not None:
            texts.append(TextBlock(text=as_json_text(part)))
    return texts, results


def _reply(raw: dict[str, Any], where: str) -> tuple[list[Any], list[ToolResultBlock]]:
    blocks: list[Any] = []
    content = raw.get("content")
    parts = content if isinstance(content, list) else []
    if not any(isinstance(p, dict) and p.get("thought") for p in parts):
        for thought in raw.get("thoughts") if isinstance(raw.get("thoughts"), list) else []:
            if isinstance(thought, dict):
                text = "\n".join(
                    s for s in (str(thought.get("subject") or ""), str(thought.get("description") or "")) if s
                )
                blocks.append(ThinkingBlock(thinking=text))
    if isinstance(content, str) and content:
        blocks.append(TextBlock(text=content))
    for j, part in enumerate(parts):  # a resumed run rewrites replies as API parts
        if not isinstance(part, dict):
            blocks.append(TextBlock(text=str(part)))
        elif isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            args = call.get("args")
            blocks.append(
                ToolUseBlock(id=str(call.get("id") or f"{raw.get('id')}-p{j}"), name=str(call.get("name") or ""),
                             input=args if isinstance(args, dict) else {})
            )  # fmt: skip
        elif part.get("thought") and isinstance(part.get("text"), str):
            blocks.append(ThinkingBlock(thinking=part["text"]))
        elif "text" in part:
            blocks.append(TextBlock(text=str(part.get("text") or "")))
    used = {b.id for b in blocks if isinstance(b, ToolUseBlock)}
    results: list[ToolResultBlock] = []
    for j, call in enumerate(raw.get("toolCalls") if isinstance(raw.get("toolCalls"), list) else []):
        if not isinstance(call, dict):
            raise SourceProblem(f"{where}: toolCalls[{j}] is {type(call).__name__}, not an object")
        call_id = str(call.get("id") or f"{raw.get('id')}-{j}")
        if call_id in used:
            for part in call.get("result") or []:
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    results.append(_result(part["functionResponse"], where, default_id=call_id))
            continue
        args = call.get("args")
        blocks.append(
            ToolUseBlock(
                id=call_id, name=str(call.get("name") or ""), input=args if isinstance(args, dict) else {}
            )
        )
        for part in call.get("result") or []:
            if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                result = _result(part["functionResponse"], where, default_id=call_id)
                results.append(result)
    return blocks, results


def _result(response: dict[str, Any], where: str, default_id: str | None = None) -> ToolResultBlock:
    call_id = response.get("id") or default_id
    if not call_id:
        raise SourceProblem(f"{where}: functionResponse without an id")
    body = response.get("response")
    if isinstance(body, dict) and set(body) <= {"output", "error"}:
        text = str(body.get("output") if "output" in body else body.get("error"))
        return ToolResultBlock(
            tool_use_id=str(call_id), content=text, is_error="error" in body and "output" not in body
        )
    return ToolResultBlock(tool_use_id=str(call_id), content=as_json_text(body))


def gemini_usage(raw: Any) -> tuple[ProviderUsage | None, int]:
    """(usage, thought tokens): ``input`` includes ``cached``; output = candidates + thoughts."""
    if not isinstance(raw, dict):
        return None, 0
    total_input = as_count(raw.get("input"))
    cached = min(total_input, as_count(raw.get("cached")))
    thoughts = as_count(raw.get("thoughts"))
    usage = ProviderUsage(
        input_tokens=total_input - cached,
        output_tokens=as_count(raw.get("output")) + thoughts,
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=0,
    )
    return usage, thoughts


def _workspace(session: ParsedSession) -> str | None:
    for pm in session.messages[:3]:
        match = _WORKSPACE.search(pm.message.text)
        if match:
            return (match.group(1) or match.group(2)).strip()
    return None


def sniff(doc: Document) -> bool:
    if doc.lines is not None:
        return any(is_gemini_line(v) for v in head_lines(doc))
    return is_gemini_chat(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    if doc.lines is not None:
        return parse_gemini_lines(doc.lines, key=key)
    return parse_gemini_document(doc.value, key=key)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else home
    return [base / ".gemini" / "tmp"]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/chats/session-*") if p.suffix in (".json", ".jsonl"))


FORMAT = ImportFormat(
    name="gemini",
    agent="Gemini CLI",
    sniff=sniff,
    parse=parse,
    files="`~/.gemini/tmp/<project>/chats/session-*.json(l)`",
    locations=Locations(roots=roots, files_under=files_under),
)
