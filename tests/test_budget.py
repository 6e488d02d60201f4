"""Budget arithmetic, thresholds, component measurement and re-projection (engine.budget)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.budget import (
    NOTE_TEMPLATE,
    ContextBudget,
    HistoryTotals,
    Thresholds,
    compute_limit,
    limit_for,
    measure_budget,
    measure_components,
    message_components,
    reproject,
)
from engine.components import SYSTEM_OVERHEAD_TOKENS
from engine.errors import ValidationError
from engine.events import ComponentTokens
from engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)
from engine.model_table import ModelTable
from engine.settings import ModelSettings, ResolvedModelSettings, Settings, resolve_model_settings
from engine.tokens import MESSAGE_OVERHEAD_TOKENS, Tokenizer, TokenizerInfo, get_encoding, get_tokenizer
from tests.strategies import histories

EMPTY_TABLE = ModelTable({}, source="test")


def resolved(
    *,
    window: int = 128_000,
    max_output: int = 16_384,
    buffer: int = 256,
    note: float = 0.80,
    compact: float = 0.95,
    hard_block: float = 0.98,
    budget: int | None = None,
    model: str = "gpt-4o",
) -> ResolvedModelSettings:
    level = ModelSettings(
        context_window=window,
        max_output_tokens=max_output,
        buffer_tokens=buffer,
        note_threshold=note,
        compact_threshold=compact,
        hard_block_threshold=hard_block,
        context_budget=budget,
    )
    return resolve_model_settings(model, settings=Settings(models={model: level}), table=EMPTY_TABLE)


def budget_of(used: int, **kwargs: object) -> ContextBudget:
    return ContextBudget.from_settings(resolved(**kwargs), ComponentTokens(conversation=used))  # type: ignore[arg-type]


# -- limit arithmetic ----------------------------------------------------------------------------

LIMIT_CASES = [
    # name, window, max_output, buffer, context_budget, expected limit
    ("seeds worked example", 128_000, 16_384, 256, None, 111_360),
    ("cap below the window wins", 128_000, 16_384, 256, 50_000, 50_000),
    ("cap above the window is ignored", 128_000, 16_384, 256, 200_000, 111_360),
    ("no buffer", 200_000, 8_192, 0, None, 191_808),
    ("tiny window", 4_000, 500, 100, None, 3_400),
]


@pytest.mark.parametrize(
    ("window", "max_output", "buffer", "cap", "expected"),
    [case[1:] for case in LIMIT_CASES],
    ids=[case[0] for case in LIMIT_CASES],
)
def test_effective_window_is_window_minus_reply_minus_buffer_capped_by_budget(
    window: int, max_output: int, buffer: int, cap: int | None, expected: int
) -> None:
    settings = resolved(window=window, max_output=max_output, buffer=buffer, budget=cap)
    budget = ContextBudget.from_settings(settings, ComponentTokens())
    assert budget.effective_window == expected
    assert compute_limit(window, max_output, buffer, cap) == expected
    # One definition of the limit across the engine: the settings call it budget_tokens.
    assert limit_for(settings) == settings.budget_tokens == expected


@pytest.mark.parametrize(
    ("window", "max_output", "buffer", "cap", "field"),
    [
        (1_000, 900, 100, None, "context_window"),
        (1_000, 1_200, 0, None, "context_window"),
        (1_000, 100, -1, None, "buffer_tokens"),
        (1_000, 100, 0, 0, "context_budget"),
    ],
    ids=["reply plus buffer fill the window", "reply larger than window", "negative buffer", "zero cap"],
)
def test_impossible_windows_are_validation_errors(
    window: int, max_output: int, buffer: int, cap: int | None, field: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        ContextBudget(window, max_output, buffer, ComponentTokens(), Thresholds(0.8, 0.95, 0.98), cap)
    assert caught.value.field == field


@pytest.mark.parametrize("bad", [0, -0.1, 1.01])
def test_thresholds_must_be_shares_of_the_limit(bad: float) -> None:
    with pytest.raises(ValidationError):
        Thresholds(note=bad, compact=0.95, hard_block=0.98)


# -- usage and levels ----------------------------------------------------------------------------

# Limit 111,360; thresholds floor(limit * share): note 89,088, compact 105,792, hard block 109,132.
LEVEL_CASES = [
    ("empty", 0, "ok", 0, 111_360),
    ("just under note", 89_087, "ok", 79, 22_273),
    ("note threshold reached", 89_088, "note", 80, 22_272),
    ("83 percent", 92_500, "note", 83, 18_860),
    ("just under compaction", 105_791, "note", 94, 5_569),
    ("compaction threshold", 105_792, "compact", 95, 5_568),
    # floor(111,360 * 0.98) = 109,132 is 97.9996%: the percent is floored too, never rounded up.
    ("hard block threshold", 109_132, "hard_block", 97, 2_228),
    ("exactly full", 111_360, "hard_block", 100, 0),
    ("over the limit", 120_000, "hard_block", 107, -8_640),
]


@pytest.mark.parametrize(
    ("used", "level", "pct", "remaining"),
    [case[1:] for case in LEVEL_CASES],
    ids=[case[0] for case in LEVEL_CASES],
)
def test_level_and_percent_follow_the_thresholds(used: int, level: str, pct: int, remaining: int) -> None:
    budget = budget_of(used)
    assert budget.used == used
    assert budget.level == level
    assert budget.used_pct == pct
    assert budget.remaining == remaining
    assert budget.used_ratio == pytest.approx(used / 111_360)


def test_level_thresholds_match_the_settings_token_thresholds() -> None:
    settings = resolved()
    assert budget_of(settings.note_tokens - 1).level == "ok"
    assert budget_of(settings.note_tokens).level == "note"
    assert budget_of(settings.compact_tokens).level == "compact"
    assert budget_of(settings.hard_block_tokens).level == "hard_block"


def test_note_text_at_83_percent_is_the_exact_seed_text() -> None:
    assert budget_of(92_500).note_text == (
        "[Context: 83% used. You can call compact_context to free space before continuing "
        "with large operations.]"
    )


def test_note_text_is_none_below_the_note_threshold_and_present_above_it() -> None:
    assert budget_of(89_087).note_text is None
    assert budget_of(89_088).note_text == NOTE_TEMPLATE.format(pct=80)
    assert budget_of(110_000).note_text == NOTE_TEMPLATE.format(pct=98)


def test_thresholds_apply_to_the_capped_budget() -> None:
    budget = budget_of(41_000, budget=50_000)
    assert budget.effective_window == 50_000
    assert budget.used_pct == 82
    assert budget.level == "note"


@given(used=st.integers(0, 300_000), note=st.floats(0.05, 1.0), gap=st.floats(0, 1), gap2=st.floats(0, 1))
@settings(max_examples=200, deadline=None)
def test_note_text_appears_exactly_when_the_level_is_not_ok(
    used: int, note: float, gap: float, gap2: float
) -> None:
    compact = note + (1 - note) * gap
    hard = compact + (1 - compact) * gap2
    budget = ContextBudget(
        128_000, 16_384, 256, ComponentTokens(tool_results=used), Thresholds(note, compact, hard)
    )
    assert (budget.note_text is None) == (budget.level == "ok")
    if budget.note_text is not None:
        assert budget.used_pct * budget.effective_window <= used * 100


# -- measuring components ------------------------------------------------------------------------

TOK = get_tokenizer("o200k_base")


def test_tool_result_content_goes_to_tool_results_and_the_rest_to_conversation() -> None:
    result = tool_result("t1", "line of output\n" * 40)
    talk, results = message_components(TOK, result)
    assert talk == MESSAGE_OVERHEAD_TOKENS
    assert results == TOK.count_block(result.blocks[0])
    assert talk + results == TOK.count_message(result)


def test_a_mixed_user_message_splits_by_block() -> None:
    mixed = Message(
        role="user",
        content=[ToolResultBlock(tool_use_id="t1", content="a result " * 30), TextBlock(text="and now this")],
    )
    talk, results = message_components(TOK, mixed)
    assert talk == MESSAGE_OVERHEAD_TOKENS + TOK.count("and now this")
    assert results == TOK.count_block(mixed.blocks[0])


def test_a_tool_role_message_is_all_tool_result() -> None:
    message = Message(role="tool", content="file contents " * 20, meta={"tool_call_id": "c1"})
    talk, results = message_components(TOK, message)
    assert (talk, results) == (MESSAGE_OVERHEAD_TOKENS, TOK.count_message(message) - MESSAGE_OVERHEAD_TOKENS)


def test_history_totals_follow_appends_and_resets_like_a_full_measure() -> None:
    turns = [
        user("Read the config and tell me the port."),
        assistant("Reading it.", tool_use("t1", "read_file", path="config.toml")),
        tool_result("t1", "[server]\nport = 8080\n" * 10),
        Message(role="tool", content="raw tool output " * 5),
        assistant("The port is 8080."),
    ]
    totals = HistoryTotals(TOK)
    assert (totals.conversation, totals.tool_results, totals.messages) == (0, 0, 0)
    for n in range(1, len(turns) + 1):
        totals.extend(turns[n - 1 : n])
        full = measure_components(tokenizer=TOK, messages=turns[:n])
        assert (totals.conversation, totals.tool_results, totals.messages) == (
            full.conversation,
            full.tool_results,
            n,
        )
    totals.reset(turns[3:])  # the history was replaced (a compaction)
    full = measure_components(tokenizer=TOK, messages=turns[3:])
    assert (totals.conversation, totals.tool_results) == (full.conversation, full.tool_results)
    totals.reset()
    assert (totals.conversation, totals.tool_results, totals.messages) == (0, 0, 0)


@settings(max_examples=50, deadline=None)
@given(histories(), st.integers(0, 30))
def test_history_totals_equal_count_messages(messages: list[Message], split: int) -> None:
    totals = HistoryTotals(TOK, messages[:split])
    totals.extend(messages[split:])
    assert totals.conversation + totals.tool_results == TOK.count_messages(messages)


def test_measure_budget_counts_every_component() -> None:
    messages = [
        user("Read the config and tell me the port."),
        assistant("Reading it.", tool_use("t1", "read_file", path="config.toml")),
        tool_result("t1", "[server]\nport = 8080\nhost = 'localhost'\n" * 10),
        assistant("The port is 8080."),
    ]
    tools = [{"name": "read_file", "description": "Read a file.", "input_schema": {"type": "object"}}]
    budget = measure_budget(
        settings=resolved(),
        tokenizer=TOK,
        system="You are a careful assistant.",
        skills=("Skill: answer briefly.",),
        tools=tools,
        summary="Earlier: the user set up the project.",
        messages=messages,
        offloaded_bytes=12_345,
    )
    c = budget.components
    assert c.system == TOK.count("You are a careful assistant.") + SYSTEM_OVERHEAD_TOKENS  # framed once
    assert c.skills == TOK.count("Skill: answer briefly.")
    assert c.tools == TOK.count_tools(tools)
    assert c.summary == TOK.count("Earlier: the user set up the project.")
    assert c.tool_results == TOK.count_block(messages[2].blocks[0])
    assert c.conversation + c.tool_results == TOK.count_messages(messages)
    assert c.offloaded_bytes == 12_345
    assert budget.used == c.system + c.skills + c.tools + c.summary + c.conversation + c.tool_results
    assert budget.effective_window == 111_360


def test_an_empty_request_measures_zero() -> None:
    assert measure_budget(settings=resolved(), tokenizer=TOK).used == 0


def counting_tokenizer() -> tuple[Tokenizer, list[str]]:
    """A fresh real o200k tokenizer (own cache) that records every text it encodes."""
    encoding = get_encoding("o200k_base")
    seen: list[str] = []

    def count(text: str) -> int:
        seen.append(text)
        return len(encoding.encode_ordinary(text))

    return Tokenizer(TokenizerInfo("o200k_base", True, "instrumented"), count), seen


def test_remeasuring_a_grown_history_only_encodes_the_new_messages() -> None:
    tokenizer, seen = counting_tokenizer()
    history = [user("first question"), assistant("first answer"), tool_result("t0", "output " * 50)]
    first = measure_budget(settings=resolved(), tokenizer=tokenizer, messages=history)
    seen.clear()
    grown = [*history, user("second question, quite different")]
    second = measure_budget(settings=resolved(), tokenizer=tokenizer, messages=grown)
    assert seen == ["second question, quite different"]
    assert second.components.conversation - first.components.conversation == tokenizer.count_message(
        grown[-1]
    )
    assert second.components.tool_results == first.components.tool_results


# -- re-projection -------------------------------------------------------------------------------


def test_reproject_recomputes_limit_and_level_under_other_settings() -> None:
    recorded = [ComponentTokens(conversation=n) for n in (10_000, 60_000, 95_000, 110_000, 130_000)]
    wide = reproject(recorded, resolved())
    assert [p.limit for p in wide] == [111_360] * 5
    assert [p.level for p in wide] == ["ok", "ok", "note", "hard_block", "hard_block"]
    assert [p.would_compact for p in wide] == [False, False, False, True, True]
    assert [p.would_block for p in wide] == [False, False, False, True, True]
    assert wide[-1].over_limit and wide[-1].remaining == 111_360 - 130_000
    assert wide[2].pct == pytest.approx(95_000 * 100 / 111_360)

    capped = reproject(recorded, resolved(budget=64_000, compact=0.9, hard_block=0.99))
    assert [p.limit for p in capped] == [64_000] * 5
    assert [p.level for p in capped] == ["ok", "compact", "hard_block", "hard_block", "hard_block"]
    assert [p.would_block for p in capped] == [False, False, True, True, True]


def test_reproject_agrees_with_the_budget_of_each_point() -> None:
    settings = resolved(window=32_000, max_output=4_000, buffer=1_000)
    recorded = [
        ComponentTokens(system=500, conversation=n, tool_results=n // 2) for n in range(0, 30_000, 2_500)
    ]
    for components, point in zip(recorded, reproject(recorded, settings), strict=True):
        budget = ContextBudget.from_settings(settings, components)
        assert (point.limit, point.used, point.level) == (budget.effective_window, budget.used, budget.level)
