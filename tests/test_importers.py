"""Importers on the derived fixtures in tests/fixtures/sessions and on tiny synthetic files.

Real SQLite in tmp_path, real tiktoken. Numbers pinned here come from the fixtures (see
their README for provenance); heavier checks on the full files are in test_importers_shared.py.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ImportFormatError
from engine.events import ComponentTokens, ProviderUsage
from engine.importers import accuracy_report, detect_format, import_file, import_files
from engine.importers.parsing.parsed import ParsedMessage
from engine.importers.writer import MISSING_RESULT_TEXT, repair_tool_pairing
from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from engine.store import SessionStore
from engine.tokens import MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS, get_tokenizer
from engine.turns import has_orphans

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "sessions"
CC_FE5E = FIXTURES / "claude-code__fe5e1c67__head37.jsonl"
CC_5C03 = FIXTURES / "claude-code__5c0375b4__head23.jsonl"
OH_GUI = FIXTURES / "openhands__basic_gui_mode.json"
OH_EVAL = FIXTURES / "openhands__ponyc-4595__head12.jsonl"
SWE_PYDICOM = FIXTURES / "swe-agent__pydicom-1458__head9.traj"
SWE_TESTREPO = FIXTURES / "swe-agent__sweagenttestrepo-1c2844.traj"
OPENAI_LIST = FIXTURES / "openai__sweagenttestrepo-1c2844.json"
ANTHROPIC_EXCHANGES = FIXTURES / "anthropic__5c0375b4__exchanges.json"
FE5E_ID = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
C503_ID = "5c0375b4-57a5-4f26-b12d-d022ee4e51b7"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


def write_lines(path: Path, values: list[Any]) -> Path:
    path.write_text("".join(json.dumps(v) + "\n" for v in values), encoding="utf-8")
    return path


def session_count(store: SessionStore) -> int:
    return len(store.list_sessions())


# -- format detection --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fixture", "expected"),
    [
        (CC_FE5E, "claude-code"),
        (CC_5C03, "claude-code"),
        (OH_GUI, "openhands"),
        (OH_EVAL, "openhands"),
        (SWE_PYDICOM, "swe-agent"),
        (SWE_TESTREPO, "swe-agent"),
        (OPENAI_LIST, "openai"),
        (ANTHROPIC_EXCHANGES, "anthropic"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_detect_format_recognises_each_fixture(fixture: Path, expected: str) -> None:
    assert detect_format(fixture) == expected


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("notes.txt", "just some notes\nabout nothing\n", "not JSON or JSON Lines"),
        (
            "config.json",
            json.dumps({"name": "x", "version": 3}),
            "not a transcript: a JSON object with keys name, version",
        ),
        ("numbers.json", "[1, 2, 3]", "list of int"),
        ("empty.json", "   \n", "empty file"),
        ("rows.jsonl", '{"a": 1}\n{"a": 2}\n', "list of objects with keys a"),
        ("empty-list.json", "[]", "empty JSON list"),
    ],
)
def test_non_transcript_files_raise_import_format_error_naming_the_file(
    tmp_path: Path, store: SessionStore, name: str, content: str, message: str
) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ImportFormatError) as caught:
        detect_format(path)
    assert str(path) in str(caught.value) and message in str(caught.value)
    assert caught.value.path == str(path)
    with pytest.raises(ImportFormatError):
        import_file(path, store)
    assert session_count(store) == 0


def test_binary_file_is_not_a_transcript(tmp_path: Path) -> None:
    path = tmp_path / "blob.bin"
    path.write_bytes(b"\xff\xfe\x00\x01garbage")
    with pytest.raises(ImportFormatError, match="not UTF-8 text"):
        detect_format(path)


def test_malformed_jsonl_line_names_its_line_and_writes_nothing(tmp_path: Path, store: SessionStore) -> None:
    lines = CC_FE5E.read_text(encoding="utf-8").splitlines()
    lines[4] = lines[4][:120]  # line 5 cut in the middle of its JSON
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ImportFormatError) as caught:
        import_file(path, store)
    assert caught.value.line == 5
    assert f"{path}:5:" in str(caught.value)
    assert session_count(store) == 0


def test_a_failure_while_writing_rolls_back_the_whole_file(store: SessionStore) -> None:
    def fail_after_first_session(done: int, total: int, label: str) -> None:
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        import_file(CC_FE5E, store, on_progress=fail_after_first_session)
    assert session_count(store) == 0
    with sqlite3.connect(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM context_events").fetchone()[0] == 0


# -- Claude Code ---------------------------------------------------------------------------------


def test_claude_code_sidechain_is_its_own_session_under_the_main_one(store: SessionStore) -> None:
    result = import_file(CC_FE5E, store)
    assert result.format == "claude-code"
    assert result.session_ids == [FE5E_ID, f"{FE5E_ID}:agent-1"]
    main, sub = (store.get_session(i) for i in result.session_ids)
    assert main.parent_session_id is None and sub.parent_session_id == FE5E_ID
    assert (main.source, sub.source) == ("import:claude-code", "import:claude-code")
    assert main.source_path == str(CC_FE5E.resolve())
    assert sub.metadata["parent_tool_use_id"] == "toolu_01LS6tcVd796SbQKmZqeVnWY"
    assert sub.metadata["description"] == "Build TODO components"
    assert sub.title.startswith("Create React components for the TODO app")
    assert main.title == "/orchestrator create TODO app by Next.js"  # the command, not its wrapper
    assert main.metadata["summaries"] == ["Empty Repo Setup: CLAUDE.md Foundation Created"]
    assert [s.message_count for s in result.sessions] == [8, 18]
    assert [s.request_count for s in result.sessions] == [3, 9]
    main_texts = " ".join(m.text for m in store.load_transcript(FE5E_ID))
    assert "Create React components for the TODO app" not in main_texts  # sub-agent not merged in


def test_claude_code_blocks_of_one_api_message_merge_and_keep_usage_once(store: SessionStore) -> None:
    import_file(CC_FE5E, store)
    raw = [json.loads(line) for line in CC_FE5E.read_text(encoding="utf-8").splitlines()]
    api_ids = {o["message"]["id"] for o in raw if o.get("type") == "assistant"}
    assert len(api_ids) == 12  # from 23 assistant lines
    stored = [m for sid in (FE5E_ID, f"{FE5E_ID}:agent-1") for m in store.load_messages(sid)]
    assistant_ids = [m.message.id for m in stored if m.message.role == "assistant"]
    assert sorted(assistant_ids) == sorted(api_ids)

    first = next(m for m in stored if m.message.id == "msg_0175yHhPUPFGbabUiDkdjvaD")
    assert [b.type for b in first.message.blocks] == ["text", "tool_use", "tool_use"]
    assert first.usage == ProviderUsage(
        input_tokens=3, cache_creation_input_tokens=1331, cache_read_input_tokens=14874, output_tokens=172
    )
    assert len(first.message.meta["uuids"]) == 3
    request = store.list_events(FE5E_ID, kind="request")[0]
    assert request.message_seq == first.seq
    assert request.usage == first.usage
    assert request.details["provider_prompt_tokens"] == 16208
    assert request.details["message_id"] == "msg_0175yHhPUPFGbabUiDkdjvaD"


def test_claude_code_parallel_tool_results_form_one_user_message(store: SessionStore) -> None:
    import_file(CC_5C03, store)
    transcript = store.load_transcript(C503_ID)
    assert [m.role for m in transcript] == [
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    assert len(transcript[4].tool_use_ids) == 3
    assert transcript[5].tool_result_ids == transcript[4].tool_use_ids
    assert transcript[1].meta["isMeta"] is True


@pytest.mark.parametrize("fixture", [CC_FE5E, CC_5C03], ids=lambda p: p.name)
def test_claude_code_tool_pairing_is_intact_in_every_session(store: SessionStore, fixture: Path) -> None:
    result = import_file(fixture, store)
    for session_id in result.session_ids:
        assert not has_orphans(store.load_transcript(session_id)), session_id
    assert not any("tool_use(s) without a result" in n for n in result.notes)


def test_claude_code_session_row_names_model_tokenizer_and_tools(store: SessionStore) -> None:
    import_file(CC_5C03, store)
    session = store.get_session(C503_ID)
    assert (session.model, session.provider) == ("claude-sonnet-4-20250514", "anthropic")
    assert session.tokenizer == get_tokenizer("claude-sonnet-4-20250514").id
    assert session.tokens_exact is False
    assert [(t.name, t.category) for t in store.list_tools(C503_ID)] == [
        ("Glob", "builtin"),
        ("Task", "builtin"),
        ("TodoWrite", "builtin"),
    ]


@pytest.mark.parametrize(
    "fixture", [CC_FE5E, OH_GUI, OH_EVAL, SWE_TESTREPO, OPENAI_LIST], ids=lambda p: p.name
)
def test_request_components_sum_the_messages_sent_before_the_call(store: SessionStore, fixture: Path) -> None:
    result = import_file(fixture, store)
    for session_id in result.session_ids:
        rows = store.load_messages(session_id)
        tokenizer = get_tokenizer(store.get_session(session_id).tokenizer)
        for event in store.list_events(session_id, kind="request"):
            sent = rows[: event.details["messages_sent"]]
            measured = event.details["measured"]  # our measure, before reconciling it
            assert measured.get("tool_results", 0) == sum(r.tool_result_tokens for r in sent)
            conversation = sum(r.tokens - r.tool_result_tokens for r in sent) + REPLY_PRIMING_TOKENS
            assert measured.get("conversation", 0) == conversation
            assert event.details["estimate_total"] == sum(measured.values())
            c, provider = event.components, event.usage.prompt_tokens if event.usage else None
            assert c.total == event.projected_tokens
            if provider:  # the stored components add up to the provider's count
                assert (c.total, event.components_basis) == (provider, "reconciled")
            else:
                assert (c.total, event.components_basis) == (event.details["estimate_total"], "estimate")
            assert event.details["tokenizer"] == tokenizer.id
            assert event.details["exact"] is tokenizer.exact


def measured(event: Any) -> ComponentTokens:
    """A stored call's components as we measured them (before reconciling them to the provider's count)."""
    return ComponentTokens(**event.details["measured"])


# -- synthetic Claude Code lines -------------------------------------------------------------------


def cc_line(kind: str, uuid: str, parent: str | None, content: Any, **extra: Any) -> dict[str, Any]:
    message: dict[str, Any] = {"role": kind, "content": content}
    if kind == "assistant":
        message |= {
            "id": extra.pop("msg_id"),
            "model": extra.pop("model", "claude-sonnet-4-20250514"),
            "usage": extra.pop("usage", {"input_tokens": 10, "output_tokens": 5}),
        }
    return {
        "type": kind, "uuid": uuid, "parentUuid": parent, "sessionId": "s1",
        "isSidechain": extra.pop("sidechain", False), "message": message, **extra,
    }  # fmt: skip


def test_claude_code_compact_boundary_restarts_what_later_calls_sent(
    tmp_path: Path, store: SessionStore
) -> None:
    path = write_lines(
        tmp_path / "compacted.jsonl",
        [
            cc_line("user", "u1", None, "first question " * 50),
            cc_line("assistant", "a1", "u1", [{"type": "text", "text": "answer " * 50}], msg_id="m1"),
            {
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": "b1",
                "parentUuid": None,
                "logicalParentUuid": "a1",
                "sessionId": "s1",
            },
            cc_line("user", "u2", "b1", "summary of the conversation", isCompactSummary=True),
            cc_line("assistant", "a2", "u2", [{"type": "text", "text": "ok"}], msg_id="m2"),
        ],
    )
    result = import_file(path, store)
    rows = store.load_messages("s1")
    assert len(rows) == 4 and rows[2].message.meta["isCompactSummary"] is True
    # the summarizer's own call (sent the whole history) sits between the two answers
    first, summarizer, second = store.list_events("s1", kind="request")
    assert measured(first).conversation == rows[0].tokens + REPLY_PRIMING_TOKENS
    assert summarizer.details["compaction_call"] is True
    after = measured(second)
    assert after.summary + after.conversation == rows[2].tokens + REPLY_PRIMING_TOKENS
    assert "skipped" not in " ".join(result.notes)  # the boundary line is read, not skipped


def test_claude_code_synthetic_messages_are_not_model_calls(tmp_path: Path, store: SessionStore) -> None:
    path = write_lines(
        tmp_path / "synthetic.jsonl",
        [
            cc_line("user", "u1", None, "hello"),
            cc_line(
                "assistant",
                "a1",
                "u1",
                [{"type": "text", "text": "API Error"}],
                msg_id="m1",
                model="<synthetic>",
            ),
        ],
    )
    result = import_file(path, store)
    assert result.sessions[0].request_count == 0
    assert result.sessions[0].model is None


def test_claude_code_abandoned_branch_is_left_out(tmp_path: Path, store: SessionStore) -> None:
    path = write_lines(
        tmp_path / "branched.jsonl",
        [
            cc_line("user", "u1", None, "hello"),
            cc_line("assistant", "a1", "u1", [{"type": "text", "text": "first try"}], msg_id="m1"),
            cc_line("assistant", "a2", "u1", [{"type": "text", "text": "second try"}], msg_id="m2"),
            cc_line("user", "u2", "a2", "thanks"),
        ],
    )
    result = import_file(path, store)
    assert [m.text for m in store.load_transcript("s1")] == ["hello", "second try", "thanks"]
    assert "left out 1 main line(s) on abandoned branches" in " ".join(result.notes)


def test_claude_code_line_without_message_names_its_line(tmp_path: Path, store: SessionStore) -> None:
    path = write_lines(
        tmp_path / "bad.jsonl",
        [cc_line("user", "u1", None, "hi"), {"type": "assistant", "uuid": "a1", "sessionId": "s1"}],
    )
    with pytest.raises(ImportFormatError) as caught:
        import_file(path, store)
    assert caught.value.line == 2


# -- OpenHands -------------------------------------------------------------------------------------


def test_openhands_event_list_maps_actions_observations_and_usage(store: SessionStore) -> None:
    result = import_file(OH_GUI, store)
    (session,) = result.sessions
    assert (session.message_count, session.request_count, session.usage_count) == (10, 5, 4)
    assert session.model == "claude-3-5-sonnet-20241022"
    rows = store.load_messages(session.session_id)
    assert [r.kind for r in rows] == ["user_input", *["tool_use", "tool_result"] * 4, "assistant"]
    assert rows[1].usage == ProviderUsage(input_tokens=4, output_tokens=104, cache_creation_input_tokens=3435)
    assert rows[4].message.blocks[0].text == "File created successfully at: /workspace/todo-app/index.html"
    assert rows[2].message.blocks[0].text.endswith("[The command completed with exit code 0.]")
    events = store.list_events(session.session_id, kind="request")
    assert [e.usage.prompt_tokens if e.usage else None for e in events] == [3439, 3601, 4769, 5488, None]
    assert not has_orphans(store.load_transcript(session.session_id))


def test_openhands_eval_record_keeps_system_prompt_tools_and_per_call_usage(store: SessionStore) -> None:
    (session,) = import_file(OH_EVAL, store).sessions
    record = store.get_session(session.session_id)
    assert record.metadata["instance_id"] == "ponylang__ponyc-4595"
    assert record.metadata["system_prompt"].startswith("You are OpenHands agent")
    assert record.provider == "openai"  # the LiteLLM route of openai/openrouter-llama-4-maverick
    assert record.model == "meta-llama/llama-4-maverick"
    tools = store.list_tools(session.session_id)
    assert [t.name for t in tools] == ["execute_bash", "finish", "str_replace_editor", "think"]
    assert all(t.category == "builtin" and t.tokens > 0 for t in tools)
    tokenizer = get_tokenizer(record.tokenizer)
    events = store.list_events(session.session_id, kind="request")
    usages = [u["prompt_tokens"] for u in json.loads(OH_EVAL.read_text())["metrics"]["token_usages"]]
    assert [e.usage.prompt_tokens for e in events] == usages == [5920, 6736, 6971, 7469]
    for event in events:
        assert (
            event.components.system
            == tokenizer.count(record.metadata["system_prompt"]) + MESSAGE_OVERHEAD_TOKENS
        )
        assert event.components.tools == sum(t.tokens for t in tools)


def test_openhands_actions_of_one_response_merge_into_one_assistant_message(
    tmp_path: Path, store: SessionStore
) -> None:
    response = {
        "id": "resp-1", "model": "gpt-4o",
        "choices": [{"message": {"content": "two things at once", "tool_calls": [
            {"id": "c1", "function": {"name": "execute_bash", "arguments": '{"command": "ls"}'}},
            {"id": "c2", "function": {"name": "execute_bash", "arguments": '{"command": "pwd"}'}},
        ]}}],
        "usage": {"prompt_tokens": 120, "completion_tokens": 30, "prompt_tokens_details": {"cached_tokens": 100}},
    }  # fmt: skip
    events = [
        {"id": 1, "source": "user", "action": "message", "args": {"content": "look around"}},
        {"id": 2, "source": "agent", "action": "run", "args": {"command": "ls"},
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c1", "model_response": response}},
        {"id": 3, "source": "agent", "observation": "run", "content": "a.txt", "cause": 2,
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c1"}},
        {"id": 4, "source": "agent", "action": "run", "args": {"command": "pwd"},
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c2", "model_response": response}},
        {"id": 5, "source": "agent", "observation": "run", "content": "/work", "cause": 4,
         "tool_call_metadata": {"function_name": "execute_bash", "tool_call_id": "c2"}},
    ]  # fmt: skip
    (session,) = import_file(write_json(tmp_path / "events.json", events), store).sessions
    transcript = store.load_transcript(session.session_id)
    assert [m.role for m in transcript] == ["user", "assistant", "user", "user"]
    assert transcript[1].tool_use_ids == ["c1", "c2"]
    assert transcript[1].blocks[1].input == {"command": "ls"}
    (event,) = store.list_events(session.session_id, kind="request")
    assert event.usage == ProviderUsage(input_tokens=20, cache_read_input_tokens=100, output_tokens=30)
    assert not has_orphans(transcript)


# -- SWE-agent and OpenAI lists ---------------------------------------------------------------------


def test_swe_agent_system_message_becomes_the_session_system_prompt(store: SessionStore) -> None:
    traj = json.loads(SWE_PYDICOM.read_text(encoding="utf-8"))
    (session,) = import_file(SWE_PYDICOM, store, model="gpt-4").sessions
    record = store.get_session(session.session_id)
    assert record.source == "import:swe-agent"
    assert record.metadata["system_prompt"] == traj["history"][0]["content"]
    assert record.metadata["model_stats"]["tokens_sent"] == 122612
    assert (record.model, record.tokenizer, record.tokens_exact) == ("gpt-4", "cl100k_base", True)
    assert session.message_count == len(traj["history"]) - 1 == 8
    rows = store.load_messages(session.session_id)
    assert rows[0].message.meta["is_demo"] is True
    assert record.title.startswith("We're currently solving the following issue")
    events = store.list_events(session.session_id, kind="request")
    assert [e.message_seq for e in events] == [2, 4, 6]
    assert all(e.usage is None for e in events)
    system_tokens = get_tokenizer("gpt-4").count(traj["history"][0]["content"]) + MESSAGE_OVERHEAD_TOKENS
    assert {e.components.system for e in events} == {system_tokens}
    report = accuracy_report(store, session.session_id)
    assert report.aggregate_ratio is None  # the fixture holds 3 of the run's 12 calls


def test_swe_agent_without_a_model_falls_back_to_the_heuristic_tokenizer(store: SessionStore) -> None:
    (session,) = import_file(SWE_PYDICOM, store).sessions
    assert (session.model, session.tokenizer, session.tokens_exact) == (None, "chars/4", False)


def test_swe_agent_function_calling_trajectory_with_the_final_step_from_trajectory(
    store: SessionStore,
) -> None:
    (session,) = import_file(SWE_TESTREPO, store).sessions
    assert (session.model, session.tokenizer) == ("gpt-4o", "o200k_base")
    transcript = store.load_transcript(session.session_id)
    assert len(transcript) == 10 and session.request_count == 5
    assert transcript[-1].meta["from_trajectory"] is True
    assert sum(len(m.tool_use_ids) for m in transcript) == 4
    assert not has_orphans(transcript)
    report = accuracy_report(store, session.session_id)
    assert report.aggregate_provider_tokens == 7141
    assert 0.9 < report.aggregate_ratio < 1.2


def test_openai_message_list_with_model_and_tool_messages(store: SessionStore) -> None:
    (session,) = import_file(OPENAI_LIST, store).sessions
    record = store.get_session(session.session_id)
    assert (record.source, record.model, record.provider) == ("import:openai", "gpt-4o", "openai")
    transcript = store.load_transcript(session.session_id)
    assert len(transcript) == 9 and session.request_count == 4
    results = [m for m in transcript if m.meta.get("openai_role") == "tool"]
    assert len(results) == 4 and all(m.role == "user" and m.tool_result_ids for m in results)
    assert results[0].tool_result_ids == ["call_fJuazlMUN5fQDQ73G6XSpYpx"]
    assert [t.name for t in store.list_tools(session.session_id)] == ["bash", "edit", "find_file", "open"]


def test_openai_plain_list_keeps_per_message_usage(tmp_path: Path, store: SessionStore) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {"role": "assistant", "content": "hello", "model": "gpt-4o-mini",
         "usage": {"prompt_tokens": 50, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 20}}},
    ]  # fmt: skip
    (session,) = import_file(write_json(tmp_path / "chat.json", messages), store).sessions
    assert session.model == "gpt-4o-mini" and session.tokens_exact
    (event,) = store.list_events(session.session_id, kind="request")
    assert event.usage == ProviderUsage(input_tokens=30, cache_read_input_tokens=20, output_tokens=2)
    assert store.get_session(session.session_id).metadata["system_prompt"] == "be brief"


# -- Anthropic request logs -------------------------------------------------------------------------


def test_anthropic_exchanges_estimate_what_claude_code_estimates_for_the_same_calls(
    store: SessionStore,
) -> None:
    exchanges = import_file(ANTHROPIC_EXCHANGES, store)
    claude = import_file(CC_5C03, store)
    (session,) = exchanges.sessions
    assert (session.message_count, session.request_count, session.usage_count) == (7, 3, 3)
    from_log = store.list_events(session.session_id, kind="request")
    from_claude = store.list_events(claude.session_ids[0], kind="request")
    # the Claude Code import adds the harness prefix its file does not hold (system prompt, tools)
    assert [e.details["estimate_total"] for e in from_log] == [
        e.details["estimate_total"] - e.details["harness_prefix_tokens"] for e in from_claude
    ]
    assert [e.usage for e in from_log] == [e.usage for e in from_claude]


def test_anthropic_request_with_tools_and_no_response(tmp_path: Path, store: SessionStore) -> None:
    tools = [
        {"name": "mcp__github__create_issue", "description": "Open an issue",
         "input_schema": {"type": "object", "properties": {"title": {"type": "string"}}}},
        {"name": "read_file", "description": "Read a file",
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    ]  # fmt: skip
    request = {
        "model": "claude-sonnet-4-5",
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "tools": tools,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "open an issue", "cache_control": {"type": "ephemeral"}}]}],
    }  # fmt: skip
    (session,) = import_file(write_json(tmp_path / "request.json", request), store).sessions
    tokenizer = get_tokenizer("claude-sonnet-4-5")
    (event,) = store.list_events(session.session_id, kind="request")
    assert event.usage is None
    assert event.components.tools == tokenizer.count_tools(tools)
    assert event.components.system == tokenizer.count("You are terse.") + MESSAGE_OVERHEAD_TOKENS
    records = {t.name: t for t in store.list_tools(session.session_id)}
    assert (records["mcp__github__create_issue"].category, records["mcp__github__create_issue"].server) == (
        "mcp",
        "github",
    )
    assert (records["read_file"].category, records["read_file"].server) == ("builtin", None)
    assert records["read_file"].tokens == tokenizer.count_tool(tools[1])


def test_anthropic_exchanges_that_do_not_continue_start_a_new_session(
    tmp_path: Path, store: SessionStore
) -> None:
    def exchange(text: str, reply: str) -> dict[str, Any]:
        return {
            "request": {"model": "claude-haiku-4-5", "messages": [{"role": "user", "content": text}]},
            "response": {"id": f"msg_{reply}", "content": [{"type": "text", "text": reply}],
                         "usage": {"input_tokens": 12, "output_tokens": 3}},
        }  # fmt: skip

    continued = exchange("hi", "hello")
    continued["request"]["messages"] += [
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": "and?"},
    ]
    result = import_file(
        write_json(tmp_path / "log.json", [exchange("hi", "hello"), continued, exchange("new", "topic")]),
        store,
    )
    assert [s.message_count for s in result.sessions] == [4, 2]
    assert [s.request_count for s in result.sessions] == [2, 1]


# -- import_files, re-import, accuracy --------------------------------------------------------------


def test_import_files_reports_progress_per_file_and_stops_at_a_bad_one(
    tmp_path: Path, store: SessionStore
) -> None:
    calls: list[tuple[int, int, str]] = []
    bad = tmp_path / "bad.json"
    bad.write_text('{"nothing": true}', encoding="utf-8")
    results = import_files([OH_GUI, SWE_TESTREPO], store, on_progress=lambda *a: calls.append(a))
    assert [r.format for r in results] == ["openhands", "swe-agent"]
    assert calls == [(1, 2, OH_GUI.name), (2, 2, SWE_TESTREPO.name)]
    with pytest.raises(ImportFormatError, match=r"bad\.json"):
        import_files([CC_5C03, bad, OPENAI_LIST], store)
    assert {s.source for s in store.list_sessions()} == {
        "import:openhands",
        "import:swe-agent",
        "import:claude-code",
    }


def test_import_file_progress_counts_sessions(store: SessionStore) -> None:
    calls: list[tuple[int, int, str]] = []
    import_file(CC_FE5E, store, on_progress=lambda *a: calls.append(a))
    assert [(done, total) for done, total, _ in calls] == [(1, 2), (2, 2)]
    assert calls[1][2].startswith("Create React components")


def test_reimporting_an_unchanged_file_adds_nothing(store: SessionStore) -> None:
    first = import_file(CC_FE5E, store)
    second = import_file(CC_FE5E, store)
    assert first.status == "imported" and second.status == "unchanged" and not second.sessions
    assert session_count(store) == 2
    assert store.message_count(FE5E_ID) == 8


def test_a_claude_code_session_read_from_another_file_is_the_same_session_not_a_copy(
    tmp_path: Path, store: SessionStore
) -> None:
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(CC_FE5E.read_bytes())
    first = import_file(CC_FE5E, store)
    second = import_file(copy, store)
    assert first.session_ids == second.session_ids and first.session_ids[0] == FE5E_ID
    assert store.get_session(second.session_ids[1]).parent_session_id == FE5E_ID
    assert session_count(store) == 2  # Claude Code's own session id: one session, its calls counted once
    assert len(store.list_events(FE5E_ID, kind="request")) == first.sessions[0].request_count
    assert store.get_session(FE5E_ID).source_path == str(CC_FE5E.resolve())  # the first file stays its source


def test_a_session_without_an_id_of_its_own_from_another_file_gets_a_suffixed_id(
    tmp_path: Path, store: SessionStore
) -> None:
    lines = [json.loads(line) for line in CC_FE5E.read_text(encoding="utf-8").splitlines()]
    for value in lines:
        value.pop("sessionId", None)
    original, copy = tmp_path / "a" / "s.jsonl", tmp_path / "b" / "s.jsonl"
    for path in (original, copy):
        path.parent.mkdir()
        path.write_text("".join(json.dumps(v) + "\n" for v in lines), encoding="utf-8")
    first, second = import_file(original, store), import_file(copy, store)
    assert first.session_ids[0] != second.session_ids[0]


def test_accuracy_report_compares_absolute_and_delta_counts(store: SessionStore) -> None:
    import_file(CC_FE5E, store)
    report = accuracy_report(store, FE5E_ID, with_sub_agents=True)
    assert report.session_ids == (FE5E_ID, f"{FE5E_ID}:agent-1")
    assert (report.calls, report.compared, report.delta_pairs) == (12, 12, 10)
    assert [r.provider for r in report.rows[:3]] == [16208, 16447, 16750]
    # Claude Code's provider count holds a hidden system prompt and tools, estimated from the
    # first call as the harness prefix...
    assert 0.9 < report.median_ratio < 1.1
    # ...and growth between consecutive calls is measured without it.
    assert 0.7 < report.delta_total_ratio < 1.3
    assert report.delta_mean_abs_pct_error < 30
    assert "delta: MAPE" in report.summary()


# -- invariants -----------------------------------------------------------------------------------


def _synthetic(ops: list[tuple[str, int]]) -> list[ParsedMessage]:
    """Messages from (kind, n) ops: 'use' = assistant with n tool uses, 'result' = results for
    the n most recent uses (some may be missing or invented), 'user' = user text."""
    messages: list[ParsedMessage] = []
    uses: list[str] = []
    for step, (kind, n) in enumerate(ops):
        if kind == "use":
            ids = [f"t{step}_{i}" for i in range(n)]
            uses += ids
            messages.append(
                ParsedMessage(Message(role="assistant", content=[ToolUseBlock(id=i, name="x") for i in ids]))
            )
        elif kind == "result":
            ids = uses[-n:] if n else [f"ghost{step}"]
            messages.append(
                ParsedMessage(
                    Message(role="user", content=[ToolResultBlock(tool_use_id=i, content="r") for i in ids])
                )
            )
        else:
            messages.append(ParsedMessage(Message(role="user", content=[TextBlock(text=f"say {step}")])))
    return messages


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["use", "result", "user"]), st.integers(0, 3)), max_size=12))
def test_repaired_pairing_never_leaves_orphans(ops: list[tuple[str, int]]) -> None:
    messages = _synthetic(ops)
    before_text = sum(len(pm.message.text) for pm in messages)
    repair_tool_pairing(messages)
    repaired = [pm.message for pm in messages]
    assert not has_orphans(repaired)
    assert sum(len(m.text) for m in repaired) >= before_text  # nothing the model saw is lost
    for message in repaired:
        for block in message.blocks:
            if isinstance(block, ToolResultBlock) and block.is_error:
                assert block.content == MISSING_RESULT_TEXT


def test_an_older_copy_of_a_claude_code_session_never_replaces_what_its_own_file_gave(
    tmp_path: Path, store: SessionStore
) -> None:
    lines = CC_FE5E.read_text(encoding="utf-8").splitlines(keepends=True)
    older = tmp_path / "backup" / CC_FE5E.name
    older.parent.mkdir()
    older.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    import_file(CC_FE5E, store)
    before = (store.message_count(FE5E_ID), len(store.list_events(FE5E_ID, kind="request")))
    import_file(older, store)  # the same session id, fewer messages: nothing is cut
    assert (store.message_count(FE5E_ID), len(store.list_events(FE5E_ID, kind="request"))) == before
    assert import_file(CC_FE5E, store).status == "unchanged"
    assert import_file(older, store).status == "unchanged"  # known as a file of the session: not read again


def test_an_api_error_line_of_an_older_claude_code_file_is_a_failed_call(
    tmp_path: Path, store: SessionStore
) -> None:
    """Files without request records keep Claude Code's API-error lines: each is a failed call, with
    its cause and the counts its message names, placed after what it sent."""
    error = (
        'API Error: 400 {"type":"error","error":{"type":"invalid_request_error",'
        '"message":"prompt is too long: 212301 tokens > 200000 maximum"}}'
    )
    path = write_lines(
        tmp_path / "old.jsonl",
        [
            cc_line("user", "u1", None, "read the whole repository " * 20),
            cc_line("assistant", "a1", "u1", [{"type": "text", "text": "reading"}], msg_id="m1"),
            cc_line("user", "u2", "a1", "and now the tests"),
            cc_line(
                "assistant", "e1", "u2", [{"type": "text", "text": error}], msg_id="e1", model="<synthetic>",
                isApiErrorMessage=True,
            ),
            cc_line("user", "u3", "e1", "try again"),
            cc_line("assistant", "a2", "u3", [{"type": "text", "text": "done"}], msg_id="m2"),
        ],
    )  # fmt: skip
    import_file(path, store)
    requests = store.list_events("s1", kind="request")
    assert [e.outcome for e in requests] == [None, "context_length_exceeded", None]
    failed = requests[1]
    assert failed.usage is None and failed.details["messages_sent"] == 3  # through "and now the tests"
    assert failed.details["failure"] == {
        "cause": "prompt_too_long", "status": 400, "message": error, "next": "next prompt",
        "prompt_tokens": 212_301, "maximum_tokens": 200_000,
    }  # fmt: skip


def test_an_openhands_file_without_its_system_prompt_measures_it_from_the_providers_count(
    store: SessionStore,
) -> None:
    """An older OpenHands trajectory keeps no SystemMessageAction, though every call sent the system
    prompt and tools (3,339 of the first call's 3,439 tokens): they are measured from the provider's
    count as the system prompt, not left "unattributed"."""
    (result,) = import_files([OH_GUI], store)
    (session_id,) = result.session_ids
    calls = [e for e in store.list_events(session_id, kind="request") if e.usage is not None]
    assert calls
    first = calls[0]
    assert (
        first.components.system == first.details["unlogged_prefix_tokens"] > 0.9 * first.usage.prompt_tokens
    )
    for event in calls:
        assert event.components.unattributed <= 0.01 * event.usage.prompt_tokens, event.components
