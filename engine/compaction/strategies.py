"""Compaction strategies: pure plan functions from (messages, settings, context) to a result.

Each plan keeps pinned messages (and the tool-pair partners they need) verbatim and in order,
never separates a tool_use from its tool_result, and returns a no-op result with a reason
when it cannot or need not act. The only call out is to the injected summarizer.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from engine.compaction.config import (
    Chain,
    ClearToolResults,
    Emergency,
    RollingIterations,
    Sandwich,
    SlidingWindow,
    Summarize,
    TreeSummary,
    Truncate,
)
from engine.compaction.cuts import (
    Cut,
    choose_cut,
    grow_bottom,
    message_tokens,
    sandwich_range,
)
from engine.compaction.extract import describe_call, error_line, is_failure_output, result_payload
from engine.compaction.offline import salient_lines
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    SummaryCache,
    build_result,
    measure,
    noop_result,
    pair_closure,
    pinned_in,
    snap_head_cut,
    summary_message,
)
from engine.compaction.summarizers import Summarizer, clip_middle, describe_media
from engine.errors import ValidationError
from engine.events import ComponentTokens
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_user_input,
)
from engine.tokens import REPLY_PRIMING_TOKENS
from engine.turns import safe_cut_points, turn_spans

CLEARED_PREFIX = "[Tool result cleared"
CLEARED_INPUT_KEY = "_cleared"
#: Share of the target reserved for a new summary when choosing a cut (capped by summary_max_tokens).
SUMMARY_SHARE_OF_TARGET = 2
#: A summary gets at least this share of the target, even when the kept messages leave less.
MIN_SUMMARY_SHARE_OF_TARGET = 10
#: Messages before ``from_index`` searched for the calls of the results cleared after it.
USE_LOOKBACK = 64
#: Lines of a cleared tool result kept in its placeholder when they state a fact.
CLEARED_FACT_LINES = 2
#: Characters per text block tried, in turn, to bring a summarizer prompt under its limit.
PROMPT_CLIP_STEPS = (4_000, 2_000, 1_000, 500, 200)


# -- shared pieces -----------------------------------------------------------------------------


def _summary_reserve(max_tokens: int, ctx: PlanContext) -> int:
    """Tokens set aside for a new summary when choosing what to keep: the cap, at most half the
    target."""
    return max(1, min(max_tokens, ctx.target_tokens // SUMMARY_SHARE_OF_TARGET))


def _summary_budget(max_tokens: int, ctx: PlanContext, kept_tokens: int) -> int:
    """Tokens a new summary may use: what the kept messages (``kept_tokens``, reply priming
    included) leave of the target, up to the cap; at least a tenth of the target (capped), so a
    summary is written even when what is kept is already over it."""
    floor = max(1, min(max_tokens, ctx.target_tokens // MIN_SUMMARY_SHARE_OF_TARGET))
    return max(floor, min(max_tokens, ctx.target_tokens - kept_tokens))


def _require_summarizer(ctx: PlanContext, strategy: str) -> Summarizer:
    if ctx.summarizer is None:
        raise ValidationError(f"the {strategy} strategy needs a summarizer", field="summarizer")
    return ctx.summarizer


def _summarize(
    messages: Sequence[Message],
    indices: Sequence[int],
    ctx: PlanContext,
    *,
    strategy: str,
    max_tokens: int,
    carry: Sequence[str | None] = (),
) -> str:
    """Summarize ``messages[indices]`` after any earlier summaries in ``carry``."""
    summarizer = _require_summarizer(ctx, strategy)
    inputs = [summary_message(text) for text in carry if text]
    inputs += [ctx.original(messages, i) for i in indices]
    return summarizer.summarize(inputs, instructions=ctx.instructions, max_tokens=max_tokens)


def _within_target(
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


def _drop_head(
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


def _turns_label(messages: Sequence[Message], start: int, end: int) -> str:
    turns = sum(1 for i in range(start, end) if i == 0 or is_user_input(messages[i]))
    return f"{end - start} messages ({turns} turn{'s' if turns != 1 else ''})"


# -- clear_tool_results ------------------------------------------------------------------------


def _result_size(block: ToolResultBlock) -> int:
    if isinstance(block.content, str):
        return len(block.content.encode("utf-8", "surrogatepass"))
    size = 0
    for part in block.content:
        if isinstance(part, TextBlock):
            size += len(part.text.encode("utf-8", "surrogatepass"))
        else:
            size += len(json.dumps(part.source, ensure_ascii=False))
    return size


def cleared_placeholder(
    size: int, tool_name: str, where: str, *, error: str | None = None, facts: Sequence[str] = ()
) -> str:
    """The text left where a tool result was cleared; a failed call keeps its error line, a
    successful one the lines that stated a fact (a setting, a value, a location)."""
    failed = f', which failed with "{error}"' if error else ""
    noted = f" It said: {' | '.join(facts)}." if facts else ""
    return (
        f'{CLEARED_PREFIX} — {size:,} bytes from "{tool_name}" ({where}){failed}.{noted} '
        "Ask to re-run or use read_result if it was stored.]"
    )


def is_cleared(block: ToolResultBlock) -> bool:
    return block.text.startswith(CLEARED_PREFIX)


def plan_clear_tool_results(
    messages: Sequence[Message], config: ClearToolResults, ctx: PlanContext, *, from_index: int = 0
) -> CompactionResult:
    """Replace the oldest tool results (beyond the ``keep`` most recent uses) with placeholders.

    ``from_index``: leave the results before it alone (a chain whose next step summarizes that
    head anyway does not clear it first)."""
    before, done = _within_target(messages, ctx)
    if done:
        return done
    if config.trigger is not None and before.total <= config.trigger:
        return noop_result(messages, ctx, f"below trigger ({before.total:,} <= {config.trigger:,} tokens)")
    # Only the calls of the results that may be cleared (and the latest ones, which are kept).
    scan = messages[max(0, from_index - USE_LOOKBACK) :] if from_index else messages
    uses = [b for m in scan for b in m.blocks if isinstance(b, ToolUseBlock)]
    calls = {b.id: b for b in uses}
    protected = {b.id for b in uses[len(uses) - config.keep :]} if config.keep else set()
    excluded = set(config.exclude_tools)
    need = before.total - ctx.target_tokens
    count = ctx.tokenizer.count_block
    chosen: dict[int, dict[int, ToolResultBlock]] = {}
    freed = 0
    for i in range(from_index, len(messages)):
        message = messages[i]
        if message.pinned or isinstance(message.content, str):
            continue
        # A lone tool-result block's tokens are the message's tool-result part, already cached.
        lone = message.role != "tool" and sum(isinstance(b, ToolResultBlock) for b in message.content) == 1
        for j, block in enumerate(message.content):
            if not isinstance(block, ToolResultBlock) or block.tool_use_id in protected:
                continue
            use = calls.get(block.tool_use_id)
            name = use.name if use is not None else "tool"
            if name in excluded or is_cleared(block):
                continue
            seq = ctx.seq_of(i)
            where = f"transcript seq {seq}" if seq is not None else f"message {i}"
            text = result_payload(block.text)
            reads_file = use is not None and describe_call(use.name, use.input).reads_file
            failed = block.is_error or is_failure_output(text, reads_file=reads_file)
            error = error_line(text) if failed else None
            facts = () if failed else salient_lines(text, CLEARED_FACT_LINES)
            new = ToolResultBlock(
                tool_use_id=block.tool_use_id,
                content=cleared_placeholder(_result_size(block), name, where, error=error, facts=facts),
                is_error=block.is_error,
            )
            held = ctx.tokenizer.count_message_parts(message)[1] if lone else count(block)
            saved = held - count(new)
            if saved <= 0:
                continue
            chosen.setdefault(i, {})[j] = new
            freed += saved
            if freed >= need and freed >= config.clear_at_least:
                break
        if freed >= need and freed >= config.clear_at_least:
            break
    if not chosen:
        return noop_result(messages, ctx, "no tool results eligible for clearing", before=before)
    if freed < config.clear_at_least:
        return noop_result(
            messages,
            ctx,
            f"clearing would free {freed:,} tokens, less than clear_at_least ({config.clear_at_least:,})",
            before=before,
        )
    cleared_ids = {b.tool_use_id for blocks in chosen.values() for b in blocks.values()}
    inputs = config.clear_tool_inputs
    kept: list[tuple[int, Message]] = []
    changed: set[int] = set(chosen)
    for i, message in enumerate(messages):
        if i in chosen:
            blocks = [chosen[i].get(j, b) for j, b in enumerate(message.content)]
            message = message.with_content(blocks)
        elif inputs and not message.pinned and message.role == "assistant":
            blocks = [_clear_input(b, inputs, cleared_ids) for b in message.blocks]
            if any(a is not b for a, b in zip(blocks, message.blocks, strict=True)):
                message = message.with_content(blocks)
                changed.add(i)
        kept.append((i, message))
    return build_result(
        messages,
        ctx,
        strategy="clear_tool_results",
        kept=kept,
        summary=ctx.summary,
        cleared=changed,
        before=before,
        reason=f"cleared {len(cleared_ids)} tool result{'s' if len(cleared_ids) != 1 else ''} "
        f"(kept the {config.keep} most recent tool uses)",
    )


def _clear_input(block: Any, inputs: bool | tuple[str, ...], cleared_ids: set[str]) -> Any:
    if not isinstance(block, ToolUseBlock) or block.id not in cleared_ids or not block.input:
        return block
    if inputs is not True and block.name not in inputs:
        return block
    size = len(json.dumps(block.input, ensure_ascii=False))
    note = {CLEARED_INPUT_KEY: f"input of {size:,} bytes cleared"}
    return block if size <= len(json.dumps(note)) else ToolUseBlock(id=block.id, name=block.name, input=note)


# -- summarize / truncate / sliding_window --------------------------------------------------------


def _cut_label(messages: Sequence[Message], choice: Cut) -> str:
    label = _turns_label(messages, 0, choice.cut)
    return f"{label}, cutting inside a turn" if choice.anchor is not None else label


def plan_summarize(messages: Sequence[Message], config: Summarize, ctx: PlanContext) -> CompactionResult:
    """Summarize the oldest turns up to the first safe boundary whose tail fits the target.

    The summary gets what the kept messages leave of the target (up to ``summary_max_tokens``).
    """
    before, done = _within_target(messages, ctx)
    if done:
        return done
    reserve = _summary_reserve(config.summary_max_tokens, ctx)
    choice = choose_cut(messages, ctx, config.keep_recent_turns, reserve, inside=config.cut_inside_turn)
    if choice is None:
        return noop_result(messages, ctx, "no safe turn boundary to summarize up to", before=before)
    kept_before = set(pinned_in(messages, 0, choice.cut))
    if choice.anchor is not None:
        kept_before.add(choice.anchor)
    head = [i for i in range(choice.cut) if i not in kept_before]
    if not head:
        return noop_result(messages, ctx, "every message before the boundary is pinned", before=before)
    budget = _summary_budget(config.summary_max_tokens, ctx, choice.kept_tokens)
    name = _require_summarizer(ctx, "summarize").name
    cached = _cached_head(ctx, "summarize", choice.cut, name)
    carry = [ctx.summary]
    reused = ""
    if cached is not None:  # fold only what came after the summary of an earlier run
        head = [i for i in head if i >= cached.range_end]
        carry.append(cached.summary)
        reused = f" (the cached summary of the first {cached.range_end:,} with {len(head):,} new messages folded in)"
    summary = (
        _summarize(messages, head, ctx, strategy="summarize", max_tokens=budget, carry=carry)
        if head
        else cached.summary  # type: ignore[union-attr]
    )
    return _drop_head(
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


def _cached_head(ctx: PlanContext, strategy: str, cut: int, summarizer: str) -> SummaryCache | None:
    """The latest cached summary of a head ``[0, end)`` with ``end <= cut``, by this summarizer."""
    return next(
        (
            e
            for e in reversed(ctx.cache)
            if e.strategy == strategy
            and e.level == 0
            and e.range_start == 0
            and 0 < e.range_end <= cut
            and e.summarizer == summarizer
        ),
        None,
    )


def plan_truncate(messages: Sequence[Message], config: Truncate, ctx: PlanContext) -> CompactionResult:
    """Drop the oldest turns until the history fits (or only the protected turns are left)."""
    before, done = _within_target(messages, ctx)
    if done:
        return done
    choice = choose_cut(
        messages, ctx, config.keep_recent_turns, before.summary, inside=config.cut_inside_turn
    )
    if choice is None:
        return noop_result(messages, ctx, "no safe turn boundary to truncate at", before=before)
    return _drop_head(
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
    before, done = _within_target(messages, ctx)
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
    return _drop_head(
        messages,
        ctx,
        cut,
        strategy="sliding_window",
        before=before,
        summary=ctx.summary,
        reason=f"kept the last {len(messages) - cut} messages, dropped {_turns_label(messages, 0, cut)}",
    )


# -- sandwich --------------------------------------------------------------------------------------


def plan_sandwich(messages: Sequence[Message], config: Sandwich, ctx: PlanContext) -> CompactionResult:
    """Keep the first and last messages, summarize the middle; reuse a summary of the same range."""
    before, done = _within_target(messages, ctx)
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
    end, kept_tokens = grow_bottom(
        messages, ctx, start, end, _summary_reserve(config.summary_max_tokens, ctx)
    )
    pinned = set(pinned_in(messages, start, end))
    middle = [i for i in range(start, end) if i not in pinned]
    if not middle:
        return noop_result(messages, ctx, "every message in the middle is pinned", before=before)
    cached = ctx.cached("sandwich", start, end)
    if cached is not None:
        entry, how = cached, "reused the cached summary of"
    else:
        budget = _summary_budget(config.summary_max_tokens, ctx, kept_tokens)
        text = _summarize(messages, middle, ctx, strategy="sandwich", max_tokens=budget, carry=[ctx.summary])
        entry = SummaryCache("sandwich", start, end, text, 0, _require_summarizer(ctx, "sandwich").name)
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


# -- rolling_iterations ----------------------------------------------------------------------------


def prompt_pieces(
    messages: Sequence[Message], *, max_tokens: int, carry_tokens: int, result_chars: int, ctx: PlanContext
) -> list[list[Message]]:
    """``messages`` in consecutive pieces, each a summarizer prompt within ``max_tokens`` beside
    the summary carried into it (``carry_tokens``): long tool results cut to ``result_chars``,
    a message still too long alone clipped further; nothing is dropped."""
    room = max(max_tokens - carry_tokens, max_tokens // 2, 1)
    pieces: list[list[Message]] = []
    piece: list[Message] = []
    used = REPLY_PRIMING_TOKENS
    for message in messages:
        clipped = _clip_message(message, result_chars, results_only=True)
        size = ctx.tokenizer.count_message(clipped)
        for limit in PROMPT_CLIP_STEPS:
            if size + REPLY_PRIMING_TOKENS <= room:
                break
            clipped = _clip_message(clipped, limit, results_only=False)
            size = ctx.tokenizer.count_message(clipped)
        if piece and used + size > room:
            pieces.append(piece)
            piece, used = [], REPLY_PRIMING_TOKENS
        piece.append(clipped)
        used += size
    if piece:
        pieces.append(piece)
    return pieces


def _clip_message(message: Message, limit: int, *, results_only: bool) -> Message:
    if limit <= 0:
        return message
    if isinstance(message.content, str):
        if results_only or len(message.content) <= limit:
            return message
        return message.with_content(clip_middle(message.content, limit))
    blocks: list[Any] = []
    for block in message.content:
        if isinstance(block, ToolResultBlock) and (
            len(block.text) > limit or not isinstance(block.content, str)
        ):
            media = [] if isinstance(block.content, str) else block.content
            lines = [f"<{describe_media(b)}>" for b in media if isinstance(b, ImageBlock | DocumentBlock)]
            text = "\n".join([clip_middle(block.text, limit), *lines])
            block = ToolResultBlock(tool_use_id=block.tool_use_id, content=text, is_error=block.is_error)
        elif isinstance(block, TextBlock) and not results_only and len(block.text) > limit:
            block = TextBlock(text=clip_middle(block.text, limit))
        blocks.append(block)
    if all(a is b for a, b in zip(blocks, message.content, strict=True)):
        return message  # nothing clipped: the same message, its token count already cached
    return message.with_content(blocks)


def plan_rolling_iterations(
    messages: Sequence[Message], config: RollingIterations, ctx: PlanContext
) -> CompactionResult:
    """Keep the last N iterations raw; older ones live in a summary refreshed every K iterations."""
    before, done = _within_target(messages, ctx)
    if done:
        return done
    spans = turn_spans(messages)
    n_keep, every = config.keep_iterations, config.resummarize_every
    if len(spans) <= n_keep:
        return noop_result(messages, ctx, f"only {len(spans)} iterations (keeps {n_keep})", before=before)
    cuts = safe_cut_points(messages)
    cut = snap_head_cut(messages, spans[-n_keep][0], prefer="backward", cuts=cuts)
    if cut is None or cut > spans[-n_keep][0]:
        return noop_result(messages, ctx, "no safe boundary before the kept iterations", before=before)
    safe = set(cuts)
    cached = next(
        (
            e
            for e in reversed(ctx.cache)
            if e.strategy == "rolling_iterations"
            and e.level == 0
            and e.range_start == 0
            and 0 < e.range_end <= cut
            and e.range_end in safe
        ),
        None,
    )
    name = "rolling_iterations"
    if cached is not None:
        raw = sum(1 for start, _ in spans if start >= cached.range_end)
        if raw < n_keep + every:
            return _drop_head(
                messages,
                ctx,
                cached.range_end,
                strategy=name,
                before=before,
                summary=cached.summary,
                cache=[cached],
                summarizer=cached.summarizer,
                reason=f"reused the summary of the first {cached.range_end} messages; "
                f"{raw} iterations raw (refresh at {n_keep + every})",
            )
        start, carry = cached.range_end, [ctx.summary, cached.summary]
    else:
        start, carry = 0, [ctx.summary]
    pinned = set(pinned_in(messages, 0, cut))
    fold = [i for i in range(start, cut) if i not in pinned]
    if not fold and cached is None:
        return noop_result(messages, ctx, "every older iteration is pinned", before=before)
    summarizer = _require_summarizer(ctx, name)
    tokens = message_tokens(messages, ctx)
    kept = sum(tokens[cut:]) + sum(tokens[i] for i in pinned) + REPLY_PRIMING_TOKENS
    budget = _summary_budget(config.summary_max_tokens, ctx, kept)
    pieces = prompt_pieces(
        [ctx.original(messages, i) for i in fold],
        max_tokens=config.prompt_max_tokens,
        carry_tokens=budget + sum(ctx.tokenizer.count(t) for t in carry if t),
        result_chars=config.tool_result_max_chars,
        ctx=ctx,
    )
    text = ""
    for n, piece in enumerate(pieces or [[]]):
        earlier = [t for t in carry if t] if n == 0 else [text]
        prompt = [summary_message(t) for t in earlier] + piece
        text = summarizer.summarize(prompt, instructions=ctx.instructions, max_tokens=budget)
    entry = SummaryCache(name, 0, cut, text, 0, summarizer.name)
    return _drop_head(
        messages,
        ctx,
        cut,
        strategy=name,
        before=before,
        summary=text,
        cache=[entry],
        summarizer=summarizer.name,
        reason=f"folded {_turns_label(messages, start, cut)} into the summary"
        f"{f' in {len(pieces)} pieces' if len(pieces) > 1 else ''}; kept the last {n_keep} iterations",
    )


# -- tree_summary ------------------------------------------------------------------------------------


def plan_tree_summary(messages: Sequence[Message], config: TreeSummary, ctx: PlanContext) -> CompactionResult:
    """Summarize leaves of ``leaf_turns`` turns, then groups of ``fanout`` summaries, up to one root."""
    before, done = _within_target(messages, ctx)
    if done:
        return done
    spans = turn_spans(messages)
    if len(spans) <= config.keep_recent_turns:
        return noop_result(
            messages, ctx, f"only {len(spans)} turns (keeps {config.keep_recent_turns})", before=before
        )
    cut = snap_head_cut(messages, spans[-config.keep_recent_turns][0], prefer="backward")
    if cut is None:
        return noop_result(messages, ctx, "no safe turn boundary before the kept turns", before=before)
    summarizer = _require_summarizer(ctx, "tree_summary")
    pinned = set(pinned_in(messages, 0, cut))
    head_spans = [(s, e) for s, e in spans if e <= cut]
    nodes: list[SummaryCache] = []
    made: list[SummaryCache] = []
    for j in range(0, len(head_spans), config.leaf_turns):
        group = head_spans[j : j + config.leaf_turns]
        start, end = group[0][0], group[-1][1]
        indices = [i for i in range(start, end) if i not in pinned]
        if not indices:
            continue
        node = ctx.cached("tree_summary", start, end, level=0)
        if node is None:
            carry = [ctx.summary] if start == 0 else []
            text = _summarize(
                messages,
                indices,
                ctx,
                strategy="tree_summary",
                max_tokens=config.leaf_max_tokens,
                carry=carry,
            )
            node = SummaryCache("tree_summary", start, end, text, 0, summarizer.name)
        nodes.append(node)
        made.append(node)
    if not nodes:
        return noop_result(messages, ctx, "every older turn is pinned", before=before)
    leaves, level = len(nodes), 0
    tokens = message_tokens(messages, ctx)
    kept = sum(tokens[cut:]) + sum(tokens[i] for i in pinned) + REPLY_PRIMING_TOKENS
    budget = _summary_budget(config.summary_max_tokens, ctx, kept)
    while len(nodes) > 1:
        level += 1
        parents: list[SummaryCache] = []
        for j in range(0, len(nodes), config.fanout):
            group = nodes[j : j + config.fanout]
            if len(group) == 1:
                parents.append(group[0])
                continue
            start, end = group[0].range_start, group[-1].range_end
            node = ctx.cached("tree_summary", start, end, level=level)
            if node is None:
                text = summarizer.summarize(
                    [summary_message(n.summary) for n in group],
                    instructions=ctx.instructions,
                    max_tokens=budget,
                )
                node = SummaryCache("tree_summary", start, end, text, level, summarizer.name)
            parents.append(node)
            made.append(node)
        nodes = parents
    root = nodes[0]
    return _drop_head(
        messages,
        ctx,
        cut,
        strategy="tree_summary",
        before=before,
        summary=root.summary,
        cache=made,
        summarizer=root.summarizer,
        reason=f"summarized {_turns_label(messages, 0, cut)} as a tree of {leaves} "
        f"leaves and {level + 1} level{'s' if level else ''}",
    )


# -- emergency --------------------------------------------------------------------------------------


def plan_emergency(messages: Sequence[Message], config: Emergency, ctx: PlanContext) -> CompactionResult:
    """After a provider context-length error: drop the oldest ~half of the turns, whatever the target.

    Dropped images and documents are listed by reference in a compression note appended to the
    summary. With no safe cut (one long turn), only the most recent user message is kept.
    """
    before = measure(messages, ctx.summary, ctx.tokenizer)
    if not messages:
        return noop_result(messages, ctx, "empty history", before=before)
    spans = turn_spans(messages)
    cut: int | None = None
    if len(spans) >= 2:
        n_drop = min(len(spans) - 1, max(1, math.ceil(len(spans) * config.drop_ratio)))
        cut = snap_head_cut(messages, spans[n_drop][0], prefer="forward")
    if cut is not None:
        keep = [*pinned_in(messages, 0, cut), *range(cut, len(messages))]
        how = f"dropped the oldest {_turns_label(messages, 0, cut)}"
    else:
        last_user = next(
            (
                i
                for i in range(len(messages) - 1, -1, -1)
                if is_user_input(messages[i]) and not messages[i].tool_result_ids
            ),
            None,
        )
        if last_user is None:
            return noop_result(
                messages, ctx, "no safe cut and no user message to fall back to", before=before
            )
        keep = sorted(pair_closure(messages, [i for i, m in enumerate(messages) if m.pinned]) | {last_user})
        how = "no safe turn boundary: kept only the most recent user message"
    if len(keep) == len(messages):
        return noop_result(messages, ctx, "nothing left to drop", before=before)
    kept = set(keep)
    dropped = [i for i in range(len(messages)) if i not in kept]
    note = compression_note(messages, dropped, ctx)
    summary = f"{ctx.summary}\n\n{note}" if ctx.summary else note
    return build_result(
        messages,
        ctx,
        strategy="emergency",
        kept=[(i, messages[i]) for i in keep],
        summary=summary,
        before=before,
        reason=f"provider context-length error: {how}",
    )


def compression_note(messages: Sequence[Message], dropped: Sequence[int], ctx: PlanContext) -> str:
    """The note an emergency compaction leaves in the summary, with references to dropped media."""
    seqs = [ctx.seq_of(i) for i in dropped]
    where = (
        f"transcript seqs {min(s for s in seqs if s is not None)}–{max(s for s in seqs if s is not None)}"
        if any(s is not None for s in seqs)
        else f"messages {dropped[0]}–{dropped[-1]}"
    )
    lines = [
        f"[Context compressed after a provider context-length error: {len(dropped)} older messages "
        f"({where}) were dropped without a summary. The full transcript is kept; ask the user if "
        "something from before is needed.]"
    ]
    for i in dropped:
        media: list[ImageBlock | DocumentBlock] = []
        for block in messages[i].blocks:
            if isinstance(block, ImageBlock | DocumentBlock):
                media.append(block)
            elif isinstance(block, ToolResultBlock) and not isinstance(block.content, str):
                media.extend(b for b in block.content if isinstance(b, ImageBlock | DocumentBlock))
        seq = ctx.seq_of(i)
        label = f"transcript seq {seq}" if seq is not None else f"message {i}"
        lines.extend(f"- Dropped {describe_media(b)} from {label}." for b in media)
    return "\n".join(lines)


# -- chain and dispatch ----------------------------------------------------------------------------


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
    before, done = _within_target(messages, ctx)
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
