"""Claude Code sessions written by the real CLI (2.1.330) against the scripted model server.

The fixtures under tests/fixtures/real_agents/claude-code/<scenario>/ hold the transcript folder
as Claude Code wrote it and the server's request log (scripts/make_real_agent_fixtures.py
regenerates them). Claude Code 2.1.3xx records every request in the transcript
(``api-request-shape`` / ``api-request-blob`` / ``api-request`` lines): for every model call the
log holds, the request the importer rebuilds from them must be the body the CLI sent, whole
(system blocks, tool definitions, messages, cache_control breakpoints, thinking and
context_management), but for what the file does not record: ``metadata``, ``stream``, the
attribution block Claude Code puts first in ``system`` as it sends, and the compaction
summarizer's call (no ``api-request`` line). The same files with those lines removed stand for
older versions: each call's messages are then rebuilt from the thread (same turns, tool_use and
tool_result blocks and prompts; ``<system-reminder>`` text Claude Code adds without writing it
down and the summarizer's instructions are left out of that comparison).
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from model_server.fixtures import load_request_log
from real_agents import agent_bin

from engine.call_failures import failure_of
from engine.importers.formats.claude_code.bundle import (
    claude_code_bundle,
    find_claude_code_bundles,
    parse_claude_code_bundle,
)
from engine.importers.formats.claude_code.replay import REPLAY_LINE_TYPES, message_hash, replay_requests
from engine.importers.formats.claude_code.requests import (
    keeps_previous_thinking,
    request_messages,
    sent_messages,
    thinking_rule,
)
from engine.importers.formats.claude_code.session import is_real_prompt, parse_claude_code
from engine.importers.parsing.parsed import ParsedSession
from engine.importers.parsing.readers import anthropic_message
from engine.importers.writer import MISSING_RESULT_TEXT
from engine.messages import Message, ThinkingBlock, assistant, tool_result, tool_use, user
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
#: Scenarios of one session file (fork_session writes two: the origin and its fork, tested apart).
SCENARIOS = sorted(
    p.name
    for p in FIXTURES.iterdir()
    if p.is_dir() and not p.name.startswith("_") and len(list((p / "transcripts").glob("*.jsonl"))) == 1
)
SHARED_SESSIONS = ROOT.parent / "shared" / "sessions"
SHARED_CC = sorted(SHARED_SESSIONS.glob("claude-code__*.jsonl")) if SHARED_SESSIONS.is_dir() else []
CLAUDE_BIN = agent_bin("claude")
_REMINDER = re.compile(r"\s*<system-reminder>.*?</system-reminder>\s*", re.S)
#: The summarizer call's instructions: Claude Code sends them, the transcript does not keep them.
COMPACT_PROMPT = "CRITICAL: Respond with TEXT ONLY"


#: What the compact_manual_instructions scenario asked ``/compact`` to keep.
COMPACT_INSTRUCTIONS = "Keep the rule about the public API and every file name."


#: The attribution block Claude Code puts first in ``system`` as it sends (not in the file).
ATTRIBUTION = "x-anthropic-billing-header:"
_STRIPPED = Path(tempfile.mkdtemp(prefix="ctxdesk-cc-older-"))


def bundle_sessions(scenario: str, *, recorded_requests: bool = True) -> list[ParsedSession]:
    """The scenario's sessions; ``recorded_requests=False`` reads a copy of its files without
    Claude Code's request records (as versions before 2.1.3xx wrote them)."""
    folder = FIXTURES / scenario / "transcripts"
    if not recorded_requests:
        folder = without_request_records(folder, _STRIPPED / scenario)
    (main_file,) = folder.glob("*.jsonl")
    return parse_claude_code_bundle(claude_code_bundle(main_file))


def without_request_records(folder: Path, out: Path) -> Path:
    if not out.exists():
        shutil.copytree(folder, out)
        for path in out.rglob("*.jsonl"):
            kept = [
                line
                for line in path.read_text(encoding="utf-8").splitlines(keepends=True)
                if json.loads(line).get("type") not in REPLAY_LINE_TYPES
            ]
            path.write_text("".join(kept), encoding="utf-8")
    return out


def as_sent(record: dict[str, Any]) -> dict[str, Any]:
    """The body the CLI sent, without what its transcript does not record."""
    body = {k: v for k, v in record["body"].items() if k not in ("metadata", "stream")}
    body["system"] = [b for b in body["system"] if not str(b.get("text", "")).startswith(ATTRIBUTION)]
    return body


def is_subagent_request(record: dict[str, Any]) -> bool:
    return "SUBTASK:" in json.dumps(record["body"]["messages"][0])


def answered_calls(scenario: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(main agent's, sub-agents') Messages calls the server answered, in order."""
    log = [
        r for r in load_request_log(FIXTURES / scenario) if r["path"] == "/v1/messages" and r["status"] == 200
    ]
    return [r for r in log if not is_subagent_request(r)], [r for r in log if is_subagent_request(r)]


def refused_calls(scenario: str) -> list[dict[str, Any]]:
    """Messages calls the server answered with an error (a 400 "prompt is too long"), in order."""
    return [
        r for r in load_request_log(FIXTURES / scenario) if r["path"] == "/v1/messages" and r["status"] != 200
    ]


def answered(calls: list[Any]) -> list[Any]:
    """The calls that got an answer (the failed ones are compared with the server's errors apart)."""
    return [c for c in calls if failure_of(c.details) is None]


def turns(messages: list[Message]) -> list[str]:
    """Roles with consecutive same-role messages merged (the API reads them as one turn)."""
    out: list[str] = []
    for m in messages:
        if not out or out[-1] != m.role:
            out.append(m.role)
    return out


def skeleton(messages: list[Message]) -> dict[str, list[Any]]:
    uses, results, texts, thinking = [], [], [], []
    for m in messages:
        for b in m.blocks:
            if b.type == "tool_use":
                uses.append((b.id, b.name, b.input))
            elif b.type == "tool_result":  # exactly as sent: the harness's text folded into it included
                content = b.content if isinstance(b.content, str) else [c.model_dump() for c in b.content]
                results.append((b.tool_use_id, content))
            elif b.type == "text" and "<task-notification>" in b.text:  # 2.1.3xx wraps it in a reminder
                start, end = b.text.index("<task-notification>"), b.text.rindex("</task-notification>")
                texts.append(b.text[start : end + len("</task-notification>")])
            elif b.type == "text" and not b.text.lstrip().startswith(("<system-reminder>", COMPACT_PROMPT)):
                texts.append(b.text.strip())
            elif b.type == "thinking":
                thinking.append(b.thinking)
    return {"tool_use": uses, "tool_result": results, "text": texts, "thinking": thinking}


def api_messages(record: dict[str, Any]) -> list[Message]:
    return [anthropic_message(m, where=f"request {record['seq']}") for m in record["body"]["messages"]]


def rebuilt(session: ParsedSession, call: Any) -> list[Message]:
    return request_messages(session.messages, call)


def compared_calls(
    scenario: str, *, recorded_requests: bool = True
) -> list[tuple[ParsedSession, Any, dict[str, Any]]]:
    sessions = bundle_sessions(scenario, recorded_requests=recorded_requests)
    main_log, sub_log = answered_calls(scenario)
    subs = [s for s in sessions if s.parent_key]
    pairs: list[tuple[ParsedSession, Any, dict[str, Any]]] = []
    main_calls = answered(sessions[0].calls)
    assert len(main_calls) == len(main_log), f"{scenario}: main calls vs log"
    pairs += [(sessions[0], c, r) for c, r in zip(main_calls, main_log, strict=True)]
    sub_calls = [c for s in subs for c in answered(s.calls)]
    assert len(sub_calls) == len(sub_log), f"{scenario}: sub-agent calls vs log"
    pairs += [(s, c, r) for s in subs for c, r in zip(answered(s.calls), sub_log, strict=False)]
    return pairs


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_recorded_call_is_rebuilt_exactly_as_the_cli_sent_it(scenario: str) -> None:
    for session, call, record in compared_calls(scenario):
        where = f"{scenario} {session.key} request {record['seq']}"
        if call.details.get("compaction_call"):  # the summarizer's call has no api-request line
            assert getattr(call, "exact_request", None) is None, where
            assert call.details["system_tools_from_request"], where
            ours, sent = rebuilt(session, call), api_messages(record)
            if sent[-1].text.lstrip().startswith(COMPACT_PROMPT):
                sent = sent[:-1]  # its instructions, a turn of their own: not in the file
            assert skeleton(ours) == skeleton(sent), where  # a threshold one saw the kept reply too
            continue
        exact, sent = call.exact_request.body, as_sent(record)
        assert exact["system"] == sent["system"], where
        assert exact["tools"] == sent["tools"], where
        assert exact["messages"] == sent["messages"], where  # content and cache_control breakpoints
        assert (exact["thinking"], exact["context_management"]) == (
            sent["thinking"],
            sent["context_management"],
        )
        assert exact == sent, where
        assert call.exact_request.headers["anthropic-beta"] == record["headers"]["anthropic-beta"], where
        assert call.details["request_digest_verified"] is True, where
        assert call.components.system > 0 and call.components.tools > 0, where
        assert "system_is_harness_prefix" not in call.details, where


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_call_the_provider_refused_is_imported_as_a_failed_call_with_what_it_sent(
    scenario: str,
) -> None:
    sessions = bundle_sessions(scenario)
    failed = [c for s in sessions for c in s.calls if failure_of(c.details) is not None]
    refused = refused_calls(scenario)
    assert len(failed) == len(refused), scenario
    for call, record in zip(failed, refused, strict=True):
        assert call.usage is None and call.exact_request.body == as_sent(record)
        assert call.exact_request.status_code in (None, record["status"])  # when the file keeps it
        if record["status"] == 400:  # Claude Code compacts after "prompt is too long" only
            assert failure_of(call.details) == {
                "cause": "prompt_too_long", "status": None, "message": None, "next": "compacted",
            }  # fmt: skip
        else:  # Claude Code 2.1.3xx writes each failed attempt's status (a system api_error line)
            failure = failure_of(call.details) or {}
            assert (failure["cause"], failure["status"]) == ("provider_error", record["status"]), scenario


def test_a_session_whose_every_call_failed_names_the_model_its_requests_asked_for() -> None:
    (session,) = bundle_sessions("provider_error")
    assert all(failure_of(c.details) is not None for c in session.calls)
    asked = {r["body"]["model"] for r in refused_calls("provider_error")}
    assert (session.model, session.provider) == (asked.pop(), "anthropic") and not asked


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s != "refusal"])
def test_without_request_records_every_call_rebuilds_the_messages_the_cli_sent(scenario: str) -> None:
    # (a refused answer leaves no line but the request record: without it the file cannot show the call)
    for session, call, record in compared_calls(scenario, recorded_requests=False):
        ours, sent = rebuilt(session, call), api_messages(record)
        where = f"{scenario} {session.key} request {record['seq']}"
        if call.details.get("compaction_call"):
            if sent[-1].text.lstrip().startswith(COMPACT_PROMPT):
                sent = sent[:-1]  # the summarizer's instructions, a turn of their own: not in the file
            if scenario.startswith("compact_auto"):
                # without the records a threshold compaction cannot be told from one after a
                # "prompt is too long" (the failed call leaves no line): its summarizer is taken
                # to leave the kept segment out, as that one does
                continue
        assert turns(ours) == turns(sent), where
        assert skeleton(ours) == skeleton(sent), where


def test_a_message_hash_is_claude_codes_own() -> None:
    (main_file,) = (FIXTURES / "parallel_tools" / "transcripts").glob("*.jsonl")
    lines = [(n, json.loads(raw)) for n, raw in enumerate(main_file.read_text().splitlines(), start=1)]
    blobs = [o for _, o in lines if o.get("type") == "api-request-blob"]
    assert blobs and all(message_hash(b["message"]) == b["hash"] for b in blobs)
    replays = replay_requests(lines)
    assert replays and all(r.verified for r in replays.values())
    # the assistant message is no blob: its hash names the file's own assistant lines
    tails = {h for _, o in lines if o.get("type") == "api-request" for h in o["tail"]}
    assert tails - {b["hash"] for b in blobs}


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_no_result_is_invented_or_left_out(scenario: str) -> None:
    for session in bundle_sessions(scenario):
        uses = [b.id for pm in session.messages for b in pm.message.blocks if b.type == "tool_use"]
        results = [b for pm in session.messages for b in pm.message.blocks if b.type == "tool_result"]
        assert sorted(uses) == sorted(r.tool_use_id for r in results), session.key
        assert all(MISSING_RESULT_TEXT not in r.text for r in results)


def test_parallel_tool_results_all_answer_their_one_assistant_message() -> None:
    (main,) = bundle_sessions("parallel_tools")
    roles = [pm.message.role for pm in main.messages]
    assert roles == ["user", "assistant", "user", "assistant"]
    assert len(main.messages[1].message.tool_use_ids) == 3
    # in completion order, as Claude Code wrote and sent them
    assert sorted(main.messages[2].message.tool_result_ids) == sorted(main.messages[1].message.tool_use_ids)
    assert not any("abandoned" in note for note in main.notes)


def test_recorded_calls_count_the_real_system_prompt_and_tools_not_a_prefix_estimate() -> None:
    (main,) = bundle_sessions("resume")
    assert "harness_prefix_tokens" not in main.metadata
    assert "Agent" in {t["name"] for t in main.tools}  # the tool definitions as sent
    for call in main.calls:
        body = call.exact_request.body
        assert call.components.tools == get_tokenizer("anthropic").count_tools(body["tools"])
        assert call.components.skills > 0  # the skill listing reminder
        assert call.details["system_sha256"] == main.calls[0].details["system_sha256"]
        error = abs(call.components.total - call.usage.prompt_tokens) / call.usage.prompt_tokens
        assert error < 0.1  # the scripted server's usage is an estimate of its own


def test_calls_carry_the_provider_usage_and_a_harness_prefix_from_the_first_call() -> None:
    (main,) = bundle_sessions("resume", recorded_requests=False)
    first, *rest = main.calls
    prefix = main.metadata["harness_prefix_tokens"]
    assert first.components.total == first.usage.prompt_tokens  # the prefix closes the first call
    assert 15_000 < prefix < first.usage.prompt_tokens  # system prompt + tool definitions
    for call in rest:
        assert call.components.system == prefix and call.details["system_is_harness_prefix"]
        error = abs(call.components.total - call.usage.prompt_tokens) / call.usage.prompt_tokens
        assert error < 0.02


@pytest.mark.parametrize(
    ("scenario", "background"), [("subagent_foreground", False), ("subagent_background", True)]
)
def test_subagent_is_linked_to_the_agent_call_that_started_it(scenario: str, background: bool) -> None:
    main, sub = bundle_sessions(scenario)
    (agent_call,) = [b for pm in main.messages for b in pm.message.blocks if b.type == "tool_use"]
    assert sub.parent_key == main.key and sub.key == f"{main.key}:agent-{sub.metadata['agent_id']}"
    assert sub.metadata["parent_tool_use_id"] == agent_call.id
    assert sub.metadata["prompt"] == agent_call.input["prompt"]
    assert sub.metadata["subagent_type"] == "general-purpose"
    assert sub.metadata["background"] is background
    assert sub.metadata["agent_id"] in main.messages[2].message.text  # the Agent tool's result names it
    if background:  # the notification is a user line of its own that starts a new turn
        notice = main.messages[-2].message
        assert notice.role == "user" and notice.meta["origin"] == "task-notification"
        assert not is_real_prompt(notice)


def test_saved_large_output_becomes_the_offloaded_blob_of_its_result() -> None:
    (main,) = bundle_sessions("large_output")
    (blob,) = main.blobs
    (result,) = [b for pm in main.messages for b in pm.message.blocks if b.type == "tool_result"]
    assert blob.tool_use_id == result.tool_use_id and blob.tool_name == "Bash"
    assert "<persisted-output>" in result.text and len(result.text) < 5_000
    assert blob.content.decode().splitlines() == [str(i) for i in range(1, 36_001)]
    assert [c.components.offloaded_bytes for c in main.calls] == [0, len(blob.content)]


@pytest.mark.parametrize(
    ("scenario", "trigger"),
    [
        ("compact_auto", "compact_threshold"),
        ("compact_auto_pct", "compact_threshold"),
        ("compact_reactive", "compact_threshold"),
        ("compact_manual", "manual"),
        ("compact_manual_instructions", "manual"),
    ],
)
def test_compaction_is_recorded_and_later_calls_send_the_summary(scenario: str, trigger: str) -> None:
    (main,) = bundle_sessions(scenario)
    (summary_at,) = [i for i, pm in enumerate(main.messages) if pm.compaction]
    summary = main.messages[summary_at]
    assert summary.starts_context and summary.message.meta["isCompactSummary"]
    info = summary.compaction
    (boundary,) = [
        json.loads(line)["compactMetadata"]
        for line in only_file(scenario).read_text(encoding="utf-8").splitlines()
        if '"compact_boundary"' in line
    ]
    assert (info["before_tokens"], info["after_tokens"]) == (boundary["preTokens"], boundary["postTokens"])
    assert info["trigger"] == trigger and info["before_tokens"] > info["after_tokens"] > 0
    if scenario == "compact_auto":  # --autocompact 100000: compacted at the threshold, before the new prompt
        assert info["before_tokens"] > 90_000
    assert "Primary Request" in info["summary"] and info["kept_uuids"]
    (summarizer,) = [c for c in main.calls if c.details.get("compaction_call")]
    expected = {  # docs/HELPERS.md "Compaction events": who, what triggered it, the user's instructions
        "compact_auto": ("agent", "auto", None),
        "compact_auto_pct": ("agent", "auto", None),
        "compact_reactive": ("agent", "reactive", None),
        "compact_manual": ("user", "manual", None),
        "compact_manual_instructions": ("user", "manual", COMPACT_INSTRUCTIONS),
    }[scenario]
    assert (info["by"], info["trigger_kind"], info.get("instructions")) == expected
    assert summarizer.usage is None and summarizer.components.summary == 0
    after = main.calls[main.calls.index(summarizer) + 1]
    assert rebuilt(main, after)[0] == summary.message
    assert after.components.summary > 0
    assert after.components.total < summarizer.components.total + after.components.system
    if info["trigger_kind"] == "auto":  # Claude Code's own compaction point, drawn as its limit line
        assert main.metadata["harness_compaction_tokens"] == info["before_tokens"]
        assert all(c.details["harness_compaction_tokens"] == info["before_tokens"] for c in main.calls)
    else:  # a reactive compaction's size is where the prompt no longer fitted, not a threshold
        assert "harness_compaction_tokens" not in main.metadata


def test_title_is_the_first_real_prompt_not_a_caveat_or_command() -> None:
    (main,) = bundle_sessions("compact_manual")
    assert main.title == "What does app.py return?"
    assert any(pm.message.meta.get("isMeta") for pm in main.messages)  # the /compact caveat is there


def test_thinking_of_earlier_turns_is_kept_by_claude_code_2_1_and_stripped_by_older_defaults() -> None:
    (main,) = bundle_sessions("thinking")
    last = main.calls[-1]
    assert last.details["previous_thinking"] == "kept"
    assert sum(isinstance(b, ThinkingBlock) for m in rebuilt(main, last) for b in m.blocks) == 3
    history = [
        user("q1"),
        assistant("a1").with_content(
            [ThinkingBlock(thinking="old " * 50, signature="s"), *assistant("a1").blocks]
        ),
        user("q2"),
        assistant("").with_content(
            [ThinkingBlock(thinking="new", signature="s"), tool_use("t1", "Read").model_dump()]
        ),
        tool_result("t1", "text"),
    ]
    sent, stripped = sent_messages(history, thinking_rule("claude-sonnet-4-5", version="1.0.98"))
    assert stripped == 1 and not any(isinstance(b, ThinkingBlock) for b in sent[1].blocks)
    assert any(isinstance(b, ThinkingBlock) for b in sent[3].blocks)  # the current turn keeps its thinking


@pytest.mark.parametrize(
    ("model", "kwargs", "keeps"),
    [
        ("claude-sonnet-4-5", {}, False),
        ("claude-sonnet-4-20250514", {"version": "1.0.98"}, False),
        ("claude-opus-4-5", {}, True),
        ("claude-sonnet-4-5", {"version": "2.1.197"}, True),
        (
            "claude-sonnet-4-5",
            {"context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}},
            True,
        ),
        (
            "claude-opus-4-5",
            {
                "context_management": {
                    "edits": [
                        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
                    ]
                }
            },
            False,
        ),
    ],
)
def test_thinking_rule_per_model_version_and_recorded_edit(
    model: str, kwargs: dict[str, Any], keeps: bool
) -> None:
    assert keeps_previous_thinking(model, **kwargs) is keeps


def test_parsing_twice_gives_the_same_keys_and_a_grown_file_only_adds(tmp_path: Path) -> None:
    (main_file,) = (FIXTURES / "resume" / "transcripts").glob("*.jsonl")
    lines = [(n, json.loads(raw)) for n, raw in enumerate(main_file.read_text().splitlines(), start=1) if raw]
    half = next(i for i, (_, o) in enumerate(lines) if o.get("type") == "last-prompt")
    before = parse_claude_code(lines[: half + 1], fallback_id="x")
    again = parse_claude_code(lines[: half + 1], fallback_id="x")
    after = parse_claude_code(lines, fallback_id="x")
    assert [s.key for s in before] == [s.key for s in again] == [s.key for s in after]
    ids = [pm.message.id for pm in before[0].messages]
    assert [pm.message.id for pm in after[0].messages][: len(ids)] == ids
    assert len(after[0].messages) > len(ids)


def test_folder_holds_one_bundle_per_session_with_its_files() -> None:
    bundles = find_claude_code_bundles(FIXTURES)
    assert len(bundles) == len(list(FIXTURES.glob("*/transcripts/*.jsonl")))
    by_scenario = {b.session_file.parents[1].name: b for b in bundles}
    assert len(by_scenario["subagent_background"].subagent_files) == 1
    assert len(by_scenario["large_output"].tool_result_files) == 1
    assert not by_scenario["resume"].subagent_files


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_CC, reason="no Claude Code sessions in ../shared")
@pytest.mark.parametrize("path", SHARED_CC, ids=[p.name for p in SHARED_CC])
def test_shared_sessions_keep_every_real_result_and_invent_none(path: Path) -> None:
    sessions = parse_claude_code_bundle(claude_code_bundle(path))
    main = sessions[0]
    results = {
        b.tool_use_id
        for s in sessions
        for pm in s.messages
        for b in pm.message.blocks
        if b.type == "tool_result"
    }
    uses = [
        b.id for s in sessions for pm in s.messages[:-1] for b in pm.message.blocks if b.type == "tool_use"
    ]
    assert set(uses) <= results  # every tool call but a last, unfinished one has its real result
    assert main.title and not main.title.startswith(("Caveat", "<"))
    assert all(s.parent_key == main.key for s in sessions[1:])
    with_usage = [c for c in main.calls if c.usage is not None]
    assert with_usage and main.metadata["harness_prefix_tokens"] > 10_000


@pytest.mark.slow
@pytest.mark.peer("claude")
def test_live_cli_run_matches_its_rebuilt_requests(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "scripts"))
    from make_real_agent_fixtures import make_claude_code_fixtures

    (out,) = make_claude_code_fixtures(["parallel_tools"], out_root=tmp_path)
    (main_file,) = (out / "transcripts").glob("*.jsonl")
    (main,) = parse_claude_code_bundle(claude_code_bundle(main_file))
    log = [r for r in load_request_log(out) if r["path"] == "/v1/messages" and r["status"] == 200]
    assert len(main.calls) == len(log)
    for call, record in zip(main.calls, log, strict=True):
        assert skeleton(rebuilt(main, call)) == skeleton(api_messages(record))
        if getattr(call, "exact_request", None) is not None:  # Claude Code 2.1.3xx records its requests
            assert call.exact_request.body == as_sent(record)


# -- through the import pipeline (import_file: api + writer) --------------------------------------
@pytest.fixture
def store(tmp_path: Path):
    from engine.store import SessionStore

    with SessionStore(tmp_path / "cc.db") as s:
        yield s


def only_file(scenario: str) -> Path:
    (main_file,) = (FIXTURES / scenario / "transcripts").glob("*.jsonl")
    return main_file


def test_import_links_subagent_and_records_calls_with_rebuilt_components(store: Any) -> None:
    from engine.importers import import_file

    result = import_file(only_file("subagent_foreground"), store)
    main_id, sub_id = result.session_ids
    sub = store.get_session(sub_id)
    assert sub.parent_session_id == main_id and sub.metadata["parent_tool_use_id"].startswith("toolu_")
    assert (
        store.get_session(main_id).title
        == "Use a general-purpose sub-agent to inspect util.py, and wait for it."
    )
    for session_id in (main_id, sub_id):
        events = store.list_events(session_id, kind="request")
        requests = store.list_requests(session_id, with_body=True)
        assert events and len(requests) == len(events)
        for event, request in zip(events, requests, strict=True):
            assert request.event_id == event.id and request.source == "import:claude_code"
            assert request.api == "anthropic_messages" and request.headers["anthropic-beta"]
            assert request.input_tokens == event.usage.input_tokens
            writes = event.usage.cache_creation_input_tokens  # the split the response gave, for engine.cost
            assert event.details["cache_write_5m_tokens"] == request.cache_creation_5m_tokens == writes
            assert event.components.system > 0 and event.components.tools > 0
            assert event.details["exact_request"] and "harness_prefix_tokens" not in event.details
    # each stored body is the one the CLI sent (but for what the transcript does not record)
    main_log, sub_log = answered_calls("subagent_foreground")
    bodies = [r.body for sid in (main_id, sub_id) for r in store.list_requests(sid, with_body=True)]
    assert bodies == [as_sent(r) for r in (*main_log, *sub_log)]


def test_import_records_the_compaction_and_the_saved_output(store: Any) -> None:
    from engine.importers import import_file
    from engine.importers.formats.claude_code.session import SUMMARY_RESERVE

    (auto,) = import_file(only_file("compact_auto"), store).session_ids
    requests = store.list_events(auto, kind="request")
    (auto_compaction,) = store.list_events(auto, kind="compaction")
    # the limit is the model's window less Claude Code's own summary reserve; where it compacted is a
    # threshold it reached (details), never the limit (#29: "Limit 155,979" beside the window)
    assert {e.limit_tokens for e in requests} == {200_000 - SUMMARY_RESERVE}
    assert {e.details["harness_compaction_tokens"] for e in requests} == {
        auto_compaction.details["before_tokens"]
    }
    (compacted,) = import_file(only_file("compact_manual"), store).session_ids
    (compaction,) = store.list_events(compacted, kind="compaction")
    assert compaction.trigger == "manual" and compaction.details["harness"] == "claude-code"
    assert compaction.details["before_tokens"] > compaction.details["after_tokens"]
    assert compaction.details["summary"].startswith("This session is being continued")
    (snapshot,) = store.list_snapshots(compacted)
    assert snapshot.strategy == "harness:claude-code"
    messages, summary, _ = store.load_resume_history(compacted)
    assert summary.startswith("This session is being continued") and messages[0].meta["isCompactSummary"]
    assert len(messages) < len(store.load_messages(compacted))
    (offloaded,) = import_file(only_file("large_output"), store).session_ids
    (blob,) = store.list_blobs(offloaded)
    assert blob.tool_name == "Bash" and blob.size_bytes > 190_000


def test_reimport_is_idempotent_and_a_grown_file_adds_only_its_new_lines(tmp_path: Path, store: Any) -> None:
    from engine.importers import import_file

    source = only_file("resume")
    raw = source.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(raw) if '"last-prompt"' in line) + 1
    copy = tmp_path / source.name
    copy.write_text("".join(raw[:cut]), encoding="utf-8")
    (session_id,) = import_file(copy, store).session_ids
    before = [(m.seq, m.message.id) for m in store.load_messages(session_id)]
    events_before = len(store.list_events(session_id, kind="request"))
    assert import_file(copy, store).sessions == ()  # unchanged: nothing written again
    copy.write_text("".join(raw), encoding="utf-8")
    (again,) = import_file(copy, store).session_ids
    after = [(m.seq, m.message.id) for m in store.load_messages(again)]
    assert again == session_id and after[: len(before)] == before and len(after) > len(before)
    assert len(store.list_events(session_id, kind="request")) == 4 > events_before
    assert len({m for _, m in after}) == len(after)  # nothing duplicated


def test_legacy_agent_file_beside_the_session_is_linked_to_its_task_call(tmp_path: Path) -> None:
    def line(kind: str, uid: str, parent: str | None, content: Any, **extra: Any) -> str:
        message: dict[str, Any] = {"role": kind, "content": content}
        if kind == "assistant":
            message |= {"id": f"m-{uid}", "model": "claude-sonnet-4-20250514", "usage": {"input_tokens": 10}}
        body = {"type": kind, "uuid": uid, "parentUuid": parent, "sessionId": "s1", "message": message}
        return json.dumps(body | extra)

    task = {
        "type": "tool_use",
        "id": "toolu_task",
        "name": "Task",
        "input": {"prompt": "Find the bug.", "description": "d"},
    }
    (tmp_path / "s1.jsonl").write_text(
        "\n".join(
            [
                line("user", "u1", None, "Fix it."),
                line("assistant", "a1", "u1", [task]),
                line(
                    "user",
                    "u2",
                    "a1",
                    [{"type": "tool_result", "tool_use_id": "toolu_task", "content": "found"}],
                ),
            ]
        )
        + "\n"
    )
    (tmp_path / "agent-9f.jsonl").write_text(
        "\n".join(
            [
                line("user", "x1", None, "Find the bug.", isSidechain=True, agentId="9f"),
                line(
                    "assistant",
                    "x2",
                    "x1",
                    [{"type": "text", "text": "found"}],
                    isSidechain=True,
                    agentId="9f",
                ),
            ]
        )
        + "\n"
    )
    (bundle,) = find_claude_code_bundles(tmp_path)
    assert [p.name for p in bundle.legacy_agent_files] == ["agent-9f.jsonl"]
    main, sub = parse_claude_code_bundle(bundle)
    assert sub.key == "s1:agent-9f" and sub.parent_key == main.key == "s1"
    assert sub.metadata["parent_tool_use_id"] == "toolu_task" and sub.metadata["background"] is False


@pytest.mark.parametrize(("version", "reported"), [("1.0.98", False), ("2.1.197", True)])
def test_stale_thinking_is_reported_only_where_the_provider_billed_it(
    tmp_path: Path, store: Any, version: str, reported: bool
) -> None:
    """claude-sonnet-4 strips earlier turns' thinking unless Claude Code (2.1) asks to keep it all."""
    from engine.findings import find_waste
    from engine.importers import import_file

    lines, parent = [], None
    for turn in range(3):
        uid = f"u{turn}"
        lines.append(
            {
                "type": "user",
                "uuid": uid,
                "parentUuid": parent,
                "message": {"role": "user", "content": f"q{turn}"},
            }
        )
        blocks = [
            {"type": "thinking", "thinking": f"reasoning {turn} " * 300, "signature": "s"},
            {"type": "text", "text": "a"},
        ]
        usage = {"input_tokens": 100 + turn, "output_tokens": 10}
        message = {
            "role": "assistant",
            "id": f"m{turn}",
            "model": "claude-sonnet-4-20250514",
            "content": blocks,
            "usage": usage,
        }
        lines.append({"type": "assistant", "uuid": f"a{turn}", "parentUuid": uid, "message": message})
        parent = f"a{turn}"
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(o | {"sessionId": "s", "version": version}) + "\n" for o in lines))
    (session_id,) = import_file(path, store).session_ids
    last = store.list_events(session_id, kind="request")[-1]
    assert last.details["previous_thinking"] == ("kept" if reported else "stripped")
    kinds = {f.kind for f in find_waste(store, session_id)}
    assert ("stale_thinking" in kinds) is reported


def test_folder_walks_leave_sub_agent_files_to_their_session(tmp_path: Path) -> None:
    from engine.importers.locations import folder_files

    shutil.copytree(FIXTURES / "subagent_foreground" / "transcripts", tmp_path / "project")
    (tmp_path / "project" / "agent-legacy.jsonl").write_text(
        json.dumps({"type": "user", "sessionId": only_file("subagent_foreground").stem, "isSidechain": True})
        + "\n"
    )
    assert [p.name for p in folder_files(tmp_path)] == [only_file("subagent_foreground").name]


# -- the tree, as an invariant ----------------------------------------------------------------------
def _tree_lines(rounds: list[list[int]]) -> list[tuple[int, dict[str, Any]]]:
    """Claude Code 2.x lines of ``rounds`` of parallel tool calls: one line per tool_use block
    (chained), each result off its own tool_use line in the given completion order, the next
    assistant line off the last result written."""
    out: list[dict[str, Any]] = [
        {"type": "user", "uuid": "u0", "parentUuid": None, "message": {"role": "user", "content": "go"}}
    ]
    parent = "u0"
    for r, order in enumerate(rounds):
        use_lines = []
        for k in range(len(order)):
            uid = f"a{r}-{k}"
            block = {"type": "tool_use", "id": f"t{r}-{k}", "name": "Read", "input": {"n": k}}
            message = {"role": "assistant", "id": f"m{r}", "model": "claude-sonnet-4-5", "content": [block]}
            out.append({"type": "assistant", "uuid": uid, "parentUuid": parent, "message": message})
            use_lines.append(uid)
            parent = uid
        for k in order:
            result = {"type": "tool_result", "tool_use_id": f"t{r}-{k}", "content": f"result {r}-{k} " * 5}
            uid = f"r{r}-{k}"
            out.append(
                {
                    "type": "user", "uuid": uid, "parentUuid": use_lines[k], "sourceToolAssistantUUID": use_lines[k],
                    "message": {"role": "user", "content": [result]},
                }
            )  # fmt: skip
            parent = uid
    final = {
        "role": "assistant",
        "id": "mz",
        "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": "done"}],
    }
    out.append({"type": "assistant", "uuid": "z", "parentUuid": parent, "message": final})
    return [(n, o | {"sessionId": "s"}) for n, o in enumerate(out, start=1)]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4).flatmap(lambda n: st.permutations(range(n))), min_size=1, max_size=5))
def test_parallel_results_in_any_completion_order_are_all_kept_and_none_invented(
    rounds: list[list[int]],
) -> None:
    (session,) = parse_claude_code(_tree_lines(rounds), fallback_id="s")
    roles = [pm.message.role for pm in session.messages]
    assert roles == ["user"] + ["assistant", "user"] * len(rounds) + ["assistant"]
    for r, order in enumerate(rounds):
        uses, results = session.messages[1 + 2 * r].message, session.messages[2 + 2 * r].message
        assert uses.tool_use_ids == [f"t{r}-{k}" for k in range(len(order))]
        assert sorted(results.tool_result_ids) == sorted(uses.tool_use_ids)
    assert not session.notes
    last = session.calls[-1]
    assert len(request_messages(session.messages, last)) == 1 + 2 * len(rounds)


def test_a_trimmed_log_keeps_the_lines_before_the_gap() -> None:
    lines = _tree_lines([[0], [1, 0]])
    gap = next(i for i, (_, o) in enumerate(lines) if o["uuid"] == "r0-0")  # the first round's result
    (session,) = parse_claude_code(lines[:gap] + lines[gap + 1 :], fallback_id="s")
    assert session.messages[0].message.text == "go"
    assert "is not in the file" in " ".join(session.notes)
    assert sum(len(pm.message.tool_use_ids) for pm in session.messages) == 3  # nothing before the gap is lost


def test_a_summary_without_a_boundary_line_still_starts_the_context() -> None:
    lines = _tree_lines([[0]])
    summary = {
        "type": "user", "uuid": "s1", "parentUuid": "z", "sessionId": "s", "isCompactSummary": True,
        "message": {"role": "user", "content": "This session is being continued. Summary: read t0-0."},
    }  # fmt: skip
    answer = {
        "type": "assistant", "uuid": "z2", "parentUuid": "s1", "sessionId": "s",
        "message": {"role": "assistant", "id": "m9", "model": "claude-sonnet-4-5", "content": [{"type": "text", "text": "ok"}]},
    }  # fmt: skip
    (session,) = parse_claude_code([*lines, (90, summary), (91, answer)], fallback_id="s")
    (compacted,) = [pm for pm in session.messages if pm.compaction]
    assert compacted.starts_context and compacted.compaction["before_tokens"] is None
    last = session.calls[-1]
    assert [m.text for m in request_messages(session.messages, last)] == [compacted.message.text]


def test_reimport_picks_up_a_sub_agent_file_or_saved_output_that_grew_alone(
    tmp_path: Path, store: Any
) -> None:
    from engine.importers import import_file

    folder = tmp_path / "project"
    shutil.copytree(FIXTURES / "subagent_foreground" / "transcripts", folder)
    (main_file,) = folder.glob("*.jsonl")
    (agent_file,) = folder.rglob("subagents/*.jsonl")
    full = agent_file.read_text(encoding="utf-8").splitlines(keepends=True)
    cut = next(i for i, line in enumerate(full) if '"type":"assistant"' in line.replace(" ", "")) + 1
    agent_file.write_text("".join(full[:cut]), encoding="utf-8")
    main_id, sub_id = import_file(main_file, store).session_ids
    before = store.message_count(sub_id)
    assert import_file(main_file, store).status == "unchanged"
    main_stat = main_file.stat()
    agent_file.write_text("".join(full), encoding="utf-8")  # only the sub-agent's file grows
    assert main_file.stat().st_mtime_ns == main_stat.st_mtime_ns
    result = import_file(main_file, store)
    assert result.status == "updated" and list(result.session_ids) == [main_id, sub_id]
    assert store.message_count(sub_id) > before
    assert store.message_count(main_id) == len(bundle_sessions("subagent_foreground")[0].messages)
    # a saved output written after the main file was last read is picked up too
    saved = folder / main_file.stem / "tool-results" / "late.txt"
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text("late output\n", encoding="utf-8")
    assert import_file(main_file, store).status == "updated"
    assert import_file(main_file, store).status == "unchanged"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_imported_database_holds_each_recorded_call_as_the_cli_sent_it(scenario: str, store: Any) -> None:
    from engine.importers import import_file

    result = import_file(only_file(scenario), store)
    main_log, sub_log = answered_calls(scenario)
    failed = refused_calls(scenario)  # recorded too, before the calls after them
    logged = sorted((*main_log, *failed), key=lambda r: r["seq"]) + sub_log
    sent = [as_sent(r) for r in logged if not is_summarizer_request(r)]
    stored = [r for sid in result.session_ids for r in store.list_requests(sid, with_body=True)]
    assert [r.body for r in stored] == sent
    events = {e.id: e for sid in result.session_ids for e in store.list_events(sid, kind="request")}
    assert all(events[r.event_id].details["request_ref"] for r in stored)


def is_summarizer_request(record: dict[str, Any]) -> bool:
    last = record["body"]["messages"][-1]["content"]
    texts = [last] if isinstance(last, str) else [b.get("text", "") for b in last if isinstance(b, dict)]
    return any(str(t).lstrip().startswith(COMPACT_PROMPT) for t in texts)


_REPLAY_FIELDS = ("tail", "keep", "cacheControl", "shapeHash", "base", "params")


@settings(max_examples=60, deadline=None)
@given(
    field=st.sampled_from(_REPLAY_FIELDS),
    value=st.one_of(
        st.none(), st.integers(-3, 10**20), st.text(max_size=8), st.lists(st.integers(), max_size=3),
        st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
        st.lists(st.dictionaries(st.sampled_from(["path", "value"]), st.lists(st.integers(-2, 5))), max_size=2),
    ),
)  # fmt: skip
def test_a_damaged_request_record_is_named_never_a_crash(field: str, value: Any) -> None:
    (main_file,) = (FIXTURES / "parallel_tools" / "transcripts").glob("*.jsonl")
    lines = [(n, json.loads(raw)) for n, raw in enumerate(main_file.read_text().splitlines(), start=1)]
    last = max(n for n, o in lines if o.get("type") == "api-request")
    damaged = [(n, {**o, field: value} if n == last else o) for n, o in lines]
    replays = replay_requests(damaged)
    assert all(r.body is not None or r.problem for r in replays.values())
    (main,) = parse_claude_code(damaged, fallback_id="x")
    assert len(main.calls) == 2


def test_exact_components_leave_out_the_thinking_the_api_strips() -> None:
    from engine.importers.formats.claude_code.replay import ReplayedRequest, exact_components

    thought = {"type": "thinking", "thinking": "old reasoning " * 40, "signature": "s"}
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "q1"}]},
        {"role": "assistant", "content": [thought, {"type": "text", "text": "a1"}]},
        {"role": "user", "content": [{"type": "text", "text": "q2"}]},
    ]
    request = ReplayedRequest("r", 1, {"model": "claude-sonnet-4-5", "system": [], "messages": messages})
    claude = get_tokenizer("anthropic")
    kept = exact_components(request, claude, rule=thinking_rule("claude-opus-4-5"))
    stripped = exact_components(request, claude, rule=thinking_rule("claude-sonnet-4-5", version="1.0.98"))
    assert kept.conversation - stripped.conversation == claude.count(thought["thinking"])


def test_a_reactive_compaction_names_the_failed_call_it_followed(store: Any) -> None:
    from engine.importers import import_file

    (session_id,) = import_file(only_file("compact_reactive"), store).session_ids
    requests = store.list_events(session_id, kind="request")
    (failed,) = [e for e in requests if failure_of(e.details)]
    assert failed.outcome == "context_length_exceeded" and failed.usage is None
    assert failed.components_basis == "estimate" and failed.components.total > 0  # what it sent, measured
    (compaction,) = store.list_events(session_id, kind="compaction")
    assert (compaction.details["by"], compaction.details["trigger_kind"]) == ("agent", "reactive")
    assert compaction.details["after_failed_call"] == failed.seq < compaction.seq
    (stored,) = [r for r in store.list_requests(session_id, with_body=True) if r.event_id == failed.id]
    assert stored.body == as_sent(refused_calls("compact_reactive")[0])


def test_a_manual_compaction_keeps_the_users_instructions(store: Any) -> None:
    from engine.importers import import_file

    (session_id,) = import_file(only_file("compact_manual_instructions"), store).session_ids
    (compaction,) = store.list_events(session_id, kind="compaction")
    assert compaction.trigger == "manual"
    assert (compaction.details["by"], compaction.details["trigger_kind"]) == ("user", "manual")
    assert compaction.details["instructions"] == COMPACT_INSTRUCTIONS


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_call_with_a_provider_count_adds_up_to_it_and_says_its_limit(scenario: str, store: Any) -> None:
    from engine.importers import import_file

    for session_id in import_file(only_file(scenario), store).session_ids:
        for event in store.list_events(session_id, kind="request"):
            provider = event.usage.prompt_tokens if event.usage else None
            if provider:
                assert event.components.total == provider == event.projected_tokens, scenario
                assert event.components_basis in ("exact", "reconciled")
                # the file's requests were rebuilt byte for byte: nothing left unattributed
                assert event.components.unattributed == 0, scenario
            assert event.context_window == 200_000 and event.details["limit_source"] == "model table"


@pytest.mark.parametrize("scenario", ["compact_auto", "compact_reactive", "compact_manual"])
def test_without_request_records_the_harness_prefix_is_measured_again_after_a_compaction(
    scenario: str,
) -> None:
    (main,) = bundle_sessions(scenario, recorded_requests=False)
    (summary_at,) = [i for i, pm in enumerate(main.messages) if pm.starts_context]
    with_usage = [c for c in answered(main.calls) if c.usage is not None and c.usage.prompt_tokens]
    after = [c for c in with_usage if c.details["at_message_index"] >= summary_at]
    before = [c for c in with_usage if c.details["at_message_index"] < summary_at]
    assert before and after
    # the first call of each context closes on the provider's count: nothing measured before the
    # compaction (the first context's prefix) is carried after it
    for first in (before[0], after[0]):
        assert first.components.total == first.usage.prompt_tokens
    assert after[0].details["harness_prefix_tokens"] != before[0].details["harness_prefix_tokens"]


LOGLINES = ROOT / "tests" / "fixtures" / "claude-code-transcripts" / "sample_session.json"


def test_claude_code_transcripts_loglines_json_is_a_claude_code_session(store: Any) -> None:
    from engine.importers import detect_format, import_file

    entries = json.loads(LOGLINES.read_text(encoding="utf-8"))["loglines"]
    assert detect_format(LOGLINES) == "claude-code"
    (session_id,) = import_file(LOGLINES, store).session_ids
    rows = store.load_messages(session_id)
    assert [r.message.role for r in rows] == [e["message"]["role"] for e in entries]  # file order, none lost
    assert [r.message.meta["timestamp"] for r in rows] == [e["timestamp"] for e in entries]
    uses = [b.id for r in rows for b in r.message.blocks if b.type == "tool_use"]
    results = [b.tool_use_id for r in rows for b in r.message.blocks if b.type == "tool_result"]
    assert uses and uses == results
    requests = store.list_events(session_id, kind="request")
    summarizer = [e for e in requests if e.details.get("compaction_call")]  # the compaction's own call
    assert len(requests) == sum(e["type"] == "assistant" for e in entries) + len(summarizer) == 16
    (compaction,) = store.list_events(session_id, kind="compaction")  # its isCompactSummary entry
    assert compaction.message_seq == next(k for k, e in enumerate(entries) if e.get("isCompactSummary"))


# -- one session however its files are passed (#31 identity) ---------------------------------------
FORK = FIXTURES / "fork_session"


def fork_files() -> tuple[Path, Path]:
    """(origin, fork): the fork's file copies the origin's lines, their replies' request records left behind."""
    files = sorted((FORK / "transcripts").glob("*.jsonl"))
    forked = {f: parse_claude_code_bundle(claude_code_bundle(f))[0].forked for f in files}
    assert sorted(forked.values()) == [False, True]
    origin, fork = sorted(files, key=lambda f: forked[f])
    return origin, fork


@pytest.mark.parametrize("order", ["origin first", "fork first"])
def test_a_forked_session_links_to_its_origin_and_its_copied_calls_count_once(store: Any, order: str) -> None:
    from engine.importers import import_files

    origin, fork = fork_files()
    paths = [origin, fork] if order == "origin first" else [fork, origin]
    results = {r.path: r for r in import_files(paths, store)}
    (origin_id,) = results[str(origin)].session_ids
    (fork_id,) = results[str(fork)].session_ids
    assert store.get_session(fork_id).metadata["forked_from"] == origin_id
    assert "forked_from" not in store.get_session(origin_id).metadata
    # every call the server answered is one request event, in the session that made it
    log = [r for r in load_request_log(FORK) if r["path"] == "/v1/messages"]
    stored = [r for sid in (origin_id, fork_id) for r in store.list_requests(sid, with_body=True)]
    assert sorted(json.dumps(r.body, sort_keys=True) for r in stored) == sorted(
        json.dumps(as_sent(r), sort_keys=True) for r in log
    )
    events = [e for sid in (origin_id, fork_id) for e in store.list_events(sid, kind="request")]
    assert len(events) == len(log) and all(e.usage is not None for e in events)
    # the fork keeps the copied history its own calls sent
    assert store.message_count(fork_id) > store.message_count(origin_id)


def subagent_file() -> Path:
    (path,) = (FIXTURES / "subagent_foreground" / "transcripts").glob("*/subagents/agent-*.jsonl")
    return path


@pytest.mark.parametrize(
    "order",
    [
        pytest.param(("sub", "main"), id="sub-agent alone, then its session"),
        pytest.param(("main", "sub"), id="its session, then the sub-agent alone"),
        pytest.param(("sub", "sub", "folder", "main"), id="twice, then as a folder"),
    ],
)
def test_a_sub_agent_is_one_linked_session_however_its_files_are_passed(
    store: Any, tmp_path: Path, order: tuple[str, ...]
) -> None:
    from engine.importers import import_file, import_files

    folder = tmp_path / "project"
    shutil.copytree(FIXTURES / "subagent_foreground" / "transcripts", folder)
    (main_file,) = folder.glob("*.jsonl")
    (sub_file,) = folder.glob("*/subagents/agent-*.jsonl")
    for step in order:
        if step == "folder":
            from engine.importers import folder_files

            import_files(folder_files(folder), store)
        else:
            import_file(sub_file if step == "sub" else main_file, store)
    sessions = store.list_sessions()
    main_id = main_file.stem
    (sub,) = [s for s in sessions if s.id != main_id]
    assert {s.id for s in sessions} == {main_id, sub.id} and sub.parent_session_id == main_id
    assert sub.id == f"{main_id}:agent-{json.loads(sub_file.read_text().splitlines()[0])['agentId']}"
    main_log, sub_log = answered_calls("subagent_foreground")
    assert len(store.list_events(sub.id, kind="request")) == len(sub_log)
    assert len(store.list_events(main_id, kind="request")) == len(main_log)
    assert sub.metadata["parent_tool_use_id"].startswith("toolu_")  # linked to the call that started it


def test_without_request_records_the_hooks_output_is_read_as_the_model_read_it() -> None:
    """Project hooks (scenario harness_text): a prompt hook's output is a reminder of its own, a
    PostToolUse hook's context is folded into the tool result before the tokens-left reminder."""
    calls = compared_calls("harness_text", recorded_requests=False)
    assert calls
    for session, call, record in calls:
        ours, sent = rebuilt(session, call), api_messages(record)

        def hooks(messages: list[Message]) -> list[str]:
            return [
                b.text.strip() for m in messages for b in m.blocks if b.type == "text" and " hook " in b.text
            ]

        assert hooks(ours) == hooks(sent) and hooks(sent), record["seq"]
        assert skeleton(ours)["tool_result"] == skeleton(sent)["tool_result"], record["seq"]
    last = api_messages(calls[-1][2])
    folded = [b.text for m in last for b in m.blocks if b.type == "tool_result"]
    assert any("PostToolUse:Read hook additional context" in text for text in folded)


def test_an_agents_compaction_records_the_limit_in_force(store: Any) -> None:
    from engine.importers import import_file

    (session_id,) = import_file(only_file("compact_reactive"), store).session_ids
    (compaction,) = store.list_events(session_id, kind="compaction")
    before = [e for e in store.list_events(session_id, kind="request") if e.seq < compaction.seq][-1]
    assert compaction.context_window == before.context_window == 200_000
    assert compaction.limit_tokens == before.limit_tokens


@pytest.mark.parametrize(
    ("scenario", "said"),
    [
        ("compact_auto", "the agent compacted itself automatically at its threshold: "),
        ("compact_reactive", "the agent compacted reactively after a call was refused as too long: "),
        ("compact_manual", "the user compacted the context: "),
        (
            "compact_manual_instructions",
            f"the user compacted the context with the instructions {COMPACT_INSTRUCTIONS!r}: ",
        ),
    ],
)
def test_a_stored_compaction_says_who_made_it_why_and_its_size(scenario: str, said: str, store: Any) -> None:
    """The reason every reader shows (timeline marker, Data page, report) is what happened, not a default."""
    from engine.importers import import_file

    (session_id, *_) = import_file(only_file(scenario), store).session_ids
    (event,) = store.list_events(session_id, kind="compaction")
    before, after = event.details["before_tokens"], event.details["after_tokens"]
    assert event.reason == f"{said}{before:,} → {after:,} tokens"
