"""Claude Code sessions: the main thread, its sub-agents, compactions and offloaded outputs.

``parse_claude_code(lines, fallback_id=...)`` reads one session file; ``parse_claude_code_bundle``
(engine.importers.claude_code_bundle) adds the files Claude Code keeps beside it:
``<session>/subagents/agent-<id>.jsonl`` (+ ``.meta.json``), legacy ``agent-*.jsonl`` and
``<session>/tool-results/*.txt``. The thread is a tree (claude_code_thread); each call's request
is rebuilt with its component breakdown (claude_code_requests). Each sub-agent becomes a
session linked to its parent and to the Agent/Task tool_use that started it; legacy inline
sidechains (``isSidechain`` lines in the main file) are grouped by the root of their chain.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.importers.claude_code_replay import (
    REPLAY_LINE_TYPES,
    ReplayedRequest,
    exact_components,
    replay_requests,
)
from engine.importers.claude_code_requests import parse_version, rebuild_calls, thinking_rule
from engine.importers.claude_code_thread import Line, Thread, build_thread, live_lines
from engine.importers.model import CallInfo, ParsedSession, SourceProblem
from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, is_user_input
from engine.model_table import ModelTable
from engine.store.payloads import RequestRecord
from engine.tokens import Tokenizer, get_tokenizer

TASK_TOOLS = ("Task", "Agent")
#: Tokenizer when a thread names no model (the writer's fallback too).
FALLBACK_TOKENIZER = "chars/4"
TITLE_CHARS = 80
_NOT_A_PROMPT = ("<command-", "<local-command-", "Caveat:", "<task-notification>", "[Request interrupted")
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
_PERSISTED = re.compile(r"tool-results/([^\s<>\"']+)")


@dataclass
class SubagentFile:
    """A sub-agent transcript beside the session: its id, lines and .meta.json (if any)."""

    agent_id: str
    lines: Sequence[Line]
    meta: dict[str, Any] = field(default_factory=dict)
    path: str | None = None


@dataclass
class ToolResultFile:
    """A large tool output Claude Code saved under ``<session>/tool-results/``."""

    name: str
    content: bytes
    path: str | None = None


@dataclass
class ClaudeCodeBlob:
    """An offloaded tool output for the writer: ``store.put_blob`` arguments."""

    tool_use_id: str
    content: bytes
    tool_name: str | None
    preview: str | None
    source_path: str | None


def parse_claude_code(
    lines: Sequence[Line],
    *,
    fallback_id: str,
    subagents: Sequence[SubagentFile] = (),
    tool_results: Sequence[ToolResultFile] = (),
) -> list[ParsedSession]:
    """Sessions of one Claude Code file: the main thread first, then each sub-agent."""
    for n, obj in lines:
        if obj.get("type") in ("user", "assistant") and not isinstance(obj.get("message"), dict):
            raise SourceProblem(f"{obj['type']} line has no message object", line=n)
    first = next((o for _, o in lines if o.get("type") in ("user", "assistant")), {})
    main_id = str(first.get("sessionId") or fallback_id)
    version = next((str(o["version"]) for _, o in lines if o.get("version")), None)
    skipped = Counter(
        str(o.get("type"))
        for _, o in lines
        if o.get("type") not in ("user", "assistant", "attachment", *REPLAY_LINE_TYPES)
        and not (o.get("type") == "system" and o.get("subtype") == "compact_boundary")
    )
    notes = [f"skipped {count} {kind!r} line(s)" for kind, count in sorted(skipped.items())]

    main_lines = [(n, o) for n, o in lines if not o.get("isSidechain")]
    side_lines = [(n, o) for n, o in lines if o.get("isSidechain")]
    sessions: list[ParsedSession] = []
    main: ParsedSession | None = None
    if any(o.get("type") in ("user", "assistant") for _, o in main_lines):
        main = thread_session(main_id, main_lines, version=version, replays=replay_requests(lines))
        main.notes[:0] = notes
        main.metadata.update(_session_meta(first, lines, version))
        _title(main, lines)
        sessions.append(main)

    task_calls = _task_calls(main) if main else {}
    for agent in subagents:
        sub = thread_session(
            f"{main_id}:agent-{agent.agent_id}",
            list(agent.lines),
            version=version,
            replays=replay_requests(agent.lines),
        )
        sub.metadata.update({"claude_session_id": main_id, "agent_id": agent.agent_id, "sidechain": True})
        if agent.path:
            sub.metadata["agent_file"] = agent.path
        _link_subagent(sub, main, agent.meta, task_calls)
        _title(sub, agent.lines)
        sessions.append(sub)
    for k, group in enumerate(_side_threads(side_lines), start=1):
        sub = thread_session(f"{main_id}:agent-{k}", group, version=version, live=False)
        sub.metadata.update({"claude_session_id": main_id, "sidechain": True, "agent_index": k})
        _link_subagent(sub, main, {}, task_calls)
        _title(sub, group)
        sessions.append(sub)
    if not sessions:
        raise SourceProblem("Claude Code file without any user or assistant message line")
    _assign_blobs(sessions, tool_results)
    return sessions


def thread_session(
    key: str,
    lines: Sequence[Line],
    *,
    version: str | None,
    live: bool = True,
    replays: dict[str, ReplayedRequest] | None = None,
) -> ParsedSession:
    """One thread (main or sub-agent) as a parsed session with every call's request rebuilt:
    exactly from the file's ``api-request`` lines where it has them (claude_code_replay)."""
    kept, notes = live_lines(lines) if live else (list(lines), [])
    thread = build_thread(kept)
    thread.notes.extend(notes)
    if replays:
        mark_compactions(thread, lines, replays)
    model = thread.models.most_common(1)[0][0] if thread.models else None
    tokenizer = get_tokenizer(model) if model else get_tokenizer(FALLBACK_TOKENIZER)
    plan, prefix = rebuild_calls(thread, tokenizer, version=version, model=model)
    for at, _, call in plan:
        pm = thread.messages[at]
        if pm.call is not call:
            pm.pending_calls.append(call)
    session = ParsedSession(
        key=key,
        messages=thread.messages,
        model=model,
        provider="anthropic" if model else None,
        notes=thread.notes,
    )
    session.metadata["claude_code_version"] = version
    exact = _apply_replays(session, [call for _, _, call in plan], replays or {}, tokenizer)
    if prefix is not None and not exact:
        session.metadata["harness_prefix_tokens"] = prefix
    _record_compactions(session, thread)
    point = session.metadata.get("harness_compaction_tokens")
    window = _real_window(model)
    for _, _, call in plan:
        if point:  # where Claude Code itself compacted: its own limit line
            call.details["harness_compaction_tokens"] = point
            call.limit_tokens = point  # type: ignore[attr-defined]
        call.context_window = call.context_window or window
    session.thread = thread  # type: ignore[attr-defined]
    session.calls = [call for _, _, call in plan]  # type: ignore[attr-defined]
    return session


def mark_compactions(thread: Thread, lines: Sequence[Line], replays: dict[str, ReplayedRequest]) -> None:
    """Which automatic compactions were made at the threshold (their summarizer saw the whole
    context, kept segment included) rather than after a failed call ("prompt is too long": a
    recorded request with no reply before the boundary; the summarizer then leaves the kept
    segment out). Only files with recorded requests tell them apart."""
    answered = {
        str(o.get("requestRef")) for _, o in lines if o.get("type") == "assistant" and o.get("requestRef")
    }
    failed_lines = sorted(r.line for r in replays.values() if r.request_id not in answered)
    replied_lines = sorted(n for n, o in lines if o.get("type") == "assistant")
    for c in thread.compactions:
        if c.trigger != "compact_threshold":
            continue
        last_reply = max((n for n in replied_lines if n < c.line), default=0)
        c.summarizes_kept = not any(last_reply < n < c.line for n in failed_lines)


def _apply_replays(
    session: ParsedSession, calls: list[CallInfo], replays: dict[str, ReplayedRequest], tokenizer: Tokenizer
) -> int:
    """Calls Claude Code recorded get their exact request (``call.exact_request``, for the store)
    and components counted from it; the others (the summarizer of a compaction) take the system
    prompt and tools of the nearest recorded call instead of the harness-prefix estimate.
    Returns how many calls were rebuilt exactly."""
    if not replays:
        return 0
    found: list[tuple[int, ReplayedRequest]] = []
    linked: set[str] = set()
    shape_counts: dict[str, tuple[int, int]] = {}
    for k, call in enumerate(calls):
        replay = replays.get(str(call.details.get("request_ref")))
        if replay is None or replay.body is None:
            if replay is not None:
                call.details["exact_request_problem"] = replay.problem
            continue
        linked.add(replay.request_id)
        found.append((k, replay))
        rule = thinking_rule(call.model, context_management=(replay.body or {}).get("context_management"))
        components = exact_components(
            replay, tokenizer, where=f"api-request line {replay.line}", rule=rule, shape_counts=shape_counts
        )
        old = call.components  # type: ignore[attr-defined]
        call.components = components.model_copy(update={"offloaded_bytes": old.offloaded_bytes})  # type: ignore[attr-defined]
        call.exact_request = _request_record(call, replay)  # type: ignore[attr-defined]
        for key in ("harness_prefix_tokens", "system_is_harness_prefix"):
            call.details.pop(key, None)
        call.details.update(_exact_details(replay))
        call.details["previous_thinking"] = "kept" if rule.keeps_all else "stripped"  # as the request said
    if not found:
        return 0
    for k, call in enumerate(calls):
        if getattr(call, "exact_request", None) is not None:
            continue
        _, near = min(found, key=lambda f: (abs(f[0] - k), f[0] > k))
        fixed = exact_components(near, tokenizer, shape_counts=shape_counts)
        old = call.components  # type: ignore[attr-defined]
        call.components = old.model_copy(update={"system": fixed.system, "tools": fixed.tools})  # type: ignore[attr-defined]
        for key in ("harness_prefix_tokens", "system_is_harness_prefix"):
            call.details.pop(key, None)
        call.details["system_tools_from_request"] = near.request_id
    first = found[0][1].body or {}
    session.tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    unlinked = [r for r in replays.values() if r.request_id not in linked]
    if unlinked:
        session.notes.append(
            f"{len(unlinked)} recorded request(s) with no reply in the file (failed or interrupted calls)"
        )
    unverified = sum(1 for _, r in found if r.verified is False)
    if unverified:
        session.notes.append(f"{unverified} rebuilt request(s) differ from their recorded requestDigest")
    return len(found)


def _exact_details(replay: ReplayedRequest) -> dict[str, Any]:
    body = replay.body or {}
    details: dict[str, Any] = {
        "exact_request": True,
        "request_ref": replay.request_id,
        "request_digest_verified": replay.verified,
        "query_source": replay.query_source,
        "request_messages": len(body.get("messages") or []),
        "system_sha256": _sha256_json(body.get("system")) if body.get("system") is not None else None,
        "tools_sha256": _sha256_json(body.get("tools")) if body.get("tools") is not None else None,
        "max_tokens": body.get("max_tokens"),
        "thinking": body.get("thinking"),
        "context_management": body.get("context_management"),
        "betas": replay.betas or None,
    }
    return {k: v for k, v in details.items() if v is not None}


def _request_record(call: CallInfo, replay: ReplayedRequest) -> RequestRecord:
    usage = call.usage
    return RequestRecord(
        api="anthropic_messages",
        source="import:claude_code",
        path="/v1/messages",
        body=replay.body,
        headers=replay.headers or None,
        status_code=200,
        stop_reason=call.details.get("stop_reason"),
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        cache_read_input_tokens=usage.cache_read_input_tokens if usage else None,
        cache_creation_input_tokens=usage.cache_creation_input_tokens if usage else None,
        cache_creation_5m_tokens=call.details.get("cache_write_5m_tokens"),
        cache_creation_1h_tokens=call.details.get("cache_write_1h_tokens"),
        started_utc=replay.timestamp,
    )


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()


def _real_window(model: str | None) -> int | None:
    """The model's real context window from the bundled model table (None when unknown)."""
    info = ModelTable.bundled().lookup(model) if model else None
    return info.context_window if info is not None else None


def _record_compactions(session: ParsedSession, thread: Thread) -> None:
    autos = [c.pre_tokens for c in thread.compactions if c.trigger == "compact_threshold" and c.pre_tokens]
    if autos:
        session.metadata["harness_compaction_tokens"] = min(autos)
    for c in thread.compactions:
        if c.summary_index is None:
            continue
        pm = thread.messages[c.summary_index]
        kept = sorted({thread.uuid_index[u] for u in c.kept_uuids if u in thread.uuid_index})
        pm.compaction = {
            "harness": "claude-code",
            "trigger": c.trigger,
            "outcome": "compacted",
            "before_tokens": c.pre_tokens,
            "after_tokens": c.post_tokens,
            "summary": prompt_text(pm.message),
            "kept_uuids": c.kept_uuids,
            "kept_message_seqs": kept,  # parsed message indexes: the stored seqs
            "removed_message_seqs": [i for i in range(c.summary_index) if i not in kept],
            "boundary_uuid": c.boundary_uuid,
        }


# -- sub-agents ------------------------------------------------------------------------------
def _side_threads(side_lines: list[Line]) -> list[list[Line]]:
    """Legacy inline sidechain lines grouped by the root of their parentUuid chain, in file order."""
    by_uuid = {o.get("uuid"): (n, o) for n, o in side_lines}
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
            if parent is None or parent[1].get("uuid") in path:
                root = uid
                break
            current = parent[1]
        for uid in path:
            roots[uid] = root
        return root

    groups: dict[str, list[Line]] = {}
    for line in side_lines:
        groups.setdefault(root_of(line[1]), []).append(line)
    return [g for g in groups.values() if any(o.get("type") in ("user", "assistant") for _, o in g)]


def _task_calls(main: ParsedSession) -> dict[str, ToolUseBlock]:
    """Agent/Task tool calls of the main thread, by id and by prompt."""
    calls: dict[str, ToolUseBlock] = {}
    for pm in main.messages:
        for block in pm.message.blocks:
            if isinstance(block, ToolUseBlock) and block.name in TASK_TOOLS:
                calls.setdefault(block.id, block)
                prompt = block.input.get("prompt")
                if isinstance(prompt, str):
                    calls.setdefault("prompt:" + prompt.strip(), block)
    return calls


def _link_subagent(
    sub: ParsedSession, main: ParsedSession | None, meta: dict[str, Any], task_calls: dict[str, ToolUseBlock]
) -> None:
    sub.parent_key = main.key if main else None
    prompt = next((prompt_text(pm.message) for pm in sub.messages if pm.message.role == "user"), "")
    task = task_calls.get(str(meta.get("toolUseId"))) or task_calls.get("prompt:" + prompt)
    info: dict[str, Any] = {
        "subagent_type": meta.get("agentType"),
        "description": meta.get("description"),
        "spawn_depth": meta.get("spawnDepth"),
        "prompt": prompt or None,
    }
    if task is not None:
        info.update(
            parent_tool_use_id=task.id,
            subagent_type=info["subagent_type"] or task.input.get("subagent_type"),
            description=info["description"] or task.input.get("description"),
            background=bool(task.input.get("run_in_background", False)),
        )
    sub.metadata.update({k: v for k, v in info.items() if v is not None})
    if not sub.model and main is not None:
        sub.model, sub.provider = main.model, main.provider


# -- titles, blobs, metadata -----------------------------------------------------------------
def prompt_text(message: Message) -> str:
    """A user message's own text: its first text block (attachment text follows it)."""
    first = next((b.text for b in message.blocks if isinstance(b, TextBlock)), message.text)
    return first.strip()


def is_real_prompt(message: Message) -> bool:
    """A user's own prompt: not a tool result, not Claude Code's caveats or command wrappers."""
    if not is_user_input(message) or message.meta.get("isMeta") or message.meta.get("isCompactSummary"):
        return False
    if message.meta.get("origin") == "task-notification":
        return False
    first = prompt_text(message)
    return bool(first) and not first.startswith(_NOT_A_PROMPT)


def _command(message: Message) -> str | None:
    """``/name args`` of a slash-command prompt that has arguments (the user's real request)."""
    text = prompt_text(message)
    name, args = _COMMAND_NAME.search(text), _COMMAND_ARGS.search(text)
    if message.meta.get("isMeta") or not name or not args or not args.group(1).strip():
        return None
    return f"{name.group(1).strip()} {args.group(1).strip()}"


def title_of_thread(session: ParsedSession, lines: Sequence[Line]) -> str | None:
    """The first real prompt (or slash command with arguments), else Claude Code's summary line."""
    for pm in session.messages:
        text = prompt_text(pm.message) if is_real_prompt(pm.message) else _command(pm.message)
        if text:
            text = " ".join(text.split())
            return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"
    summaries = [str(o["summary"]) for _, o in lines if o.get("type") == "summary" and o.get("summary")]
    return summaries[-1] if summaries else None


def _title(session: ParsedSession, lines: Sequence[Line]) -> None:
    title = title_of_thread(session, lines)
    session.title = title  # type: ignore[attr-defined]
    if title:
        session.metadata["title"] = title


def _assign_blobs(sessions: list[ParsedSession], files: Sequence[ToolResultFile]) -> None:
    """Each saved output becomes the blob of the tool_result whose ``<persisted-output>`` names
    it, in whichever thread (main or sub-agent) that result is; one blob per file."""
    by_name = {f.name: f for f in files}
    linked: set[str] = set()
    for session in sessions:
        session.blobs = _blobs(session, by_name, linked)  # type: ignore[attr-defined]
        _count_offloaded(session, session.blobs)  # type: ignore[attr-defined]
    unlinked = sorted(set(by_name) - linked)
    if unlinked and sessions:
        sessions[0].notes.append(
            f"{len(unlinked)} saved tool output(s) named by no tool result: {', '.join(unlinked)}"
        )


def _blobs(
    session: ParsedSession, by_name: dict[str, ToolResultFile], linked: set[str]
) -> list[ClaudeCodeBlob]:
    if not by_name:
        return []
    tool_names = {
        b.id: b.name for pm in session.messages for b in pm.message.blocks if isinstance(b, ToolUseBlock)
    }
    blobs: list[ClaudeCodeBlob] = []
    for pm in session.messages:
        for block in pm.message.blocks:
            if not isinstance(block, ToolResultBlock) or "tool-results/" not in block.text:
                continue
            for name in _PERSISTED.findall(block.text):
                file = by_name.get(name)
                if file is None or name in linked:
                    continue
                linked.add(name)
                blobs.append(
                    ClaudeCodeBlob(
                        tool_use_id=block.tool_use_id,
                        content=file.content,
                        tool_name=tool_names.get(block.tool_use_id),
                        preview=block.text[:2000],
                        source_path=file.path,
                    )
                )
    return blobs


def _count_offloaded(session: ParsedSession, blobs: Sequence[ClaudeCodeBlob]) -> None:
    """Each call's ``offloaded_bytes``: saved outputs whose preview it sent instead of them."""
    sizes = {b.tool_use_id: len(b.content) for b in blobs}
    if not sizes:
        return
    messages = [pm.message for pm in session.messages]
    for call in getattr(session, "calls", []):
        sent = {u for i in call.sent.indexes() for u in messages[i].tool_result_ids}
        offloaded = sum(size for use_id, size in sizes.items() if use_id in sent)
        if offloaded:
            call.components = call.components.model_copy(update={"offloaded_bytes": offloaded})


def _session_meta(first: dict[str, Any], lines: Sequence[Line], version: str | None) -> dict[str, Any]:
    summaries = [str(o["summary"]) for _, o in lines if o.get("type") == "summary" and o.get("summary")]
    meta = {
        "claude_session_id": first.get("sessionId"),
        "cwd": first.get("cwd"),
        "claude_code_version": version,
        "claude_code_version_tuple": list(parse_version(version) or ()) or None,
        "git_branch": first.get("gitBranch") or None,
        "summaries": summaries or None,
    }
    return {k: v for k, v in meta.items() if v is not None}
