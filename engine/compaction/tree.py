"""The tree_summary strategy: the head summarized as a tree of chunk summaries (each node
cached by its range, so a re-plan summarizes only new chunks).
"""

from __future__ import annotations

from collections.abc import Sequence

from engine.compaction.config import (
    TreeSummary,
)
from engine.compaction.cuts import head_kept_tokens
from engine.compaction.plan_steps import (
    drop_head,
    require_summarizer,
    summarize_messages,
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
from engine.messages import (
    Message,
)
from engine.turns import turn_spans


def plan_tree_summary(messages: Sequence[Message], config: TreeSummary, ctx: PlanContext) -> CompactionResult:
    """Summarize leaves of ``leaf_turns`` turns, then groups of ``fanout`` summaries, up to one root."""
    before, done = within_target(messages, ctx)
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
    summarizer = require_summarizer(ctx, "tree_summary")
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
            text = summarize_messages(
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
    budget = summary_budget(config.summary_max_tokens, ctx, head_kept_tokens(messages, ctx, cut, pinned))
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
    return drop_head(
        messages,
        ctx,
        cut,
        strategy="tree_summary",
        before=before,
        summary=root.summary,
        cache=made,
        summarizer=root.summarizer,
        reason=f"summarized {turns_label(messages, 0, cut)} as a tree of {leaves} "
        f"leaves and {level + 1} level{'s' if level else ''}",
    )
