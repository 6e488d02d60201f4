"""Claude Code sessions: the main thread, its sub-agents, compactions and offloaded outputs.

``parse_claude_code(lines, fallback_id=...)`` reads one session file; ``parse_claude_code_bundle``
(engine.importers.formats.claude_code.bundle) adds the files Claude Code keeps beside it:
``<session>/subagents/agent-<id>.jsonl`` (+ ``.meta.json``), legacy ``agent-*.jsonl`` and
``<session>/tool-results/*.txt``. The thread is a tree (claude_code_thread); each call's request
is rebuilt with its component breakdown (claude_code_requests), exactly where the file recorded
it (claude_code_replay, claude_code_exact). Each sub-agent becomes a session linked to its parent
and to the Agent/Task tool_use that started it (claude_code_subagents); legacy inline sidechains
(``isSidechain`` lines in the main file) are grouped by the root of their chain. Titles come from
claude_code_titles, saved tool outputs become blobs in claude_code_blobs.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.importers.formats.claude_code.blobs import ToolResultFile, assign_blobs
from engine.importers.formats.claude_code.exact import apply_failed, apply_replays
from engine.importers.formats.claude_code.failures import FailedCall, failed_calls
from engine.importers.formats.claude_code.reminders import add_todo_reminders, sends_unlogged_reminders
from engine.importers.formats.claude_code.replay import (
    REPLAY_LINE_TYPES,
    ReplayedRequest,
    replay_requests,
)
from engine.importers.formats.claude_code.requests import parse_version, rebuild_calls
from engine.importers.formats.claude_code.subagents import link_subagent, side_threads, task_calls
from engine.importers.formats.claude_code.thread import Line, Thread, build_thread, live_lines
from engine.importers.formats.claude_code.titles import is_real_prompt as is_real_prompt
from engine.importers.formats.claude_code.titles import prompt_text, set_title
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.tokens import Tokenizer, get_tokenizer

#: Tokenizer when a thread names no model (the writer's fallback too).
FALLBACK_TOKENIZER = "chars/4"
#: Claude Code keeps this many tokens of the window for the summary it writes when compacting: its
#: prompt may use the window less this, and it auto-compacts 13,000 below that (engine.explain).
SUMMARY_RESERVE = 20_000
#: Line types read besides user and assistant lines (others are counted as skipped).
_KEPT_LINE_TYPES = ("attachment", *REPLAY_LINE_TYPES)


@dataclass
class SubagentFile:
    """A sub-agent transcript beside the session: its id, lines and .meta.json (if any)."""

    agent_id: str
    lines: Sequence[Line]
    meta: dict[str, Any] = field(default_factory=dict)
    path: str | None = None


def parse_claude_code(
    lines: Sequence[Line],
    *,
    fallback_id: str,
    subagents: Sequence[SubagentFile] = (),
    tool_results: Sequence[ToolResultFile] = (),
    main_id: str | None = None,
) -> list[ParsedSession]:
    """Sessions of one Claude Code file: the main thread first, then each sub-agent. ``main_id``:
    the session's id when ``lines`` do not hold it (a sub-agent file read alone).

    Sessions keyed by Claude Code's own ids are ``shared_key``: the same session whichever file
    holds it. A ``--fork-session`` file copies its origin's lines (same uuids; its replies' request
    records stay in the origin's file): those replies are not calls of the fork (they were paid
    once, by the origin), and the fork is ``forked`` in the lineage of the origin's first line."""
    first: dict[str, Any] | None = None
    version: str | None = None
    skipped: Counter[str] = Counter()
    main_lines: list[Line] = []
    side_lines: list[Line] = []
    main_has_messages = False
    recorded = False  # the file has api-request lines (Claude Code 2.1.3xx)
    summaries: list[str] = []
    for line in lines:  # one pass: a session's lines are many, each pass over them counts
        n, obj = line
        kind = obj.get("type")
        message_line = kind in ("user", "assistant")
        if kind == "api-request":
            recorded = True
        elif kind == "summary" and obj.get("summary"):
            summaries.append(str(obj["summary"]))
        if message_line:
            if not isinstance(obj.get("message"), dict):
                raise SourceProblem(f"{obj['type']} line has no message object", line=n)
            if first is None:
                first = obj
        elif kind not in _KEPT_LINE_TYPES and not (
            kind == "system" and obj.get("subtype") == "compact_boundary"
        ):
            skipped[str(kind)] += 1
        if version is None and obj.get("version"):
            version = str(obj["version"])
        if obj.get("isSidechain"):
            side_lines.append(line)
        else:
            main_lines.append(line)
            main_has_messages = main_has_messages or message_line
    first = first if first is not None else {}
    own_id = main_id or first.get("sessionId")
    main_id = str(own_id or fallback_id)
    notes = [f"skipped {count} {kind!r} line(s)" for kind, count in sorted(skipped.items())]

    sessions: list[ParsedSession] = []
    main: ParsedSession | None = None
    if main_has_messages:
        replays = replay_requests(lines) if recorded else {}
        main = thread_session(main_id, main_lines, version=version, replays=replays)
        main.notes[:0] = notes
        main.metadata.update(_session_meta(first, summaries, version))
        set_title(main, lines)
        main.lineage_key = str(first["uuid"]) if isinstance(first.get("uuid"), str) else None
        copied = drop_copied_calls(main, lines) if recorded else 0
        if copied:
            main.forked = True
            main.metadata["forked_calls_copied"] = copied
            main.notes.append(
                f"{copied} call(s) copied from the session this one was forked from: not counted again"
            )
        sessions.append(main)

    tasks = task_calls(main) if main and (subagents or side_lines) else {}
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
        link_subagent(sub, main, agent.meta, tasks)
        sub.parent_key = sub.parent_key or main_id  # read alone: its parent, by Claude Code's id
        set_title(sub, agent.lines)
        sessions.append(sub)
    for k, group in enumerate(side_threads(side_lines), start=1):
        sub = thread_session(f"{main_id}:agent-{k}", group, version=version, live=False)
        sub.metadata.update({"claude_session_id": main_id, "sidechain": True, "agent_index": k})
        link_subagent(sub, main, {}, tasks)
        set_title(sub, group)
        sessions.append(sub)
    if not sessions:
        raise SourceProblem("Claude Code file without any user or assistant message line")
    for session in sessions:
        session.shared_key = own_id is not None
    assign_blobs(sessions, tool_results)
    return sessions


def drop_copied_calls(session: ParsedSession, lines: Sequence[Line]) -> int:
    """Replies whose request record is not in this file (2.1.3xx records every request it sends,
    beside its reply) were copied from another session's file by ``--fork-session``: kept as
    history the fork's own calls sent, but not as calls of the fork. Returns how many."""
    if not any(o.get("type") == "api-request" for _, o in lines):
        return 0  # an older file records no requests: a copy cannot be told from a reply
    recorded = {str(o["id"]) for _, o in lines if o.get("type") == "api-request" and o.get("id")}
    copied = 0
    for pm in session.messages:
        ref = pm.call.details.get("request_ref") if pm.call is not None else None
        if ref is not None and str(ref) not in recorded:
            pm.call = None
            copied += 1
    if copied:
        session.calls = _calls(session.messages)
    return copied


def _calls(messages: Sequence[ParsedMessage]) -> list[CallInfo]:
    """Every call of ``messages`` in order: each message's own, then those made right after it."""
    calls: list[CallInfo] = []
    for pm in messages:
        if pm.call is not None:
            calls.append(pm.call)
        if pm.pending_calls:
            calls.extend(pm.pending_calls)
    return calls


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
    # lines without uuids (claude-code-transcripts' loglines) have no tree to follow: file order
    live = live and any(isinstance(o.get("uuid"), str) for _, o in lines)
    kept, notes = live_lines(lines) if live else (list(lines), [])
    thread = build_thread(kept)
    thread.notes.extend(notes)
    if replays:
        mark_compactions(thread, lines, replays)
    if sends_unlogged_reminders(parse_version(version)):  # what 1.0.x sent and did not write
        rebuilt = add_todo_reminders(thread)
        if rebuilt:
            thread.notes.append(
                f"{rebuilt} TodoWrite reminder(s) Claude Code {version} sent but did not log: rebuilt"
            )
    model = thread.models.most_common(1)[0][0] if thread.models else requested_model(replays or {})
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
    exact = apply_replays(session, [call for _, _, call in plan], replays or {}, tokenizer)
    if prefix is not None and not exact:
        session.metadata["harness_prefix_tokens"] = prefix
    failed = _place_failed_calls(thread, lines, replays or {}, model, tokenizer)
    _record_compactions(session, thread, lines, failed)
    point = session.metadata.get("harness_compaction_tokens")
    session.calls = _calls(thread.messages)
    for call in session.calls if point else ():
        # where Claude Code itself compacted: a threshold it reached, not its limit
        call.details["harness_compaction_tokens"] = point
    session.output_reserve = SUMMARY_RESERVE  # below the model's window, Claude Code's own
    return session


def requested_model(replays: dict[str, ReplayedRequest]) -> str | None:
    """The model the recorded requests asked for: a session whose every call failed has no
    answer naming one, yet each request did."""
    asked = Counter(str(r.body["model"]) for r in replays.values() if r.body and r.body.get("model"))
    return asked.most_common(1)[0][0] if asked else None


def _place_failed_calls(
    thread: Thread,
    lines: Sequence[Line],
    replays: dict[str, ReplayedRequest],
    model: str | None,
    tokenizer: Tokenizer,
) -> list[FailedCall]:
    """Calls that got no answer, each after the last message it sent (before the calls made
    after it: a reactive compaction's summarizer follows its failed call)."""
    failed = failed_calls(thread, lines, replays, model)
    placed: dict[int, int] = {}
    for f in failed:
        if f.replay is not None:
            apply_failed(f.call, f.replay, tokenizer)
        if f.after_index is None:
            thread.notes.append(f"a failed call at line {f.line} before any message: left out")
            continue
        pending = thread.messages[f.after_index].pending_calls
        pending.insert(placed.get(f.after_index, 0), f.call)
        placed[f.after_index] = placed.get(f.after_index, 0) + 1
    return failed


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


def _record_compactions(
    session: ParsedSession, thread: Thread, lines: Sequence[Line], failed: Sequence[FailedCall]
) -> None:
    reactive = {c.line: _failed_before(c.line, failed) for c in thread.compactions}
    autos = [
        c.pre_tokens
        for c in thread.compactions
        if c.trigger == "compact_threshold" and c.pre_tokens and reactive[c.line] is None
    ]
    if autos:
        session.metadata["harness_compaction_tokens"] = min(autos)
    for c in thread.compactions:
        if c.summary_index is None:
            continue
        pm = thread.messages[c.summary_index]
        kept = sorted({thread.uuid_index[u] for u in c.kept_uuids if u in thread.uuid_index})
        after = reactive[c.line]
        manual = c.trigger == "manual"
        pm.compaction = {
            "harness": "claude-code",
            "trigger": c.trigger,
            "by": "user" if manual else "agent",
            "trigger_kind": "manual" if manual else "reactive" if after is not None else "auto",
            **({"instructions": _compact_instructions(lines, c.line)} if manual else {}),
            **({"after_failed_request_ref": after.call.details.get("request_ref")} if after else {}),
            **({"after_failed_line": after.line} if after else {}),
            "outcome": "compacted",
            "before_tokens": c.pre_tokens,
            "after_tokens": c.post_tokens,
            "summary": prompt_text(pm.message),
            "kept_uuids": c.kept_uuids,
            "kept_message_seqs": kept,  # parsed message indexes: the stored seqs
            "removed_message_seqs": [i for i in range(c.summary_index) if i not in kept],
            "boundary_uuid": c.boundary_uuid,
        }


def _session_meta(first: dict[str, Any], summaries: list[str], version: str | None) -> dict[str, Any]:
    meta = {
        "claude_session_id": first.get("sessionId"),
        "cwd": first.get("cwd"),
        "claude_code_version": version,
        "claude_code_version_tuple": list(parse_version(version) or ()) or None,
        "git_branch": first.get("gitBranch") or None,
        "summaries": summaries or None,
    }
    return {k: v for k, v in meta.items() if v is not None}


def _failed_before(boundary_line: int, failed: Sequence[FailedCall]) -> FailedCall | None:
    """The failed call a compaction followed ("prompt is too long": Claude Code's reactive compaction)."""
    before = [f for f in failed if f.line < boundary_line]
    last = before[-1] if before else None
    if last is None or (last.call.details.get("failure") or {}).get("cause") != "prompt_too_long":
        return None
    return last


_COMPACT_ARGS = re.compile(
    r"<command-name>/compact</command-name>.*?<command-args>(.*?)</command-args>", re.S
)


def _compact_instructions(lines: Sequence[Line], boundary_line: int) -> str | None:
    """The user's instructions to a manual ``/compact`` (its ``<command-args>``), from the command
    line Claude Code writes beside the boundary; None when they gave none."""
    near = sorted(lines, key=lambda line: abs(line[0] - boundary_line))
    for _, obj in near[:40]:
        message = obj.get("message") if obj.get("type") == "user" else None
        content = message.get("content") if isinstance(message, dict) else None
        match = _COMPACT_ARGS.search(content) if isinstance(content, str) else None
        if match:
            return match.group(1).strip() or None
    return None
