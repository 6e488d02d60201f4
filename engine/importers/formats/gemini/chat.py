"""A replayed Gemini CLI chat (:mod:`.history`) as a session: its messages in canonical form.

Messages: ``user`` (text or parts, incl. ``functionResponse``), ``gemini`` (content,
``thoughts``, ``toolCalls`` with their ``result`` parts, per-call ``tokens`` {input, output,
cached, thoughts, tool, total} and ``model``); ``info`` / ``error`` / ``warning`` lines are the
CLI's own notices (skipped). A reply with ``tokens`` is a call; a rewritten copy never is. A
tool result is sent once per context where it stands: as the user turn that carries it, else
after the reply whose ``toolCalls`` hold it (the older JSON form).
"""

from __future__ import annotations

import re
from typing import Any

from engine.events import ProviderUsage
from engine.importers.formats.gemini.history import MESSAGE_TYPES, SNAPSHOT, ChatLog, Entry
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, Sent, SourceProblem
from engine.importers.parsing.readers import as_count, as_json_text, build_message, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

_NOTICE_TYPES = ("info", "error", "warning")
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


def session_of(log: ChatLog, *, key: str, settings: dict[str, Any] | None = None) -> ParsedSession:
    """The session a replayed chat describes: each entry's messages, a call per reply the CLI
    counted (``tokens``), a new context at each rewrite, a compaction at each compression."""
    header = log.header
    session_id = header.get("sessionId")
    session = ParsedSession(key=str(session_id) if session_id else key, messages=[])
    session.shared_key = bool(session_id)  # Gemini CLI's own id: the same session from any file
    answered = _answered_by_user_turns(log.entries, lines=log.lines)
    notices = 0
    models: dict[str, int] = {}
    starts: Entry | None = None  # a context start whose entry made no message (a notice)
    last_call: CallInfo | None = None
    compactions: list[dict[str, Any]] = []
    # (message index, run) of each message a resumed history added among earlier ones: the
    # calls of earlier runs did not send it
    added: list[tuple[int, int]] = []
    for index, entry in enumerate(log.entries):
        raw, where = entry.raw, f"messages[{index}]"
        kind = raw.get("type")
        starts = entry if entry.starts else starts
        meta = {k: raw[k] for k in ("id", "timestamp") if raw.get(k)}
        if entry.copy:
            meta["rewritten"] = True
        produced: list[ParsedMessage] = []
        if kind == "user":
            text_parts, results = _user_parts(raw.get("content"), where)
            blocks: list[Any] = [*results, *text_parts]
            if blocks:
                content: Any = text_parts[0].text if len(blocks) == 1 and text_parts else blocks
                produced.append(ParsedMessage(build_message("user", content, where=where, meta=meta)))
        elif kind == "gemini":
            model = raw.get("model") if isinstance(raw.get("model"), str) else None
            reply, results = _reply(raw, where)
            results = [r for r in results if r.tool_use_id not in answered]
            call = None
            usage, thoughts = gemini_usage(raw.get("tokens"))
            if not entry.copy and usage is not None:  # a reply the CLI counted: one streamed call
                if model:
                    models[model] = models.get(model, 0) + 1
                call = CallInfo(usage=usage, model=model)
                at = len(session.messages)
                unsent = frozenset(i for i, run in added if run > entry.run)
                if unsent:
                    call.sent = Sent(head=(), start=0, end=at, excluded=unsent)
                if thoughts:
                    call.details["reasoning_tokens"] = thoughts
                if raw.get("timestamp"):
                    call.details["call_utc"] = raw["timestamp"]
                last_call = call
            produced.append(
                ParsedMessage(build_message("assistant", reply, where=where, meta=meta), call=call)
            )
            if results:
                produced.append(
                    ParsedMessage(
                        build_message("user", results, where=where, meta={**meta, "from_tool_calls": True})
                    )
                )
        elif kind in _NOTICE_TYPES:
            notices += 1
        else:
            raise SourceProblem(f"{where}: unknown message type {kind!r}")
        if produced and starts is not None:
            first = produced[0]
            first.starts_context = True
            # later calls send the history from here (a compression's or a resumed rewrite's)
            first.message = first.message.model_copy(
                update={"meta": {**first.message.meta, "context_start": starts.starts}}
            )
            if starts.starts == "compression":
                first.compaction = _compression(log.entries, index, last_call, settings)
                compactions.append(first.compaction)
            starts = None
        if entry.copy and entry.run:  # (a new context's copies are of run 0: history.start_context)
            added.extend((len(session.messages) + k, entry.run) for k in range(len(produced)))
        session.messages.extend(produced)
    if not session.messages:
        raise SourceProblem("a Gemini CLI chat with no user or model messages")
    _after_tokens(session, compactions)
    session.model = max(models, key=lambda m: models[m]) if models else None
    session.provider = provider_of(session.model) or "gemini"
    session.unlogged_prefix_in = "system"  # the system instruction and tool declarations
    # A Gemini model's output limit is apart from its input window: Gemini CLI lets a prompt use the
    # whole window (its tokenLimit), so no reply reserve comes off it.
    session.output_reserve = 0
    meta = {
        "gemini_session_id": session_id,
        "project_hash": header.get("projectHash"),
        "started_utc": header.get("startTime"),
        "last_updated_utc": header.get("lastUpdated"),
        "kind": header.get("kind"),
        "summary": header.get("summary"),
    }
    cwd = _workspace(session) or _first_directory(header)
    if cwd:
        meta["cwd"] = cwd
    session.metadata.update({k: v for k, v in meta.items() if v})
    resent = sum(1 for e in log.entries if e.copy and e.run)
    if resent:
        session.notes.append(
            f"{resent} tool result message(s) a resumed run sent a second time (Gemini CLI 0.61): stored "
            "where they stand, not sent by the calls before the resume"
        )
    rewrites = sum(1 for e in log.entries if e.starts == "rewrite")
    if rewrites:
        session.notes.append(
            f"{rewrites} rewritten history(ies) (a resumed run sends its history again, each tool result "
            "twice in Gemini CLI 0.61): imported as a new context of what the later calls sent"
        )
    if notices:
        session.notes.append(f"skipped {notices} CLI notice message(s) (info/warning/error)")
    session.notes.append(
        "a Gemini CLI chat does not keep the system instruction and tool declarations it sent (their size "
        "is measured from the provider's count)"
    )
    return session


def agent_calls_of(log: ChatLog) -> dict[str, tuple[str, str, str]]:
    """{sub-agent id: (the call that started it, the agent's name, the prompt it was given)}: a
    reply's ``toolCalls`` entry names the ``agentId`` it ran."""
    out: dict[str, tuple[str, str, str]] = {}
    for entry in log.entries:
        calls = entry.raw.get("toolCalls") if not entry.copy else None
        for call in calls if isinstance(calls, list) else []:
            if isinstance(call, dict) and isinstance(call.get("agentId"), str) and call.get("id"):
                args = call.get("args") if isinstance(call.get("args"), dict) else {}
                name = str(args.get("agent_name") or call.get("name") or "")
                out[call["agentId"]] = (str(call["id"]), name, str(args.get("prompt") or ""))
    return out


def _answered_by_user_turns(entries: list[Entry], *, lines: bool) -> set[str]:
    """The tool call ids a user turn answers: a reply's ``toolCalls`` results are then sent as
    that turn (the JSON Lines form writes one), never again after the reply; the older JSON form
    keeps them only in ``toolCalls``."""
    answered: set[str] = set()
    for entry in entries:
        if entry.raw.get("type") == "user" and isinstance(entry.raw.get("content"), list):
            for part in entry.raw["content"]:
                if isinstance(part, dict) and isinstance(part.get("functionResponse"), dict):
                    answered.add(str(part["functionResponse"].get("id") or ""))
    return answered if lines else set()


def _compression(
    entries: list[Entry], index: int, last_call: CallInfo | None, settings: dict[str, Any] | None
) -> dict[str, Any]:
    """A chat compression's compaction details: the prompt count it was checked on (the last
    call's), the snapshot, and the agent's ``compressionThreshold`` when its settings say."""
    snapshot = next(
        (
            _plain_text(e.raw)
            for e in entries[index:]
            if e.copy and e.raw.get("type") == "user" and SNAPSHOT in _plain_text(e.raw)
        ),
        None,
    )
    details: dict[str, Any] = {
        "source": "gemini",
        "by": "agent",
        "trigger": "compact_threshold",
        "trigger_kind": "auto",
        "summary": snapshot,
        # the <state_snapshot> call and its verification are side calls the chat does not keep
        "summarizer_calls_not_in_file": 2,
    }
    if last_call is not None and last_call.usage is not None:
        details["before_tokens"] = last_call.usage.prompt_tokens
    threshold = (settings or {}).get("compressionThreshold")
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool) and 0 < threshold <= 1:
        details["agent_setting"] = {"compressionThreshold": threshold}
    return details


def _after_tokens(session: ParsedSession, compactions: list[dict[str, Any]]) -> None:
    """A compression's tokens after: the prompt count of the first call that sent its history."""
    pending = None
    for pm in session.messages:
        if pm.compaction is not None and pm.compaction in compactions:
            pending = pm.compaction
        if pending is not None and pm.call is not None and pm.call.usage is not None:
            pending["after_tokens"] = pm.call.usage.prompt_tokens
            pending["after_tokens_from"] = "the next call's prompt count"
            pending = None


def _plain_text(raw: dict[str, Any]) -> str:
    content = raw.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict) and "text" in p)
    return ""


def _first_directory(header: dict[str, Any]) -> str | None:
    directories = header.get("directories")
    if isinstance(directories, list) and directories and isinstance(directories[0], str):
        return directories[0]
    return None


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
