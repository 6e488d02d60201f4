"""The context guard: pure target evaluation, forced final turns, tool reservations, debug topics."""

from __future__ import annotations

import logging

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.budget import Thresholds, format_note
from engine.debug import LOGGER_NAME, TOPICS
from engine.errors import ValidationError
from engine.events import ComponentTokens
from engine.guard import (
    FINAL_REPORT_TOOL,
    FINAL_REPORT_TOOL_NAME,
    ContextGuard,
    GuardCounters,
    GuardTarget,
    compute_floor,
    decide_request,
    decide_tool_output,
    evaluate_target,
)
from engine.model_table import ModelTable
from engine.settings import ModelSettings, ResolvedModelSettings, Settings, resolve_model_settings
from engine.tokens import get_tokenizer

TOK = get_tokenizer("o200k_base")
FINAL_SCHEMA = TOK.count_tool(FINAL_REPORT_TOOL)
THRESHOLDS = Thresholds(note=0.8, compact=0.95, hard_block=0.98)


def resolved(
    model: str = "gpt-4o",
    *,
    window: int = 10_000,
    max_output: int = 1_000,
    buffer: int = 0,
    budget: int | None = None,
    provider: str | None = None,
) -> ResolvedModelSettings:
    """Settings with limit ``window - max_output - buffer`` (9,000 by default)."""
    level = ModelSettings(
        context_window=window, max_output_tokens=max_output, buffer_tokens=buffer, context_budget=budget
    )
    return resolve_model_settings(
        model, provider, settings=Settings(models={model: level}), table=ModelTable({}, source="test")
    )


def target(model: str = "gpt-4o", **kwargs: object) -> GuardTarget:
    return GuardTarget.from_settings(resolved(model, **kwargs))  # type: ignore[arg-type]


def guard(current: int = 0, schema: int = 0) -> ContextGuard:
    return ContextGuard(TOK, current=current, schema=schema)


# -- pure: one target ----------------------------------------------------------------------------

EVAL_CASES = [
    # name, counters (current, pending, new, schema), limit, floor, expected outcome, level
    ("empty", (0, 0, 0, 0), 9_000, 0, "ok", "ok"),
    ("under the note", (7_000, 100, 50, 49), 9_000, 0, "ok", "ok"),
    ("note threshold", (7_000, 100, 50, 50), 9_000, 0, "note", "note"),
    ("compaction level is not a note", (8_550, 0, 0, 0), 9_000, 0, "ok", "compact"),
    ("exactly at the limit fits", (8_000, 500, 300, 200), 9_000, 0, "ok", "hard_block"),
    ("one over the limit", (8_000, 500, 300, 201), 9_000, 500, "forced_final", "hard_block"),
    ("floor fits, projection does not", (20_000, 0, 1_000, 500), 9_000, 8_999, "forced_final", "hard_block"),
    ("floor passes the limit", (20_000, 0, 1_000, 500), 9_000, 9_001, "skipped_provider", "hard_block"),
]


@pytest.mark.parametrize(
    ("counts", "limit", "floor", "outcome", "level"),
    [case[1:] for case in EVAL_CASES],
    ids=[case[0] for case in EVAL_CASES],
)
def test_evaluate_target_outcomes(
    counts: tuple[int, int, int, int], limit: int, floor: int, outcome: str, level: str
) -> None:
    counters = GuardCounters(*counts)
    evaluation = evaluate_target(counters, limit, thresholds=THRESHOLDS, floor=floor)
    assert evaluation.outcome == outcome
    assert evaluation.level == level
    assert evaluation.projected == sum(counts)
    assert evaluation.remaining == limit - sum(counts)


def test_the_floor_is_fixed_history_plus_this_turn_plus_the_final_report_tool() -> None:
    counters = GuardCounters(current=5_000, pending=300, new=200, schema=2_000)
    assert compute_floor(counters, fixed_tokens=1_000, final_schema=60) == 1_000 + 300 + 200 + 60
    # the fixed part can never exceed what is committed
    assert compute_floor(counters, fixed_tokens=9_999, final_schema=60) == 5_000 + 300 + 200 + 60


counter_values = st.integers(min_value=0, max_value=200_000)
counters_strategy = st.builds(GuardCounters, counter_values, counter_values, counter_values, counter_values)


@given(counters=counters_strategy, limit=st.integers(1, 400_000), floor=st.integers(0, 400_000))
@settings(max_examples=300)
def test_an_ok_or_note_evaluation_never_projects_past_its_limit(
    counters: GuardCounters, limit: int, floor: int
) -> None:
    evaluation = evaluate_target(counters, limit, thresholds=THRESHOLDS, floor=floor)
    if evaluation.outcome in ("ok", "note"):
        assert evaluation.projected <= limit
    else:
        assert evaluation.projected > limit


@given(
    counters=counters_strategy,
    limits=st.lists(st.integers(1, 400_000), min_size=1, max_size=4),
    fixed=st.integers(0, 100_000),
    final_reason=st.sampled_from([None, "context"]),
)
@settings(max_examples=150, deadline=None)
def test_a_request_decision_never_says_ok_for_a_target_it_does_not_fit(
    counters: GuardCounters, limits: list[int], fixed: int, final_reason: str | None
) -> None:
    targets = [
        GuardTarget(f"m{i}", resolved(window=limit + 1_000, max_output=1_000))
        for i, limit in enumerate(limits)
    ]
    plan = decide_request(
        counters, targets, fixed_tokens=fixed, final_schema=FINAL_SCHEMA, final_reason=final_reason
    )
    for decision in plan.targets:
        if decision.outcome in ("ok", "note"):
            assert decision.evaluation.projected <= decision.evaluation.limit
        if decision.outcome == "forced_final":
            assert decision.best_effort == (decision.evaluation.projected > decision.evaluation.limit)
    assert any(d.outcome != "skipped_provider" for d in plan.targets)
    assert plan.final_forced == (plan.outcome == "forced_final")


# -- pure: tool outputs --------------------------------------------------------------------------


@given(
    counters=counters_strategy,
    tokens=st.integers(0, 300_000),
    limits=st.lists(st.integers(1, 900_000), min_size=1),
)
def test_decide_tool_output_rejects_exactly_past_the_smallest_limit(
    counters: GuardCounters, tokens: int, limits: list[int]
) -> None:
    expected = counters.current + counters.pending + counters.new + counters.schema + tokens <= min(limits)
    assert decide_tool_output(counters, tokens, limits) is expected


@given(
    counts=st.tuples(*[st.integers(0, 5_000)] * 4),
    tokens=st.integers(0, 6_000),
)
@settings(max_examples=200, deadline=None)
def test_reserve_rejects_exactly_when_the_output_would_pass_the_limit(
    counts: tuple[int, int, int, int], tokens: int
) -> None:
    current, pending, new, schema = counts
    g = guard(current=current, schema=schema)
    g.add_pending(pending)
    g.add_new(new)
    limit = 9_000
    decision = g.reserve_tool_output(tokens, tool_name="read_file", targets=[target()])
    rejected = current + pending + new + schema + tokens > limit
    assert decision.accepted is (not rejected)
    assert (decision.outcome == "rejected") is rejected
    assert g.may_run_tools is (not rejected)
    assert g.counters.pending == pending + (0 if rejected else tokens)


# -- counters ------------------------------------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.integers(0, 3_000)),
        st.tuples(st.just("pending"), st.integers(0, 3_000)),
        st.tuples(st.just("reserve"), st.integers(0, 3_000)),
        st.tuples(st.just("request"), st.just(0)),
        st.tuples(st.just("commit"), st.just(0)),
    ),
    max_size=40,
)


@given(ops=operations)
@settings(max_examples=150, deadline=None)
def test_counters_only_grow_until_a_turn_commits(ops: list[tuple[str, int]]) -> None:
    g = guard(current=1_000, schema=200)
    targets = [target()]
    g.evaluate_request(targets)
    for op, tokens in ops:
        before = g.counters
        if op == "new":
            g.add_new(tokens)
        elif op == "pending":
            g.add_pending(tokens)
        elif op == "reserve":
            g.reserve_tool_output(tokens, tool_name="t")
        elif op == "request":
            g.evaluate_request(targets)
        else:
            g.commit_turn()
            assert g.counters.current == before.current + before.pending + before.new
            assert (g.counters.pending, g.counters.new) == (0, 0)
            continue
        after = g.counters
        assert after.current == before.current
        assert after.pending >= before.pending
        assert after.new >= before.new


@pytest.mark.parametrize("method", ["add_new", "add_pending", "set_schema"])
def test_negative_counts_are_validation_errors(method: str) -> None:
    g = guard()
    with pytest.raises(ValidationError):
        getattr(g, method)(-1)
    assert g.counters == GuardCounters()


def test_commit_turn_can_set_a_measured_total_after_compaction() -> None:
    g = guard(current=8_000, schema=300)
    g.add_new(500)
    assert g.commit_turn(current=2_000) == GuardCounters(current=2_000, schema=300)
    assert g.turn_index == 1


# -- requests ------------------------------------------------------------------------------------


def test_a_request_that_fits_is_ok_and_leaves_tools_alone() -> None:
    g = guard(current=3_000, schema=500)
    g.add_new(100)
    decision = g.evaluate_request([target()])
    assert (decision.outcome, decision.reason, decision.final_forced) == ("ok", None, False)
    assert decision.tools_restricted_to is None and decision.may_run_tools
    (event,) = decision.events
    assert (event.kind, event.trigger, event.outcome) == ("guard", "turn_preflight", "ok")
    assert (event.limit_tokens, event.projected_tokens, event.remaining_tokens) == (9_000, 3_600, 5_400)
    assert (event.context_window, event.max_output_tokens, event.buffer_tokens) == (10_000, 1_000, 0)
    assert event.details["counters"] == {"current": 3_000, "pending": 0, "new": 100, "schema": 500}
    assert event.details["sources"]["context_window"].startswith("model:gpt-4o")
    assert event.details["thresholds"] == {"note": 0.8, "compact": 0.95, "hard_block": 0.98}
    assert event.details["tools_restricted_to"] is None and event.details["best_effort"] is False


def test_a_request_past_the_note_threshold_is_a_note_with_the_note_text() -> None:
    g = guard(current=7_000, schema=500)
    decision = g.evaluate_request([target()])
    assert (decision.outcome, decision.reason) == ("note", "note_threshold")
    assert decision.note_text == format_note(7_500, 9_000) == decision.events[0].details["note"]
    assert "83% used" in decision.note_text


def test_a_request_over_the_limit_forces_a_final_turn_with_final_report_only() -> None:
    g = guard(current=8_000, schema=1_500)
    g.add_new(200, message_seq=41)
    components = ComponentTokens(system=400, tools=1_500, conversation=7_800)
    decision = g.evaluate_request([target()], components=components, message_seq=41)
    assert (decision.outcome, decision.reason, decision.final_forced) == ("forced_final", "context", True)
    assert decision.tools_restricted_to == (FINAL_REPORT_TOOL_NAME,)
    assert not decision.may_run_tools and not decision.best_effort
    assert g.counters.schema == FINAL_SCHEMA  # recomputed for final_report alone
    (event,) = decision.events
    assert event.projected_tokens == 8_000 + 200 + FINAL_SCHEMA
    assert event.components == components and event.message_seq == 41
    assert event.details["tools_restricted_to"] == ["final_report"]
    assert event.details["tipping"] == {"tokens": 200, "message_seq": 41}
    # the turn stays final: the next evaluation keeps the restriction and says so
    again = g.evaluate_request([target()])
    assert (again.outcome, again.reason) == ("forced_final", "context")


def test_a_final_turn_still_over_the_limit_proceeds_best_effort_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    g = guard(current=9_500, schema=800)
    with caplog.at_level(logging.WARNING, logger=LOGGER_NAME):
        decision = g.evaluate_request([target()])
    assert (decision.outcome, decision.best_effort) == ("forced_final", True)
    assert decision.events[0].details["best_effort"] is True
    assert any("best effort" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)


def test_a_target_whose_window_is_below_the_floor_is_skipped_when_another_fits() -> None:
    g = guard(current=6_000, schema=300)
    g.add_new(2_500)  # floor = 2,500 + final_report schema > the small target's 2,000-token limit
    small, large = target("gpt-4o-mini", window=3_000), target("gpt-4.1", window=40_000)
    decision = g.evaluate_request([large, small], components=ComponentTokens(system=1_000))
    assert [d.outcome for d in decision.targets] == ["ok", "skipped_provider"]
    assert decision.outcome == "ok"
    assert decision.usable_targets == (large,) and decision.skipped_targets == (small,)
    skipped = decision.events[1]
    assert (skipped.outcome, skipped.reason, skipped.limit_tokens) == (
        "skipped_provider",
        "floor_exceeds_limit",
        2_000,
    )
    assert skipped.details["floor_tokens"] == 1_000 + 2_500 + FINAL_SCHEMA


def test_a_usable_fallback_over_its_limit_forces_the_final_turn() -> None:
    # The request must fit every provider it may be sent to.
    g = guard(current=8_000, schema=2_000)
    decision = g.evaluate_request([target("gpt-4.1", window=40_000), target("gpt-4o")])
    assert decision.outcome == "forced_final"
    assert [d.outcome for d in decision.targets] == ["forced_final", "forced_final"]
    assert [d.best_effort for d in decision.targets] == [False, False]


def test_when_no_target_can_fit_none_is_skipped_and_the_turn_is_final_best_effort() -> None:
    g = guard(current=1_000, schema=100)
    g.add_new(5_000)
    decision = g.evaluate_request([target("a", window=2_000), target("b", window=3_000)])
    assert [d.outcome for d in decision.targets] == ["forced_final", "forced_final"]
    assert decision.best_effort


def test_set_schema_is_restricted_to_final_report_until_the_turn_commits() -> None:
    g = guard(current=9_000, schema=1_000)
    g.evaluate_request([target()])
    with pytest.raises(ValidationError):
        g.set_schema(1_000)
    g.set_schema(FINAL_SCHEMA)  # the restricted tool list itself is fine
    g.commit_turn()
    assert g.counters.schema == 1_000  # the full tool list is back
    assert g.may_run_tools and not g.final_forced


def test_evaluate_request_needs_a_target() -> None:
    with pytest.raises(ValidationError):
        guard().evaluate_request([])


# -- tool outputs --------------------------------------------------------------------------------


def test_a_tool_output_that_fits_is_reserved_into_pending() -> None:
    g = guard(current=2_000, schema=500)
    g.evaluate_request([target()])
    decision = g.reserve_tool_output(1_200, tool_name="grep")
    assert (decision.trigger, decision.outcome, decision.accepted) == ("tool_preflight", "ok", True)
    assert g.counters.pending == 1_200
    assert decision.events[0].details["tool_name"] == "grep"


def test_a_tool_output_past_the_limit_is_rejected_and_ends_tool_use_for_the_turn() -> None:
    g = guard(current=6_000, schema=1_000)
    g.evaluate_request([target()])
    rejected = g.reserve_tool_output(2_500, tool_name="cat", message_seq=7)
    assert (rejected.outcome, rejected.reason, rejected.accepted) == (
        "rejected",
        "token_budget_exceeded",
        False,
    )
    assert rejected.final_forced and not rejected.may_run_tools
    assert rejected.tools_restricted_to == ("final_report",)
    (event,) = rejected.events
    assert event.projected_tokens == 6_000 + 1_000 + 2_500
    assert event.details["tipping"] == {"tool_name": "cat", "tokens": 2_500, "message_seq": 7}
    assert g.counters.pending == 0

    # even a tiny output is now refused, although it would fit
    refused = g.reserve_tool_output(10, tool_name="ls")
    assert (refused.outcome, refused.reason, refused.accepted) == ("rejected", "tools_refused", False)
    # and the next request is the final one, for the reason the turn became final
    final = g.evaluate_request([target()])
    assert (final.outcome, final.reason) == ("forced_final", "token_budget_exceeded")
    g.commit_turn()
    assert g.reserve_tool_output(10, tool_name="ls").accepted


def test_reserve_needs_targets_before_the_first_request() -> None:
    with pytest.raises(ValidationError):
        guard().reserve_tool_output(10, tool_name="ls")


# -- debug topics --------------------------------------------------------------------------------


def drive_a_turn_to_its_final() -> None:
    g = guard(current=6_000, schema=1_000)
    g.add_new(300)
    g.set_schema(900)
    g.evaluate_request([target()])
    g.reserve_tool_output(500, tool_name="grep")
    g.reserve_tool_output(5_000, tool_name="cat")
    g.evaluate_request([target()])
    g.commit_turn()


def test_context_debug_logs_every_topic(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CONTEXT_DEBUG", "true")
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        drive_a_turn_to_its_final()
    records = [r for r in caplog.records if r.name == LOGGER_NAME and r.levelno == logging.DEBUG]
    topics = {r.ctx_topic for r in records}  # type: ignore[attr-defined]
    assert topics == TOPICS
    messages = [r.getMessage() for r in records]
    assert any(
        m.startswith("context-guard/provider-eval provider=openai model=gpt-4o limit=9000") for m in messages
    )
    assert any(
        m.startswith("context-guard/enforce ") and "reason=token_budget_exceeded" in m for m in messages
    )
    tool_eval = [r for r in records if r.ctx_topic == "tool-eval"]  # type: ignore[attr-defined]
    assert [r.ctx_fields["accepted"] for r in tool_eval] == [True, False]  # type: ignore[attr-defined]


def test_without_context_debug_nothing_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger=LOGGER_NAME):
        drive_a_turn_to_its_final()
    assert [r for r in caplog.records if r.levelno == logging.DEBUG] == []
