"""Codex CLI and Gemini CLI transcripts written by the real clients (tests/fixtures/real_agents,
made by scripts/real_agents_codex_gemini.py), checked against what the model server received.

For every model call, the messages the import says were sent (``messages_sent`` of its request
event) must be what the request carried: the same texts, tool calls (name and arguments) and
tool results, in order; and the call's provider usage must be what the server reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from engine.importers import import_file
from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.store import SessionStore
from tests.model_server import gemini as gemini_api
from tests.model_server import openai_responses

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
        elif kind == "reasoning":
            atoms.append(("reasoning", "\n".join(s["text"] for s in item["summary"])))
        elif kind == "function_call":
            atoms.append(("call", item["call_id"], item["name"], json.loads(item["arguments"])))
        elif kind == "custom_tool_call":
            atoms.append(("call", item["call_id"], item["name"], {"input": item["input"]}))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            atoms.append(("result", item["call_id"], item["output"]))
        else:
            raise AssertionError(f"unexpected input item {kind}")
    return atoms


def test_codex_rollout_imports_every_call_as_the_server_received_it(store: SessionStore) -> None:
    result = import_file(transcript_file(CODEX, "rollout-*.jsonl"), store)
    (session,) = result.sessions
    requests = requests_to(CODEX, "/v1/responses")
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 5
    row = store.get_session(session.session_id)
    for event, request in zip(events, requests, strict=True):
        base, *sent = request["body"]["input"]
        assert base["role"] == "developer"
        # The rollout keeps the base instructions; Codex 0.169 sends them without one line
        # (the checklist rule, the plan tool being off in `exec`).
        kept, sent_lines = row.metadata["system_prompt"].splitlines(), base["content"][0]["text"].splitlines()
        assert set(sent_lines) <= set(kept) and len(kept) - len(sent_lines) == 1
        assert imported_atoms(transcript[: event.details["messages_sent"]]) == responses_atoms(sent)
        assert event.model == request["body"]["model"] == "gpt-5.5"
        assert event.context_window == 258_400  # the rollout's model_context_window


def test_codex_usage_is_what_the_server_reported_with_cached_and_reasoning_tokens(
    store: SessionStore,
) -> None:
    result = import_file(transcript_file(CODEX, "rollout-*.jsonl"), store)
    events = store.list_events(result.sessions[0].session_id, kind="request")
    requests = requests_to(CODEX, "/v1/responses")
    previous = 0
    for event, request in zip(events, requests, strict=True):
        body = request["body"]
        # Rebuild the server's stream for this request to read the usage it reported.
        completed = openai_responses.reply_events(body, [], call_index=0, previous_input=previous)[-1][1]
        reported = completed["response"]["usage"]
        previous = reported["input_tokens"]
        assert event.usage is not None
        assert event.usage.prompt_tokens == reported["input_tokens"]
        assert event.usage.cache_read_input_tokens == reported["input_tokens_details"]["cached_tokens"]
    assert [e.details.get("reasoning_tokens") for e in events] == [27, None, None, None, 23]


def test_codex_parallel_calls_form_one_assistant_message_and_apply_patch_is_a_tool_use(
    store: SessionStore,
) -> None:
    result = import_file(transcript_file(CODEX, "rollout-*.jsonl"), store)
    transcript = store.load_transcript(result.sessions[0].session_id)
    first_reply = next(m for m in transcript if m.role == "assistant")
    assert [b.name for b in first_reply.blocks if isinstance(b, ToolUseBlock)] == [
        "exec_command",
        "exec_command",
    ]
    results = transcript[transcript.index(first_reply) + 1]
    assert len(results.tool_result_ids) == 2
    patch = next(
        b for m in transcript for b in m.blocks if isinstance(b, ToolUseBlock) and b.name == "apply_patch"
    )
    assert patch.input["input"].startswith("*** Begin Patch\n*** Update File: README.md")
    assert result.sessions[0].project == "/tmp/ctxdesk-real-agents/codex-tools-resume/repo"


# -- Gemini CLI -------------------------------------------------------------------------------


def contents_atoms(contents: list[dict[str, Any]]) -> list[Atom]:
    atoms: list[Atom] = []
    answered: set[str] = set()
    for content in contents:
        role = "assistant" if content["role"] == "model" else "user"
        for part in content["parts"]:
            if "functionCall" in part:
                call = part["functionCall"]
                atoms.append(("call", None, call["name"], call["args"]))
            elif "functionResponse" in part:
                response = part["functionResponse"]
                if response["id"] in answered:
                    continue  # Gemini CLI 0.61 sends each result twice after --resume
                answered.add(response["id"])
                atoms.append(("result", None, response["response"]["output"]))
            elif part.get("thought"):
                atoms.append(("reasoning", part["text"]))
            elif "text" in part:
                atoms.append(("text", role, part["text"]))
    return atoms


def test_gemini_chat_imports_every_call_as_the_server_received_it(store: SessionStore) -> None:
    result = import_file(transcript_file(GEMINI, "session-*.jsonl"), store)
    (session,) = result.sessions
    requests = requests_to(GEMINI, ":streamGenerateContent")
    events = store.list_events(session.session_id, kind="request")
    transcript = store.load_transcript(session.session_id)
    assert len(events) == len(requests) == 5
    for event, request in zip(events, requests, strict=True):
        sent = imported_atoms(transcript[: event.details["messages_sent"]], ids=False)
        # Gemini CLI drops earlier thoughts from the history it sends.
        assert [a for a in sent if a[0] != "reasoning"] == contents_atoms(request["body"]["contents"])
        assert event.model == request["path"].split("/")[-1].split(":")[0]


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


def test_gemini_resumed_run_keeps_the_usage_the_rewritten_history_dropped(store: SessionStore) -> None:
    """On --resume Gemini CLI rewrites the chat ($set messages) without tokens or model:
    the earlier copies of those messages still give them."""
    path = transcript_file(GEMINI, "session-*.jsonl")
    assert '"$set":{"messages"' in path.read_text(encoding="utf-8")
    result = import_file(path, store)
    (session,) = result.sessions
    assert session.request_count == session.usage_count == 5
    assert session.model == "gemini-3.1-pro-preview"


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
