"""Compaction strategies: pure plan functions from (messages, settings, context) to a result;
this module runs a chain of them and dispatches by ``type`` (each strategy lives in its own module).

Each plan keeps pinned messages (and the tool-pair partners they need) verbatim and in order,
never separates a tool_use from its tool_result, and returns a no-op result with a reason
when it cannot or need not act. The only call out is to the injected summarizer.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from engine.compaction.clearing import (
    CLEARED_FACT_LINES,
    CLEARED_INPUT_KEY,
    CLEARED_PREFIX,
    USE_LOOKBACK,
    cleared_placeholder,
    is_cleared,
    plan_clear_tool_results,
)
from engine.compaction.config import (
    Chain,
    ClearToolResults,
    Summarize,
    Truncate,
)
from engine.compaction.emergency import compression_note, plan_emergency
from engine.compaction.head_plans import plan_sliding_window, plan_summarize, plan_truncate
from engine.compaction.plan_steps import MIN_SUMMARY_SHARE_OF_TARGET, SUMMARY_SHARE_OF_TARGET, within_target
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    SummaryCache,
    noop_result,
)
from engine.compaction.rolling import PROMPT_CLIP_STEPS, plan_rolling_iterations, prompt_pieces
from engine.compaction.sandwich import plan_sandwich
from engine.compaction.tree import plan_tree_summary
from engine.messages import (
    Message,
)

__all__ = [
    "CLEARED_FACT_LINES",
    "CLEARED_INPUT_KEY",
    "CLEARED_PREFIX",
    "MIN_SUMMARY_SHARE_OF_TARGET",
    "OVER_TARGET_REASONS",
    "PLANS",
    "PROMPT_CLIP_STEPS",
    "SUMMARY_SHARE_OF_TARGET",
    "USE_LOOKBACK",
    "cleared_placeholder",
    "compression_note",
    "is_cleared",
    "plan_chain",
    "plan_clear_tool_results",
    "plan_compaction",
    "plan_emergency",
    "plan_rolling_iterations",
    "plan_sandwich",
    "plan_sliding_window",
    "plan_summarize",
    "plan_tree_summary",
    "plan_truncate",
    "prompt_pieces",
]


#: What a cleared tool result is expected to cost, placeholder and kept lines included.
CLEARED_ESTIMATE_TOKENS = 80
#: A chain clears only the tail that could be kept: this many targets' worth, estimated cleared.
CLEAR_TAIL_TARGETS = 2


def _summarizes_later(config: Chain, step: Any) -> bool:
    steps = list(config.steps)
    return step in steps and any(isinstance(s, Summarize) for s in steps[steps.index(step) + 1 :])


def _clear_from(messages: Sequence[Message], ctx: PlanContext) -> int:
    """Where clearing starts when a summarize step follows: the start of the tail that, with its
    results cleared, would be ``CLEAR_TAIL_TARGETS`` targets. Clearing older results
    is wasted work when the summary replaces them (the summary reads the uncleared messages)."""
    budget = ctx.target_tokens * CLEAR_TAIL_TARGETS
    used = 0
    for i in range(len(messages) - 1, -1, -1):
        conversation, results = ctx.tokenizer.count_message_parts(messages[i])
        used += conversation + min(results, CLEARED_ESTIMATE_TOKENS * len(messages[i].tool_result_ids))
        if used > budget:
            return i  # where clearing starts need not be a safe cut: nothing is cut there
    return 0


def _inside_turn_steps(config: Chain, ctx: PlanContext) -> tuple[Any, ...]:
    """The steps a chain runs when its own leave the history over the target: clear every tool
    result but the latest, then summarize (without a summarizer: drop) inside the last turn.

    With ``cut_inside_turns`` the chain's own summarize and truncate steps already cut inside a
    last turn that alone is over the target; these are the last resort after them."""
    if not config.cut_inside_turns:
        return ()
    cut: Any = (
        Summarize(cut_inside_turn=True) if ctx.summarizer is not None else Truncate(cut_inside_turn=True)
    )
    return (ClearToolResults(keep=1), cut)


def plan_chain(messages: Sequence[Message], config: Chain, ctx: PlanContext) -> CompactionResult:
    """Run the steps in order, each on the previous output, until the history fits the target."""
    before, done = within_target(messages, ctx)
    if done:
        return done
    current: Sequence[Message] = messages
    summary = ctx.summary
    source = list(range(len(messages)))
    removed: set[int] = set()
    cleared: set[int] = set()
    ran: list[str] = []
    reasons: list[str] = []
    cache: list[SummaryCache] = []
    summarizer_name: str | None = None
    result: CompactionResult | None = None
    after = before  # each step that changes the history measures its output: the last one's stands
    fits = False
    for step in (*config.steps, *_inside_turn_steps(config, ctx)):
        if fits:
            break
        if config.cut_inside_turns and isinstance(step, Summarize | Truncate):
            step = step.model_copy(update={"cut_inside_turn": True})
        step_ctx = replace(
            ctx,
            summary=summary,
            seqs=[ctx.seq_of(i) for i in source] if ctx.seqs is not None else None,
            # Cached ranges are in input indices: valid while no step has removed a message.
            cache=ctx.cache if len(source) == len(messages) else (),
            originals=[ctx.original(messages, i) for i in source],
            measured=after,
        )
        if (
            isinstance(step, ClearToolResults)
            and ctx.summarizer is not None
            and _summarizes_later(config, step)
        ):
            result = plan_clear_tool_results(
                current, step, step_ctx, from_index=_clear_from(current, step_ctx)
            )
        else:
            result = plan_compaction(current, step, step_ctx)
        reasons.append(f"{step.type}: {result.reason}")
        if result.noop:
            continue
        ran.append(step.type)
        removed.update(source[i] for i in result.removed)
        cleared.update(source[i] for i in result.cleared)
        cache.extend(
            replace(e, range_start=source[e.range_start], range_end=source[e.range_end - 1] + 1)
            for e in result.cache
        )
        source = [source[i] for i in result.source_indices]
        current, summary, after = result.messages, result.summary, result.after_components
        summarizer_name = result.summarizer or summarizer_name
        fits = result.fits
    if not ran:
        return noop_result(messages, ctx, "; ".join(reasons), before=before)
    return CompactionResult(
        messages=tuple(current),
        summary=summary,
        before_tokens=before.total,
        after_tokens=after.total,
        before_count=len(messages),
        after_count=len(current),
        target_tokens=ctx.target_tokens,
        strategies_run=tuple(ran),
        removed=tuple(sorted(removed)),
        cleared=tuple(sorted(cleared - removed)),
        source_indices=tuple(source),
        before_components=before,
        after_components=after,
        reason="; ".join(reasons),
        noop=False,
        cache=tuple(cache),
        summarizer=summarizer_name,
    )


PLANS: dict[str, Callable[[Sequence[Message], Any, PlanContext], CompactionResult]] = {
    "clear_tool_results": plan_clear_tool_results,
    "summarize": plan_summarize,
    "sandwich": plan_sandwich,
    "sliding_window": plan_sliding_window,
    "truncate": plan_truncate,
    "rolling_iterations": plan_rolling_iterations,
    "tree_summary": plan_tree_summary,
    "emergency": plan_emergency,
    "chain": plan_chain,
}


#: Why a strategy can leave a history over its target, said in the result's reason when it does.
OVER_TARGET_REASONS = {
    "clear_tool_results": "it only shortens tool results; text and tool calls stay",
    "summarize": "it never cuts inside its kept last turns (cut_inside_turn is off)",
    "truncate": "it never cuts inside its kept last turns (cut_inside_turn is off)",
    "sliding_window": "it keeps keep_messages messages whatever their tokens",
    "sandwich": "its first preserve_top and last preserve_bottom messages are kept verbatim",
    "rolling_iterations": "its last keep_iterations iterations are kept raw",
    "tree_summary": "its last keep_recent_turns turns are kept raw",
    "emergency": "it drops about half the turns whatever the target (after a provider error)",
    "chain": "no step could cut further without splitting a tool_use from its tool_result or dropping a pin",
}


def plan_compaction(messages: Sequence[Message], config: Any, ctx: PlanContext) -> CompactionResult:
    """Plan with the strategy named by ``config.type``; a result still over the target says why."""
    result = PLANS[config.type](messages, config, ctx)
    if result.noop or result.fits or "over the target" in result.reason:
        return result
    why = f"; still {result.after_tokens:,} tokens, over the target of {result.target_tokens:,}: "
    because = (
        "what no cut may split (the last message, the tool pairs and pins it keeps) is over it"
        if getattr(config, "cut_inside_turn", False)
        else OVER_TARGET_REASONS[config.type]
    )
    return replace(result, reason=result.reason + why + because)
