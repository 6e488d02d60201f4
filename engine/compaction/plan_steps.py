"""Steps every plan shares: the summary's share of the target, the summarizer call, the
"already within target" check, and dropping a head while keeping pins and a cut turn's request.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    SummaryCache,
    build_result,
    measure,
    noop_result,
    pinned_in,
    summary_message,
)
from engine.compaction.summarizers import Summarizer
from engine.errors import ValidationError
from engine.events import ComponentTokens
from engine.messages import (
    Message,
    is_user_input,
)

#: Share of the target reserved for a new summary when choosing a cut (capped by summary_max_tokens).
SUMMARY_SHARE_OF_TARGET = 2
#: A summary gets at least this share of the target, even when the kept messages leave less.
MIN_SUMMARY_SHARE_OF_TARGET = 10


def summary_reserve(max_tokens: int, ctx: PlanContext) -> int:
    """Tokens set aside for a new summary when choosing what to keep: the cap, at most half the
    target."""
    return max(1, min(max_tokens, ctx.target_tokens // SUMMARY_SHARE_OF_TARGET))


def summary_budget(max_tokens: int, ctx: PlanContext, kept_tokens: int) -> int:
    """Tokens a new summary may use: what the kept messages (``kept_tokens``, reply priming
    included) leave of the target, up to the cap; at least a tenth of the target (capped), so a
    summary is written even when what is kept is already over it."""
    floor = max(1, min(max_tokens, ctx.target_tokens // MIN_SUMMARY_SHARE_OF_TARGET))
    return max(floor, min(max_tokens, ctx.target_tokens - kept_tokens))


def require_summarizer(ctx: PlanContext, strategy: str) -> Summarizer:
    if ctx.summarizer is None:
        raise ValidationError(f"the {strategy} strategy needs a summarizer", field="summarizer")
    return ctx.summarizer


def summarize_messages(
    messages: Sequence[Message],
    indices: Sequence[int],
    ctx: PlanContext,
    *,
    strategy: str,
    max_tokens: int,
    carry: Sequence[str | None] = (),
) -> str:
    """Summarize ``messages[indices]`` after any earlier summaries in ``carry``."""
    summarizer = require_summarizer(ctx, strategy)
    inputs = [summary_message(text) for text in carry if text]
    inputs += [ctx.original(messages, i) for i in indices]
    return summarizer.summarize(inputs, instructions=ctx.instructions, max_tokens=max_tokens)


def within_target(
    messages: Sequence[Message], ctx: PlanContext
) -> tuple[ComponentTokens, CompactionResult | None]:
    """The before-measure, and a no-op result when the history already fits the target."""
    before = ctx.measured or measure(messages, ctx.summary, ctx.tokenizer)
    if not messages:
        return before, noop_result(messages, ctx, "empty history", before=before)
    if before.total <= ctx.target_tokens:
        return before, noop_result(
            messages,
            ctx,
            f"already within target ({before.total:,} <= {ctx.target_tokens:,} tokens)",
            before=before,
        )
    return before, None


def drop_head(
    messages: Sequence[Message],
    ctx: PlanContext,
    cut: int,
    *,
    strategy: str,
    before: ComponentTokens,
    summary: str | None,
    reason: str,
    cache: Sequence[SummaryCache] = (),
    summarizer: str | None = None,
    anchor: int | None = None,
) -> CompactionResult:
    """Keep ``messages[cut:]``, the pinned messages before ``cut`` and the ``anchor`` (the opening
    user message of a turn cut inside)."""
    before_cut = set(pinned_in(messages, 0, cut))
    if anchor is not None:
        before_cut.add(anchor)
    keep = [*sorted(before_cut), *range(cut, len(messages))]
    return build_result(
        messages,
        ctx,
        strategy=strategy,
        kept=[(i, messages[i]) for i in keep],
        summary=summary,
        reason=reason,
        cache=cache,
        before=before,
        summarizer=summarizer,
    )


def turns_label(messages: Sequence[Message], start: int, end: int) -> str:
    turns = sum(1 for i in range(start, end) if i == 0 or is_user_input(messages[i]))
    return f"{end - start} messages ({turns} turn{'s' if turns != 1 else ''})"
