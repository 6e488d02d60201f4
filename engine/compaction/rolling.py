"""The rolling_iterations strategy: the last iterations kept raw, older ones folded into a
summary in pieces that each fit the summarizer's prompt (nothing is dropped silently).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.compaction.config import (
    RollingIterations,
)
from engine.compaction.cuts import head_kept_tokens
from engine.compaction.plan_steps import (
    drop_head,
    require_summarizer,
    summary_budget,
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
    summary_message,
)
from engine.compaction.summarizers import clip_middle, describe_media
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
)
from engine.tokens import REPLY_PRIMING_TOKENS
from engine.turns import safe_cut_points, turn_spans

PROMPT_CLIP_STEPS = (4_000, 2_000, 1_000, 500, 200)


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
    before, done = within_target(messages, ctx)
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
    name = "rolling_iterations"
    cached = ctx.cached_head(name, cut, ends=set(cuts))
    if cached is not None:
        raw = sum(1 for start, _ in spans if start >= cached.range_end)
        if raw < n_keep + every:
            return drop_head(
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
    summarizer = require_summarizer(ctx, name)
    budget = summary_budget(config.summary_max_tokens, ctx, head_kept_tokens(messages, ctx, cut, pinned))
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
    return drop_head(
        messages,
        ctx,
        cut,
        strategy=name,
        before=before,
        summary=text,
        cache=[entry],
        summarizer=summarizer.name,
        reason=f"folded {turns_label(messages, start, cut)} into the summary"
        f"{f' in {len(pieces)} pieces' if len(pieces) > 1 else ''}; kept the last {n_keep} iterations",
    )
