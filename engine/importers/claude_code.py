"""Claude Code session JSONL: one line per content block, sub-agents inline as sidechains.

Lines of one API response repeat its ``message.id`` and ``usage``: their blocks merge into one
assistant message and the usage is kept once (the last line's, which has the final output
count). Consecutive tool-result lines merge into one user message, as the API received them.
The main thread is the ``parentUuid`` chain ending at the last main line; sidechain lines
(``isSidechain``) group by the root of their chain, and each group becomes a sub-agent
session of its own, linked to the main session and to the Task call that started it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import anthropic_content, anthropic_usage, build_message
from engine.importers.writer import is_result_message
from engine.messages import Message, ToolUseBlock

SYNTHETIC_MODEL = "<synthetic>"
TASK_TOOLS = ("Task", "Agent")
_KEPT_LINE_FIELDS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly")

Line = tuple[int, dict[str, Any]]


def parse_claude_code(lines: Sequence[Line], *, fallback_id: str) -> list[ParsedSession]:
    by_uuid = {obj["uuid"]: (n, obj) for n, obj in lines if isinstance(obj.get("uuid"), str)}
    message_lines = [(n, obj) for n, obj in lines if obj.get("type") in ("user", "assistant")]
    for n, obj in message_lines:
        if not isinstance(obj.get("message"), dict):
            raise SourceProblem(f"{obj['type']} line has no message object", line=n)
    skipped = Counter(
        str(obj.get("type")) for _, obj in lines if obj.get("type") not in ("user", "assistant")
    )
    main_lines = [(n, o) for n, o in message_lines if not o.get("isSidechain")]
    side_lines = [(n, o) for n, o in message_lines if o.get("isSidechain")]

    first = next((o for _, o in message_lines), {})
    main_id = str(first.get("sessionId") or fallback_id)
    notes = [f"skipped {count} {kind!r} line(s)" for kind, count in sorted(skipped.items())]
    boundaries = {
        o.get("uuid")
        for _, o in lines
        if o.get("type") == "system" and o.get("subtype") == "compact_boundary"
    }

    sessions: list[ParsedSession] = []
    main: ParsedSession | None = None
    if main_lines:
        chain, chain_notes = _main_chain(main_lines, by_uuid)
        main = _thread_session(main_id, chain, boundaries)
        main.notes.extend(notes + chain_notes)
        main.metadata.update(_session_meta(first, lines))
        sessions.append(main)

    task_calls = _task_calls(main) if main else {}
    for k, thread in enumerate(_side_threads(side_lines, by_uuid), start=1):
        sub = _thread_session(f"{main_id}:agent-{k}", thread, boundaries)
        sub.parent_key = main.key if main else None
        sub.metadata.update({"claude_session_id": main_id, "sidechain": True, "agent_index": k})
        root_text = sub.messages[0].message.text.strip() if sub.messages else ""
        task = task_calls.get(root_text)
        if task is not None:
            sub.metadata.update(
                parent_tool_use_id=task.id,
                subagent_type=task.input.get("subagent_type"),
                description=task.input.get("description"),
            )
        if not sub.model and main is not None:
            sub.model, sub.provider = main.model, main.provider
        if main is None:
            sub.notes.extend(notes)
        sessions.append(sub)
    if not sessions:
        raise SourceProblem("Claude Code file without any user or assistant message line")
    return sessions


def _main_chain(main_lines: list[Line], by_uuid: dict[str, Line]) -> tuple[list[Line], list[str]]:
    """The parentUuid chain ending at the last main line (abandoned branches left out).

    A chain broken by a parent that is not in the file (a trimmed or resumed log) falls back
    to every main line in file order rather than dropping the start.
    """
    main_uuids = {o.get("uuid") for _, o in main_lines}
    chain: list[Line] = []
    current: Line | None = main_lines[-1]
    visited: set[str] = set()
    while current is not None:
        n, obj = current
        uid = obj.get("uuid")
        if uid in visited:
            break
        visited.add(uid)
        if uid in main_uuids:
            chain.append(current)
        parent = obj.get("parentUuid") or obj.get("logicalParentUuid")
        if parent is None:
            current = None
        elif parent in by_uuid:
            current = by_uuid[parent]
        else:
            return main_lines, [
                f"parent {parent} of line {n} is not in the file: main thread taken in file order"
            ]
    chain.reverse()
    dropped = len(main_lines) - len(chain)
    return chain, ([f"left out {dropped} main line(s) on abandoned branches"] if dropped else [])


def _side_threads(side_lines: list[Line], by_uuid: dict[str, Line]) -> list[list[Line]]:
    """Sidechain lines grouped by the root of their parentUuid chain, in file order."""
    roots: dict[str, str] = {}

    def root_of(obj: dict[str, Any]) -> str:
        path: list[str] = []
        current = obj
        while True:
            uid = current.get("uuid")
            if uid in roots:
                root = roots[uid]
                break
            path.append(uid)
            parent = by_uuid.get(current.get("parentUuid") or "")
            if parent is None or not parent[1].get("isSidechain") or parent[1].get("uuid") in path:
                root = uid
                break
            current = parent[1]
        for uid in path:
            roots[uid] = root
        return root

    groups: dict[str, list[Line]] = {}
    for line in side_lines:
        groups.setdefault(root_of(line[1]), []).append(line)
    return list(groups.values())


def _thread_session(key: str, thread: list[Line], boundaries: set[Any]) -> ParsedSession:
    messages: list[ParsedMessage] = []
    by_message_id: dict[str, ParsedMessage] = {}
    models: Counter[str] = Counter()
    for n, obj in thread:
        raw = obj["message"]
        where = f"line {n}"
        try:
            content = anthropic_content(raw.get("content"), where=where)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=n) from exc
        if not content:
            continue
        starts_context = obj.get("parentUuid") in boundaries or obj.get("logicalParentUuid") in boundaries
        if obj["type"] == "assistant":
            message_id = raw.get("id")
            model = raw.get("model")
            usage = anthropic_usage(raw.get("usage"))
            existing = by_message_id.get(message_id) if message_id else None
            if existing is not None:
                existing.message = _extended(existing.message, _blocks(content), obj.get("uuid"))
                if existing.call is not None and usage is not None:
                    existing.call.usage = usage
                continue
            meta = _meta(
                obj,
                {"request_id": obj.get("requestId"), "model": model, "stop_reason": raw.get("stop_reason")},
            )
            message = _message("assistant", content, where, n, id=message_id or obj.get("uuid"), meta=meta)
            call = None
            if model != SYNTHETIC_MODEL:
                call = CallInfo(
                    usage=usage,
                    model=model,
                    details={"message_id": message_id, "request_id": obj.get("requestId")},
                )
                if model:
                    models[model] += 1
            pm = ParsedMessage(message, call=call, starts_context=starts_context)
            if message_id:
                by_message_id[message_id] = pm
            messages.append(pm)
            continue
        message = _message("user", content, where, n, id=obj.get("uuid"), meta=_meta(obj, {}))
        previous = messages[-1] if messages else None
        if (
            previous is not None
            and not starts_context
            and is_result_message(previous)
            and is_result_message(ParsedMessage(message))
        ):
            previous.message = _extended(previous.message, message.blocks, obj.get("uuid"))
            continue
        messages.append(ParsedMessage(message, starts_context=starts_context))
    model = models.most_common(1)[0][0] if models else None
    return ParsedSession(key=key, messages=messages, model=model, provider="anthropic" if model else None)


def _blocks(content: str | list[Any]) -> list[Any]:
    return Message(role="assistant", content=content).blocks


def _extended(message: Message, blocks: list[Any], uuid: Any) -> Message:
    """``message`` with more blocks from another line; the lines' uuids stay in meta."""
    meta = dict(message.meta)
    meta["uuids"] = [*meta.get("uuids", [meta.get("uuid")]), uuid]
    return Message(role=message.role, content=[*message.blocks, *blocks], id=message.id, meta=meta)


def _message(role: str, content: Any, where: str, line: int, **fields: Any) -> Message:
    try:
        return build_message(role, content, where=where, **fields)
    except SourceProblem as exc:
        raise SourceProblem(str(exc), line=line) from exc


def _meta(obj: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"uuid": obj.get("uuid"), "timestamp": obj.get("timestamp")}
    meta.update({k: obj[k] for k in _KEPT_LINE_FIELDS if k in obj})
    meta.update({k: v for k, v in extra.items() if v is not None})
    return {k: v for k, v in meta.items() if v is not None}


def _task_calls(main: ParsedSession) -> dict[str, ToolUseBlock]:
    """Task tool calls of the main thread by their prompt (a sub-agent's first message)."""
    calls: dict[str, ToolUseBlock] = {}
    for pm in main.messages:
        for block in pm.message.blocks:
            if isinstance(block, ToolUseBlock) and block.name in TASK_TOOLS:
                prompt = block.input.get("prompt")
                if isinstance(prompt, str):
                    calls.setdefault(prompt.strip(), block)
    return calls


def _session_meta(first: dict[str, Any], lines: Sequence[Line]) -> dict[str, Any]:
    summaries = [str(o["summary"]) for _, o in lines if o.get("type") == "summary" and o.get("summary")]
    meta = {
        "claude_session_id": first.get("sessionId"),
        "cwd": first.get("cwd"),
        "claude_code_version": first.get("version"),
        "git_branch": first.get("gitBranch") or None,
        "summaries": summaries or None,
    }
    return {k: v for k, v in meta.items() if v is not None}
