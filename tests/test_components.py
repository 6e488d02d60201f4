"""The one component measure of a call and its reconciliation with the provider's count (engine.components)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.clients import ModelRequest, ModelResponse
from engine.components import (
    MEASURED_COMPONENTS,
    SYSTEM_OVERHEAD_TOKENS,
    HistoryTotals,
    components_basis,
    measure_request,
    reconcile,
    reconcile_call,
)
from engine.errors import ValidationError
from engine.events import COMPONENT_COLORS, COMPONENT_LABELS, COMPONENTS, ComponentTokens, ProviderUsage
from engine.messages import Message, TextBlock, assistant, tool_result, tool_use, user
from engine.model_table import ModelTable
from engine.session.assembly import ToolTokens, assemble_request, prompt_sections
from engine.session.event_building import request_event
from engine.settings import ModelSettings, Settings, resolve_model_settings
from engine.tokens import REPLY_PRIMING_TOKENS, get_tokenizer
from tests.strategies import histories

TOK = get_tokenizer("o200k_base")
CLAUDE = get_tokenizer("anthropic")
SUMMARY = "Summary: the user set up the payments project and fixed the port."
SKILL = "Skill: answer in one paragraph, cite the file you read."
READ_TOOL = {"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}


def a_history() -> list[Message]:
    return [
        user("Read the config and tell me the port."),
        assistant("Reading it.", tool_use("t1", "read_file", path="config.toml")),
        tool_result("t1", "[server]\nport = 8080\nhost = 'localhost'\n" * 10),
        assistant("The port is 8080."),
    ]


# -- the measure ------------------------------------------------------------------------------


def test_every_part_is_counted_once_with_the_framing_decided_here() -> None:
    messages = a_history()
    c = measure_request(
        TOK, system="You are careful.", tools=[READ_TOOL], messages=messages, summary=SUMMARY, skills=(SKILL,)
    )
    assert c.system == TOK.count("You are careful.") + SYSTEM_OVERHEAD_TOKENS
    assert c.skills == TOK.count(SKILL) and c.summary == TOK.count(SUMMARY)
    assert c.tools == TOK.count_tools([READ_TOOL])
    assert c.tool_results == TOK.count_block(messages[2].blocks[0])
    assert c.conversation + c.tool_results == TOK.count_messages(messages)  # framing + priming included
    assert c.unattributed == 0 and c.total == c.measured


MEASURE_CASES = [
    # (name, kwargs, expected components as a dict of the non-zero parts)
    ("nothing sent costs nothing", {"system": "", "tools": [], "messages": []}, {}),
    (
        "a system prompt is framed once, whatever its blocks",
        {"system": ["You are careful.", "Project rules: be brief."], "tools": [], "messages": []},
        {
            "system": TOK.count("You are careful.")
            + TOK.count("Project rules: be brief.")
            + SYSTEM_OVERHEAD_TOKENS
        },
    ),
    (
        "skills sent alone still frame a system prompt",
        {"system": "", "tools": [], "messages": [], "skills": (SKILL,)},
        {"system": SYSTEM_OVERHEAD_TOKENS, "skills": TOK.count(SKILL)},
    ),
    (
        "a summary inside a message moves out of conversation (no system prompt framed)",
        {"system": "", "tools": [], "messages": [user(SUMMARY), user("go on")], "summary": SUMMARY},
        {
            "summary": TOK.count(SUMMARY),
            "conversation": TOK.count_messages([user(SUMMARY), user("go on")]) - TOK.count(SUMMARY),
        },
    ),
    (
        "one message of plain conversation: framing and reply priming are conversation",
        {"system": "", "tools": [], "messages": [user("hello")]},
        {"conversation": TOK.count_message(user("hello")) + REPLY_PRIMING_TOKENS},
    ),
]


@pytest.mark.parametrize(("name", "kwargs", "expected"), MEASURE_CASES, ids=[c[0] for c in MEASURE_CASES])
def test_measure_cases(name: str, kwargs: dict, expected: dict[str, int]) -> None:
    got = measure_request(TOK, **kwargs)
    assert {k: v for k, v in got.as_dict().items() if v} == expected


@pytest.mark.parametrize("tokenizer", [TOK, CLAUDE], ids=["o200k", "claude-estimate"])
def test_a_summary_or_skill_in_the_messages_is_never_counted_twice(tokenizer) -> None:
    """Claude Code sends its summary and skill listing as user text blocks: the total is the same
    whether or not they are named, only the split differs."""
    messages = [
        Message(role="user", content=[TextBlock(text=f"\n{SUMMARY}\n"), TextBlock(text=SKILL)]),
        *a_history(),
    ]
    plain = measure_request(tokenizer, system="sys", tools=[], messages=messages)
    named = measure_request(
        tokenizer, system="sys", tools=[], messages=messages, summary=SUMMARY, skills=(SKILL,)
    )
    assert named.total == plain.total
    assert named.summary == tokenizer.count(f"\n{SUMMARY}\n") and named.skills == tokenizer.count(SKILL)
    assert named.conversation == plain.conversation - named.summary - named.skills


@given(histories())
def test_running_totals_measure_as_the_messages_do(messages: list[Message]) -> None:
    listed = measure_request(TOK, system="s", tools=[READ_TOOL], messages=messages, summary=SUMMARY)
    running = measure_request(
        TOK, system="s", tools=[READ_TOOL], messages=HistoryTotals(TOK, messages), summary=SUMMARY
    )
    assert listed == running
    assert listed.conversation + listed.tool_results == TOK.count_messages(messages)


def test_the_residual_is_a_labelled_coloured_component_counted_in_the_total() -> None:
    assert COMPONENTS[-1] == "unattributed" and set(MEASURED_COMPONENTS) == set(COMPONENTS) - {"unattributed"}
    assert COMPONENT_LABELS["unattributed"] == "Harness, unattributed" and "unattributed" in COMPONENT_COLORS
    c = ComponentTokens(system=10, unattributed=5)
    assert (c.total, c.measured, c.as_dict()["unattributed"]) == (15, 10, 5)


# -- reconciliation ---------------------------------------------------------------------------

RECONCILE_CASES = [
    # (name, measured parts, provider count, max_scale_up, expected parts incl. unattributed)
    ("no provider count: as measured", {"system": 100, "conversation": 50}, None, 1.0, {"system": 100, "conversation": 50}),
    ("a zero count is no count", {"system": 100}, 0, 1.0, {"system": 100}),
    ("equal: unchanged", {"system": 100, "conversation": 50}, 150, 1.0, {"system": 100, "conversation": 50}),
    ("short and maybe harness text: the rest unattributed", {"system": 100, "conversation": 50}, 200, 1.0,
     {"system": 100, "conversation": 50, "unattributed": 50}),
    ("short but every byte seen: spread over what was sent", {"system": 100, "conversation": 50}, 300, math.inf,
     {"system": 200, "conversation": 100}),
    ("short beyond the estimator's margin: scaled up to it, the rest unattributed",
     {"system": 100, "conversation": 100}, 300, 1.1, {"system": 110, "conversation": 110, "unattributed": 80}),
    ("over: scaled down, never a negative residual", {"system": 100, "tools": 50, "conversation": 30, "tool_results": 21},
     150, 1.0, {"system": 75, "tools": 37, "conversation": 22, "tool_results": 16}),
    # the repro: a system prompt measured before an agent's compaction carried across it
    ("a system prompt carried across a compaction is scaled down to the provider's count",
     {"system": 50_808, "conversation": 3_434}, 36_541, 1.0, {"system": 34_228, "conversation": 2_313}),
    ("nothing measured: all unattributed", {}, 1_234, math.inf, {"unattributed": 1_234}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "parts", "provider", "scale", "expected"), RECONCILE_CASES, ids=[c[0] for c in RECONCILE_CASES]
)
def test_reconcile_cases(name: str, parts: dict, provider: int | None, scale: float, expected: dict) -> None:
    got = reconcile(ComponentTokens(**parts, offloaded_bytes=7), provider, max_scale_up=scale)
    assert {k: v for k, v in got.as_dict().items() if v and k != "offloaded_bytes"} == expected
    assert got.offloaded_bytes == 7
    if provider:
        assert got.total == provider


components_st = st.builds(
    ComponentTokens,
    **{name: st.integers(0, 200_000) for name in MEASURED_COMPONENTS},
    unattributed=st.integers(0, 9),
)
scales = st.one_of(st.just(1.0), st.just(math.inf), st.floats(1.0, 3.0))


@given(components_st, st.integers(1, 2_000_000), scales)
def test_reconciled_components_add_up_to_the_provider_count_and_never_go_negative(
    measured: ComponentTokens, provider: int, scale: float
) -> None:
    got = reconcile(measured, provider, max_scale_up=scale)
    assert got.total == provider
    assert all(getattr(got, name) >= 0 for name in COMPONENTS)
    parts_measured = measured.measured
    if parts_measured >= provider:  # scaled down: nothing unattributed, no part grew
        assert got.unattributed == 0
        assert all(getattr(got, n) <= getattr(measured, n) for n in MEASURED_COMPONENTS)
    else:  # never shrinks a part, and leaves unattributed only what the scale could not cover
        assert all(getattr(got, n) >= getattr(measured, n) for n in MEASURED_COMPONENTS)
        if parts_measured and scale == math.inf:
            assert got.unattributed == 0
    for n in MEASURED_COMPONENTS:  # each part keeps its share, within one token of exact
        if parts_measured:
            exact = getattr(measured, n) * got.measured / parts_measured
            assert abs(getattr(got, n) - exact) < 1


@given(components_st, st.integers(1, 2_000_000), st.sampled_from([1.0, math.inf]))
def test_reconciling_twice_changes_nothing(measured: ComponentTokens, provider: int, scale: float) -> None:
    once = reconcile(measured, provider, max_scale_up=scale)
    assert reconcile(once, provider, max_scale_up=scale) == once


@pytest.mark.parametrize("scale", [0.9, -1.0, math.nan, "2"])
def test_a_scale_below_one_is_refused_with_its_value(scale: object) -> None:
    with pytest.raises(ValidationError, match="max_scale_up") as raised:
        reconcile(ComponentTokens(system=1), 10, max_scale_up=scale)  # type: ignore[arg-type]
    assert raised.value.field == "max_scale_up"


BASIS_CASES = [
    ("no provider count", 150, None, True, "estimate"),
    ("a zero count", 150, 0, True, "estimate"),
    ("exact tokenizer, same count", 150, 150, True, "exact"),
    ("exact tokenizer, framing we do not model", 150, 153, True, "reconciled"),
    ("an estimate that happens to match is still not exact", 150, 150, False, "reconciled"),
]


@pytest.mark.parametrize(
    ("name", "ours", "provider", "exact", "basis"), BASIS_CASES, ids=[c[0] for c in BASIS_CASES]
)
def test_basis_cases(name: str, ours: int, provider: int | None, exact: bool, basis: str) -> None:
    measured = ComponentTokens(conversation=ours)
    assert components_basis(measured, provider, exact_tokenizer=exact) == basis
    reconciled, said = reconcile_call(measured, provider, exact_tokenizer=exact)
    assert said == basis and reconciled == reconcile(measured, provider)


# -- the session manager records them ---------------------------------------------------------


def test_the_session_managers_request_event_adds_up_to_the_provider_and_says_how() -> None:
    settings = resolve_model_settings(
        "gpt-4o",
        settings=Settings(models={"gpt-4o": ModelSettings(context_window=20_000, max_output_tokens=1_000)}),
        table=ModelTable({}, source="test"),
    )
    totals = HistoryTotals(TOK, a_history())
    view = assemble_request(
        prompt_sections("You are careful.", [], [SKILL]), summary=SUMMARY, status=[], tools=(READ_TOOL,),
        tool_tokens=ToolTokens(TOK), totals=totals, offloaded_bytes=0, settings=settings, note=None, final=False,
    )  # fmt: skip
    measured = view.components
    assert measured == measure_request(
        TOK, system=[view.prompt.blocks[0]], skills=(SKILL,), summary=view.prompt.blocks[-1], tools=[READ_TOOL],
        messages=a_history(),
    )  # fmt: skip
    request = ModelRequest(
        model="gpt-4o", system=view.prompt.text, messages=tuple(a_history()), tools=(READ_TOOL,)
    )

    def event(usage: ProviderUsage | None):
        response = ModelResponse(message=assistant("ok"), usage=usage) if usage else None
        return request_event(
            view, settings, request, provider="openai", trigger="user_input", outcome="ok", step=0,
            messages_sent=4, deferred_tools=0, summary_injected=True, tokenizer_id=TOK.id, response=response,
        )  # fmt: skip

    provider = measured.total + 40
    answered = event(ProviderUsage(input_tokens=provider, output_tokens=5))
    assert answered.components.total == provider and answered.components.unattributed == 0
    assert answered.components_basis == "reconciled" and answered.projected_tokens == measured.total
    exact = event(ProviderUsage(input_tokens=measured.total, output_tokens=5))
    assert exact.components == measured and exact.components_basis == "exact"
    unanswered = event(None)
    assert unanswered.components == measured and unanswered.components_basis == "estimate"
