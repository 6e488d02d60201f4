"""What each Claude Code model call sent, rebuilt from the thread, and its component breakdown.

A call sends the messages of the current context: everything before it, or after the last
compaction the summary, the segment Claude Code preserved, and what came after. The
summarizer call of a compaction sends the whole context before it. Thinking of earlier turns
is left out where Anthropic strips it (:func:`keeps_previous_thinking`). The system prompt and
tool definitions are not in these files: the provider's count minus ours at the first call
with usage is the "harness prefix, not in the transcript", carried to every later call (in
the ``system`` component, flagged ``system_is_harness_prefix`` in the call's details).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from engine.events import ComponentTokens
from engine.importers.claude_code_thread import Thread
from engine.importers.model import CallInfo, ParsedMessage
from engine.messages import Message, ThinkingBlock, is_user_input
from engine.tokens import REPLY_PRIMING_TOKENS, Tokenizer

#: Claude Code versions from which requests carry ``clear_thinking_20251015`` with ``keep: "all"``
#: (seen in 2.1.197's requests): earlier turns' thinking is then sent and counted.
KEEPS_THINKING_FROM_VERSION = (2, 1, 0)
#: Models whose API default keeps earlier turns' thinking (Anthropic: Opus 4.5 and later).
_KEEPS_THINKING_MODELS = re.compile(
    r"claude-(opus-4-[5-9]|opus-[5-9]|sonnet-4-[6-9]|sonnet-[5-9]|haiku-[5-9])"
)


@dataclass(frozen=True)
class ThinkingRule:
    """How many of the latest user turns keep their thinking (None: all of them)."""

    keep_turns: int | None

    @property
    def keeps_all(self) -> bool:
        return self.keep_turns is None


def parse_version(version: Any) -> tuple[int, ...] | None:
    if not isinstance(version, str):
        return None
    parts = re.findall(r"\d+", version)[:3]
    return tuple(int(p) for p in parts) if parts else None


def thinking_rule(
    model: str | None, *, context_management: dict[str, Any] | None = None, version: str | None = None
) -> ThinkingRule:
    """Which turns' thinking a request is billed for.

    A recorded ``clear_thinking`` edit decides (``keep: "all"`` or ``{"type": "thinking_turns",
    "value": N}``); Claude Code ≥ 2.1 sends ``keep: "all"``; otherwise the API default: Opus 4.5
    and later keep every turn's thinking, earlier models strip it from previous turns.
    """
    for edit in (context_management or {}).get("edits") or []:
        if isinstance(edit, dict) and str(edit.get("type", "")).startswith("clear_thinking"):
            keep = edit.get("keep", {"type": "thinking_turns", "value": 1})
            if keep == "all":
                return ThinkingRule(None)
            if isinstance(keep, dict) and isinstance(keep.get("value"), int):
                return ThinkingRule(max(1, keep["value"]))
            return ThinkingRule(1)
    parsed = parse_version(version)
    if parsed is not None and parsed >= KEEPS_THINKING_FROM_VERSION:
        return ThinkingRule(None)
    if model and _KEEPS_THINKING_MODELS.search(model):
        return ThinkingRule(None)
    return ThinkingRule(1)


def keeps_previous_thinking(model: str | None, **kwargs: Any) -> bool:
    return thinking_rule(model, **kwargs).keeps_all


def without_thinking(message: Message) -> Message:
    blocks = [b for b in message.blocks if not isinstance(b, ThinkingBlock)]
    return message.with_content(blocks) if len(blocks) != len(message.blocks) else message


def sent_messages(messages: list[Message], rule: ThinkingRule) -> tuple[list[Message], int]:
    """``messages`` as billed under ``rule``; returns them and how many had thinking dropped."""
    if rule.keeps_all:
        return messages, 0
    starts = [i for i, m in enumerate(messages) if is_user_input(m)]
    cut = starts[-rule.keep_turns] if len(starts) >= rule.keep_turns else 0
    out: list[Message] = []
    stripped = 0
    for i, message in enumerate(messages):
        if i < cut and message.role == "assistant":
            slim = without_thinking(message)
            stripped += slim is not message
            message = slim
        out.append(message)
    return out, stripped


def context_plan(thread: Thread) -> list[tuple[int, list[int], CallInfo]]:
    """(message index the call belongs at, indexes sent, call) for every call, in order.

    Regular calls sit on their assistant message; a compaction's summarizer call sits on the
    last message before its summary and sends the whole context before it.
    """
    plan: list[tuple[int, list[int], CallInfo]] = []
    summaries = {c.summary_index: c for c in thread.compactions if c.summary_index is not None}
    context: list[int] = []
    for i, pm in enumerate(thread.messages):
        compaction = summaries.get(i)
        if compaction is not None:
            summarizer = CallInfo(
                model=_model_before(thread.messages, i),
                details={"compaction_call": True, "compaction_trigger": compaction.trigger},
            )
            at = compaction.last_index_before if compaction.last_index_before is not None else max(i - 1, 0)
            kept = sorted({thread.uuid_index[u] for u in compaction.kept_uuids if u in thread.uuid_index})
            # the summarizer is sent what it summarizes: the context without the preserved segment
            plan.append((at, [k for k in context if k not in kept], summarizer))
            context = [i, *kept]
            continue
        if pm.call is not None:
            plan.append((i, list(context), pm.call))
        context.append(i)
    return plan


def _model_before(messages: list[ParsedMessage], index: int) -> str | None:
    for pm in reversed(messages[:index]):
        if pm.call is not None and pm.call.model:
            return pm.call.model
    return None


def components_of(
    messages: Iterable[Message], tokenizer: Tokenizer, *, summary_ids: set[str | None]
) -> ComponentTokens:
    conversation = tool_results = summary = 0
    for message in messages:
        conv, results = tokenizer.count_message_parts(message)
        if message.id in summary_ids and message.meta.get("isCompactSummary"):
            summary += conv
        else:
            conversation += conv
        tool_results += results
    any_sent = conversation or tool_results or summary
    return ComponentTokens(
        summary=summary,
        conversation=conversation + (REPLY_PRIMING_TOKENS if any_sent else 0),
        tool_results=tool_results,
    )


def rebuild_calls(
    thread: Thread, tokenizer: Tokenizer, *, version: str | None, model: str | None
) -> tuple[list[tuple[int, list[int], CallInfo]], int | None]:
    """Set each call's sent messages, components and details; returns the plan and the
    harness prefix (None when no call has the provider's usage)."""
    plan = context_plan(thread)
    messages = [pm.message for pm in thread.messages]
    summary_ids = {messages[c.summary_index].id for c in thread.compactions if c.summary_index is not None}
    prefix: int | None = None
    for at, indexes, call in plan:
        rule = thinking_rule(call.model or model, version=version)
        sent, stripped = sent_messages([messages[i] for i in indexes], rule)
        components = components_of(sent, tokenizer, summary_ids=summary_ids)
        if stripped:
            full = components_of([messages[i] for i in indexes], tokenizer, summary_ids=summary_ids)
            call.details["thinking_stripped_tokens"] = full.total - components.total
        if prefix is None and call.usage is not None and call.usage.prompt_tokens:
            prefix = max(0, call.usage.prompt_tokens - components.total)
        call.details["previous_thinking"] = "kept" if rule.keeps_all else "stripped"
        call.details["request_messages"] = len(sent)  # messages_sent (a seq bound) is the writer's
        call.request_messages = sent  # type: ignore[attr-defined]  # the rebuilt request, for tests and tools
        call.components = components  # type: ignore[attr-defined]
        call.details["at_message_index"] = at
    if prefix:
        for _, _, call in plan:
            base: ComponentTokens = call.components  # type: ignore[attr-defined]
            call.components = base.model_copy(update={"system": prefix})  # type: ignore[attr-defined]
            call.details["harness_prefix_tokens"] = prefix
            call.details["system_is_harness_prefix"] = True
    return plan, prefix
