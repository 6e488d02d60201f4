"""Values shared by every compaction strategy: the frozen plan result, its inputs, token accounting.

A plan never mutates its input. ``CompactionResult.messages`` is the history to send; the
summary travels beside it (``.summary``) and is injected when the request is assembled.
Helpers here find where a history may be cut without separating a tool_use from its result.
"""

from __future__ import annotations

import bisect
import functools
import heapq
from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from engine.budget import HistoryTotals
from engine.events import ComponentTokens
from engine.messages import Message, ToolResultBlock, ToolUseBlock
from engine.tokens import REPLY_PRIMING_TOKENS, Tokenizer
from engine.turns import safe_cut_points, snap_to_cut

if TYPE_CHECKING:
    from engine.compaction.protocols import Summarizer

#: ``Message.meta`` key that marks a message built only to hand an earlier summary to a summarizer.
SUMMARY_META_KEY = "ctxdesk_summary"


@dataclass(frozen=True)
class SummaryCache:
    """A summary with the range of input indices ``[range_start, range_end)`` it covers.

    Strategies that cache (sandwich, rolling_iterations, tree_summary) reuse an entry only
    when the range they would summarize is exactly this one; the store keeps these as
    ``context_states`` rows (there in transcript seqs, see ``operations``).
    """

    strategy: str
    range_start: int
    range_end: int
    summary: str
    level: int = 0
    summarizer: str = ""


@dataclass(frozen=True)
class PlanContext:
    """Everything a plan function needs besides the messages and its own settings."""

    target_tokens: int
    tokenizer: Tokenizer
    summarizer: Summarizer | None = None
    summary: str | None = None
    instructions: str | None = None
    seqs: Sequence[int | None] | None = None
    cache: tuple[SummaryCache, ...] = ()
    context_window: int | None = None
    #: The messages as they were before earlier steps of a chain cleared them, aligned with the
    #: messages a plan gets: a summary is written from these, so a cleared result's facts survive.
    originals: Sequence[Message] | None = None
    #: The measure of these messages with ``summary``, when the caller has it (a chain's steps):
    #: saves a recount of the whole history per step.
    measured: ComponentTokens | None = None

    def original(self, messages: Sequence[Message], index: int) -> Message:
        """``messages[index]`` as it was before any earlier step shortened it."""
        return self.originals[index] if self.originals is not None else messages[index]

    def seq_of(self, index: int) -> int | None:
        if self.seqs is None:
            return None
        return self.seqs[index] if 0 <= index < len(self.seqs) else None

    def cached(self, strategy: str, start: int, end: int, level: int = 0) -> SummaryCache | None:
        """The newest cached summary of exactly ``[start, end)`` at ``level``, if any."""
        return self._cache_index.get((strategy, level, start, end))

    def cached_head(
        self, strategy: str, cut: int, *, summarizer: str | None = None, ends: Container[int] | None = None
    ) -> SummaryCache | None:
        """The newest cached level-0 summary of a head ``[0, end)`` with ``0 < end <= cut``; only
        one written by ``summarizer`` and one ending at one of ``ends``, when they are given."""
        for e in reversed(self.cache):
            if (e.strategy, e.level, e.range_start) != (strategy, 0, 0) or not 0 < e.range_end <= cut:
                continue
            if (summarizer is None or e.summarizer == summarizer) and (ends is None or e.range_end in ends):
                return e
        return None

    @functools.cached_property
    def _cache_index(self) -> dict[tuple[str, int, int, int], SummaryCache]:
        # Built once per context: a tree plan looks up every node, so a scan per lookup is quadratic.
        return {(e.strategy, e.level, e.range_start, e.range_end): e for e in self.cache}


@dataclass(frozen=True)
class CompactionResult:
    """What a strategy (or chain) decided. ``noop`` results carry the input unchanged and a reason.

    ``removed`` lists input indices dropped or folded into the summary; ``cleared`` lists input
    indices kept but shortened (tool results replaced by a placeholder); ``source_indices``
    gives, for each output message, the input index it came from.
    """

    messages: tuple[Message, ...]
    summary: str | None
    before_tokens: int
    after_tokens: int
    before_count: int
    after_count: int
    target_tokens: int
    strategies_run: tuple[str, ...]
    removed: tuple[int, ...]
    cleared: tuple[int, ...]
    source_indices: tuple[int, ...]
    before_components: ComponentTokens
    after_components: ComponentTokens
    reason: str
    noop: bool
    cache: tuple[SummaryCache, ...] = field(default=())
    summarizer: str | None = None

    @property
    def fits(self) -> bool:
        """True when the compacted history (summary included) is within the target."""
        return self.after_tokens <= self.target_tokens

    @property
    def saved_tokens(self) -> int:
        return self.before_tokens - self.after_tokens


# -- token accounting ------------------------------------------------------------------------


def measure(messages: Iterable[Message], summary: str | None, tokenizer: Tokenizer) -> ComponentTokens:
    """Summary, conversation and tool-result tokens; their total is what the history costs.

    Same split as the budget (``HistoryTotals``): tool-result blocks (and whole ``tool`` role
    messages) are tool results, everything else including framing is conversation. Both come
    from the tokenizer's per-message cache, so re-measuring a history counts nothing twice.
    """
    history = HistoryTotals(tokenizer, messages)
    return ComponentTokens(
        summary=tokenizer.count(summary) if summary else 0,
        conversation=history.conversation,
        tool_results=history.tool_results,
    )


def measure_changes(
    before: ComponentTokens,
    ctx: PlanContext,
    summary: str | None,
    *,
    dropped: Iterable[Message] = (),
    rewritten: Iterable[tuple[Message, Message]] = (),
) -> ComponentTokens:
    """``before`` with the ``dropped`` messages taken out, each (old, new) of ``rewritten``
    swapped, and ``summary``: only those messages are counted (a plan over 100,000 messages
    changes a few), the rest is arithmetic; equal to ``measure`` of the changed history."""
    parts = ctx.tokenizer.count_message_parts
    primed = before.conversation > 0
    conversation = before.conversation - (REPLY_PRIMING_TOKENS if primed else 0)
    results = before.tool_results
    for message in dropped:
        talk, held = parts(message)
        conversation, results = conversation - talk, results - held
    for old, new in rewritten:
        (old_talk, old_held), (talk, held) = parts(old), parts(new)
        conversation, results = conversation + talk - old_talk, results + held - old_held
    return ComponentTokens(
        summary=ctx.tokenizer.count(summary) if summary else 0,
        conversation=conversation + REPLY_PRIMING_TOKENS if conversation or results else 0,
        tool_results=results,
    )


def _measure_after(
    messages: Sequence[Message],
    kept: Sequence[tuple[int, Message]],
    kept_indices: set[int],
    before: ComponentTokens,
    summary: str | None,
    ctx: PlanContext,
) -> ComponentTokens:
    """``measure(kept messages, summary)`` from ``before`` (:func:`measure_changes`), or a
    recount when most of the history changed."""
    changed = [(i, m) for i, m in kept if m is not messages[i]]
    if len(changed) + len(messages) - len(kept_indices) > len(kept):
        return measure((m for _, m in kept), summary, ctx.tokenizer)  # most of it changed: recount
    return measure_changes(
        before,
        ctx,
        summary,
        dropped=(messages[i] for i in range(len(messages)) if i not in kept_indices),
        rewritten=((messages[i], m) for i, m in changed),
    )


def noop_result(
    messages: Sequence[Message], ctx: PlanContext, reason: str, *, before: ComponentTokens | None = None
) -> CompactionResult:
    """The input unchanged, with the reason nothing was done."""
    before = before or ctx.measured or measure(messages, ctx.summary, ctx.tokenizer)
    return CompactionResult(
        messages=tuple(messages),
        summary=ctx.summary,
        before_tokens=before.total,
        after_tokens=before.total,
        before_count=len(messages),
        after_count=len(messages),
        target_tokens=ctx.target_tokens,
        strategies_run=(),
        removed=(),
        cleared=(),
        source_indices=tuple(range(len(messages))),
        before_components=before,
        after_components=before,
        reason=reason,
        noop=True,
    )


def build_result(
    messages: Sequence[Message],
    ctx: PlanContext,
    *,
    strategy: str,
    kept: Sequence[tuple[int, Message]],
    summary: str | None,
    reason: str,
    cleared: Iterable[int] = (),
    cache: Iterable[SummaryCache] = (),
    before: ComponentTokens | None = None,
    summarizer: str | None = None,
) -> CompactionResult:
    """A result keeping ``kept`` (input index, possibly rewritten message) in input order."""
    before = before or ctx.measured or measure(messages, ctx.summary, ctx.tokenizer)
    kept = sorted(kept, key=lambda pair: pair[0])
    out = tuple(m for _, m in kept)
    kept_indices = {i for i, _ in kept}
    after = _measure_after(messages, kept, kept_indices, before, summary, ctx)
    return CompactionResult(
        messages=out,
        summary=summary,
        before_tokens=before.total,
        after_tokens=after.total,
        before_count=len(messages),
        after_count=len(out),
        target_tokens=ctx.target_tokens,
        strategies_run=(strategy,),
        removed=tuple(i for i in range(len(messages)) if i not in kept_indices),
        cleared=tuple(sorted(set(cleared) & kept_indices)),
        source_indices=tuple(i for i, _ in kept),
        before_components=before,
        after_components=after,
        reason=reason,
        noop=False,
        cache=tuple(cache),
        summarizer=summarizer,
    )


# -- where a history may be cut ----------------------------------------------------------------


def pair_safe_positions(messages: Sequence[Message]) -> list[bool]:
    """``safe[p]`` (0 <= p <= len) is True when no tool_use before p is answered at or after p.

    Splitting a history at a pair-safe position never separates a tool_use from its result.
    """
    answered_at: dict[str, int] = {}
    for i, message in enumerate(messages):
        for rid in message.tool_result_ids:
            answered_at.setdefault(rid, i)
    # open_until[p] > 0 means some pair spans the gap before position p.
    spans = [0] * (len(messages) + 2)
    for i, message in enumerate(messages):
        for uid in message.tool_use_ids:
            j = answered_at.get(uid)
            if j is not None and j > i:
                spans[i + 1] += 1
                spans[j + 1] -= 1
    safe: list[bool] = []
    running = 0
    for p in range(len(messages) + 1):
        running += spans[p]
        safe.append(running == 0)
    return safe


def snap_head_cut(
    messages: Sequence[Message],
    index: int,
    *,
    prefer: str = "backward",
    cuts: Sequence[int] | None = None,
) -> int | None:
    """A safe cut (keep ``messages[cut:]``) at ``index`` itself if safe, else the nearest one.

    ``cuts`` is ``safe_cut_points(messages)`` when the caller already has it.
    """
    cuts = safe_cut_points(messages) if cuts is None else cuts
    at = bisect.bisect_left(cuts, index)
    if at < len(cuts) and cuts[at] == index:
        return index
    index = max(0, min(index, len(messages)))
    return snap_to_cut(cuts, index, prefer="forward" if prefer == "forward" else "backward")


class _PairGraph:
    """Tool-pair partners by message index: a use's results, a result's (first) use."""

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self.use_at: dict[str, int] = {}
        self.result_at: dict[str, list[int]] = {}
        for i, message in enumerate(messages):
            for block in message.blocks:
                if isinstance(block, ToolUseBlock):
                    self.use_at.setdefault(block.id, i)
                elif isinstance(block, ToolResultBlock):
                    self.result_at.setdefault(block.tool_use_id, []).append(i)

    def partners(self, i: int) -> list[int]:
        message = self.messages[i]
        found = [j for uid in message.tool_use_ids for j in self.result_at.get(uid, [])]
        found += [self.use_at[rid] for rid in message.tool_result_ids if rid in self.use_at]
        return found

    def grow(self, closed: set[int], indices: Iterable[int]) -> list[int]:
        """Add ``indices`` and everything they reach to ``closed``; returns what was added."""
        added = [i for i in dict.fromkeys(indices) if i not in closed]
        closed.update(added)
        stack = list(added)
        while stack:
            for j in self.partners(stack.pop()):
                if j not in closed:
                    closed.add(j)
                    added.append(j)
                    stack.append(j)
        return added


def pair_closure(messages: Sequence[Message], indices: Iterable[int]) -> set[int]:
    """``indices`` plus every message holding the other half of a tool pair among them."""
    closed: set[int] = set()
    _PairGraph(messages).grow(closed, indices)
    return closed


def pinned_tokens_before(
    messages: Sequence[Message], cuts: Sequence[int], tokens: Sequence[int]
) -> list[int]:
    """For each of ascending ``cuts``: tokens of ``pinned_in(messages, 0, cut)``, in one pass.

    The pinned set before a cut only grows with the cut, and so does its pair closure, so the
    closure is extended per cut rather than rebuilt; members past the current cut wait in a
    heap until a later cut passes them.
    """
    pinned = [i for i, m in enumerate(messages) if m.pinned]
    if not pinned:
        return [0] * len(cuts)
    graph = _PairGraph(messages)
    closed: set[int] = set()
    waiting: list[int] = []
    next_pinned = total = 0
    out: list[int] = []
    for cut in cuts:
        start = next_pinned
        while next_pinned < len(pinned) and pinned[next_pinned] < cut:
            next_pinned += 1
        for i in graph.grow(closed, pinned[start:next_pinned]):
            heapq.heappush(waiting, i)
        while waiting and waiting[0] < cut:
            total += tokens[heapq.heappop(waiting)]
        out.append(total)
    return out


def pinned_in(messages: Sequence[Message], start: int, end: int) -> list[int]:
    """Pinned messages in ``[start, end)``, with the tool-pair partners they need, in order."""
    pinned = [i for i in range(start, end) if messages[i].pinned]
    if not pinned:
        return []
    return sorted(i for i in pair_closure(messages, pinned) if start <= i < end)


def summary_message(summary: str) -> Message:
    """An earlier summary handed to a summarizer as input (never part of a history)."""
    return Message(role="user", content=summary, meta={SUMMARY_META_KEY: True})


def is_summary_message(message: Message) -> bool:
    return bool(message.meta.get(SUMMARY_META_KEY))
