"""GitHub Copilot CLI sessions (``~/.copilot/session-state/<session id>/events.jsonl``).

One JSON object a line, ``{type, data, id, timestamp, parentId}``: ``session.start`` (version,
model, working folder), ``system.message`` (the system prompt as sent), ``user.message`` (what the
user typed, and ``transformedContent``: the text sent, with the ``<current_datetime>`` Copilot
adds), ``session.usage_record`` (the provider's count for the next reply: ``inputTokens`` the whole
prompt, cache reads and writes, output, reasoning), ``assistant.message`` (the reply's text and
``toolRequests``), ``tool.execution_complete`` (``result.content``: what the model is sent back),
``session.resume`` when a later run continues the session. Each assistant message is one model
call; its tool results are sent in the order it asked for them. A sub-agent (the ``task`` tool) runs
in the same file: its turns carry ``parentToolCallId`` (its prompt and system message share its
``interactionId``) and it becomes a child session. The tool definitions are not kept: their size is
measured from the provider's count.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import SNIFF_LINES, ImportFormat, Locations
from engine.importers.formats.copilot.runs import chosen_model, keep_run_totals, results_by_completion
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, provider_of
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock

PRODUCER = "copilot-agent"
#: Event types that change nothing the model is sent (turn marks, hooks, telemetry, the UI's own).
_BOOKKEEPING_PREFIXES = (
    "session.",
    "assistant.turn_",
    "hook.",
    "tool.execution_start",
    "tool.user_requested",
)


def is_copilot_line(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "session.start"
        and isinstance(value.get("data"), dict)
        and value["data"].get("producer") == PRODUCER
    )


def copilot_usage(raw: Any) -> tuple[ProviderUsage | None, int]:
    """(usage, reasoning tokens) of a ``session.usage_record``'s ``usage``: ``inputTokens`` is the
    whole prompt, cache reads and writes included."""
    if not isinstance(raw, dict) or raw.get("inputTokens") is None:
        return None, 0
    usage = ProviderUsage.from_prompt_total(
        _count(raw.get("inputTokens")),
        _count(raw.get("outputTokens")),
        cache_read=_count(raw.get("cacheReadTokens")),
        cache_write=_count(raw.get("cacheWriteTokens")),
    )
    return usage, _count(raw.get("reasoningTokens"))


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


MAIN = ""  # the agent key of the session's own agent (sub-agents are keyed by their task's tool call)


def agent_of_events(events: list[tuple[int, dict[str, Any]]]) -> list[str]:
    """Whose each event is: the main agent, or the sub-agent started by a tool call. A sub-agent's
    turns carry ``parentToolCallId``; its prompt and system message only share its
    ``interactionId``."""
    interactions: dict[str, str] = {}
    for _, event in events:
        data = event.get("data") or {}
        if data.get("parentToolCallId") and data.get("interactionId"):
            interactions[str(data["interactionId"])] = str(data["parentToolCallId"])
    owners = []
    for _, event in events:
        data = event.get("data") or {}
        parent = data.get("parentToolCallId") or interactions.get(str(data.get("interactionId")))
        owners.append(str(parent) if parent else MAIN)
    return owners


def parse_events(events: list[tuple[int, dict[str, Any]]], *, key: str) -> list[ParsedSession]:
    """The session, then one child session per sub-agent (its calls are in the same file)."""
    start = next((e["data"] for _, e in events if e.get("type") == "session.start"), {})
    selected = chosen_model(start, events)
    by_completion = results_by_completion(start.get("copilotVersion"))
    session_key = str(start.get("sessionId") or key)
    results: dict[str, ToolResultBlock] = {}
    started: dict[str, dict[str, Any]] = {}
    for _, event in events:
        data = event.get("data") or {}
        if event.get("type") == "tool.execution_complete":
            results[str(data.get("toolCallId"))] = _result(data)
        elif event.get("type") == "subagent.started":
            started[str(data.get("toolCallId"))] = data
    owners = agent_of_events(events)
    sessions: dict[str, ParsedSession] = {}
    usage: dict[str, tuple[ProviderUsage | None, int]] = {}  # by kind of agent: Copilot numbers neither
    limits: dict[str, int | None] = {}  # Copilot's own prompt limit for the call (maxPromptTokens)
    models: dict[str, dict[str, int]] = {}
    compacting: dict[str, tuple[int, dict[str, Any]]] = {}  # where each agent's compaction began
    for (line, event), owner in zip(events, owners, strict=True):
        kind, data = event.get("type"), event.get("data") or {}
        if kind not in (
            "system.message", "user.message", "session.usage_record", "assistant.message",
            "session.compaction_start", "session.compaction_complete", "session.error",
        ):  # fmt: skip
            continue
        if owner not in sessions:
            sessions[owner] = ParsedSession(
                key=session_key if owner == MAIN else f"{session_key}/{owner}",
                messages=[],
                parent_key=None if owner == MAIN else session_key,
                shared_key=bool(start.get("sessionId")),  # Copilot's own ids: the same session from any file
            )
        session = sessions[owner]
        where = f"line {line}"
        if kind == "system.message" and session.system_prompt is None:
            session.system_prompt = str(data.get("content") or "")
        elif kind == "user.message":
            text = data.get("transformedContent") or data.get("content") or ""
            meta = {"id": data.get("messageId"), "typed": data.get("content")}
            session.messages.append(ParsedMessage(build_message("user", str(text), where=where, meta=meta)))
            if session.title is None and isinstance(data.get("content"), str):
                session.title = data["content"][:120]  # what the user typed, without Copilot's date
        elif kind == "session.error":
            failed = failed_call(data, model=selected, when=event.get("timestamp"))
            if failed is not None and session.messages:
                session.messages[-1].pending_calls.append(failed)
        elif kind == "session.compaction_start":
            compacting[owner] = (len(session.messages), data)
        elif kind == "session.compaction_complete":
            begun = compacting.pop(owner, (len(session.messages), {}))
            apply_compaction(session, data, begun, model=selected, when=event.get("timestamp"))
        elif kind == "session.usage_record":
            raw = data.get("usage") if isinstance(data.get("usage"), dict) else {}
            usage[str(raw.get("interactionType"))] = copilot_usage(raw)
            limits[str(raw.get("interactionType"))] = _count(raw.get("maxPromptTokens")) or None
        elif kind == "assistant.message":
            model = data.get("model") if isinstance(data.get("model"), str) else None
            if model:
                models.setdefault(owner, {})[model] = models.setdefault(owner, {}).get(model, 0) + 1
            slot = "conversation-agent" if owner == MAIN else "conversation-subagent"
            paid = usage.pop(slot, None)
            limit = limits.pop(slot, None)
            session.messages.extend(
                _reply(
                    data,
                    paid,
                    results,
                    model=model,
                    limit=limit,
                    where=where,
                    when=event.get("timestamp"),
                    by_completion=by_completion,
                )
            )
    if MAIN not in sessions or not sessions[MAIN].messages:
        raise SourceProblem("a Copilot CLI session with no messages")
    counted_calls = any(e.get("type") == "session.usage_record" for _, e in events)
    if not counted_calls:
        keep_run_totals(sessions[MAIN], events)
    for owner, session in sessions.items():
        counted = models.get(owner) or {}
        session.model = max(counted, key=lambda m: counted[m]) if counted else selected
        session.provider = provider_of(session.model)
        session.unlogged_prefix_in = "tools"  # the tool definitions are not in the events
        _share_agent_limit(session)
        session.metadata.update(_metadata(start, started.get(owner)))
        session.notes.append(
            "Copilot CLI does not keep the tool definitions it sent ("
            + (
                "their size is measured from the provider's count)"
                if counted_calls or session.metadata.get("provider_run_totals")
                else "not measured: no count of the provider's)"
            )
        )
    return [s for s in sessions.values() if s.messages]


def failed_call(data: dict[str, Any], *, model: str | None, when: Any) -> CallInfo | None:
    """A ``session.error`` of a model call (``errorType`` ``query``: the provider refused it, or
    the stream broke): a failed call, no usage. Other errors (a tool's, the CLI's) are no call."""
    if data.get("errorType") != "query":
        return None
    status = data.get("statusCode") if isinstance(data.get("statusCode"), int) else None
    message = str(data.get("message") or "")
    call = CallInfo(model=model)
    call.details["failure"] = failure_details(
        classify_failure(status, None, message), status=status, message=message
    )
    if when:
        call.details["call_utc"] = when
    return call


SUMMARY_INTRO = (
    "Some of the conversation history has been summarized to free up context.\n\n"
    "You were originally given instructions from a user over one or more turns. Here were the user messages:\n"
)


def compacted_history_text(typed: list[str], summary: str) -> str:
    """The user message Copilot's history starts with after a compaction: what the user typed
    (one ``<user_message>`` block each) and the summary."""
    blocks = "\n".join(f"<user_message>\n{text}\n</user_message>" for text in typed)
    return f"{SUMMARY_INTRO}{blocks}\n\nHere is a summary of the prior context:\n<summary>\n{summary}\n</summary>\n"


def apply_compaction(
    session: ParsedSession,
    data: dict[str, Any],
    begun: tuple[int, dict[str, Any]],
    *,
    model: str | None,
    when: Any,
) -> None:
    """A compaction Copilot ran in the background while the agent went on: its summary call (the
    history then, and a request for a summary) is a call; applied, the history restarts at a user
    message holding what the user typed and the summary, followed by the messages that came after the
    history it summarised (``preCompactionMessagesLength`` counts the wire's messages, system first)."""
    started_at, start = begun
    spent = data.get("compactionTokensUsed") if isinstance(data.get("compactionTokensUsed"), dict) else None
    if spent and session.messages:
        usage = ProviderUsage.from_prompt_total(
            _count(spent.get("inputTokens")),
            _count(spent.get("outputTokens")),
            cache_read=_count(spent.get("cacheReadTokens")),
            cache_write=_count(spent.get("cacheWriteTokens")),
        )
        # the limit Copilot compacted against holds for its summary call too (the agent's own)
        limit = _count(data.get("tokenLimit")) or None
        call = CallInfo(usage=usage, model=spent.get("model") or model, limit_tokens=limit)
        call.details.update(compaction_call=True, compaction_outcome=data.get("outcome"))
        if _count(spent.get("requestCount")) > 1:
            call.details["request_count"] = spent["requestCount"]
        session.messages[max(0, min(started_at, len(session.messages)) - 1)].pending_calls.append(call)
    if not (data.get("success") and data.get("outcome") == "applied"):
        return
    cut = _wire_cut(session, _count(data.get("preCompactionMessagesLength")))
    typed = [
        str(m.message.meta["typed"])
        for m in session.messages[:cut]
        if m.message.role == "user" and isinstance(m.message.meta.get("typed"), str)
    ]
    text = compacted_history_text(typed, str(data.get("summaryContent") or ""))
    compaction = {
        "trigger": "compact_threshold"
        if data.get("trigger") == "threshold"
        else str(data.get("trigger") or ""),
        "trigger_kind": "auto" if data.get("trigger") == "threshold" else "manual",
        "by": "agent" if data.get("trigger") == "threshold" else "user",
        "reason": "Copilot CLI compacted: the prompt passed its limit",
        "before_tokens": _count(start.get("currentTokens")) or None,
        "threshold_tokens": _count(data.get("tokenLimit")) or None,
        "summary_tokens_estimate": _count(data.get("postCompactionTokens")) or None,
    }
    if data.get("summaryContent"):  # the summary the history goes on from
        compaction["summary"] = str(data["summaryContent"])
    if when:
        compaction["when_utc"] = when
    kept = [ParsedMessage(m.message.model_copy()) for m in session.messages[cut:]]
    summary = build_message("user", text, where="compaction", meta={"compaction_summary": True})
    session.messages.append(ParsedMessage(summary, starts_context=True, compaction=compaction))
    session.messages.extend(kept)


def _wire_cut(session: ParsedSession, replaced: int) -> int:
    """How many parsed messages the first ``replaced`` messages of the request were (the system
    prompt one, each tool result one)."""
    count = 1 if session.system_prompt is not None else 0
    for index, parsed in enumerate(session.messages):
        if count >= replaced:
            return index
        results = len(parsed.message.tool_result_ids)
        count += results or 1
    return len(session.messages)


def _metadata(start: dict[str, Any], sub: dict[str, Any] | None) -> dict[str, Any]:
    context = start.get("context") if isinstance(start.get("context"), dict) else {}
    meta = {
        "cwd": context.get("cwd"),
        "copilot_session_id": start.get("sessionId"),
        "copilot_version": start.get("copilotVersion"),
        "started_utc": start.get("startTime"),
        "reasoning_effort": start.get("reasoningEffort"),
    }
    if sub:
        meta.update(
            agent=sub.get("agentName"),
            agent_title=sub.get("agentDisplayName"),
            task=sub.get("agentDescription"),
        )
    return {k: v for k, v in meta.items() if v}


def _share_agent_limit(session: ParsedSession) -> None:
    """A call Copilot kept no usage record for (a refused one) had the same limit as the others:
    the one its usage records name, when they name one."""
    calls = [c for m in session.messages for c in ([m.call] if m.call else []) + m.pending_calls]
    named = {c.limit_tokens for c in calls if c.limit_tokens is not None}
    if len(named) == 1:
        (limit,) = named
        for call in calls:
            if call.limit_tokens is None:
                call.limit_tokens = limit


def _reply(
    data: dict[str, Any],
    usage: tuple[ProviderUsage | None, int] | None,
    results: dict[str, ToolResultBlock],
    *,
    model: str | None,
    limit: int | None,
    where: str,
    when: Any,
    by_completion: bool = False,
) -> list[ParsedMessage]:
    blocks: list[Any] = []
    if data.get("content"):
        blocks.append(TextBlock(text=str(data["content"])))
    uses = [r for r in data.get("toolRequests") or [] if isinstance(r, dict)]
    for request in uses:
        arguments = request.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except json.JSONDecodeError:
                arguments = {"input": arguments}
        tool_input = arguments if isinstance(arguments, dict) else {}
        blocks.append(
            ToolUseBlock(id=str(request.get("toolCallId")), name=str(request.get("name")), input=tool_input)
        )
    call = CallInfo(usage=usage[0] if usage else None, model=model, limit_tokens=limit)
    if usage and usage[1]:
        call.details["reasoning_tokens"] = usage[1]
    if when:
        call.details["call_utc"] = when
    meta = {"id": data.get("messageId")} if data.get("messageId") else {}
    parsed = [ParsedMessage(build_message("assistant", blocks or "", where=where, meta=meta), call=call)]
    answered = [results[str(r.get("toolCallId"))] for r in uses if str(r.get("toolCallId")) in results]
    if by_completion:  # ``results`` holds them in the order the tools completed
        order = {use_id: n for n, use_id in enumerate(results)}
        answered.sort(key=lambda block: order[block.tool_use_id])
    if answered:
        parsed.append(
            ParsedMessage(build_message("user", answered, where=where, meta={"from_tool_calls": True}))
        )
    return parsed


def _result(data: dict[str, Any]) -> ToolResultBlock:
    result = data.get("result") if isinstance(data.get("result"), dict) else {}
    error = data.get("error") if isinstance(data.get("error"), dict) else {}
    text = result.get("content")
    if text is None:
        text = error.get("message") or ""
    return ToolResultBlock(
        tool_use_id=str(data.get("toolCallId")), content=str(text), is_error=not data.get("success", True)
    )


def sniff(doc: Document) -> bool:
    return doc.lines is not None and any(is_copilot_line(v) for _, v in doc.lines[:SNIFF_LINES])


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_events([(n, v) for n, v in doc.lines or () if isinstance(v, dict)], key=key)


def _roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["COPILOT_HOME"]) if env.get("COPILOT_HOME") else home / ".copilot"
    return [base / "session-state"]


def _sessions(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/events.jsonl") if p.is_file())


FORMAT = ImportFormat(
    name="copilot",
    agent="GitHub Copilot CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines"}),
    files="`~/.copilot/session-state/<session>/events.jsonl`",
    locations=Locations(roots=_roots, files_under=_sessions),
)
