"""Invariants of every compaction strategy, on generated orphan-free histories (hypothesis)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from engine.compaction import STRATEGY_NAMES, CompactionResult, OfflineSummarizer, compact
from engine.compaction.result import measure
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    tool_use,
    user,
)
from engine.tokens import get_tokenizer
from engine.turns import has_orphans

TOKENIZER = get_tokenizer("chars/4")
SUMMARIZER = OfflineSummarizer(TOKENIZER)
PROPERTY_SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])

WORDS = (
    "fix",
    "the",
    "parser",
    "never",
    "use",
    "tabs",
    "decided",
    "error",
    "src/app.py",
    "TODO",
    "run",
    "tests",
)


def build_history(seeds: list[int], lead_assistant: bool, pending: bool) -> list[Message]:
    """An orphan-free agent session, one turn per seed: user input (sometimes with an image or a
    PDF), 0-3 tool rounds (thinking, text, tool uses; outputs from a few words to ~4k characters,
    as one user message or as tool-role messages), pins on any kind of message; optionally an
    assistant first and unanswered tool uses last. Seeds keep generation cheap and shrinkable."""
    ids = itertools.count()
    out: list[Message] = []

    def text(rng: random.Random) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 40)))

    def pin(rng: random.Random, odds: int) -> bool:
        return rng.randrange(odds) == 0

    if lead_assistant:
        out.append(assistant("hello"))
    for seed in seeds:
        rng = random.Random(seed)
        if rng.random() < 0.2:  # a screenshot or a document with the request
            media = ImageBlock(source={"type": "url", "url": f"https://example.com/{seed}.png"})
            if rng.random() < 0.5:
                media = DocumentBlock(
                    source={"type": "base64", "media_type": "application/pdf", "data": "QUJD" * 50}
                )
            out.append(Message(role="user", content=[TextBlock(text=text(rng)), media], pinned=pin(rng, 5)))
        else:
            out.append(user(text(rng), pinned=pin(rng, 5)))
        for _ in range(rng.randint(0, 3)):
            names = ("bash", "read_file", "edit")
            uses = [
                tool_use(f"tu_{next(ids)}", rng.choice(names), command=text(rng))
                for _ in range(rng.randint(1, 2))
            ]
            thinking = [ThinkingBlock(thinking=text(rng), signature="sig")] if rng.random() < 0.3 else []
            blocks = [*thinking, TextBlock(text=text(rng)), *uses]
            out.append(Message(role="assistant", content=blocks, pinned=pin(rng, 10)))
            results = [
                ToolResultBlock(
                    tool_use_id=u.id,
                    content=text(rng) if rng.random() < 0.5 else "log line\n" * rng.randint(20, 450),
                    is_error=pin(rng, 4),
                )
                for u in uses
            ]
            if rng.random() < 0.5:
                out.append(Message(role="user", content=results, pinned=pin(rng, 10)))
            else:
                out.extend(Message(role="tool", content=[r]) for r in results)
        if rng.random() < 0.5:
            out.append(assistant(text(rng)))
    if pending:
        out.append(assistant("", tool_use(f"tu_{next(ids)}", "bash", command="still running")))
    return out


long_histories = st.builds(
    build_history, st.lists(st.integers(0, 2**32), min_size=1, max_size=9), st.booleans(), st.booleans()
)

shares = st.floats(0.05, 1.3)


def run(messages: list[Message], strategy: str, target: int, summary: str | None = None) -> CompactionResult:
    return compact(
        messages,
        strategy=strategy,
        target_tokens=target,
        summarizer=SUMMARIZER,
        tokenizer=TOKENIZER,
        summary=summary,
    )


def target_for(messages: list[Message], share: float) -> int:
    return max(1, int(TOKENIZER.count_messages(messages) * share))


def is_subsequence(needles: list[Message], haystack: tuple[Message, ...]) -> bool:
    rest = iter(haystack)
    return all(any(n == h for h in rest) for n in needles)


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@PROPERTY_SETTINGS
@given(messages=long_histories, share=shares)
def test_no_tool_use_is_separated_from_its_result(strategy, messages, share):
    assume(messages and not has_orphans(messages))
    result = run(messages, strategy, target_for(messages, share))
    assert not has_orphans(result.messages)
    kept_uses = {b.id for m in result.messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    kept_results = {
        b.tool_use_id for m in result.messages for b in m.blocks if isinstance(b, ToolResultBlock)
    }
    assert kept_results <= kept_uses


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@PROPERTY_SETTINGS
@given(messages=long_histories, share=shares)
def test_pinned_messages_survive_verbatim_and_in_order(strategy, messages, share):
    assume(messages and not has_orphans(messages))
    result = run(messages, strategy, target_for(messages, share))
    assert is_subsequence([m for m in messages if m.pinned], result.messages)


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@PROPERTY_SETTINGS
@given(messages=long_histories, share=shares)
def test_the_input_list_is_unchanged(strategy, messages, share):
    assume(messages)
    frozen = [m.model_dump() for m in messages]
    original = list(messages)
    run(messages, strategy, target_for(messages, share))
    assert [m.model_dump() for m in messages] == frozen
    assert all(a is b for a, b in zip(messages, original, strict=True))


@pytest.mark.parametrize("strategy", [s for s in STRATEGY_NAMES if s != "emergency"])
@PROPERTY_SETTINGS
@given(messages=long_histories, share=shares)
def test_a_second_identical_run_is_a_noop_once_under_target(strategy, messages, share):
    assume(messages and not has_orphans(messages))
    target = target_for(messages, share)
    first = run(messages, strategy, target)
    assume(first.fits)
    second = run(list(first.messages), strategy, target, summary=first.summary)
    assert second.noop
    assert second.messages == first.messages
    assert second.summary == first.summary
    assert second.after_tokens == first.after_tokens


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@PROPERTY_SETTINGS
@given(messages=long_histories, share=shares)
def test_the_result_accounts_for_every_message_and_token(strategy, messages, share):
    assume(messages and not has_orphans(messages))
    result = run(messages, strategy, target_for(messages, share))
    assert result.before_tokens == measure(messages, None, TOKENIZER).total
    assert result.after_tokens == measure(result.messages, result.summary, TOKENIZER).total
    assert result.after_components.total == result.after_tokens
    assert sorted([*result.removed, *result.source_indices]) == list(range(len(messages)))
    assert list(result.source_indices) == sorted(result.source_indices)
    assert (result.before_count, result.after_count) == (len(messages), len(result.messages))
    if result.noop:
        assert result.messages == tuple(messages) and result.strategies_run == ()
    else:
        assert result.strategies_run
    for index, message in zip(result.source_indices, result.messages, strict=True):
        assert message == messages[index] or index in result.cleared
