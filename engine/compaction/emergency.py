"""The emergency strategy: after a provider error, drop about half the turns and say what
was dropped (media included) in a compression note.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from engine.compaction.config import (
    Emergency,
)
from engine.compaction.plan_steps import (
    turns_label,
)
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    build_result,
    measure,
    noop_result,
    pair_closure,
    pinned_in,
    snap_head_cut,
)
from engine.compaction.summarizers import describe_media
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    ToolResultBlock,
    is_user_input,
)
from engine.turns import turn_spans


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
        how = f"dropped the oldest {turns_label(messages, 0, cut)}"
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
