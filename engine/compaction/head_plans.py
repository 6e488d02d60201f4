"""Plans that replace a history's head: summarize (a summary of the oldest turns), truncate
(drop them), sliding_window (keep the last N messages); each cuts at a safe turn boundary.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.compaction.config import (
    SlidingWindow,
    Summarize,
    Truncate,
)
from engine.compaction.cuts import (
    Cut,
    choose_cut,
)
from engine.compaction.plan_steps import (
    drop_head,
    require_summarizer,
    summarize_messages,
    summary_budget,
    summary_reserve,
    turns_label,
    within_target,
)
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    SummaryCache,
    noop_result,
    pinned_in,
    snap_head_cut,
)
from engine.messages import (
    Message,
)


def _cut_label(messages: Sequence[Message], choice: Cut) -> str:
    label = turns_label(messages, 0, choice.cut)
    return f"{label}, cutting inside a turn" if choice.anchor is not None else label


def plan_summarize(messages: Sequence[Message], config: Summarize, ctx: PlanContext) -> CompactionResult:
    """Summarize the oldest turns up to the first safe boundary whose tail fits the target.

    The summary gets what the kept messages leave of the target (up to ``summary_max_tokens``).
    """
    before, done = within_target(messages, ctx)
    if done:
        return done
    reserve = summary_reserve(config.summary_max_tokens, ctx)
    choice = choose_cut(messages, ctx, config.keep_recent_turns, reserve, inside=config.cut_inside_turn)
    if choice is None:
        return noop_result(messages, ctx, "no safe turn boundary to summarize up to", before=before)
    kept_before = set(pinned_in(messages, 0, choice.cut))
    if choice.anchor is not None:
        kept_before.add(choice.anchor)
    head = [i for i in range(choice.cut) if i not in kept_before]
    if not head:
        return noop_result(messages, ctx, "every message before the boundary is pinned", before=before)
    budget = summary_budget(config.summary_max_tokens, ctx, choice.kept_tokens)
    name = require_summarizer(ctx, "summarize").name
    cached = ctx.cached_head("summarize", choice.cut, summarizer=name)
    carry = [ctx.summary]
    reused = ""
    if cached is not None:  # fold only what came after the summary of an earlier run
        head = [i for i in head if i >= cached.range_end]
        carry.append(cached.summary)
        reused = f" (the cached summary of the first {cached.range_end:,} with {len(head):,} new messages folded in)"
    summary = (
        summarize_messages(messages, head, ctx, strategy="summarize", max_tokens=budget, carry=carry)
        if head
        else cached.summary  # type: ignore[union-attr]
    )
    return drop_head(
        messages,
        ctx,
        choice.cut,
        strategy="summarize",
        before=before,
        summary=summary,
        summarizer=name,
        reason=f"summarized {_cut_label(messages, choice)}{reused}",
        anchor=choice.anchor,
        cache=[SummaryCache("summarize", 0, choice.cut, summary, 0, name)],
    )


def plan_truncate(messages: Sequence[Message], config: Truncate, ctx: PlanContext) -> CompactionResult:
    """Drop the oldest turns until the history fits (or only the protected turns are left)."""
    before, done = within_target(messages, ctx)
    if done:
        return done
    choice = choose_cut(
        messages, ctx, config.keep_recent_turns, before.summary, inside=config.cut_inside_turn
    )
    if choice is None:
        return noop_result(messages, ctx, "no safe turn boundary to truncate at", before=before)
    return drop_head(
        messages,
        ctx,
        choice.cut,
        strategy="truncate",
        before=before,
        summary=ctx.summary,
        reason=f"dropped the oldest {_cut_label(messages, choice)}",
        anchor=choice.anchor,
    )


def plan_sliding_window(
    messages: Sequence[Message], config: SlidingWindow, ctx: PlanContext
) -> CompactionResult:
    """Keep the last ``keep_messages`` messages, the cut snapped back to a safe turn boundary."""
    before, done = within_target(messages, ctx)
    if done:
        return done
    if len(messages) <= config.keep_messages:
        return noop_result(
            messages,
            ctx,
            f"only {len(messages)} messages (window keeps {config.keep_messages})",
            before=before,
        )
    cut = snap_head_cut(messages, len(messages) - config.keep_messages, prefer="backward")
    if cut is None:
        return noop_result(messages, ctx, "no safe turn boundary for the window", before=before)
    return drop_head(
        messages,
        ctx,
        cut,
        strategy="sliding_window",
        before=before,
        summary=ctx.summary,
        reason=f"kept the last {len(messages) - cut} messages, dropped {turns_label(messages, 0, cut)}",
    )
