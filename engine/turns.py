"""Turn structure of a message list: pure functions, no I/O.

A turn starts at a user message that carries the user's input; a message that only returns
tool results never starts one. A cut at index k keeps ``messages[k:]``; it is safe only at a
turn boundary and only if no kept tool_result answers a tool_use that would be dropped.
``safe_cut_points`` lists every safe cut in one linear pass; planners that weigh many cuts use
it rather than ``is_safe_cut`` per cut, which scans the history each time.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any, Literal

from engine.components import measure_request
from engine.errors import ValidationError
from engine.limit import Limit
from engine.messages import Message, ToolResultBlock, ToolUseBlock, is_user_input


def parse_turn_boundaries(messages: Sequence[Message]) -> list[int]:
    """Start index of each turn. Index 0 always starts one (even an assistant-first history)."""
    if not messages:
        return []
    return [0, *(i for i in range(1, len(messages)) if is_user_input(messages[i]))]


def turn_spans(messages: Sequence[Message]) -> list[tuple[int, int]]:
    """[start, end) of every turn, in order."""
    starts = parse_turn_boundaries(messages)
    ends = [*starts[1:], len(messages)] if starts else []
    return list(zip(starts, ends, strict=True))


def turn_indices(messages: Sequence[Message]) -> list[int]:
    """The turn index of each message."""
    out: list[int] = []
    turn = 0
    for i, message in enumerate(messages):
        if i > 0 and is_user_input(message):
            turn += 1
        out.append(turn)
    return out


def is_safe_cut(messages: Sequence[Message], index: int) -> bool:
    """True when keeping ``messages[index:]`` starts at a turn and orphans no tool_result."""
    if index <= 0 or index >= len(messages) or not is_user_input(messages[index]):
        return False
    dropped_uses = {i for m in messages[:index] for i in m.tool_use_ids}
    if not dropped_uses:
        return True
    return not any(rid in dropped_uses for m in messages[index:] for rid in m.tool_result_ids)


def safe_cut_points(messages: Sequence[Message]) -> list[int]:
    """Every index ``k`` (ascending) where ``is_safe_cut(messages, k)`` holds, in one pass.

    A cut at ``k`` orphans a result when some tool_use before ``k`` has a result at or after
    ``k``; per id that is every ``k`` in ``(first use, last result]``, marked with a
    difference array, so the whole list costs O(messages + blocks), not one scan per cut.
    """
    n = len(messages)
    first_use: dict[str, int] = {}
    last_result: dict[str, int] = {}
    for i, message in enumerate(messages):
        for block in message.blocks:
            if isinstance(block, ToolUseBlock):
                first_use.setdefault(block.id, i)
            elif isinstance(block, ToolResultBlock):
                last_result[block.tool_use_id] = i
    # open_at[k] > 0 after the prefix sum: some pair spans the cut at k.
    open_at = [0] * (n + 2)
    for rid, r in last_result.items():
        u = first_use.get(rid)
        if u is not None and u < r:
            open_at[u + 1] += 1
            open_at[r + 1] -= 1
    cuts: list[int] = []
    running = 0
    for k in range(n):
        running += open_at[k]
        if k > 0 and running == 0 and is_user_input(messages[k]):
            cuts.append(k)
    return cuts


def snap_to_cut(
    cuts: Sequence[int], index: int, *, prefer: Literal["backward", "forward"] = "backward"
) -> int | None:
    """The cut of ascending ``cuts`` nearest ``index`` (see ``find_safe_boundary``); None if none."""
    if not cuts:
        return None
    split = bisect.bisect_right(cuts, index)  # cuts[:split] <= index < cuts[split:]
    if prefer == "backward":
        return cuts[split - 1] if split else cuts[0]
    return cuts[split] if split < len(cuts) else cuts[-1]


def find_safe_boundary(
    messages: Sequence[Message], index: int, *, prefer: Literal["backward", "forward"] = "backward"
) -> int | None:
    """Snap a cut point to the nearest safe turn boundary; ``None`` when there is none.

    ``backward`` keeps more (the largest safe cut <= index) and falls back to the smallest
    safe cut > index; ``forward`` does the opposite. A cut keeps at least one message and
    drops at least one, so a single oversized turn has no safe cut.
    """
    index = max(0, min(index, len(messages)))
    return snap_to_cut(safe_cut_points(messages), index, prefer=prefer)


def is_over_context_budget(
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]] = (),
    *,
    tokenizer: Any,
    system_tokens: int = 0,
    limit: Limit | None = None,
    context_window: int | None = None,
    max_output_tokens: int = 0,
    buffer_tokens: int = 0,
    context_budget: int | None = None,
) -> bool:
    """True when the request (system prompt tokens + messages + tool definitions, measured by
    ``engine.components.measure_request``) is over its limit: ``limit``, else the ``Limit`` of
    ``context_window`` less ``max_output_tokens`` and ``buffer_tokens``, capped by ``context_budget``."""
    if limit is None:
        if context_window is None:
            raise ValidationError("give a limit or a context_window", field="context_window")
        limit = Limit(context_window, max_output_tokens, buffer_tokens, context_budget)
    prompt = system_tokens + measure_request(tokenizer, system="", tools=tools, messages=messages).total
    return prompt > limit.tokens


def has_orphans(messages: Sequence[Message]) -> bool:
    """True when a tool_result has no earlier tool_use, or a tool_use no later tool_result.

    The last assistant message may hold unanswered tool uses (the tools are still running).
    """
    seen_uses: set[str] = set()
    answered: set[str] = set()
    last_assistant = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
    pending_ok: set[str] = set(messages[last_assistant].tool_use_ids) if last_assistant >= 0 else set()
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolUseBlock):
                seen_uses.add(block.id)
            elif isinstance(block, ToolResultBlock):
                if block.tool_use_id not in seen_uses:
                    return True
                answered.add(block.tool_use_id)
    return bool(seen_uses - answered - pending_ok)
