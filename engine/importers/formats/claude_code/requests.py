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

import bisect
import functools
import itertools
import re
from collections.abc import Sequence
from typing import Any

from engine.events import ComponentTokens
from engine.importers.formats.claude_code.thread import Thread
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, Sent, ThinkingRule
from engine.importers.parsing.readers import unvalidated
from engine.messages import Message, ThinkingBlock, is_user_input
from engine.store.records import share_fields_set
from engine.tokens import REPLY_PRIMING_TOKENS, Tokenizer

#: Claude Code versions from which requests carry ``clear_thinking_20251015`` with ``keep: "all"``
#: (seen in 2.1.197's requests): earlier turns' thinking is then sent and counted.
KEEPS_THINKING_FROM_VERSION = (2, 1, 0)
#: Models whose API default keeps earlier turns' thinking (Anthropic: Opus 4.5 and later).
_KEEPS_THINKING_MODELS = re.compile(
    r"claude-(opus-4-[5-9]|opus-[5-9]|sonnet-4-[6-9]|sonnet-[5-9]|haiku-[5-9])"
)


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
    if (model is None or type(model) is str) and (version is None or type(version) is str):
        return _default_rule(model, version)  # asked once per call of a session: the same answer
    return _default_rule.__wrapped__(model, version)


@functools.lru_cache(maxsize=256)
def _default_rule(model: str | None, version: str | None) -> ThinkingRule:
    """The rule without a recorded ``clear_thinking`` edit: by Claude Code's version, then the model."""
    parsed = parse_version(version)
    if parsed is not None and parsed >= KEEPS_THINKING_FROM_VERSION:
        return ThinkingRule(None)
    if model and _KEEPS_THINKING_MODELS.search(model):
        return ThinkingRule(None)
    return ThinkingRule(1)


def keeps_previous_thinking(model: str | None, **kwargs: Any) -> bool:
    return thinking_rule(model, **kwargs).keeps_all


def without_thinking(message: Message) -> Message:
    content = message.content
    if isinstance(content, str) or not any(isinstance(b, ThinkingBlock) for b in content):
        return message  # most messages: nothing to drop, no copy of their blocks made
    return message.with_content([b for b in content if not isinstance(b, ThinkingBlock)])


def sent_messages(
    messages: list[Message], rule: ThinkingRule, *, slimmed: dict[int, Any] | None = None
) -> tuple[list[Message], int]:
    """``messages`` as billed under ``rule``; returns them and how many had thinking dropped.
    ``slimmed``: each message's copy without thinking, by the message's identity (kept with it), for
    callers that bill the same messages again request after request."""
    if rule.keeps_all:
        return messages, 0
    starts = [i for i, m in enumerate(messages) if is_user_input(m)]
    cut = starts[-rule.keep_turns] if len(starts) >= rule.keep_turns else 0
    out: list[Message] = []
    stripped = 0
    for i, message in enumerate(messages):
        if i < cut and message.role == "assistant":
            known = slimmed.get(id(message)) if slimmed is not None else None
            if known is not None and known[0] is message:
                slim = known[1]
            else:
                slim = without_thinking(message)
                if slimmed is not None:
                    slimmed[id(message)] = (message, slim)
            stripped += slim is not message
            message = slim
        out.append(message)
    return out, stripped


Plan = list[tuple[int, Sent, CallInfo]]


def context_plan(thread: Thread) -> Plan:
    """(message index the call belongs at, what it sent, call) for every call, in order.

    Regular calls sit on their assistant message; a compaction's summarizer call sits on the
    last message before its summary and sends the context before it without the segment
    Claude Code keeps (it summarizes the rest).
    """
    plan: Plan = []
    summaries = {c.summary_index: c for c in thread.compactions if c.summary_index is not None}
    head: tuple[int, ...] = ()
    start = 0
    for i, pm in enumerate(thread.messages):
        compaction = summaries.get(i)
        if compaction is not None:
            summarizer = CallInfo(
                model=_model_before(thread.messages, i),
                details={"compaction_call": True, "compaction_trigger": compaction.trigger},
            )
            at = compaction.last_index_before if compaction.last_index_before is not None else max(i - 1, 0)
            kept = tuple(
                sorted({thread.uuid_index[u] for u in compaction.kept_uuids if u in thread.uuid_index})
            )
            # the summarizer leaves the kept segment out, except at a threshold compaction: it saw
            # the context as it stood, without the new prompt (Claude Code 2.1.3xx;
            # claude_code.mark_compactions)
            excluded = frozenset(kept)
            if compaction.summarizes_kept:
                replied = max(
                    (k for k in range(i) if thread.messages[k].message.role == "assistant"), default=-1
                )
                excluded = frozenset(k for k in kept if k > replied)
            plan.append((at, Sent(head, start, i, excluded), summarizer))
            head, start = (i, *kept), i + 1
            continue
        if pm.call is not None:
            plan.append((i, Sent(head, start, i), pm.call))
    return plan


def _model_before(messages: list[ParsedMessage], index: int) -> str | None:
    for pm in reversed(messages[:index]):
        if pm.call is not None and pm.call.model:
            return pm.call.model
    return None


class _Counts:
    """Per-message token parts of a thread, counted once, with prefix sums over the thread."""

    def __init__(self, messages: list[Message], tokenizer: Tokenizer) -> None:
        n = len(messages)
        self.conv = [0] * n
        self.conv_slim = [0] * n  # conversation tokens with the message's thinking dropped
        self.results = [0] * n
        self.has_thinking = [False] * n
        self.summary = [False] * n
        self.user_inputs: list[int] = []
        for i, message in enumerate(messages):  # each counted once, its count handed on: not cached
            self.conv[i], self.results[i] = tokenizer.count_message_parts(message, cached=False)
            self.summary[i] = bool(message.meta.get("isCompactSummary"))
            if message.role == "assistant":
                slim = without_thinking(message)
                if slim is not message:
                    self.has_thinking[i] = True
                    self.conv_slim[i] = tokenizer.count_message_parts(slim, cached=False)[0]
                    continue
            elif is_user_input(message):
                self.user_inputs.append(i)
            self.conv_slim[i] = self.conv[i]
        self.user_input_set = set(self.user_inputs)
        self.p_conv = list(itertools.accumulate(self.conv, initial=0))
        self.p_slim = list(itertools.accumulate(self.conv_slim, initial=0))
        self.p_results = list(itertools.accumulate(self.results, initial=0))
        self.p_thinking = list(itertools.accumulate(map(int, self.has_thinking), initial=0))

    def cut(self, sent: Sent, rule: ThinkingRule) -> tuple[int, int]:
        """(head positions, tail index) before which thinking is dropped under ``rule``."""
        if rule.keeps_all:
            return 0, sent.start
        k = rule.keep_turns or 1
        head_users = [p for p, i in enumerate(sent.head) if i in self.user_input_set]
        lo, hi = (
            bisect.bisect_left(self.user_inputs, sent.start),
            bisect.bisect_left(self.user_inputs, sent.end),
        )
        tail_users = self.user_inputs[lo:hi]
        if len(tail_users) >= k:
            return len(sent.head), tail_users[-k]
        need = k - len(tail_users)
        if len(head_users) >= need:
            return head_users[-need], sent.start
        return 0, sent.start

    def components(self, sent: Sent, rule: ThinkingRule) -> tuple[tuple[int, int, int], int, int]:
        """((summary, conversation, tool_results) tokens, thinking tokens dropped, messages whose
        thinking was dropped)."""
        head_cut, tail_cut = self.cut(sent, rule)
        conversation = summary = dropped = slimmed = 0
        results = 0
        for p, i in enumerate(sent.head):
            if i in sent.excluded:
                continue
            conv = self.conv_slim[i] if p < head_cut else self.conv[i]
            dropped += self.conv[i] - conv
            slimmed += conv != self.conv[i]
            if self.summary[i]:
                summary += conv
            else:
                conversation += conv
            results += self.results[i]
        start, end = sent.start, sent.end
        tail_cut = min(max(tail_cut, start), end)
        slim = self.p_slim[tail_cut] - self.p_slim[start]
        full_before = self.p_conv[tail_cut] - self.p_conv[start]
        conversation += slim + self.p_conv[end] - self.p_conv[tail_cut]
        dropped += full_before - slim
        slimmed += self.p_thinking[tail_cut] - self.p_thinking[start]
        results += self.p_results[end] - self.p_results[start]
        for i in sent.excluded:
            if start <= i < end:
                conv = self.conv_slim[i] if i < tail_cut else self.conv[i]
                conversation -= conv
                results -= self.results[i]
                if i < tail_cut:
                    dropped -= self.conv[i] - conv
                    slimmed -= self.has_thinking[i]
        any_sent = conversation or results or summary
        parts = (summary, conversation + (REPLY_PRIMING_TOKENS if any_sent else 0), results)
        return parts, dropped, slimmed


def request_messages(parsed: Sequence[ParsedMessage], call: CallInfo) -> list[Message]:
    """The messages a call sent, as rebuilt (earlier turns' thinking dropped where stripped)."""
    if call.sent is None or call.thinking_rule is None:
        raise ValueError("the call's request was not rebuilt (rebuild_calls sets what it sent)")
    messages = [parsed[i].message for i in call.sent.indexes()]
    return sent_messages(messages, call.thinking_rule)[0]


def rebuild_calls(
    thread: Thread, tokenizer: Tokenizer, *, version: str | None, model: str | None
) -> tuple[Plan, int | None]:
    """Set each call's sent span, components and details; returns the plan and the harness
    prefix of its first context (None when no call has the provider's usage). Each message is
    counted once.

    The harness prefix (what every call sent that the file does not hold: system prompt, tools,
    reminders) is the provider's count minus ours at the first call with usage of each context,
    measured again after every compaction: what Claude Code sends changes across one, so nothing
    measured before it is carried after it (a context with no usage takes the last one measured)."""
    plan = context_plan(thread)
    counts = _Counts([pm.message for pm in thread.messages], tokenizer)
    tokenizer_id = tokenizer.id
    for pm, conversation, results in zip(thread.messages, counts.conv, counts.results, strict=True):
        pm.counted = (pm.message, tokenizer_id, conversation, results)  # the writer's count of it
    starts = [i for i, pm in enumerate(thread.messages) if pm.starts_context]
    prefixes: dict[int, int] = {}
    contexts: list[int] = []
    parts: list[tuple[int, int, int]] = []
    rules: dict[str | None, ThinkingRule] = {}  # by the model a call asked: the thread's version for all
    for at, sent, call in plan:
        asked = call.model or model
        rule = rules.get(asked) if asked is None or type(asked) is str else None
        if rule is None:
            rule = thinking_rule(asked, version=version)
            if asked is None or type(asked) is str:
                rules[asked] = rule
        measured, dropped, slimmed = counts.components(sent, rule)
        if slimmed:
            call.details["thinking_stripped_tokens"] = dropped
        context = bisect.bisect_right(starts, at)  # compactions before the call's last message
        if context not in prefixes and call.usage is not None and call.usage.prompt_tokens:
            prefixes[context] = max(0, call.usage.prompt_tokens - sum(measured))
        contexts.append(context)
        parts.append(measured)
        call.details["previous_thinking"] = "kept" if rule.keeps_all else "stripped"
        call.details["request_messages"] = len(sent)  # messages_sent (a seq bound) is the writer's
        call.details["at_message_index"] = at
        call.sent = sent
        call.thinking_rule = rule
    known: int | None = None
    for context in range(max(contexts, default=-1) + 1):
        if context in prefixes:
            known = prefixes[context]
        elif known is not None:
            prefixes[context] = known
    for (_, _, call), context, (summary, conversation, results) in zip(plan, contexts, parts, strict=True):
        prefix = prefixes.get(context)
        # each call's components made once, the harness prefix in them (held with the call until written)
        if prefix:
            call.components = _components(
                system=prefix, summary=summary, conversation=conversation, tool_results=results
            )
            call.details["harness_prefix_tokens"] = prefix
            call.details["system_is_harness_prefix"] = True
        else:
            call.components = _components(summary=summary, conversation=conversation, tool_results=results)
    return plan, prefixes[min(prefixes)] if prefixes else None


_ZERO_COMPONENTS = dict.fromkeys(ComponentTokens.model_fields, 0)
_GIVEN_COMPONENTS: dict[frozenset[str], set[str]] = {}


def _components(**given: int) -> ComponentTokens:
    """``ComponentTokens(**given)``, its set of given fields shared (``share_fields_set``), made
    without validating counts that are non-negative ints (validation keeps them as they are)."""
    if not all(type(v) is int and v >= 0 for v in given.values()):
        return share_fields_set(ComponentTokens(**given))
    key = frozenset(given)
    names = _GIVEN_COMPONENTS.get(key)
    if names is None:
        names = _GIVEN_COMPONENTS[key] = share_fields_set(ComponentTokens(**given)).__pydantic_fields_set__
    return unvalidated(ComponentTokens, {**_ZERO_COMPONENTS, **given}, names, None)
