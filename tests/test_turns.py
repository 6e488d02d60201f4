"""Turn structure: table-driven cases with tiny builders, and hypothesis invariants of safe cuts."""

from __future__ import annotations

from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.limit import Limit
from engine.messages import Message, TextBlock, ToolResultBlock, is_user_input, tool_use
from engine.messages import assistant as _assistant
from engine.messages import tool_result as _tool_result
from engine.messages import user as _user
from engine.tokens import get_tokenizer
from engine.turns import (
    find_safe_boundary,
    has_orphans,
    is_over_context_budget,
    is_safe_cut,
    parse_turn_boundaries,
    safe_cut_points,
    turn_indices,
    turn_spans,
)
from tests.strategies import HEAVY, histories

# -- tiny builders --------------------------------------------------------------------------


def user(text: str = "hi") -> Message:
    return _user(text)


def assistant(text: str = "ok") -> Message:
    return _assistant(text)


def assistant_tool_use(*ids: str) -> Message:
    return _assistant("", *(tool_use(i, "bash", cmd="ls") for i in ids))


def tool_result(tool_use_id: str) -> Message:
    return _tool_result(tool_use_id, "output")


def tool_message(tool_use_id: str) -> Message:
    """An OpenAI-style role=tool result."""
    return Message(role="tool", content=[ToolResultBlock(tool_use_id=tool_use_id, content="output")])


def result_with_text(tool_use_id: str, text: str = "also this") -> Message:
    """A user message that returns a result and adds the user's own words."""
    return Message(
        role="user",
        content=[ToolResultBlock(tool_use_id=tool_use_id, content="output"), TextBlock(text=text)],
    )


# -- boundaries -----------------------------------------------------------------------------

#: One user request answered through two chained tool rounds: a single turn.
CHAINED_TOOL_TURN = [
    user(),
    assistant_tool_use("a"),
    tool_result("a"),
    assistant_tool_use("b"),
    tool_result("b"),
    assistant(),
]

BOUNDARY_CASES = [
    pytest.param([], [], id="empty"),
    pytest.param([user()], [0], id="single-user"),
    pytest.param([user(), assistant()], [0], id="one-exchange"),
    pytest.param([user(), assistant(), user(), assistant()], [0, 2], id="two-turns"),
    pytest.param(
        CHAINED_TOOL_TURN,
        [0],
        id="chained-tool-turn-is-one-turn",
    ),
    pytest.param(
        [user(), assistant_tool_use("a", "b"), tool_message("a"), tool_message("b"), assistant(), user()],
        [0, 5],
        id="openai-tool-messages-stay-in-turn",
    ),
    pytest.param([assistant(), assistant(), user(), assistant()], [0, 2], id="history-starts-with-assistant"),
    pytest.param([tool_result("x"), user()], [0, 1], id="history-starts-with-tool-result"),
    pytest.param(
        [user(), assistant_tool_use("a"), result_with_text("a"), assistant()],
        [0, 2],
        id="result-with-user-text-starts-a-turn",
    ),
    pytest.param([user(), user(), user()], [0, 1, 2], id="consecutive-user-inputs"),
]


@pytest.mark.parametrize(("messages", "starts"), BOUNDARY_CASES)
def test_parse_turn_boundaries(messages: list[Message], starts: list[int]) -> None:
    assert parse_turn_boundaries(messages) == starts


@pytest.mark.parametrize(("messages", "starts"), BOUNDARY_CASES)
def test_spans_and_indices_agree_with_boundaries(messages: list[Message], starts: list[int]) -> None:
    spans = turn_spans(messages)
    assert [s for s, _ in spans] == starts
    assert [e for _, e in spans] == [*starts[1:], len(messages)][: len(spans)]
    indices = turn_indices(messages)
    assert indices == [turn for turn, (s, e) in enumerate(spans) for _ in range(s, e)]


# -- safe cuts ------------------------------------------------------------------------------

SIX = [user("q1"), assistant("a1"), user("q2"), assistant_tool_use("t"), tool_result("t"), user("q3")]


@pytest.mark.parametrize(
    ("messages", "index", "safe"),
    [
        pytest.param(SIX, 2, True, id="at-a-turn"),
        pytest.param(SIX, 5, True, id="at-the-last-turn"),
        pytest.param(SIX, 0, False, id="zero-drops-nothing"),
        pytest.param(SIX, 6, False, id="end-keeps-nothing"),
        pytest.param(SIX, 3, False, id="mid-turn-assistant"),
        pytest.param(SIX, 4, False, id="at-a-tool-result"),
        pytest.param(
            [user(), assistant_tool_use("a"), result_with_text("a"), assistant()],
            2,
            False,
            id="would-orphan-a-result",
        ),
    ],
)
def test_is_safe_cut(messages: list[Message], index: int, safe: bool) -> None:
    assert is_safe_cut(messages, index) is safe


@pytest.mark.parametrize(
    ("messages", "index", "prefer", "expected"),
    [
        pytest.param(SIX, 4, "backward", 2, id="snaps-back-to-turn-start"),
        pytest.param(SIX, 4, "forward", 5, id="snaps-forward-to-next-turn"),
        pytest.param(SIX, 2, "backward", 2, id="already-at-a-boundary"),
        pytest.param(SIX, 0, "backward", 2, id="nothing-before-falls-forward"),
        pytest.param(SIX, 99, "forward", 5, id="nothing-after-falls-back"),
        pytest.param(SIX, -3, "backward", 2, id="negative-index-clamped"),
        pytest.param(
            CHAINED_TOOL_TURN,
            3,
            "backward",
            None,
            id="single-oversized-turn-cannot-be-cut",
        ),
        pytest.param([], 0, "backward", None, id="empty-history"),
        pytest.param(
            [user(), assistant_tool_use("a"), result_with_text("a"), assistant(), user("next"), assistant()],
            2,
            "backward",
            4,
            id="skips-a-boundary-that-would-orphan",
        ),
    ],
)
def test_find_safe_boundary(
    messages: list[Message], index: int, prefer: Literal["backward", "forward"], expected: int | None
) -> None:
    assert find_safe_boundary(messages, index, prefer=prefer) == expected


@HEAVY
@given(histories(), st.integers(-2, 40), st.sampled_from(["backward", "forward"]))
def test_a_safe_boundary_never_orphans_a_tool_result(
    messages: list[Message], index: int, prefer: Literal["backward", "forward"]
) -> None:
    assert not has_orphans(messages)
    cut = find_safe_boundary(messages, index, prefer=prefer)
    if cut is None:
        return
    kept = messages[cut:]
    assert 0 < cut < len(messages)
    assert is_user_input(kept[0])
    assert not has_orphans(kept)


@HEAVY
@given(histories())
def test_every_safe_cut_is_a_turn_start(messages: list[Message]) -> None:
    starts = set(parse_turn_boundaries(messages))
    assert {i for i in range(len(messages)) if is_safe_cut(messages, i)} <= starts


#: A turn whose tool round uses id "a": twice in a row, the id spans both turns.
REUSED_ID_TURN = [user(), assistant_tool_use("a"), tool_result("a")]


@pytest.mark.parametrize(
    ("messages", "cuts"),
    [
        pytest.param([], [], id="empty"),
        pytest.param([user()], [], id="single-user"),
        pytest.param(SIX, [2, 5], id="turns-and-a-tool-round"),
        pytest.param(CHAINED_TOOL_TURN, [], id="one-oversized-turn"),
        pytest.param([assistant(), user(), assistant()], [1], id="assistant-first"),
        pytest.param([user(), user(), user()], [1, 2], id="consecutive-user-inputs"),
        pytest.param(
            [user(), assistant_tool_use("a"), result_with_text("a"), assistant()],
            [],
            id="turn-start-that-would-orphan-its-result",
        ),
        pytest.param(
            [user(), assistant_tool_use("a"), result_with_text("a"), assistant(), user("next"), assistant()],
            [4],
            id="skips-the-orphaning-start",
        ),
        pytest.param(
            [user(), assistant_tool_use("a"), user("q2"), assistant(), tool_result("a"), user("q3")],
            [5],
            id="pair-spanning-a-turn",
        ),
        pytest.param(
            [*REUSED_ID_TURN, *REUSED_ID_TURN, user()],
            [6],
            id="reused-tool-id-spans-from-first-use-to-last-result",
        ),
        pytest.param(
            [user(), result_with_text("x"), assistant_tool_use("x"), user("q3")],
            [1, 3],
            id="result-before-its-use",
        ),
        pytest.param(
            [user(), assistant_tool_use("a", "b"), tool_message("a"), tool_message("b"), assistant(), user()],
            [5],
            id="openai-tool-messages",
        ),
    ],
)
def test_safe_cut_points(messages: list[Message], cuts: list[int]) -> None:
    assert safe_cut_points(messages) == cuts
    assert cuts == [i for i in range(len(messages) + 1) if is_safe_cut(messages, i)]


@HEAVY
@given(histories())
def test_safe_cut_points_are_exactly_the_safe_cuts(messages: list[Message]) -> None:
    assert safe_cut_points(messages) == [i for i in range(len(messages)) if is_safe_cut(messages, i)]


#: Messages with ids from a small pool: reused ids, results before uses, unanswered uses.
messy_messages = st.one_of(
    st.builds(user),
    st.builds(assistant),
    st.lists(st.sampled_from("abc"), min_size=1, max_size=2).map(lambda ids: assistant_tool_use(*ids)),
    st.sampled_from("abc").map(tool_result),
    st.sampled_from("abc").map(result_with_text),
    st.sampled_from("abc").map(tool_message),
)


@HEAVY
@given(st.lists(messy_messages, max_size=30))
def test_safe_cut_points_match_is_safe_cut_on_messy_histories(messages: list[Message]) -> None:
    assert safe_cut_points(messages) == [i for i in range(len(messages)) if is_safe_cut(messages, i)]


@HEAVY
@given(st.lists(messy_messages, max_size=30), st.integers(-2, 35), st.sampled_from(["backward", "forward"]))
def test_find_safe_boundary_snaps_like_the_definition(
    messages: list[Message], index: int, prefer: Literal["backward", "forward"]
) -> None:
    clamped = max(0, min(index, len(messages)))
    cuts = [i for i in range(len(messages)) if is_safe_cut(messages, i)]
    before, after = [c for c in cuts if c <= clamped], [c for c in cuts if c > clamped]
    if not cuts:
        expected = None
    elif prefer == "backward":
        expected = before[-1] if before else after[0]
    else:
        expected = after[0] if after else before[-1]
    assert find_safe_boundary(messages, index, prefer=prefer) == expected


# -- orphans --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "orphans"),
    [
        pytest.param([user(), assistant_tool_use("a"), tool_result("a")], False, id="answered"),
        pytest.param([user(), assistant_tool_use("a")], False, id="pending-in-last-assistant"),
        pytest.param([tool_result("a"), user()], True, id="result-without-use"),
        pytest.param([user(), assistant_tool_use("a"), user(), assistant()], True, id="use-never-answered"),
        pytest.param([user(), tool_result("a"), assistant_tool_use("a")], True, id="result-before-use"),
        pytest.param(
            [user(), assistant_tool_use("a", "b"), tool_message("a"), tool_message("b")],
            False,
            id="tool-role",
        ),
    ],
)
def test_has_orphans(messages: list[Message], orphans: bool) -> None:
    assert has_orphans(messages) is orphans


# -- budget ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("window", "max_output", "buffer", "budget", "system", "over"),
    [
        pytest.param(10_000, 1_000, 0, None, 0, False, id="fits"),
        pytest.param(20, 1, 0, None, 0, True, id="messages-alone-overflow"),
        pytest.param(120, 100, 0, None, 0, True, id="output-reserve-tips-it"),
        pytest.param(10_000, 1_000, 0, None, 9_000, True, id="system-prompt-tips-it"),
        pytest.param(10_000, 1_000, 8_980, None, 0, True, id="the-buffer-tips-it"),
        pytest.param(10_000, 1_000, 0, 30, 0, True, id="the-context-budget-tips-it"),
        pytest.param(10_000, 1_000, 0, 5_000, 0, False, id="a-budget-above-the-use-fits"),
    ],
)
def test_is_over_context_budget(
    window: int, max_output: int, buffer: int, budget: int | None, system: int, over: bool
) -> None:
    messages = [user("x" * 40), assistant("y" * 40)]  # chars/4: 10 + 3 framing each, +3 priming = 29
    tools = [{"name": "ls", "description": "List files.", "input_schema": {}}]  # 8 + 1 + 3 + 1 = 13
    tokenizer = get_tokenizer("chars/4")
    by_fields = is_over_context_budget(
        messages, tools, context_window=window, max_output_tokens=max_output, buffer_tokens=buffer,
        context_budget=budget, tokenizer=tokenizer, system_tokens=system,
    )  # fmt: skip
    by_limit = is_over_context_budget(
        messages,
        tools,
        limit=Limit(window, max_output, buffer, budget),
        tokenizer=tokenizer,
        system_tokens=system,
    )
    assert by_fields is by_limit is over
