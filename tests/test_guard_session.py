"""End to end: a growing session measured and guarded turn by turn, its guard events stored and read back."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from engine.budget import measure_components
from engine.components import SYSTEM_OVERHEAD_TOKENS
from engine.debug import LOGGER_NAME
from engine.events import ComponentTokens
from engine.guard import FINAL_REPORT_TOOL, ContextGuard, GuardDecision, GuardTarget
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.model_table import ModelTable
from engine.settings import ModelSettings, Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

SYSTEM = "You are a coding agent. Read files with read_file before you change them."
TOOLS = [
    {
        "name": "read_file",
        "description": "Read a text file from the workspace.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    }
]


def file_text(turn: int) -> str:
    return "".join(
        f"def handler_{turn}_{i}(request):\n    return respond(request, code={i})\n" for i in range(14)
    )


def test_a_growing_session_earns_a_note_then_a_forced_final_turn_recorded_in_the_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CONTEXT_DEBUG", "1")
    tokenizer = get_tokenizer("gpt-4o")
    settings = resolve_model_settings(
        "gpt-4o",
        settings=Settings(
            models={"gpt-4o": ModelSettings(context_window=6_000, max_output_tokens=1_000, buffer_tokens=200)}
        ),
        table=ModelTable({}, source="test"),
    )
    limit = settings.budget_tokens
    assert limit == 4_800
    target = GuardTarget.from_settings(settings)

    store = SessionStore(tmp_path / "session.db")
    session_id = store.create_session(
        model="gpt-4o", provider="openai", tokenizer=tokenizer.id, tokens_exact=True
    )
    history: list[Message] = []

    def measure(messages: list[Message], tools: list[dict[str, Any]]) -> ComponentTokens:
        return measure_components(tokenizer=tokenizer, system=SYSTEM, tools=tools, messages=messages)

    def persist(decision: GuardDecision) -> None:
        for event in decision.events:
            store.record_event(session_id, event)

    start = measure([], TOOLS)
    guard = ContextGuard(tokenizer, current=start.system + start.skills, schema=start.tools)
    decisions: list[GuardDecision] = []

    def final_turn(turn_messages: list[Message]) -> None:
        """The forced final request: final_report is the only tool, and the turn ends."""
        preflight = guard.evaluate_request(
            [target],
            components=measure(turn_messages, [FINAL_REPORT_TOOL]),
            message_seq=len(turn_messages) - 1,
        )
        persist(preflight)
        decisions.append(preflight)
        assert preflight.outcome == "forced_final"
        assert preflight.tools_restricted_to == ("final_report",)
        assert guard.counters.schema == tokenizer.count_tools([FINAL_REPORT_TOOL])
        turn_messages.append(assistant("Final report: handlers summarised so far; the rest remains."))

    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        for turn in range(40):
            question = user(f"Turn {turn}: open module_{turn}.py and summarise its handlers.")
            guard.add_new(tokenizer.count_message(question), message_seq=len(history))
            turn_messages = [*history, question]
            components = measure(turn_messages, TOOLS)
            preflight = guard.evaluate_request([target], components=components, message_seq=len(history))
            persist(preflight)
            decisions.append(preflight)
            # In this session the requests themselves stay under the limit; a tool output tips it.
            assert not preflight.final_forced
            # the guard's counters track the measured request (reply priming aside)
            assert 0 <= components.total - preflight.counters.projected <= 3
            call = assistant("Reading it.", tool_use(f"t{turn}", "read_file", path=f"module_{turn}.py"))
            guard.add_pending(tokenizer.count_message(call))
            turn_messages.append(call)
            output = tool_result(f"t{turn}", file_text(turn))
            reserved = guard.reserve_tool_output(
                tokenizer.count_message(output),
                tool_name="read_file",
                components=measure([*turn_messages, output], TOOLS),
                message_seq=len(turn_messages),
            )
            persist(reserved)
            decisions.append(reserved)
            if reserved.accepted:
                turn_messages.append(output)
                turn_messages.append(assistant(f"module_{turn}.py has 14 handlers."))
                guard.add_pending(tokenizer.count_message(turn_messages[-1]))
            else:
                refusal = tool_result(f"t{turn}", "[output rejected: context budget exceeded]")
                guard.add_pending(tokenizer.count_message(refusal))
                turn_messages.append(refusal)
                final_turn(turn_messages)
            store.append_messages(session_id, turn_messages[len(history) :], tokenizer=tokenizer)
            history = turn_messages
            if not reserved.accepted:
                break
            guard.commit_turn(current=measure(history, []).total)
        else:
            pytest.fail("the session never reached a forced final turn")

    outcomes = [d.outcome for d in decisions]
    assert "note" in outcomes
    first_note = outcomes.index("note")
    first_final = next(i for i, d in enumerate(decisions) if d.final_forced)
    assert first_final == len(decisions) - 2  # the rejection, then the final request
    assert first_note < first_final

    stored = store.list_events(session_id, kind="guard")
    assert len(stored) == sum(len(d.events) for d in decisions)
    assert {e.limit_tokens for e in stored} == {4_800}
    assert {(e.context_window, e.max_output_tokens, e.buffer_tokens) for e in stored} == {(6_000, 1_000, 200)}
    assert [e.outcome for e in stored] == [d.outcome for d in decisions]
    assert [e.trigger for e in stored].count("turn_preflight") == sum(
        d.trigger == "turn_preflight" for d in decisions
    )

    notes = [e for e in stored if e.outcome == "note"]
    assert all(e.details["note"].startswith("[Context: ") for e in notes)
    assert all(e.projected_tokens <= e.limit_tokens for e in stored if e.outcome in ("ok", "note"))

    # The tool output that tipped the session over is rejected, and the turn ends with a final
    # request offering final_report alone.
    rejected, final = stored[-2], stored[-1]
    assert (rejected.trigger, rejected.outcome, rejected.reason) == (
        "tool_preflight",
        "rejected",
        "token_budget_exceeded",
    )
    assert rejected.projected_tokens > rejected.limit_tokens
    assert (
        rejected.projected_tokens
        == sum(rejected.details["counters"].values()) + rejected.details["tool_tokens"]
    )
    assert rejected.details["tipping"]["tool_name"] == "read_file"
    assert (final.trigger, final.outcome, final.reason) == (
        "turn_preflight",
        "forced_final",
        "token_budget_exceeded",
    )
    assert final.turn_index == rejected.turn_index
    assert final.details["tools_restricted_to"] == ["final_report"]
    assert final.details["sources"]["context_window"].startswith("model:gpt-4o")
    assert (
        final.components is not None
        and final.components.system == tokenizer.count(SYSTEM) + SYSTEM_OVERHEAD_TOKENS
    )
    assert final.components.tools == tokenizer.count_tools([FINAL_REPORT_TOOL])
    assert store.message_count(session_id) == len(history)

    topics = {r.ctx_topic for r in caplog.records if r.name == LOGGER_NAME and hasattr(r, "ctx_topic")}
    assert {
        "init-counters",
        "loop-init",
        "provider-eval",
        "tool-eval",
        "enforce",
        "request-metrics",
    } <= topics
    store.close()
