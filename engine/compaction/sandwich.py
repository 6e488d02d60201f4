"""The sandwich strategy: keep the first and last messages, summarize the middle (a summary
of the same range is reused).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.compaction.config import (
    Sandwich,
)
from engine.compaction.cuts import (
    grow_bottom,
    sandwich_range,
)
from engine.compaction.plan_steps import (
    require_summarizer,
    summarize_messages,
    summary_budget,
    summary_reserve,
    within_target,
)
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    SummaryCache,
    build_result,
    noop_result,
    pinned_in,
)
from engine.messages import (
    Message,
)


def plan_sandwich(messages: Sequence[Message], config: Sandwich, ctx: PlanContext) -> CompactionResult:
    """Keep the first and last messages, summarize the middle; reuse a summary of the same range."""
    before, done = within_target(messages, ctx)
    if done:
        return done
    if ctx.context_window and before.total < config.trigger_ratio * ctx.context_window:
        return noop_result(
            messages,
            ctx,
            f"below trigger ({before.total:,} < {config.trigger_ratio:.0%} of {ctx.context_window:,})",
            before=before,
        )
    span = sandwich_range(messages, config)
    if span is None:
        return noop_result(
            messages,
            ctx,
            f"no middle to summarize between the first {config.preserve_top} and last "
            f"{config.preserve_bottom} messages",
            before=before,
        )
    start, end = span
    end, kept_tokens = grow_bottom(messages, ctx, start, end, summary_reserve(config.summary_max_tokens, ctx))
    pinned = set(pinned_in(messages, start, end))
    middle = [i for i in range(start, end) if i not in pinned]
    if not middle:
        return noop_result(messages, ctx, "every message in the middle is pinned", before=before)
    cached = ctx.cached("sandwich", start, end)
    if cached is not None:
        entry, how = cached, "reused the cached summary of"
    else:
        budget = summary_budget(config.summary_max_tokens, ctx, kept_tokens)
        text = summarize_messages(
            messages, middle, ctx, strategy="sandwich", max_tokens=budget, carry=[ctx.summary]
        )
        entry = SummaryCache("sandwich", start, end, text, 0, require_summarizer(ctx, "sandwich").name)
        how = "summarized"
    keep = [*range(start), *sorted(pinned), *range(end, len(messages))]
    return build_result(
        messages,
        ctx,
        strategy="sandwich",
        kept=[(i, messages[i]) for i in keep],
        summary=entry.summary,
        cache=[entry],
        before=before,
        summarizer=entry.summarizer,
        reason=f"{how} messages [{start}, {end}) between the first {start} and last {len(messages) - end}",
    )
