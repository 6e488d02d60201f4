"""Codex CLI and Gemini CLI transcripts written by the real clients (tests/fixtures/real_agents,
made by scripts/real_agents_codex_gemini.py), checked against what the model server received.

For every model call, the messages the import says were sent (``messages_sent`` of its request
event) must be what the request carried: the same texts, tool calls (name and arguments) and
tool results, in order; and the call's provider usage must be what the server reported.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.importers import import_file
from engine.importers.formats.codex import FORMAT as FORMAT_CODEX
from engine.importers.formats.gemini import FORMAT as FORMAT_GEMINI
from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.sent import sent_seqs
from engine.store import SessionStore
from tests.model_server import gemini as gemini_api
from tests.model_server import openai_responses
from tests.model_server.fixtures import load_request_log

REAL = Path(__file__).resolve().parent / "fixtures" / "real_agents"
CODEX = REAL / "codex" / "tools-resume"
GEMINI = REAL / "gemini" / "tools-resume"

Atom = tuple[Any, ...]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def requests_to(folder: Path, fragment: str) -> list[dict[str, Any]]:
    lines = (folder / "requests.jsonl").read_text(encoding="utf-8").splitlines()
    return [r for r in map(json.loads, lines) if fragment in r["path"]]


def transcript_file(folder: Path, pattern: str) -> Path:
    (path,) = sorted(folder.rglob(pattern))
    return path


def imported_atoms(messages: list[Message], *, ids: bool = True) -> list[Atom]:
    """What the messages carry, flattened: texts by role, tool calls, tool results."""
    atoms: list[Atom] = []
    for message in messages:
        role = message.meta.get("openai_role") or message.role
        for block in message.blocks:
            if isinstance(block, TextBlock):
                atoms.append(("text", role, block.text))
            elif isinstance(block, ThinkingBlock):
                atoms.append(("reasoning", block.thinking))
            elif isinstance(block, ToolUseBlock):
                atoms.append(("call", block.id if ids else None, block.name, block.input))
            elif isinstance(block, ToolResultBlock):
                atoms.append(("result", block.tool_use_id if ids else None, block.text))
    return atoms


# -- Codex ------------------------------------------------------------------------------------


def responses_atoms(items: list[dict[str, Any]]) -> list[Atom]:
    atoms: list[Atom] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = {"assistant": "assistant", "user": "user"}.get(item["role"], item["role"])
            for part in item["content"]:
                atoms.append(("text", role, part["text"]))
        elif kind == "agent_message":
            for part in item["content"]:
                atoms.append(("text", "agent_message", part.get("text", part.get("encrypted_content"))))
        elif kind == "reasoning":
            atoms.append(("reasoning", "\n".join(s["text"] for s in item["summary"])))
        elif kind == "function_call":
            atoms.append(("call", item["call_id"], item["name"], json.loads(item["arguments"])))
        elif kind == "custom_tool_call":
            atoms.append(("call", item["call_id"], item["name"], {"input": item["input"]}))
        elif kind == "web_search_call":
            atoms.append(("server call", "web_search", item["action"]))
        elif kind in ("function_call_output", "custom_tool_call_output") and "call_id" not in item:
            atoms.append(("output", item["name"], item["output"]))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            atoms.append(("result", item["call_id"], item["output"]))
        else:
            raise AssertionError(f"unexpected input item {kind}")
    return atoms


def codex_atoms(messages: list[Message]) -> list[Atom]:
    atoms: list[Atom] = []
    for message in messages:
        role = message.meta.get("openai_role") or message.role
        server_run = set(message.meta.get("server_tool_use_ids") or ())
        for block in message.blocks:
            if role == "tool_output" and isinstance(block, TextBlock):
                atoms.append(("output", message.meta["output_name"], block.text))
            elif isinstance(block, ToolUseBlock) and block.id in server_run:
                atoms.append(("server call", block.name, block.input["action"]))
            else:
                atoms.extend(imported_atoms([message.model_copy(update={"content": [block]})]))
    return atoms


def codex_calls(folder: Path, thread: str) -> list[dict[str, Any]]:
    """The requests one Codex thread sent (its `thread-id` header), a failed request's retries
    (the same body again) counted once: Codex logs only the error of the last one."""
    calls: list[dict[str, Any]] = []
    for record in load_request_log(folder):
        if record["path"] != "/v1/responses" or record["headers"].get("thread-id") != thread:
            continue
        last = calls[-1] if calls else None
        if last is not None and last["status"] >= 500 and record["body"]["input"] == last["body"]["input"]:
            calls[-1] = record
            continue
        calls.append(record)
    return calls


def answered(folder: Path) -> dict[int, dict[str, Any]]:
    return {int(k): v for k, v in json.loads((folder / "answers.json").read_text(encoding="utf-8")).items()}


def sent_segment(store: SessionStore, session_id: str, event: Any) -> tuple[int, int]:
    """(first, end) indexes of the transcript a call sent: from the start of its context (the
    importer's segment: a compaction, or a history the agent rewrote)."""
    transcript = store.load_transcript(session_id)
    starts = {e.message_seq for e in store.list_events(session_id, kind="compaction")}
    starts |= {i for i, m in enumerate(transcript) if m.meta.get("context_start")}
    segment = event.details["segment"]
    return (sorted(starts)[segment - 1] if segment else 0), event.details["messages_sent"]


CODEX_SCENARIOS = [
    "tools-resume",
    "auto-compact",
    "subagents",
    "subagent-fork",
    "goal-websearch",
    "failed-calls",
]


@pytest.mark.parametrize("scenario", CODEX_SCENARIOS)
def test_every_codex_call_imports_as_the_server_received_it(store: SessionStore, scenario: str) -> None:
    check_codex_run(store, REAL / "codex" / scenario)


@pytest.mark.peer("codex")
@pytest.mark.parametrize("scenario", ["auto-compact", "subagents"])
def test_a_live_codex_run_imports_as_the_server_received_it(
    tmp_path: Path, store: SessionStore, scenario: str
) -> None:
    """The installed Codex CLI, run now against the scripted server (a version the fixtures do
    not cover shows here first)."""
    from scripts.real_agents_codex_gemini import CODEX_SCENARIOS as RUNS
    from scripts.real_agents_codex_gemini import run_codex

    check_codex_run(store, run_codex(scenario, RUNS[scenario], tmp_path))


def check_codex_run(store: SessionStore, folder: Path) -> None:
    """Each thread's calls (sub-agents in their own session, linked), in order: the texts, tool
    calls, results, agent messages, outputs without a call and web searches sent, and the usage
    answered; a failed call is a request event with its failure and no usage."""
    scenario = folder.name
    files = sorted(folder.rglob("rollout-*.jsonl"))
    main = next(p for p in files if not FORMAT_CODEX.accompanies(p))
    result = import_file(main, store)
    assert len(result.sessions) == len(files)
    answers = answered(folder) if (folder / "answers.json").exists() else {}
    for session in result.sessions:
        calls = codex_calls(folder, session.session_id)
        events = store.list_events(session.session_id, kind="request")
        transcript = store.load_transcript(session.session_id)
        system = store.get_session(session.session_id).metadata["system_prompt"]
        assert len(events) == len(calls) > 0
        for event, request in zip(events, calls, strict=True):
            base, *sent = request["body"]["input"]
            assert base["role"] == "developer" and set(base["content"][0]["text"].splitlines()) <= set(
                system.splitlines()
            )
            first, end = sent_segment(store, session.session_id, event)
            assert codex_atoms(transcript[first:end]) == responses_atoms(sent), (scenario, event.seq)
            assert event.model == request["body"]["model"]
            failure = event.details.get("failure")
            assert (failure is None) == (request["status"] == 200)
            if failure is None and answers:
                usage = answers[request["seq"]]
                assert event.usage is not None
                assert event.usage.prompt_tokens == usage["input_tokens"]
                assert event.usage.cache_read_input_tokens == usage["input_tokens_details"]["cached_tokens"]
            elif failure is not None:
                assert event.usage is None and failure["cause"] == {400: "prompt_too_long"}.get(
                    request["status"], "provider_error"
                )
            kind = json.loads(request["headers"]["x-codex-turn-metadata"])["request_kind"]
            assert bool(event.details.get("compaction_call")) == (kind == "compaction")


def test_codex_sub_agent_is_linked_to_its_parent_and_the_spawn_call(store: SessionStore) -> None:
    folder = REAL / "codex" / "subagents"
    files = sorted(folder.rglob("rollout-*.jsonl"))
    (child_file,) = [p for p in files if FORMAT_CODEX.accompanies(p)]
    (parent_file,) = [p for p in files if p != child_file]
    (parent, child) = import_file(parent_file, store).sessions
    assert child.parent_session_id == parent.session_id and parent.parent_session_id is None
    meta = store.get_session(child.session_id).metadata
    spawn = next(
        b
        for m in store.load_transcript(parent.session_id)
        for b in m.blocks
        if isinstance(b, ToolUseBlock) and b.name == "spawn_agent"
    )
    assert meta["parent_tool_use_id"] == spawn.id and meta["agent_path"] == "/root/counter"
    assert child.title == "/root/counter: Count the files in the repository."  # its path and task
    # a folder import reads the child with its parent, once
    assert FORMAT_CODEX.locations is not None
    assert FORMAT_CODEX.locations.files_under(folder / "sessions") == [parent_file]
    assert import_file(parent_file, store).status == "unchanged"


@pytest.mark.parametrize(("agent", "pattern"), [("codex", "rollout-*.jsonl"), ("gemini", "chats/**/*.jsonl")])
@pytest.mark.parametrize("order", ["child first", "parent first", "twice"])
def test_a_sub_agent_is_one_session_however_its_files_are_passed(
    store: SessionStore, agent: str, pattern: str, order: str
) -> None:
    """The agent's own ids key the sessions: a sub-agent file passed alone, before or after its
    parent's, or the parent twice, makes one linked sub-agent session, never a copy."""
    fmt = FORMAT_CODEX if agent == "codex" else FORMAT_GEMINI
    files = sorted((REAL / agent / "subagents").rglob(pattern))
    (child,) = [p for p in files if fmt.accompanies(p)]
    (parent,) = [p for p in files if not fmt.accompanies(p)]
    passes = {"child first": [child, parent], "parent first": [parent, child], "twice": [parent, parent]}[
        order
    ]
    for path in passes:
        import_file(path, store)
    sessions = store.list_sessions()
    assert len(sessions) == 2
    (sub,) = [s for s in sessions if s.parent_session_id]
    assert (
        sub.parent_session_id in {s.id for s in sessions}
        and len(store.list_events(sub.id, kind="request")) == 2
    )


def test_a_forked_codex_sub_agent_inherits_its_parents_history_without_its_calls(store: SessionStore) -> None:
    """fork_turns "all": the child's rollout copies the parent's history; those replies are no
    calls of the child's (one call, as the server saw), and the spawn call left open gets the
    "aborted" output Codex sends for it."""
    folder = REAL / "codex" / "subagent-fork"
    parent_file = next(p for p in folder.rglob("rollout-*.jsonl") if not FORMAT_CODEX.accompanies(p))
    (parent, child) = import_file(parent_file, store).sessions
    assert (parent.request_count, child.request_count) == (4, 1)
    transcript = store.load_transcript(child.session_id)
    inherited = [m for m in transcript if m.meta.get("inherited")]
    assert inherited and all(transcript.index(m) < len(inherited) + 1 for m in inherited)
    (aborted,) = [m for m in transcript if m.meta.get("codex_aborted")]
    assert [b.text for b in aborted.blocks if isinstance(b, ToolResultBlock)] == ["aborted"]
    assert store.get_session(child.session_id).metadata["forked_from_thread"] == parent.session_id


@pytest.mark.parametrize(("agent", "pattern"), [("codex", "rollout-*.jsonl"), ("gemini", "chats/**/*.jsonl")])
def test_a_broken_sub_agent_file_leaves_its_parent_importable(
    tmp_path: Path, store: SessionStore, agent: str, pattern: str
) -> None:
    """A sub-agent's file with a line that is not JSON: the parent imports, and says which file
    it could not read (the child alone is refused naming its line)."""
    fmt = FORMAT_CODEX if agent == "codex" else FORMAT_GEMINI
    folder = tmp_path / agent
    shutil.copytree(REAL / agent / "subagents", folder)
    files = sorted(folder.rglob(pattern))
    (child,) = [p for p in files if fmt.accompanies(p)]
    (parent,) = [p for p in files if not fmt.accompanies(p)]
    child.write_text(child.read_text(encoding="utf-8") + "{not json\n", encoding="utf-8")
    result = import_file(parent, store)
    assert len(result.sessions) == 1 and any(
        child.name in note and "not read" in note for note in result.notes
    )


def test_codex_sub_agent_rollout_given_alone_imports_naming_its_parent_thread(
    tmp_path: Path, store: SessionStore
) -> None:
    folder = REAL / "codex" / "subagents"
    child_file = next(p for p in folder.rglob("rollout-*.jsonl") if FORMAT_CODEX.accompanies(p))
    alone = tmp_path / child_file.name
    alone.write_bytes(child_file.read_bytes())
    (session,) = import_file(alone, store).sessions
    meta = store.get_session(session.session_id).metadata
    parent_file = next(p for p in folder.rglob("rollout-*.jsonl") if p != child_file)
    assert session.parent_session_id is None  # its parent is not in the store: named, not linked
    assert parent_file.name.endswith(f"-{meta['parent_thread_id']}.jsonl") and session.request_count == 2


def test_codex_auto_compaction_records_its_limit_tokens_and_summary_call(store: SessionStore) -> None:
    """model_auto_compact_token_limit and model_context_window (config.toml beside sessions/: the
    rollout does not record them; the point is Codex's rule over them, engine.explain.agents);
    before = what Codex counted at the last call (input + output), after = its estimate."""
    folder = REAL / "codex" / "auto-compact"
    (session,) = import_file(next(folder.rglob("rollout-*.jsonl")), store).sessions
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    requests = store.list_events(session.session_id, kind="request")
    d = compaction.details
    first = requests[0].usage
    assert d["by"] == "agent" and d["trigger_kind"] == "auto"
    assert d["agent_setting"] == {"model_auto_compact_token_limit": 20_000, "model_context_window": 64_000}
    assert d["before_tokens"] == first.prompt_tokens + first.output_tokens > 20_000
    assert 0 < d["after_tokens"] < 20_000
    assert [bool(e.details.get("compaction_call")) for e in requests] == [
        False,
        True,
        False,
        False,
        False,
        False,
    ]
    assert d["summary"].endswith(store.load_transcript(session.session_id)[requests[1].message_seq].text)


def test_codex_refused_call_then_reactive_compaction_and_a_provider_error(store: SessionStore) -> None:
    folder = REAL / "codex" / "failed-calls"
    (session,) = import_file(next(folder.rglob("rollout-*.jsonl")), store).sessions
    requests = store.list_events(session.session_id, kind="request")
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    refused = requests[1]
    assert (
        refused.outcome == "context_length_exceeded"
        and refused.details["failure"]["cause"] == "prompt_too_long"
    )
    assert compaction.details["trigger_kind"] == "reactive"
    assert compaction.details["after_failed_call"] == refused.seq
    assert compaction.details["before_tokens"] == 258_400  # Codex counts its window full after a refusal
    assert requests[-1].outcome == "provider_error" and requests[-1].details["attempts_recorded"] is False


def test_a_failed_call_logged_after_an_earlier_import_is_recorded(
    tmp_path: Path, store: SessionStore
) -> None:
    """The rollout grows by the turn's error after an import (a follower reads it mid-turn): the
    failed call, made right after a message imported already, is recorded on the next import."""
    source = next((REAL / "codex" / "failed-calls").rglob("rollout-*.jsonl"))
    lines = source.read_text(encoding="utf-8").splitlines(keepends=True)
    path = tmp_path / source.name
    failed_at = [i for i, line in enumerate(lines) if '"task_complete"' in line and '"error"' in line]
    for cut in failed_at:  # just before each logged error
        path.write_text("".join(lines[:cut]), encoding="utf-8")
        import_file(path, store)
    path.write_text("".join(lines), encoding="utf-8")
    (session,) = import_file(path, store).sessions
    events = store.list_events(session.session_id, kind="request")
    assert [e.outcome for e in events] == [None, "context_length_exceeded", None, None, "provider_error"]


def test_codex_failure_told_twice_is_one_failed_call(tmp_path: Path, store: SessionStore) -> None:
    """An ``error`` event before the turn's own error names the same failed call: one request event."""
    source = next((REAL / "codex" / "failed-calls").rglob("rollout-*.jsonl"))
    lines = source.read_text(encoding="utf-8").splitlines()
    at = next(i for i, line in enumerate(lines) if '"task_complete"' in line and '"error"' in line)
    error = {
        "type": "error",
        "message": "Codex ran out of room",
        "codex_error_info": "context_window_exceeded",
    }
    lines.insert(
        at, json.dumps({"timestamp": "2026-11-28T06:03:32.100Z", "type": "event_msg", "payload": error})
    )
    path = tmp_path / source.name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (session,) = import_file(path, store).sessions
    failed = [e for e in store.list_events(session.session_id, kind="request") if e.details.get("failure")]
    assert len(failed) == 2  # the refused call and the last run's, as without the extra line


@pytest.mark.parametrize(
    ("name", "item", "expected"),
    [
        (
            "web search with an empty id",
            {"type": "web_search_call", "id": "", "status": "completed",
             "action": {"type": "search", "query": "make test"}},
            ("server call", "web_search", {"type": "search", "query": "make test"}),
        ),
        (
            "output without a call_id",
            {"type": "function_call_output", "name": "goal_objective", "namespace": "agent", "output": "Ship"},
            ("output", "goal_objective", "Ship"),
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)  # fmt: skip
def test_codex_items_without_ids_import_instead_of_rejecting_the_file(
    tmp_path: Path, store: SessionStore, name: str, item: dict[str, Any], expected: Atom
) -> None:
    rollout = transcript_file(CODEX, "rollout-*.jsonl").read_text(encoding="utf-8").splitlines()
    line = json.dumps({"timestamp": "2026-11-24T06:27:00.000Z", "type": "response_item", "payload": item})
    path = tmp_path / "rollout-2026-11-24T06-26-17-x.jsonl"
    path.write_text("\n".join([*rollout, line]) + "\n", encoding="utf-8")
    (session,) = import_file(path, store).sessions
    transcript = store.load_transcript(session.session_id)
    assert codex_atoms(transcript)[-1] == expected
    assert not any(
        isinstance(b, ToolResultBlock) and b.is_error for m in transcript for b in m.blocks
    )  # nothing invented for a call the provider ran


# -- Gemini CLI -------------------------------------------------------------------------------


def contents_atoms(contents: list[dict[str, Any]]) -> list[Atom]:
    """What a request's contents carry, every part as sent (a result sent twice counts twice)."""
    atoms: list[Atom] = []
    for content in contents:
        role = "assistant" if content["role"] == "model" else "user"
        for part in content["parts"]:
            if "functionCall" in part:
                call = part["functionCall"]
                atoms.append(("call", None, call["name"], call["args"]))
            elif "functionResponse" in part:
                response = part["functionResponse"]["response"]
                atoms.append(("result", None, response.get("output", response.get("error"))))
            elif part.get("thought"):
                atoms.append(("reasoning", part["text"]))
            elif "text" in part:
                atoms.append(("text", role, part["text"]))
    return atoms


def first_text(contents: list[dict[str, Any]]) -> str:
    return contents[0]["parts"][0]["text"]


GEMINI_SCENARIOS = ["tools-resume", "compression", "subagents"]


@pytest.mark.parametrize("scenario", GEMINI_SCENARIOS)
def test_every_gemini_call_imports_as_the_server_received_it(store: SessionStore, scenario: str) -> None:
    check_gemini_run(store, REAL / "gemini" / scenario)


@pytest.mark.peer("gemini")
@pytest.mark.parametrize("scenario", ["compression", "subagents"])
def test_a_live_gemini_run_imports_as_the_server_received_it(
    tmp_path: Path, store: SessionStore, scenario: str
) -> None:
    """The installed Gemini CLI, run now against the scripted server."""
    from scripts.real_agents_codex_gemini import GEMINI_SCENARIOS as RUNS
    from scripts.real_agents_codex_gemini import run_gemini

    check_gemini_run(store, run_gemini(scenario, RUNS[scenario], tmp_path))


def check_gemini_run(store: SessionStore, folder: Path) -> None:
    """Each session's streamed calls (a sub-agent's in its own session), in order: the texts, tool
    calls and results sent (a resumed history's results twice, as Gemini CLI 0.61 sends them; after
    a compression the snapshot and the rewritten turn), and the usage answered. Router and
    compression side calls (:generateContent) are not chat calls."""
    scenario = folder.name
    main = next(folder.rglob("chats/session-*.jsonl"))
    result = import_file(main, store)
    requests = [r for r in load_request_log(folder) if ":streamGenerateContent" in r["path"]]
    answers = answered(folder) if (folder / "answers.json").exists() else {}
    assert len(result.sessions) == 1 + len(list(folder.rglob("chats/*/*.jsonl")))
    matched = 0
    for session in result.sessions:
        events = store.list_events(session.session_id, kind="request")
        transcript = store.load_transcript(session.session_id)
        mine = [r for r in requests if first_text(r["body"]["contents"]) == transcript[0].text]
        assert len(events) == len(mine) > 0
        matched += len(mine)
        for event, request in zip(events, mine, strict=True):
            first, end = sent_segment(store, session.session_id, event)
            # a resumed history's second copies were not sent by the first run's calls
            seqs = sent_seqs(first, end, event.messages_excluded)
            sent = imported_atoms([transcript[i] for i in seqs], ids=False)
            # Gemini CLI drops earlier thoughts from the history it sends.
            assert [a for a in sent if a[0] != "reasoning"] == contents_atoms(request["body"]["contents"]), (
                scenario,
                event.seq,
            )
            assert event.model == request["path"].split("/")[-1].split(":")[0]
            if answers:
                usage = answers[request["seq"]]
                assert event.usage is not None and event.usage.prompt_tokens == usage["promptTokenCount"]
                assert event.usage.cache_read_input_tokens == usage.get("cachedContentTokenCount", 0)
    assert matched == len(requests)


def test_gemini_usage_is_what_the_server_reported(store: SessionStore) -> None:
    result = import_file(transcript_file(GEMINI, "session-*.jsonl"), store)
    events = store.list_events(result.sessions[0].session_id, kind="request")
    previous = 0
    for event, request in zip(events, requests_to(GEMINI, ":streamGenerateContent"), strict=True):
        reported = gemini_api.usage_for(request["body"], [], previous)
        previous = reported["promptTokenCount"]
        assert event.usage is not None
        assert event.usage.prompt_tokens == reported["promptTokenCount"]
        assert event.usage.cache_read_input_tokens == reported.get("cachedContentTokenCount", 0)
    assert events[0].details["reasoning_tokens"] > 0  # the first reply's thought


def test_gemini_resumed_run_keeps_the_usage_and_the_results_sent_twice(store: SessionStore) -> None:
    """On --resume Gemini CLI rewrites the chat ($set messages, no tokens, each tool result a
    second time): the calls are the ones the CLI counted, none invented for the rewritten copies."""
    path = transcript_file(GEMINI, "session-*.jsonl")
    assert '"$set":{"messages"' in path.read_text(encoding="utf-8")
    result = import_file(path, store)
    (session,) = result.sessions
    assert session.request_count == session.usage_count == 5
    assert session.model == "gemini-3.1-pro-preview"
    transcript = store.load_transcript(session.session_id)
    results = [b.text for m in transcript for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert len(results) > len(set(results))  # the duplicates the model saw are kept


def test_gemini_compression_is_a_compaction_that_keeps_the_earlier_calls(store: SessionStore) -> None:
    folder = REAL / "gemini" / "compression"
    (session,) = import_file(next(folder.rglob("chats/session-*.jsonl")), store).sessions
    requests = store.list_events(session.session_id, kind="request")
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    d = compaction.details
    assert d["by"] == "agent" and d["trigger_kind"] == "auto"
    assert d["agent_setting"] == {"compressionThreshold": 0.001}
    before = [e for e in requests if e.seq < compaction.seq]
    assert len(before) == 3 and d["before_tokens"] == before[-1].usage.prompt_tokens
    assert d["after_tokens"] == next(e for e in requests if e.seq > compaction.seq).usage.prompt_tokens
    assert d["summary"].startswith("<state_snapshot>")
    assert session.request_count == session.usage_count == 5  # no call for the rewritten "Got it"


def test_gemini_sub_agent_is_linked_to_its_invoke_agent_call(store: SessionStore) -> None:
    folder = REAL / "gemini" / "subagents"
    main = next(folder.rglob("chats/session-*.jsonl"))
    (parent, child) = import_file(main, store).sessions
    assert child.parent_session_id == parent.session_id
    meta = store.get_session(child.session_id).metadata
    invoke = next(
        b
        for m in store.load_transcript(parent.session_id)
        for b in m.blocks
        if isinstance(b, ToolUseBlock) and b.name == "invoke_agent"
    )
    assert meta["parent_tool_use_id"] == invoke.id and meta["agent_name"] == "codebase_investigator"
    assert child.title == "codebase_investigator: List the files in the repository and say what they are."
    assert FORMAT_GEMINI.locations is not None
    assert FORMAT_GEMINI.locations.files_under(folder / "tmp") == [main]
    assert FORMAT_GEMINI.accompanies(next(folder.rglob("chats/*/*.jsonl")))
    assert import_file(main, store).status == "unchanged"


def test_what_the_files_do_not_keep_is_measured_once_and_carried_to_every_call(store: SessionStore) -> None:
    """Codex keeps no tool definitions, Gemini CLI no system instruction or tools: the gap at the
    first call is carried, so later estimates follow the provider's count closely."""
    for folder, pattern, where in (
        (CODEX, "rollout-*.jsonl", "tools"),
        (GEMINI, "session-*.jsonl", "system"),
    ):
        (session,) = import_file(transcript_file(folder, pattern), store).sessions
        events = store.list_events(session.session_id, kind="request")
        prefix = events[0].details["unlogged_prefix_tokens"]
        assert prefix > 1_000 and all(e.details["unlogged_prefix_in"] == where for e in events)
        assert events[0].projected_tokens == events[0].usage.prompt_tokens
        for event in events[1:]:
            assert abs(event.projected_tokens - event.usage.prompt_tokens) / event.usage.prompt_tokens < 0.05


def _post(url: str, body: dict[str, Any]) -> tuple[int, bytes]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, json.dumps(body).encode(), {"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_scripted_servers_answer_errors_and_padded_usage_as_scripted() -> None:
    """What the failed-call and auto-compaction scenarios rely on: an error reply in the API's own
    shape, and a padded usage counted as cache reads (and answered_usages says what was sent)."""
    from tests.model_server.core import ScriptedServer

    body = {"model": "gpt-5.5", "input": [{"type": "message", "role": "user", "content": "hi"}]}
    with openai_responses.install(ScriptedServer()) as server:
        server.queue({"error": {"status": 400, "code": "context_length_exceeded", "message": "too long"}})
        server.queue({"output": [{"type": "message", "text": "ok"}], "pad": 30_000})
        status, raw = _post(server.base_url + "/v1/responses", body)
        assert status == 400 and json.loads(raw)["error"]["code"] == "context_length_exceeded"
        status, raw = _post(server.base_url + "/v1/responses", body)
        usage = openai_responses.answered_usages(server)[2]
        plain = openai_responses.usage_for(body, 0, [])
        assert status == 200 and usage["input_tokens"] == plain["input_tokens"] + 30_000
        assert usage["input_tokens_details"]["cached_tokens"] == 30_000
    contents = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    with gemini_api.install(ScriptedServer()) as server:
        server.queue({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "too many tokens"}})
        status, raw = _post(
            server.base_url + "/v1beta/models/gemini-3.1-pro-preview:streamGenerateContent", contents
        )
        assert status == 400 and json.loads(raw)["error"]["status"] == "INVALID_ARGUMENT"


_ODD_VALUES = st.sampled_from([None, 0, -1, "", "x", [], {}, [1], {"a": 1}, True, 1.5])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_damaged_codex_or_gemini_line_imports_or_says_what_is_wrong(
    tmp_path: Path, data: st.DataObject
) -> None:
    """Any field of any line of a real rollout or chat set to a value of another type: the file
    imports, or an ImportFormatError names it; never a raw exception."""
    from engine.errors import ImportFormatError

    sources = sorted(p for p in REAL.rglob("*.jsonl") if p.parent.name != "_shapes" and p.name != "requests.jsonl"
                     and ("codex" in p.parts or "gemini" in p.parts))  # fmt: skip
    source = data.draw(st.sampled_from(sources))
    lines = [json.loads(line) for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    target = lines[data.draw(st.integers(0, len(lines) - 1))]
    for _ in range(data.draw(st.integers(1, 4))):  # walk down to a field, then damage it
        keys = list(target) if isinstance(target, dict) else list(range(len(target)))
        if not keys:
            break
        key = data.draw(st.sampled_from(keys))
        if not isinstance(target[key], dict | list) or data.draw(st.booleans()):
            target[key] = data.draw(_ODD_VALUES)
            break
        target = target[key]
    with tempfile.TemporaryDirectory(dir=tmp_path) as folder:  # one per example
        path = Path(folder) / source.relative_to(REAL)
        path.parent.mkdir(parents=True)
        path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
        with SessionStore(Path(folder) / "s.db") as store:
            try:
                import_file(path, store)
            except ImportFormatError as exc:
                assert str(exc)
