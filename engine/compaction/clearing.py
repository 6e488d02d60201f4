"""The clear_tool_results strategy: the oldest tool results (beyond the most recent uses)
replaced by a placeholder that keeps a failed call's error line or a successful one's fact lines.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

from engine.compaction.config import (
    ClearToolResults,
)
from engine.compaction.extract import describe_call, error_line, is_failure_output, result_payload
from engine.compaction.offline import salient_lines
from engine.compaction.plan_steps import (
    within_target,
)
from engine.compaction.result import (
    CompactionResult,
    PlanContext,
    measure_changes,
    noop_result,
)
from engine.events import ComponentTokens
from engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
)

CLEARED_PREFIX = "[Tool result cleared"
CLEARED_INPUT_KEY = "_cleared"
#: Messages before ``from_index`` searched for the calls of the results cleared after it.
USE_LOOKBACK = 64
#: Lines of a cleared tool result kept in its placeholder when they state a fact.
CLEARED_FACT_LINES = 2


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
    messages: Sequence[Message],
    config: ClearToolResults,
    ctx: PlanContext,
    *,
    from_index: int = 0,
    keep_ids: Collection[str] = (),
) -> CompactionResult:
    """Replace the oldest tool results (beyond the ``keep`` most recent uses) with placeholders.

    ``from_index``: leave the results before it alone (a chain whose next step summarizes that
    head anyway does not clear it first). ``keep_ids``: results of these calls are never cleared
    (the proxy's offloaded ones, already a preview)."""
    before, done = within_target(messages, ctx)
    if done:
        return done
    if config.trigger is not None and before.total <= config.trigger:
        return noop_result(messages, ctx, f"below trigger ({before.total:,} <= {config.trigger:,} tokens)")
    # Only the calls of the results that may be cleared (and the latest ones, which are kept).
    scan = messages[max(0, from_index - USE_LOOKBACK) :] if from_index else messages
    uses = [b for m in scan for b in m.blocks if isinstance(b, ToolUseBlock)]
    calls = {b.id: b for b in uses}
    protected = {b.id for b in uses[len(uses) - config.keep :]} if config.keep else set()
    protected |= set(keep_ids)
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
    rewritten = {
        i: messages[i].with_content([blocks.get(j, b) for j, b in enumerate(messages[i].content)])
        for i, blocks in chosen.items()
    }
    if inputs:
        for i, message in enumerate(messages):
            if i in chosen or message.pinned or message.role != "assistant":
                continue
            new_blocks = [_clear_input(b, inputs, cleared_ids) for b in message.blocks]
            if any(a is not b for a, b in zip(new_blocks, message.blocks, strict=True)):
                rewritten[i] = message.with_content(new_blocks)
    return _rewrite_result(
        messages,
        ctx,
        rewritten,
        before=before,
        reason=f"cleared {len(cleared_ids)} tool result{'s' if len(cleared_ids) != 1 else ''} "
        f"(kept the {config.keep} most recent tool uses)",
    )


def _rewrite_result(
    messages: Sequence[Message],
    ctx: PlanContext,
    rewritten: dict[int, Message],
    *,
    before: ComponentTokens,
    reason: str,
) -> CompactionResult:
    """Every message kept, the ``rewritten`` ones replaced: the after-measure counts only those
    (``build_result`` would walk all 100,000 kept pairs to find the few that changed)."""
    out = list(messages)
    for i, message in rewritten.items():
        out[i] = message
    after = measure_changes(
        before, ctx, ctx.summary, rewritten=((messages[i], m) for i, m in rewritten.items())
    )
    # Every message kept in place: the no-op result with the rewritten messages and their measure.
    return replace(
        noop_result(messages, ctx, reason, before=before),
        messages=tuple(out),
        after_tokens=after.total,
        after_components=after,
        strategies_run=("clear_tool_results",),
        cleared=tuple(sorted(rewritten)),
        noop=False,
    )


def _clear_input(block: Any, inputs: bool | tuple[str, ...], cleared_ids: set[str]) -> Any:
    if not isinstance(block, ToolUseBlock) or block.id not in cleared_ids or not block.input:
        return block
    if inputs is not True and block.name not in inputs:
        return block
    size = len(json.dumps(block.input, ensure_ascii=False))
    note = {CLEARED_INPUT_KEY: f"input of {size:,} bytes cleared"}
    return block if size <= len(json.dumps(note)) else ToolUseBlock(id=block.id, name=block.name, input=note)
