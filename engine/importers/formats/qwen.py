"""Qwen Code chat recordings (``~/.qwen/projects/<project>/chats/<session id>.jsonl``).

Qwen Code (a fork of Gemini CLI) writes one JSON object a line: ``user`` (what the user typed),
``assistant`` (the reply's parts: ``thought`` text, text, ``functionCall`` with its id; its
``usageMetadata``: the provider's count, ``promptTokenCount`` the whole prompt), ``tool_result``
(``functionResponse`` parts: what the model is sent back), and ``system`` bookkeeping (telemetry,
attribution snapshots). Each assistant line is one model call. Qwen Code sends neither its system
prompt and tools nor the ``<system-reminder>`` texts it puts before a session's first prompt (the
skills, the environment, the deferred tools) and before a resumed prompt (the date): the file does
not keep them, so their size is measured from the provider's count at the first call. It does not
send earlier thoughts back.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.events import ProviderUsage
from engine.importers.documents import Document, read_document
from engine.importers.formats import SNIFF_LINES, Beside, ImportFormat, Locations
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import as_json_text, build_message, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

_LINE_TYPES = frozenset({"user", "assistant", "tool_result", "system"})


def is_qwen_line(value: Any) -> bool:
    message = value.get("message") if isinstance(value, dict) else None
    return (
        isinstance(value, dict)
        and value.get("type") in _LINE_TYPES
        and "sessionId" in value
        and isinstance(message, dict)
        and isinstance(message.get("parts"), list)
    )


def qwen_usage(raw: Any) -> tuple[ProviderUsage | None, int]:
    """(usage, thought tokens) of a ``usageMetadata``: ``promptTokenCount`` is the whole prompt,
    cached tokens included; ``candidatesTokenCount`` the whole completion."""
    if not isinstance(raw, dict) or raw.get("promptTokenCount") is None:
        return None, 0
    usage = ProviderUsage.from_prompt_total(
        _count(raw.get("promptTokenCount")),
        _count(raw.get("candidatesTokenCount")),
        cache_read=_count(raw.get("cachedContentTokenCount")),
    )
    return usage, _count(raw.get("thoughtsTokenCount"))


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def parse_lines(lines: list[tuple[int, dict[str, Any]]], *, key: str) -> ParsedSession:
    first = next((v for _, v in lines if v.get("sessionId")), {})
    session_id = str(first.get("sessionId") or key)
    agent = first.get("agentId") if first.get("isSidechain") else None
    session = ParsedSession(
        key=f"{session_id}/{agent}" if agent else session_id,
        messages=[],
        parent_key=session_id if agent else None,
        shared_key=bool(first.get("sessionId")),  # Qwen Code's own ids: the same session from any file
    )
    models: dict[str, int] = {}
    paid: CallInfo | None = None  # a sub-agent's file writes a call's usage and its reply on two lines
    answered: list[dict[str, Any]] = []  # the main agent's calls since its last reply line (telemetry)
    compressed = False  # the next call is the first after a compression
    for number, line in lines:
        kind = line.get("type")
        parts = [p for p in (line.get("message") or {}).get("parts") or [] if isinstance(p, dict)]
        where = f"line {number}"
        meta = {"id": line["uuid"]} if line.get("uuid") else {}
        if kind == "user":
            texts = [TextBlock(text=str(p["text"])) for p in parts if "text" in p and not p.get("thought")]
            if texts:
                content: Any = texts[0].text if len(texts) == 1 else texts
                session.messages.append(ParsedMessage(build_message("user", content, where=where, meta=meta)))
        elif kind == "assistant":
            answered.clear()
            model = line.get("model") if isinstance(line.get("model"), str) else None
            if model:
                models[model] = models.get(model, 0) + 1
            usage, thoughts = qwen_usage(line.get("usageMetadata"))
            if usage is None and paid is not None:
                call, paid = paid, None
            else:
                call = CallInfo(
                    usage=usage, model=model, context_window=_count(line.get("contextWindowSize")) or None
                )
                if compressed:  # sent without the <system-reminder> texts later calls carry again
                    call.details["own_framing"] = True
                    compressed = False
                if thoughts:
                    call.details["reasoning_tokens"] = thoughts
                if line.get("timestamp"):
                    call.details["call_utc"] = line["timestamp"]
            if not parts and usage is not None:
                paid = call  # the reply follows on the next assistant line
                continue
            reply = build_message("assistant", _reply_blocks(parts) or "", where=where, meta=meta)
            session.messages.append(ParsedMessage(reply, call=call))
        elif kind == "system" and line.get("subtype") == "ui_telemetry":
            event = ((line.get("systemPayload") or {}).get("uiEvent")) or {}
            call = telemetry_call(event)
            if call is not None and session.messages:
                session.messages[-1].pending_calls.append(call)
            elif event.get("event.name") == "qwen-code.api_response" and not event.get("subagent_name"):
                answered.append(event)  # the main agent's: its reply's line follows, or a compression
        elif kind == "system" and line.get("subtype") == "chat_compression":
            payload = line.get("systemPayload") or {}
            summaries = [summary_call(e) for e in answered]
            if session.messages:
                session.messages[-1].pending_calls.extend(summaries)
            session.messages.extend(compressed_history(payload, where))
            answered.clear()
            compressed = True
        elif kind == "tool_result":
            results = [
                _result(p["functionResponse"]) for p in parts if isinstance(p.get("functionResponse"), dict)
            ]
            if results:
                message = build_message("user", results, where=where, meta={**meta, "from_tool_calls": True})
                session.messages.append(ParsedMessage(message))
    if paid is not None:  # a call whose reply was never written (the run stopped)
        session.messages.append(ParsedMessage(build_message("assistant", "", where="end"), call=paid))
    if not session.messages:
        raise SourceProblem("a Qwen Code chat with no user or model messages")
    session.model = max(models, key=lambda m: models[m]) if models else None
    session.provider = provider_of(session.model)
    windows = [_count(v.get("contextWindowSize")) for _, v in lines if v.get("contextWindowSize")]
    session.context_window = max(windows) if windows else None  # the window Qwen Code works with
    session.unlogged_prefix_in = "system"  # system prompt, tools, and the reminders before the first prompt
    meta = {
        "agent": first.get("agentName") if agent else None,
        "cwd": first.get("cwd"),
        "qwen_session_id": first.get("sessionId"),
        "qwen_version": first.get("version"),
        "git_branch": first.get("gitBranch"),
        "started_utc": first.get("timestamp"),
    }
    session.metadata.update({k: v for k, v in meta.items() if v})
    session.notes.append(
        "Qwen Code does not keep its system prompt, its tools, or the <system-reminder> texts it sends before "
        "a first or resumed prompt (their size is measured from the provider's count)"
    )
    return session


def summary_call(event: dict[str, Any]) -> CallInfo:
    """A call of a compression (its usage from telemetry; it sent the history and the compression
    prompt, which the chat does not record)."""
    usage = ProviderUsage.from_prompt_total(
        _count(event.get("input_token_count")),
        _count(event.get("output_token_count")),
        cache_read=_count(event.get("cached_content_token_count")),
    )
    call = CallInfo(usage=usage, model=event.get("model") if isinstance(event.get("model"), str) else None)
    call.details.update(compaction_call=True, reply=event.get("response_text"))
    if event.get("event.timestamp"):
        call.details["call_utc"] = event["event.timestamp"]
    return call


def compressed_history(payload: dict[str, Any], where: str) -> list[ParsedMessage]:
    """The history a chat compression left (``compressedHistory``: the summary as a user turn, the
    model's acknowledgement, the turns it kept): later calls send it, not what came before."""
    info = payload.get("info") if isinstance(payload.get("info"), dict) else {}
    compaction = {
        "trigger": "compact_threshold" if info.get("triggerReason") == "token_limit" else "manual",
        "trigger_kind": "auto" if info.get("triggerReason") == "token_limit" else "manual",
        "by": "agent" if info.get("triggerReason") == "token_limit" else "user",
        "reason": "Qwen Code compressed the chat: the prompt neared its window",
        "before_tokens": _count(info.get("originalTokenCount")) or None,
        "after_tokens_estimate": _count(info.get("newTokenCount")) or None,
    }
    parsed: list[ParsedMessage] = []
    for content in payload.get("compressedHistory") or []:
        if not isinstance(content, dict):
            continue
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        results = [
            _result(p["functionResponse"]) for p in parts if isinstance(p.get("functionResponse"), dict)
        ]
        if content.get("role") == "model":
            message = build_message("assistant", _reply_blocks(parts) or "", where=where)
        elif results:
            message = build_message("user", results, where=where, meta={"from_tool_calls": True})
        else:
            texts = [TextBlock(text=str(p["text"])) for p in parts if "text" in p]
            message = build_message("user", texts or "", where=where)
        first = not parsed
        if first and message.role == "user" and message.text.strip():
            compaction["summary"] = message.text.strip()  # the summary turn the chat goes on from
        parsed.append(ParsedMessage(message, starts_context=first, compaction=compaction if first else None))
    return parsed


#: Qwen Code's own background agents (the memory extractor): their calls appear only as telemetry.
MANAGED_AGENT_PREFIX = "managed-"


def telemetry_call(event: dict[str, Any]) -> CallInfo | None:
    """A call the chat shows only in its telemetry: a failed one (``qwen-code.api_error``: status,
    message, no usage) or one of Qwen Code's managed background agents (``qwen-code.api_response``
    with a ``managed-`` sub-agent: its usage; what it was sent is not recorded). Other telemetry
    (the main agent's calls, tools) repeats what the chat's lines hold."""
    name = event.get("event.name")
    model = event.get("model") if isinstance(event.get("model"), str) else None
    if name == "qwen-code.api_error":
        status = event.get("status_code") if isinstance(event.get("status_code"), int) else None
        message = str(event.get("error_message") or "")
        call = CallInfo(model=model)
        cause = classify_failure(status, str(event.get("error_type") or "") or None, message)
        call.details["failure"] = failure_details(
            cause, status=status, message=message, error_type=event.get("error_type")
        )
    elif name == "qwen-code.api_response" and str(event.get("subagent_name", "")).startswith(
        MANAGED_AGENT_PREFIX
    ):
        usage = ProviderUsage.from_prompt_total(
            _count(event.get("input_token_count")),
            _count(event.get("output_token_count")),
            cache_read=_count(event.get("cached_content_token_count")),
        )
        call = CallInfo(usage=usage, model=model)
        call.details.update(side_call=event["subagent_name"], reply=event.get("response_text"))
    else:
        return None
    if event.get("event.timestamp"):
        call.details["call_utc"] = event["event.timestamp"]
    return call


def _reply_blocks(parts: list[dict[str, Any]]) -> list[Any]:
    blocks: list[Any] = []
    for part in parts:
        if isinstance(part.get("functionCall"), dict):
            call = part["functionCall"]
            args = call.get("args") if isinstance(call.get("args"), dict) else {}
            blocks.append(ToolUseBlock(id=str(call.get("id")), name=str(call.get("name")), input=args))
        elif part.get("thought") and "text" in part:
            blocks.append(ThinkingBlock(thinking=str(part["text"])))
        elif "text" in part:
            blocks.append(TextBlock(text=str(part["text"])))
    return blocks


def _result(response: dict[str, Any]) -> ToolResultBlock:
    body = response.get("response")
    if isinstance(body, dict) and ("output" in body or "error" in body):
        text = body.get("output") if "output" in body else body.get("error")
        return ToolResultBlock(
            tool_use_id=str(response.get("id")),
            content=str(text or ""),
            is_error="error" in body and "output" not in body,
        )
    return ToolResultBlock(tool_use_id=str(response.get("id")), content=as_json_text(body))


def sniff(doc: Document) -> bool:
    return doc.lines is not None and any(is_qwen_line(v) for _, v in doc.lines[:SNIFF_LINES])


def parse(doc: Document, key: str) -> list[ParsedSession]:
    """A chat and the sub-agents it started (``<project>/subagents/<session>/agent-*.jsonl``); a
    sub-agent's file alone is its own session, a child of the chat either way."""
    chat = parse_lines([(n, v) for n, v in doc.lines or () if isinstance(v, dict)], key=key)
    sessions = [chat]
    for path in subagent_files(doc.path):
        lines = read_document(path).lines or ()
        sub = parse_lines([(n, v) for n, v in lines if isinstance(v, dict)], key=path.stem)
        if sub.model is None:  # a sub-agent's lines name no model: it runs on its chat's
            sub.model, sub.provider, sub.context_window = chat.model, chat.provider, chat.context_window
        sessions.append(sub)
    return sessions


def subagent_files(chat: Path) -> list[Path]:
    """The sub-agent transcripts Qwen Code keeps for the chat ``chat``."""
    if chat.parent.name != "chats":
        return []
    return sorted((chat.parent.parent / "subagents" / chat.stem).glob("*.jsonl"))


def companions(chat: Path) -> str | None:
    """The sub-agent transcripts beside a chat (names, sizes, times), so a re-import sees them grow."""
    files = subagent_files(Path(chat))
    if not files:
        return None
    stamp = "|".join(f"{f.name}:{f.stat().st_size}:{f.stat().st_mtime_ns}" for f in files)
    return hashlib.sha256(stamp.encode()).hexdigest()


def accompanies(path: Path) -> bool:
    """A sub-agent's transcript: imported with its chat, not on its own in a folder import."""
    return (
        path.parent.parent.name == "subagents"
        and (path.parent.parent.parent / "chats" / f"{path.parent.name}.jsonl").is_file()
    )


def _roots(env: Mapping[str, str], home: Path) -> list[Path]:
    return [home / ".qwen" / "projects"]


def _chats(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/chats/*.jsonl") if p.is_file())


FORMAT = ImportFormat(
    name="qwen",
    agent="Qwen Code",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines"}),
    files="`~/.qwen/projects/<project>/chats/<session>.jsonl`",
    locations=Locations(roots=_roots, files_under=_chats),
    companions=Beside("chats/*", companions),
    accompanies=accompanies,
)
