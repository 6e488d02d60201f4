"""Where a history may be cut, and what keeping the rest costs: the first safe cut whose kept
messages fit a target (found from the end, counting only what may be kept), cuts inside a last
turn that split no tool pair, and the sandwich's middle.

Pure functions over messages and token counts; the plans in ``strategies`` decide what to do
with the cut.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.compaction.config import Sandwich
from engine.compaction.result import PlanContext, pair_safe_positions, pinned_in, pinned_tokens_before
from engine.messages import Message, is_user_input
from engine.tokens import REPLY_PRIMING_TOKENS
from engine.turns import safe_cut_points, turn_spans


def message_tokens(messages: Sequence[Message], ctx: PlanContext) -> list[int]:
    return [ctx.tokenizer.count_message(m) for m in messages]


def head_kept_tokens(messages: Sequence[Message], ctx: PlanContext, cut: int, pinned: Iterable[int]) -> int:
    """What a head cut keeps costs: ``messages[cut:]`` and the ``pinned`` ones before it, reply
    priming included."""
    count = ctx.tokenizer.count_message
    return (
        sum(count(m) for m in messages[cut:]) + sum(count(messages[i]) for i in pinned) + REPLY_PRIMING_TOKENS
    )


def head_cuts(messages: Sequence[Message], keep_turns: int) -> list[int]:
    """Safe cuts (ascending) that keep at least the last ``keep_turns`` turns."""
    spans = turn_spans(messages)
    if len(spans) <= keep_turns:
        return []
    limit = spans[-keep_turns][0]
    return [cut for cut in safe_cut_points(messages) if cut <= limit]


@dataclass(frozen=True)
class Cut:
    """Where a head is cut: keep ``messages[cut:]``, the pinned ones before it and ``anchor`` (the
    opening user message of a turn cut inside); ``kept_tokens`` is what that costs, reply
    priming included."""

    cut: int
    kept_tokens: int
    anchor: int | None = None


def inner_cuts(messages: Sequence[Message], after: int) -> list[int]:
    """Positions inside the history's last turns, after ``after`` (0 or a safe cut, which no
    pair spans, so the tail alone tells), that separate no tool_use from its tool_result (at
    least the last message is always kept)."""
    safe = pair_safe_positions(messages[after:])
    return [after + p for p in range(1, len(messages) - after) if safe[p]]


def turn_anchor(messages: Sequence[Message], starts: Sequence[int], cut: int) -> int | None:
    """The user message opening the turn a cut falls inside, when it can be kept on its own."""
    at = max((s for s in starts if s < cut), default=None)
    if at is None:
        return None
    message = messages[at]
    if not is_user_input(message) or message.tool_result_ids or message.tool_use_ids or message.pinned:
        return None
    return at


class LazyTokens:
    """``tokens[i]`` of a message, counted (from the tokenizer's cache) only when asked: a plan
    over 100,000 messages looks at the few it may keep."""

    def __init__(self, messages: Sequence[Message], ctx: PlanContext) -> None:
        self.messages = messages
        self.count = ctx.tokenizer.count_message

    def __getitem__(self, index: int) -> int:
        return self.count(self.messages[index])


def choose_cut(
    messages: Sequence[Message], ctx: PlanContext, keep_turns: int, reserve: int, *, inside: bool = False
) -> Cut | None:
    """The first safe cut (keeping at least ``keep_turns`` turns) whose kept messages plus
    ``reserve`` tokens fit the target; else the last one; None when there is none.

    With ``inside``, when no turn boundary fits, points inside the last turns that split no tool
    pair are tried too (the turn's opening user message is kept beside the cut).
    """
    cuts = head_cuts(messages, keep_turns)
    tokens = LazyTokens(messages, ctx)
    fixed = REPLY_PRIMING_TOKENS
    target = ctx.target_tokens - reserve
    last: Cut | None = None
    if cuts:
        # Kept cost of a cut: messages[cut:] plus the pinned ones before it. It never grows as the
        # cut moves later (no pair spans a safe cut, so what a later cut adds from the head is a
        # pinned message it took from the tail), so the first that fits is found from the end.
        pinned = pinned_tokens_before(messages, cuts, tokens)
        tail, at, best = 0, len(messages), None
        for k in range(len(cuts) - 1, -1, -1):
            while at > cuts[k]:
                at -= 1
                tail += tokens[at]
            cost = tail + pinned[k] + fixed
            if last is None:
                last = Cut(cuts[k], cost)
            if cost > target:
                break
            best = Cut(cuts[k], cost)
        if best is not None:
            return best
        if not inside:
            return last
    elif not inside:
        return None
    inner = inner_cuts(messages, cuts[-1] if cuts else 0)
    if not inner:
        return last
    suffix = dict(zip(range(len(messages), inner[0] - 1, -1), itertools.accumulate(
        (tokens[i] for i in range(len(messages) - 1, inner[0] - 1, -1)), initial=0), strict=True))  # fmt: skip
    starts = [start for start, _ in turn_spans(messages)]
    held_inner = pinned_tokens_before(messages, inner, tokens)
    choice = last
    # First with the turn's opening message kept beside the cut; when that never fits (the
    # request alone is over the target), without it: the summary then carries the request.
    for keep_anchor in (True, False):
        for c, held in zip(inner, held_inner, strict=True):
            anchor = turn_anchor(messages, starts, c) if keep_anchor else None
            cost = suffix[c] + held + fixed + (tokens[anchor] if anchor is not None else 0)
            if cost <= target:
                return Cut(c, cost, anchor)
            if keep_anchor:
                choice = Cut(c, cost, anchor)
    return choice


def fitting_cut(messages: Sequence[Message], ctx: PlanContext, keep_turns: int, reserve: int) -> int | None:
    """The cut of ``choose_cut`` at turn boundaries only."""
    choice = choose_cut(messages, ctx, keep_turns, reserve)
    return None if choice is None else choice.cut


def sandwich_range(messages: Sequence[Message], config: Sandwich) -> tuple[int, int] | None:
    """The middle ``[start, end)`` a sandwich summarizes, both edges snapped so no tool pair is split."""
    n = len(messages)
    if n <= config.preserve_top + config.preserve_bottom:
        return None
    safe = pair_safe_positions(messages)
    start = next((p for p in range(config.preserve_top, n + 1) if safe[p]), None)
    end = next((q for q in range(n - config.preserve_bottom, -1, -1) if safe[q]), None)
    if start is None or end is None or start >= end:
        return None
    return start, end


def grow_bottom(
    messages: Sequence[Message], ctx: PlanContext, start: int, end: int, reserve: int
) -> tuple[int, int]:
    """Move the middle's end back over pair-safe points while the top, the pinned middle messages,
    the grown bottom and ``reserve`` tokens still fit the target: (new end, kept tokens)."""
    tokens = message_tokens(messages, ctx)
    pinned = set(pinned_in(messages, start, end))
    top = sum(tokens[:start]) + REPLY_PRIMING_TOKENS
    held = sum(tokens[i] for i in pinned)
    first_free = next((i for i in range(start, end) if i not in pinned), end)
    safe = pair_safe_positions(messages)
    room = ctx.target_tokens - reserve
    best = end
    q, grown = end, sum(tokens[end:])
    while q - 1 > first_free:
        q -= 1
        if q not in pinned:
            grown += tokens[q]
        if top + held + grown > room:
            break
        if safe[q]:
            best = q
    kept = top + sum(tokens[best:]) + sum(tokens[i] for i in pinned if i < best)
    return best, kept
