"""Invariants every compaction strategy keeps, on random agent histories.

For every strategy name and any target: the output has no orphaned tool_result (or tool_use),
every pinned message is kept unchanged, and the input list and its messages are not modified.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.compaction import STRATEGY_NAMES, OfflineSummarizer, compact
from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock
from engine.tokens import get_tokenizer
from engine.turns import has_orphans

TOKENIZER = get_tokenizer("o200k_base")
SUMMARIZER = OfflineSummarizer(TOKENIZER)

words = st.text(alphabet='abcdefghij klmnop ✓é中\n{}:"', min_size=0, max_size=120)
long_words = st.integers(min_value=0, max_value=4).flatmap(lambda k: st.just("log line ✓ 42\n" * (k * 60)))


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Turns of user input, tool rounds (1-3 parallel uses, results in one message) and a final
    answer; any message may be pinned; the last turn may end with tool uses still running."""
    out: list[Message] = []
    call = 0

    def pin() -> bool:
        return draw(st.integers(0, 9)) == 0

    for turn in range(draw(st.integers(1, 6))):
        out.append(Message(role="user", content=f"task {turn}: " + draw(words), pinned=pin()))
        for _ in range(draw(st.integers(0, 3))):
            ids = [f"toolu_{call + k}" for k in range(draw(st.integers(1, 3)))]
            call += len(ids)
            text = draw(words)
            blocks: list[Any] = [TextBlock(text=text)] if text else []
            blocks += [ToolUseBlock(id=i, name="bash", input={"command": draw(words)}) for i in ids]
            out.append(Message(role="assistant", content=blocks, pinned=pin()))
            results = [
                ToolResultBlock(
                    tool_use_id=i, content=draw(words) + draw(long_words), is_error=draw(st.booleans())
                )
                for i in ids
            ]
            out.append(Message(role="user", content=results, pinned=pin()))
        out.append(Message(role="assistant", content=f"done {turn}. " + draw(words), pinned=pin()))
    if draw(st.booleans()):
        out.append(
            Message(role="assistant", content=[ToolUseBlock(id="toolu_pending", name="bash", input={})])
        )
    return out


def plain(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


@pytest.mark.parametrize("strategy", STRATEGY_NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(history=histories(), share=st.floats(min_value=0.02, max_value=1.2))
def test_compaction_keeps_pairs_and_pins_and_never_mutates_its_input(
    strategy: str, history: list[Message], share: float
) -> None:
    assert not has_orphans(history)
    snapshot, items = plain(history), list(history)
    target = max(1, int(TOKENIZER.count_messages(history) * share))

    result = compact(
        history, strategy=strategy, target_tokens=target, tokenizer=TOKENIZER, summarizer=SUMMARIZER
    )

    event("noop" if result.noop else "compacted")
    assert not has_orphans(list(result.messages)), f"{strategy} orphaned a tool_use or tool_result"
    kept = {(m.role, m.content_hash) for m in result.messages}
    for message in history:
        if message.pinned:
            assert (message.role, message.content_hash) in kept, (
                f"{strategy} dropped or changed a pinned message"
            )
    assert plain(history) == snapshot, f"{strategy} modified its input messages"
    assert len(history) == len(items) and all(a is b for a, b in zip(history, items, strict=True))
    if result.noop:
        assert plain(list(result.messages)) == snapshot
