"""An OpenCode session's history rebuilt the way OpenCode sends it (its
``MessageV2.toModelMessages``), one model call per assistant step; Kilo CLI's additions to what
it sends (``<environment_details>``) included."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.events import ProviderUsage
from engine.importers.formats.opencode.database import Rows
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

#: What OpenCode sends in place of a tool output it compacted, and for a call that never finished.
CLEARED_OUTPUT = "[Old tool result content cleared]"
INTERRUPTED_OUTPUT = "[Tool execution was interrupted]"
#: The user text OpenCode sends for a compaction marker and for a command the user ran as a tool.
COMPACTION_PROMPT = "What did we do so far?"
SUBTASK_PROMPT = "The following tool was executed by the user"
ENVIRONMENT_TAG = "<environment_details>"


def environment_details(context: dict[str, Any], info: dict[str, Any]) -> str:
    """Kilo CLI's ``<environment_details>`` for a user message (its ``injectEditorContext``): the
    message's time to the second, the folders, and the editor's files when an editor sent them."""
    created = (info.get("time") or {}).get("created")
    when = datetime.fromtimestamp(created / 1000, tz=UTC) if isinstance(created, int | float) else None
    lines = [f"Message time: {when.strftime('%Y-%m-%dT%H:%M:%SZ') if when else ''}"]
    if context.get("directory"):
        lines.append(f"Working directory: {context['directory']}")
    if context.get("worktree"):
        lines.append(f"Workspace root folder: {context['worktree']}")
    if context.get("activeFile"):
        lines.append(f"Active file: {context['activeFile']}")
    for key, title in (("visibleFiles", "Visible files:"), ("openTabs", "Open tabs:")):
        if context.get(key):
            lines += [title, *(f"  {name}" for name in context[key])]
    return "\n".join(["", "", ENVIRONMENT_TAG, *lines, "</environment_details>"])


def _kilo_folders(row: dict[str, Any]) -> dict[str, Any]:
    """The session's directory and its worktree (the directory, up one level per segment of the
    session's ``path``), as Kilo CLI derives them."""
    directory = str(row.get("directory") or "")
    ups = [".." for segment in str(row.get("path") or "").split("/") if segment]
    return {
        "directory": directory,
        "worktree": os.path.normpath(os.path.join(directory, *ups)) if ups else directory,
    }


def parse_rows(rows: Rows, app: str = "opencode") -> list[ParsedSession]:
    """One session per OpenCode session that has messages; sub-agent sessions name their parent."""
    parts: dict[str, list[dict[str, Any]]] = {}
    for message_id, data in rows.parts:
        parts.setdefault(message_id, []).append(data)
    by_session: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for message_id, session_id, data in rows.messages:
        by_session.setdefault(session_id, []).append((message_id, data))
    removed_summaries: dict[str, list[dict[str, Any]]] = {}
    for info in rows.removed:
        if info.get("role") == "assistant" and info.get("summary"):
            removed_summaries.setdefault(str(info.get("parentID")), []).append(info)
    sessions = []
    for row in rows.sessions:
        messages = by_session.get(row["id"], [])
        history = [({**info, "id": mid}, parts.get(mid, [])) for mid, info in messages]
        session = _session(row, history, app, removed_summaries)
        if session.messages:
            sessions.append(session)
    return sessions


def _session(
    row: dict[str, Any],
    history: list[tuple[dict[str, Any], list[dict[str, Any]]]],
    app: str,
    removed_summaries: dict[str, list[dict[str, Any]]] | None = None,
) -> ParsedSession:
    session = ParsedSession(
        key=str(row["id"]),
        shared_key=True,  # OpenCode's own session ids: the same session from a copy of the database
        messages=[],
        parent_key=row.get("parent_id") or None,
        title=row.get("title") or None,
    )
    models: dict[str, int] = {}
    summarised: set[str] = set()  # user messages a finished compaction summary answered
    for info in (info for info, _ in history):
        if (
            info.get("role") == "assistant"
            and info.get("summary")
            and info.get("finish")
            and not info.get("error")
        ):
            summarised.add(str(info.get("parentID")))
    for index, (info, parts) in enumerate(history):
        where = f"session {row['id']} message {index}"
        role = info.get("role")
        if role == "user":
            message = _user_message(parts, where, info, _kilo_folders(row) if app == "kilo" else None)
            if message is not None:
                marker = next((p for p in parts if p.get("type") == "compaction"), None)
                starts = str(info.get("id")) in summarised  # OpenCode's filterCompacted restarts here
                compaction = (
                    compaction_details(marker, _agent(app)) if starts and marker is not None else None
                )
                if (
                    compaction is not None
                    and marker is not None
                    and marker.get("overflow")
                    and session.messages
                ):
                    # the provider refused the call before it as too long; OpenCode drops that reply
                    refused = overflowed_call(str(info.get("id")), info.get("model"))
                    session.messages[-1].pending_calls.append(refused)
                    compaction["after_failed_request_ref"] = refused.details["request_ref"]
                session.messages.append(ParsedMessage(message, starts_context=starts, compaction=compaction))
        elif role == "assistant":
            model = info.get("modelID")
            if isinstance(model, str):
                models[model] = models.get(model, 0) + 1
            failed = _dropped_failed_call(info, parts)
            if failed is not None:  # OpenCode sends nothing of it again: a call, not a message
                if session.messages:
                    session.messages[-1].pending_calls.append(failed)
                continue
            replies = _assistant_messages(info, parts, where)
            calls = (
                (removed_summaries or {}).get(str(info.get("parentID")), []) if info.get("summary") else []
            )
            if calls and replies and replies[-1].call is not None and replies[-1].call.usage is None:
                # Kilo's chunked summary: the kept message records no count; each of its calls is a
                # message it removed (the chunks', then the merge's), the last one this reply's
                *chunks, merge = calls
                if session.messages:
                    session.messages[-1].pending_calls.extend(_summary_call(c) for c in chunks)
                replies[-1].call.usage = opencode_usage(merge.get("tokens"))
            session.messages.extend(replies)
        else:
            raise SourceProblem(f"{where}: unknown role {role!r}")
    session.model = max(models, key=lambda m: models[m]) if models else None
    provider = next((i.get("providerID") for i, _ in history if i.get("providerID")), None)
    session.provider = provider_of(session.model) or provider
    session.unlogged_prefix_in = "system"  # OpenCode keeps neither its system prompt nor its tools
    meta = {
        "cwd": row.get("directory"),
        "title": row.get("title"),
        f"{app}_session_id": row.get("id"),
        f"{app}_version": row.get("version"),
        "agent": row.get("agent"),
        "started_utc": _utc(row.get("time_created")),
        "last_updated_utc": _utc(row.get("time_updated")),
    }
    session.metadata.update({k: v for k, v in meta.items() if v})
    session.notes.append(
        f"{_agent(app)} does not keep the system prompt and tool definitions it sent (their size is measured "
        "from the provider's count)"
    )
    return session


def _summary_call(info: dict[str, Any]) -> CallInfo:
    """A compaction summary call whose message the agent removed: its usage and time."""
    call = CallInfo(usage=opencode_usage(info.get("tokens")), model=info.get("modelID"))
    call.details["compaction_call"] = True
    created = (info.get("time") or {}).get("created")
    if created:
        call.details["call_utc"] = _utc(created)
    return call


def overflowed_call(compaction_id: str, model: Any) -> CallInfo:
    """The call a provider refused as too long, which an ``overflow`` compaction answers: OpenCode
    keeps no message of it, only this mark. A failed call (prompt too long), no usage."""
    model_id = model.get("modelID") if isinstance(model, dict) else None
    call = CallInfo(model=model_id if isinstance(model_id, str) else None)
    call.details["failure"] = failure_details(
        "prompt_too_long",
        message="the provider refused the prompt as too long (OpenCode's overflow compaction)",
    )
    call.details["request_ref"] = f"{compaction_id}:overflow"
    return call


def compaction_details(marker: dict[str, Any], agent: str = "OpenCode") -> dict[str, Any]:
    """The compaction event of an OpenCode ``compaction`` part: ``auto`` (the context passed the
    model's usable window), ``overflow`` (after the provider refused a prompt too long), else the
    user's ``/compact``. The summary call that follows sent the earlier history rendered as text."""
    auto, overflow = bool(marker.get("auto")), bool(marker.get("overflow"))
    kind = "reactive" if overflow else "auto" if auto else "manual"
    return {
        "trigger": "manual" if kind == "manual" else "compact_threshold",
        "trigger_kind": kind,
        "by": "agent" if auto or overflow else "user",
        "reason": {
            "auto": f"{agent} compacted: the context passed the model's usable window",
            "reactive": f"{agent} compacted after the provider refused a prompt too long",
            "manual": "the user compacted the session",
        }[kind],
    }


def _user_message(
    parts: list[dict[str, Any]],
    where: str,
    info: dict[str, Any],
    editor_context: dict[str, Any] | None = None,
) -> Any:
    """The user message as sent. ``editor_context`` (Kilo CLI): the ``<environment_details>`` text
    Kilo appends at send time to every user message that does not carry one already."""
    blocks: list[Any] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text" and not part.get("ignored"):
            blocks.append(TextBlock(text=str(part.get("text") or "")))
        elif kind == "file" and part.get("mime") not in ("text/plain", "application/x-directory"):
            # A binary attachment: sent as a file part, kept here by name (its bytes are not stored).
            blocks.append(TextBlock(text=f"[Attached {part.get('mime')}: {part.get('filename') or 'file'}]"))
        elif kind == "compaction":
            blocks.append(TextBlock(text=COMPACTION_PROMPT))
        elif kind == "subtask":
            blocks.append(TextBlock(text=SUBTASK_PROMPT))
    if not blocks:
        return None
    if editor_context is not None and not any(
        p.get("type") == "text"
        and p.get("synthetic")
        and str(p.get("text", "")).lstrip().startswith(ENVIRONMENT_TAG)
        for p in parts
    ):
        blocks.append(
            TextBlock(text=environment_details({**editor_context, **(info.get("editorContext") or {})}, info))
        )
    meta = {"id": info.get("id")} if info.get("id") else {}
    content: Any = blocks[0].text if len(blocks) == 1 else blocks
    return build_message("user", content, where=where, meta=meta)


def _assistant_messages(info: dict[str, Any], parts: list[dict[str, Any]], where: str) -> list[ParsedMessage]:
    """The model calls of one assistant message: one per step (``step-start`` ... ``step-finish``),
    each an assistant message followed by its tool results."""
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    error = info.get("error")
    parsed: list[ParsedMessage] = []
    for number, step in enumerate(steps):
        finish = next((p for p in step if p.get("type") == "step-finish"), None)
        blocks, results = _step_blocks(step)
        if not blocks:
            continue
        usage_source = finish.get("tokens") if finish else (info.get("tokens") if len(steps) == 1 else None)
        call = CallInfo(usage=opencode_usage(usage_source), model=info.get("modelID"))
        reasoning = (usage_source or {}).get("reasoning") if isinstance(usage_source, dict) else None
        if reasoning:
            call.details["reasoning_tokens"] = reasoning
        created = (info.get("time") or {}).get("created")
        if created:
            call.details["call_utc"] = _utc(created)
        if info.get("summary"):
            call.details["compaction_call"] = True
        failure = failure_of_error(error) if error and number == len(steps) - 1 else None
        if failure is not None:
            call.details["failure"] = failure
        meta = {"id": info.get("id"), "step": number} if info.get("id") else {}
        parsed.append(ParsedMessage(build_message("assistant", blocks, where=where, meta=meta), call=call))
        if results:
            parsed.append(
                ParsedMessage(build_message("user", results, where=where, meta={"from_tool_calls": True}))
            )
    return parsed


def _dropped_failed_call(info: dict[str, Any], parts: list[dict[str, Any]]) -> CallInfo | None:
    """A reply that failed and that OpenCode leaves out of later requests (all but an interrupted
    one that had produced something): its call, failed, with no usage (the provider billed none)."""
    error = info.get("error")
    if not error:
        return None
    aborted = isinstance(error, dict) and error.get("name") == "MessageAbortedError"
    if aborted and any(p.get("type") not in ("step-start", "reasoning") for p in parts):
        return None
    call = CallInfo(model=info.get("modelID"))
    failure = failure_of_error(error)
    if failure is not None:
        call.details["failure"] = failure
    created = (info.get("time") or {}).get("created")
    if created:
        call.details["call_utc"] = _utc(created)
    return call


def failure_of_error(error: Any) -> dict[str, Any] | None:
    """``details["failure"]`` from an OpenCode message ``error`` (None for a reply cut at its
    output limit: the call itself succeeded)."""
    if not isinstance(error, dict) or error.get("name") == "MessageOutputLengthError":
        return None
    data = error.get("data") if isinstance(error.get("data"), dict) else {}
    message = str(data.get("message") or error.get("name") or "")
    status = data.get("statusCode") if isinstance(data.get("statusCode"), int) else None
    error_type = _error_type(data.get("responseBody"))
    if error.get("name") == "MessageAbortedError":
        cause = classify_failure(None, interrupted=True)
    elif error.get("name") == "ContextOverflowError":
        cause = "prompt_too_long"
    else:
        cause = classify_failure(status, error_type, message)
    return failure_details(cause, status=status, message=message, error_type=error_type)


def _error_type(body: Any) -> str | None:
    try:
        parsed = json.loads(body) if isinstance(body, str) else None
    except json.JSONDecodeError:
        return None
    inner = parsed.get("error") if isinstance(parsed, dict) else None
    return str(inner.get("type")) if isinstance(inner, dict) and inner.get("type") else None


def _step_blocks(step: list[dict[str, Any]]) -> tuple[list[Any], list[ToolResultBlock]]:
    blocks: list[Any] = []
    results: list[ToolResultBlock] = []
    for part in step:
        kind = part.get("type")
        if kind == "text":
            blocks.append(TextBlock(text=str(part.get("text") or "")))
        elif kind == "reasoning":
            blocks.append(ThinkingBlock(thinking=str(part.get("text") or "")))
        elif kind == "tool":
            state = part.get("state") or {}
            call_id = str(part.get("callID") or part.get("id"))
            tool_input = state.get("input") if isinstance(state.get("input"), dict) else {}
            blocks.append(ToolUseBlock(id=call_id, name=str(part.get("tool")), input=tool_input))
            results.append(_tool_result(call_id, state))
    return blocks, results


def _tool_result(call_id: str, state: dict[str, Any]) -> ToolResultBlock:
    status = state.get("status")
    if status == "completed":
        compacted = (state.get("time") or {}).get("compacted")
        text = CLEARED_OUTPUT if compacted else str(state.get("output") or "")
        return ToolResultBlock(tool_use_id=call_id, content=text)
    if status == "error":
        return ToolResultBlock(tool_use_id=call_id, content=str(state.get("error") or ""), is_error=True)
    return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED_OUTPUT, is_error=True)


def opencode_usage(tokens: Any) -> ProviderUsage | None:
    """OpenCode's ``tokens``: ``input`` is the uncached input, ``output`` excludes ``reasoning``
    (the provider's completion tokens are their sum), ``cache.read`` / ``cache.write``. All zeros
    is no count (a failed reply; Kilo CLI's chunked compaction summary records none)."""
    if not isinstance(tokens, dict):
        return None
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    counts = [
        tokens.get("input"),
        tokens.get("output"),
        tokens.get("reasoning"),
        cache.get("read"),
        cache.get("write"),
    ]
    if not any(_count(c) for c in counts):
        return None
    return ProviderUsage(
        input_tokens=_count(tokens.get("input")),
        output_tokens=_count(tokens.get("output")) + _count(tokens.get("reasoning")),
        cache_read_input_tokens=_count(cache.get("read")),
        cache_creation_input_tokens=_count(cache.get("write")),
    )


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def _utc(millis: Any) -> str | None:
    if not isinstance(millis, int | float) or millis <= 0:
        return None
    return datetime.fromtimestamp(millis / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


def _agent(app: str) -> str:
    """The agent's name for people: OpenCode, or its fork Kilo CLI."""
    return "Kilo CLI" if app == "kilo" else "OpenCode"
