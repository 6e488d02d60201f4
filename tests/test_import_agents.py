"""Importers of agents' own files, on the samples in tests/fixtures/agents (see its README for
where each comes from): Codex (compaction, pre-envelope rollouts), Gemini CLI (JSON form),
Cline tasks, plain Anthropic lists, OpenHands (legacy pairs, condensations), Aider, Letta,
LangChain, OpenAI Responses item lists; and what is refused, with why.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from engine.errors import ImportFormatError
from engine.importers import detect_format, import_file
from engine.messages import ToolResultBlock, ToolUseBlock
from engine.store import SessionStore
from engine.turns import has_orphans

AGENTS = Path(__file__).resolve().parent / "fixtures" / "agents"
SESSIONS = Path(__file__).resolve().parent / "fixtures" / "sessions"
SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "sessions"
CLINE_TASK = AGENTS / "cline" / "1732400000000"
SWE_GPT4 = next((AGENTS / "swe-agent").glob("gpt4__*/*.traj"))


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def write_json(path: Path, value: Any) -> Path:
    path.write_text(json.dumps(value), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (CLINE_TASK / "api_conversation_history.json", "cline"),
        (AGENTS / "anthropic_messages.json", "anthropic"),
        (AGENTS / "aider" / ".aider.chat.history.md", "aider"),
        (AGENTS / "langchain" / "messages_to_dict.json", "langchain"),
        (AGENTS / "langchain" / "dumpd.json", "langchain"),
        (AGENTS / "openai_responses_input.json", "openai-responses"),
        (AGENTS / "letta" / "memgpt_agent_with_convo.af", "letta"),
        (AGENTS / "letta" / "loop.af", "letta"),
        (AGENTS / "openhands" / "resolver_output_legacy.json", "openhands"),
        (AGENTS / "openhands" / "events_with_condensation.json", "openhands"),
        (AGENTS / "codex" / "rollout-compacted.jsonl", "codex"),
        (AGENTS / "codex" / "rollout-legacy-2025-05-02.jsonl", "codex"),
        (AGENTS / "gemini" / "session-2026-11-24T06-14-b6435e65.json", "gemini"),
        (AGENTS / "claude-web" / "conversations.json", "claude-web"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_detect_format_recognises_each_agent_file(path: Path, expected: str) -> None:
    assert detect_format(path) == expected


#: Every agent sample shipped here: (path under tests/fixtures/agents, format, sessions). A new
#: sample must be listed (the test below fails on one that is not).
AGENT_SAMPLES = [
    ("anthropic_messages.json", "anthropic", 1),
    ("openai_responses_input.json", "openai-responses", 1),
    ("aider/.aider.chat.history.md", "aider", 2),
    ("claude-web/conversations.json", "claude-web", 1),
    ("cline/1732400000000/api_conversation_history.json", "cline", 1),
    ("cline/1764000000000/api_conversation_history.json", "cline", 1),
    ("codex/rollout-compacted.jsonl", "codex", 1),
    ("codex/rollout-legacy-2025-05-02.jsonl", "codex", 1),
    ("gemini/session-2026-11-24T06-14-b6435e65.json", "gemini", 1),
    ("langchain/dumpd.json", "langchain", 1),
    ("langchain/messages_to_dict.json", "langchain", 1),
    ("letta/loop.af", "letta", 1),
    ("letta/memgpt_agent_with_convo.af", "letta", 1),
    ("openhands/events_with_condensation.json", "openhands", 1),
    ("openhands/resolver_mock_output.jsonl", "openhands", 2),
    ("openhands/resolver_output_legacy.json", "openhands", 1),
    ("swe-agent/gpt4__pydicom__default__t-0.00__p-0.95__c-3.00__install-1/pydicom__pydicom-1458.traj", "swe-agent", 1),
]  # fmt: skip
#: Every public transcript in ../shared/sessions: (file, format, sessions).
SHARED_SAMPLES = [
    ("claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl", "claude-code", 3),
    ("claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl", "claude-code", 6),
    ("openhands__multi_swe_bench_examples_output.jsonl", "openhands", 3),
    ("openhands__tests_runtime_trajs_basic_gui_mode.json", "openhands", 1),
    ("swe-agent__6e44b9__sweagenttestrepo-1c2844.traj", "swe-agent", 1),
    ("swe-agent__pydicom__pydicom-1458.traj", "swe-agent", 1),
]


def assert_imports_with_messages(store: SessionStore, path: Path, fmt: str, sessions: int) -> None:
    from engine.importers.writer import MISSING_RESULT_TEXT

    result = import_file(path, store)
    assert (result.format, len(result.sessions)) == (fmt, sessions)
    for session in result.sessions:
        transcript = store.load_transcript(session.session_id)
        assert session.message_count > 0 and any(m.role == "user" for m in transcript)
        assert not any(MISSING_RESULT_TEXT in b.text for m in transcript for b in m.blocks
                       if isinstance(b, ToolResultBlock))  # fmt: skip


def test_every_agent_sample_is_listed() -> None:
    from engine.importers.locations import folder_files

    listed = {AGENTS / p for p, _, _ in AGENT_SAMPLES}
    assert set(folder_files(AGENTS)) == listed


@pytest.mark.parametrize(("path", "fmt", "sessions"), AGENT_SAMPLES, ids=[p for p, _, _ in AGENT_SAMPLES])
def test_every_agent_sample_imports_with_messages(
    store: SessionStore, path: str, fmt: str, sessions: int
) -> None:
    assert_imports_with_messages(store, AGENTS / path, fmt, sessions)


@pytest.mark.shared
@pytest.mark.skipif(not SHARED.is_dir(), reason="needs ../shared")
@pytest.mark.parametrize(("name", "fmt", "sessions"), SHARED_SAMPLES, ids=[n for n, _, _ in SHARED_SAMPLES])
def test_every_shared_session_imports_with_messages(
    store: SessionStore, name: str, fmt: str, sessions: int
) -> None:
    assert {p.name for p in SHARED.iterdir() if p.is_file()} == {n for n, _, _ in SHARED_SAMPLES}
    assert_imports_with_messages(store, SHARED / name, fmt, sessions)


@pytest.mark.parametrize(
    ("path", "started", "timed_calls"),
    [
        ("claude-web/conversations.json", "2026-10-02T08:14:03.500Z", 2),
        ("letta/memgpt_agent_with_convo.af", "2025-03-24T02:59:06.174Z", 25),
        ("openhands/events_with_condensation.json", "2025-01-20T20:29:32.262Z", 5),
        ("cline/1764000000000/api_conversation_history.json", "2025-11-24T16:00:00.000Z", 3),
        ("gemini/session-2026-11-24T06-14-b6435e65.json", "2026-11-24T06:14:12.043Z", 3),
        ("codex/rollout-compacted.jsonl", "2026-11-24T06:13:55.800Z", 7),
        ("langchain/dumpd.json", None, 0),  # keeps no times: none invented
    ],
    ids=lambda v: v if isinstance(v, str) and "/" in v else None,
)
def test_session_and_call_times_come_from_the_transcript(
    store: SessionStore, path: str, started: str | None, timed_calls: int
) -> None:
    """Costs land on the day the calls were made: each call's call_utc and the session's
    started_utc are the transcript's times, not the import's."""
    (session, *_) = import_file(AGENTS / path, store).sessions
    assert store.get_session(session.session_id).metadata.get("started_utc") == started
    events = store.list_events(session.session_id, kind="request")
    assert sum(1 for e in events if e.details.get("call_utc")) == timed_calls
    assert all(e.details["call_utc"] >= started for e in events if e.details.get("call_utc"))


def test_every_agent_sample_imports_with_intact_tool_pairing(store: SessionStore) -> None:
    for path in sorted(
        p for p in AGENTS.rglob("*") if p.is_file() and p.suffix in (".json", ".jsonl", ".af", ".md", ".traj")
    ):
        if path.name in ("ui_messages.json", "task_metadata.json", "README.md"):
            continue
        result = import_file(path, store)
        assert result.sessions, path
        for session in result.sessions:
            assert session.message_count > 0 and session.request_count > 0, path
            assert not has_orphans(store.load_transcript(session.session_id)), path


# -- Codex ------------------------------------------------------------------------------------


def test_codex_compacted_line_is_a_compaction_and_later_calls_send_its_replacement_history(
    store: SessionStore,
) -> None:
    (session,) = import_file(AGENTS / "codex" / "rollout-compacted.jsonl", store).sessions
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    assert compaction.outcome == "compacted" and compaction.details["summary"].startswith("The user asked")
    requests = store.list_events(session.session_id, kind="request")
    after = [e for e in requests if e.message_seq > compaction.message_seq]
    assert len(after) == 2
    # The first call after the compaction sent the replacement history (4 messages) + the new prompt.
    transcript = store.load_transcript(session.session_id)
    assert after[0].details["messages_sent"] - compaction.message_seq == 5
    assert transcript[compaction.message_seq].meta.get("openai_role") is None
    shell = transcript[after[0].message_seq]
    assert [b.name for b in shell.blocks if isinstance(b, ToolUseBlock)] == ["local_shell"]
    assert after[0].usage is not None and after[0].usage.prompt_tokens == 322


def test_codex_pre_envelope_rollout_reads_items_and_function_output_objects(store: SessionStore) -> None:
    (session,) = import_file(AGENTS / "codex" / "rollout-legacy-2025-05-02.jsonl", store).sessions
    transcript = store.load_transcript(session.session_id)
    result = next(b for m in transcript for b in m.blocks if isinstance(b, ToolResultBlock))
    assert '"output":"6 cli.py' in result.text
    assert session.session_id == "5f6e1a2b-0c3d-4e5f-8a9b-0c1d2e3f4a5b"
    assert session.project == "/home/dev/proj" and session.model is None


# -- Gemini, Cline, Anthropic ------------------------------------------------------------------


def test_gemini_json_form_takes_tool_results_from_tool_calls_and_skips_notices(store: SessionStore) -> None:
    result = import_file(AGENTS / "gemini" / "session-2026-11-24T06-14-b6435e65.json", store)
    (session,) = result.sessions
    transcript = store.load_transcript(session.session_id)
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant", "user", "assistant"]
    assert len(transcript[2].tool_result_ids) == 2
    assert session.usage_count == 3 and session.model == "gemini-3.1-pro-preview"
    assert any("notice" in n for n in result.notes)


def test_cline_task_takes_per_request_usage_from_ui_messages_and_model_from_metadata(
    store: SessionStore,
) -> None:
    (session,) = import_file(CLINE_TASK / "api_conversation_history.json", store).sessions
    events = store.list_events(session.session_id, kind="request")
    assert [
        (e.usage.input_tokens, e.usage.cache_read_input_tokens, e.usage.cache_creation_input_tokens)
        for e in events
    ] == [
        (4, 0, 11842),
        (3, 11842, 302),
        (3, 12144, 398),
    ]
    assert session.model == "claude-sonnet-4-20250514" and session.project == "/home/dev/proj"
    assert events[0].details["cline_cost"] == 0.0453


def test_cline_results_sent_as_text_are_tool_results_of_their_calls(store: SessionStore) -> None:
    """Cline sends a result as user text (``[read_file for 'x'] Result:`` + output): answering a
    native tool_use (newer versions) or the XML call in the reply's text. Each becomes a tool_result
    of its call (header kept, nothing invented, none counted as user input); Cline's own cost is
    kept as agent_cost_usd and each call's time is the UI log's."""
    from engine.importers.writer import MISSING_RESULT_TEXT

    for task, calls in ((AGENTS / "cline" / "1764000000000", ["read_file", "execute_command"]),
                        (CLINE_TASK, ["read_file", "replace_in_file", "execute_command"])):  # fmt: skip
        (session,) = import_file(task / "api_conversation_history.json", store).sessions
        transcript = store.load_transcript(session.session_id)
        uses = {b.id: b.name for m in transcript for b in m.blocks if isinstance(b, ToolUseBlock)}
        results = [b for m in transcript for b in m.blocks if isinstance(b, ToolResultBlock)]
        assert [uses[r.tool_use_id] for r in results] == calls
        assert not any(MISSING_RESULT_TEXT in r.text for r in results)
        assert not any("] Result:" in b.text for m in transcript if m.role == "user" for b in m.blocks
                       if not isinstance(b, ToolResultBlock))  # fmt: skip
        assert not has_orphans(transcript)
    native = store.get_session("cline:1764000000000")
    assert (
        native.metadata["agent_cost_usd"] == 0.05695
        and native.metadata["started_utc"] == "2025-11-24T16:00:00.000Z"
    )
    events = store.list_events(native.id, kind="request")
    assert events[0].details["call_utc"] == "2025-11-24T16:00:03.000Z"  # its reply's ts
    last = events[-1].details["measured"]
    assert last["tool_results"] > last["conversation"]  # a session that is mostly tool output
    xml = next(m for m in store.load_transcript("cline:1732400000000") if m.meta.get("cline_tool_xml"))
    assert xml.meta["cline_tool_xml"] == ["<read_file>\n<path>cli.py</path>\n</read_file>"]


def test_cline_ui_messages_alone_says_what_it_is_and_what_to_import(
    tmp_path: Path, store: SessionStore
) -> None:
    for name in ("ui_messages.json", "task_metadata.json"):
        with pytest.raises(ImportFormatError, match=r"import api_conversation_history\.json"):
            import_file(CLINE_TASK / name, store)
    renamed = tmp_path / "ui.json"
    shutil.copy(CLINE_TASK / "ui_messages.json", renamed)
    with pytest.raises(ImportFormatError, match="Cline / Roo Code task's UI log"):
        import_file(renamed, store)
    assert store.list_sessions() == []


def test_cline_conversation_without_its_ui_log_imports_without_usage(
    tmp_path: Path, store: SessionStore
) -> None:
    task = tmp_path / "task"
    task.mkdir()
    shutil.copy(CLINE_TASK / "api_conversation_history.json", task)
    result = import_file(task / "api_conversation_history.json", store)
    assert result.sessions[0].usage_count == 0
    assert any("no ui_messages.json" in n for n in result.notes)


def test_plain_anthropic_message_list_is_one_session(store: SessionStore) -> None:
    (session,) = import_file(AGENTS / "anthropic_messages.json", store).sessions
    assert (session.message_count, session.request_count) == (4, 2)


# -- OpenHands --------------------------------------------------------------------------------


def test_openhands_legacy_pairs_become_tool_calls_with_results_and_the_task(store: SessionStore) -> None:
    result = import_file(AGENTS / "openhands" / "resolver_output_legacy.json", store)
    (session,) = result.sessions
    transcript = store.load_transcript(session.session_id)
    assert transcript[0].text.startswith("Please fix the following issue")
    uses = [b for m in transcript for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert [u.name for u in uses] == ["run", "run_ipython", "run", "finish"]
    assert uses[1].input["code"].startswith("print(open(")
    results = [b for m in transcript for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert results[0].text == "README.md\ncli.py" and len(results) == 3
    assert session.request_count == 4


def test_openhands_resolver_output_with_flat_histories_imports_every_action(store: SessionStore) -> None:
    """OpenHands' resolver output (tests/unit/resolver/mock_output/output.jsonl, MIT): flat
    histories of 8 and 44 events (each observation after its action, arguments at the top level):
    the task, one call per agent action answered by its observation, and OpenHands' own cost."""
    result = import_file(AGENTS / "openhands" / "resolver_mock_output.jsonl", store)
    sessions = {s.session_id.rsplit(":", 1)[-1]: s for s in result.sessions}
    assert {k: s.request_count for k, s in sessions.items()} == {"5": 4, "1": 22}
    assert sessions["5"].title == "Add MIT license (neubig/pr-viewer#5)"  # the issue it resolved
    for number, cost in (("5", 0.070713), ("1", 1.152933)):
        session = sessions[number]
        transcript = store.load_transcript(session.session_id)
        assert transcript[0].role == "user" and "# Problem Statement" in transcript[0].text
        assert not has_orphans(transcript)
        results = [b for m in transcript for b in m.blocks if isinstance(b, ToolResultBlock)]
        assert len(results) == session.request_count - 1 and all(r.text for r in results)  # finish: none
        meta = store.get_session(session.session_id).metadata
        assert meta["agent_cost_usd"] == cost
        per_call = [
            e.details["agent_cost_usd"] for e in store.list_events(session.session_id, kind="request")
        ]
        assert sum(per_call) == pytest.approx(cost)
    first = store.load_transcript(sessions["5"].session_id)
    (use,) = [b for b in first[1].blocks if isinstance(b, ToolUseBlock)]
    assert (use.name, use.input) == ("run", {"command": "touch LICENSE"})


def test_openhands_condensation_is_a_compaction_with_its_summary(store: SessionStore) -> None:
    (session,) = import_file(AGENTS / "openhands" / "events_with_condensation.json", store).sessions
    (compaction,) = store.list_events(session.session_id, kind="compaction")
    assert compaction.details["summary"].startswith("USER_CONTEXT")
    assert compaction.details["forgotten_events"] > 0
    later = [
        e
        for e in store.list_events(session.session_id, kind="request")
        if e.message_seq > compaction.message_seq
    ]
    assert later and all(e.details["messages_sent"] > compaction.message_seq for e in later)


def test_openhands_history_with_nothing_importable_is_an_error(tmp_path: Path, store: SessionStore) -> None:
    empty = write_json(
        tmp_path / "output.json",
        {
            "history": [[{"action": "change_agent_state", "source": "environment"}, {"observation": "null"}]],
            "metrics": {},
        },
    )
    with pytest.raises(ImportFormatError, match="no messages"):
        import_file(empty, store)
    assert store.list_sessions() == []


# -- Aider, Letta, LangChain, Responses -------------------------------------------------------------


def test_aider_log_is_one_session_per_start_with_rounded_usage(store: SessionStore) -> None:
    result = import_file(AGENTS / "aider" / ".aider.chat.history.md", store)
    first, second = result.sessions
    assert (first.model, second.model) == ("claude-3-5-sonnet-20241022", "gpt-4o")
    events = store.list_events(first.session_id, kind="request")
    usage = events[0].usage
    assert (usage.input_tokens, usage.cache_creation_input_tokens, usage.output_tokens) == (1300, 1100, 112)
    assert events[0].details["usage_rounded"] is True
    transcript = store.load_transcript(first.session_id)
    assert transcript[0].text == "add a --verbose flag to cli.py"
    assert "<<<<<<< SEARCH" in transcript[1].text


def test_letta_agent_file_keeps_system_prompt_tools_window_and_evicted_messages(store: SessionStore) -> None:
    result = import_file(AGENTS / "letta" / "memgpt_agent_with_convo.af", store)
    (session,) = result.sessions
    row = store.get_session(session.session_id)
    assert session.context_window == 32_000 and session.model == "gpt-4.5-preview"
    assert "send_message" in {t.name for t in store.list_tools(session.session_id)}
    assert row.metadata["system_prompt"]
    assert any("no longer in the agent's context" in n for n in result.notes)
    (current,) = import_file(AGENTS / "letta" / "loop.af", store).sessions
    assert current.model == "claude-sonnet-4-5-20250929"
    assert store.get_session(current.session_id).metadata["system_prompt"].startswith("You are Loop")


def test_letta_agent_without_conversation_is_refused_saying_why(tmp_path: Path, store: SessionStore) -> None:
    agent = json.loads((AGENTS / "letta" / "loop.af").read_text(encoding="utf-8"))
    agent["agents"][0]["messages"] = agent["agents"][0]["messages"][:1]
    with pytest.raises(ImportFormatError, match="no conversation"):
        import_file(write_json(tmp_path / "empty.af", agent), store)


@pytest.mark.parametrize("name", ["messages_to_dict.json", "dumpd.json"])
def test_langchain_lists_keep_tool_calls_and_usage_metadata(store: SessionStore, name: str) -> None:
    (session,) = import_file(AGENTS / "langchain" / name, store).sessions
    events = store.list_events(session.session_id, kind="request")
    assert [e.usage.prompt_tokens for e in events] == [82, 115]
    assert events[1].usage.cache_read_input_tokens == 64
    assert store.get_session(session.session_id).metadata["system_prompt"] == "You are a helpful assistant."
    assert session.model == "gpt-4o-2024-08-06"


def test_openai_responses_items_group_parallel_calls_into_one_reply(store: SessionStore) -> None:
    (session,) = import_file(AGENTS / "openai_responses_input.json", store).sessions
    transcript = store.load_transcript(session.session_id)
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"]
    assert transcript[1].tool_use_ids == ["call_p", "call_r"]
    assert transcript[2].tool_result_ids == ["call_p", "call_r"]


# -- model and window from the file ------------------------------------------------------------


def test_swe_agent_run_directory_is_a_tokenizer_hint_never_a_model_or_window(store: SessionStore) -> None:
    result = import_file(SWE_GPT4, store)
    (session,) = result.sessions
    assert session.model is None and session.tokenizer == "cl100k_base" and session.tokens_exact
    assert all(e.context_window is None for e in store.list_events(session.session_id, kind="request"))
    assert any("run directory says 'gpt4'" in n for n in result.notes)


@pytest.mark.parametrize(
    ("path", "cost"),
    [(SWE_GPT4, 1.26719), (SESSIONS / "swe-agent__sweagenttestrepo-1c2844.traj", 0.01952)],
    ids=["pydicom", "testrepo"],
)
def test_swe_agent_own_cost_is_kept_beside_ours(store: SessionStore, path: Path, cost: float) -> None:
    """info.model_stats.instance_cost: what SWE-agent says the run cost (its prices), as
    agent_cost_usd; the other run totals stay in model_stats."""
    (session,) = import_file(path, store).sessions
    meta = store.get_session(session.session_id).metadata
    assert meta["agent_cost_usd"] == cost and meta["model_stats"]["instance_cost"] == pytest.approx(cost)
    assert meta["agent_cost_source"] == "swe-agent info.model_stats.instance_cost"


@pytest.mark.shared
@pytest.mark.skipif(not (SHARED / "swe-agent__pydicom__pydicom-1458.traj").exists(), reason="needs ../shared")
def test_shared_swe_agent_run_is_not_measured_against_an_8k_window(
    tmp_path: Path, store: SessionStore
) -> None:
    run = tmp_path / "gpt4__pydicom__default__t-0.00__p-0.95__c-3.00__install-1"
    run.mkdir()
    shutil.copy(SHARED / "swe-agent__pydicom__pydicom-1458.traj", run / "pydicom__pydicom-1458.traj")
    (session,) = import_file(run / "pydicom__pydicom-1458.traj", store).sessions
    assert session.model is None and session.tokens_exact
    assert session.last_estimate_tokens > 8_192  # a gpt-4 (8k) window would read > 100%


def test_unknown_model_is_said_not_guessed(store: SessionStore) -> None:
    result = import_file(AGENTS / "anthropic_messages.json", store)
    assert any("model unknown" in n for n in result.notes)
    assert result.sessions[0].context_window is None


def test_openhands_legacy_records_as_json_lines_are_one_session_each(
    tmp_path: Path, store: SessionStore
) -> None:
    record = json.loads((AGENTS / "openhands" / "resolver_output_legacy.json").read_text(encoding="utf-8"))
    output = tmp_path / "output.jsonl"
    output.write_text(
        json.dumps(record) + "\n" + json.dumps({**record, "number": 13}) + "\n", encoding="utf-8"
    )
    result = import_file(output, store)
    assert [s.message_count for s in result.sessions] == [8, 8]
    assert result.sessions[0].session_id.endswith(":12") and result.sessions[1].session_id.endswith(":13")


def test_claude_web_export_is_one_session_per_conversation_with_attachments_sent(store: SessionStore) -> None:
    result = import_file(AGENTS / "claude-web" / "conversations.json", store)
    (session,) = result.sessions  # the empty conversation is left out
    assert session.session_id == "0d5b1c3e-7a2f-4b8e-9c61-2f4a8e1b7d90"
    transcript = store.load_transcript(session.session_id)
    assert [m.role for m in transcript] == ["user", "assistant", "user", "assistant"]
    assert "a,1\nb,2" in transcript[0].text and "The user wants" not in transcript[1].text
    assert "[tool_use web_search]" in transcript[3].text and session.request_count == 2


@pytest.mark.parametrize(
    ("lines", "says"),
    [
        (
            [{"display": "fix the test", "pastedContents": {}, "timestamp": 1, "project": "/p"}],
            "Claude Code's prompt history",
        ),
        ([{"session_id": "s", "ts": 1, "text": "fix the test"}], "Codex's prompt history"),
        (
            [{"sessionId": "s", "messageId": 0, "type": "user", "message": "hi", "timestamp": "t"}],
            "Gemini CLI's prompt log",
        ),
    ],
)
def test_an_agents_prompt_history_says_what_it_is_and_what_to_import(
    tmp_path: Path, store: SessionStore, lines: list[dict[str, Any]], says: str
) -> None:
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(v) + "\n" for v in lines * 2), encoding="utf-8")
    with pytest.raises(ImportFormatError, match=says):
        import_file(path, store)


@pytest.mark.shared
@pytest.mark.skipif(
    not (SHARED / "openhands__multi_swe_bench_examples_output.jsonl").exists(), reason="needs ../shared"
)
def test_shared_openhands_eval_output_imports_every_instance_with_per_call_usage(store: SessionStore) -> None:
    result = import_file(SHARED / "openhands__multi_swe_bench_examples_output.jsonl", store)
    assert len(result.sessions) == 3
    assert [s.usage_count for s in result.sessions] == [23, 33, 49]  # metrics.token_usages per instance
    for session in result.sessions:
        assert not has_orphans(store.load_transcript(session.session_id))
