"""Request bodies from an assembled prompt: the Messages API body with cache breakpoints
(``to_anthropic_request``, ``build_anthropic_request`` over an incrementally rendered
:class:`AnthropicHistory`) and the Chat Completions body (``to_openai_request``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import Any

from engine.convert import to_anthropic, to_openai
from engine.errors import ValidationError
from engine.messages import Message
from engine.prompt.sections import MAX_CACHE_BREAKPOINTS, SECTION_SEPARATOR, AssembledPrompt
from engine.tokens import tool_parts

EPHEMERAL = {"type": "ephemeral"}
#: Blocks that may carry cache_control (thinking blocks may not).
_CACHEABLE_BLOCK_TYPES = frozenset({"text", "tool_use", "tool_result", "image", "document"})


def _strip_cache_control(messages: list[dict[str, Any]]) -> None:
    # Imported messages may carry the provider's own breakpoints (engine.convert keeps them for
    # lossless round trips); the request places its own, within the limit. Only blocks are
    # touched: a tool's input may hold a key of that name as data.
    for message in messages:
        content = message.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict):
                block.pop("cache_control", None)
                inner = block.get("content") if block.get("type") == "tool_result" else None
                for sub in inner if isinstance(inner, list) else ():
                    if isinstance(sub, dict):
                        sub.pop("cache_control", None)


def volatile_tail(prompt: AssembledPrompt) -> int:
    """How many of the prompt's last sections are not cacheable (the context status, a scratchpad):
    they change between calls, so the request sends them after the cached conversation."""
    count = 0
    for section in reversed(prompt.sections):
        if section.is_cacheable:
            break
        count += 1
    return count


def _with_trailing_text(message: dict[str, Any], text: str) -> dict[str, Any]:
    """A copy of a rendered user message with ``text`` as its last block (the dict may be shared)."""
    content = message["content"]
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else list(content)
    return {**message, "content": [*blocks, {"type": "text", "text": text}]}


def _mark_last_cacheable_message(messages: list[dict[str, Any]]) -> bool:
    """Put a breakpoint on the last block that can carry one; True if one was placed. The marked
    message is replaced by a copy (the dicts may be an AnthropicHistory's, shared between requests)."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        content = message["content"]
        if isinstance(content, str):
            if content:
                marked = [{"type": "text", "text": content, "cache_control": dict(EPHEMERAL)}]
                messages[index] = {**message, "content": marked}
                return True
            continue
        for i in range(len(content) - 1, -1, -1):
            block = content[i]
            if block.get("type") in _CACHEABLE_BLOCK_TYPES and (
                block.get("type") != "text" or block.get("text")
            ):
                marked = [*content[:i], block | {"cache_control": dict(EPHEMERAL)}, *content[i + 1 :]]
                messages[index] = {**message, "content": marked}
                return True
    return False


class AnthropicHistory:
    """A growing history rendered for the Messages API once per message, not once per request.

    ``render(messages)`` returns the Anthropic dicts of ``messages`` (provider breakpoints
    stripped), rendering only what was not rendered before: the cache is valid for the longest
    prefix equal to what it last saw (messages are frozen, so an edited message is another object
    and compares unequal). The same list object passed again is taken to have been appended to
    or shortened only, as a session manager's history is (an edit there replaces the list or a
    message at its ends). A session manager keeps one per session, so a turn costs the new
    messages, not the history. The dicts returned are shared between calls: treat them as
    read-only."""

    def __init__(self) -> None:
        self._messages: list[Message] = []
        self._rendered: list[dict[str, Any]] = []
        #: Output index at which each message's dict starts (tool messages merge into one).
        self._starts: list[int] = []
        #: count_cache_breakpoints of each rendered dict (keys inside tool inputs, as data).
        self._keys: list[int] = []
        self.data_keys = 0
        self._source: Sequence[Message] | None = None

    def render(self, messages: Sequence[Message]) -> list[dict[str, Any]]:
        keep = min(len(self._messages), len(messages))
        if not self._grew(messages, keep) and self._messages[:keep] != list(messages[:keep]):
            keep = 0  # replaced (compaction): start again
        if keep < len(self._messages):  # and a shorter history (a failed turn taken back)
            self._truncate(keep)
        self._source = messages
        for index in range(keep, len(messages)):
            self._add(messages[index])
        return list(self._rendered)

    def _grew(self, messages: Sequence[Message], keep: int) -> bool:
        """True when ``messages`` is the list object rendered last time, only appended to or
        shortened since (a session manager's history): its kept prefix is checked at its ends
        instead of message by message, so a turn costs O(new messages) at any history length."""
        if messages is not self._source or keep == 0:
            return False
        return messages[0] is self._messages[0] and messages[keep - 1] is self._messages[keep - 1]

    def _truncate(self, count: int) -> None:
        """Forget every message from ``count`` on (re-rendering a tool dict it was merged into)."""
        cut = self._starts[count]
        first = bisect.bisect_left(self._starts, cut)  # the first message of the dict at ``cut``
        redo = self._messages[first:count]
        del self._messages[first:], self._starts[first:], self._rendered[cut:]
        self.data_keys -= sum(self._keys[cut:])
        del self._keys[cut:]
        for message in redo:
            self._add(message)

    def _add(self, message: Message) -> None:
        (rendered,) = to_anthropic([message])
        _strip_cache_control([rendered])
        previous = self._messages[-1] if self._messages else None
        if message.role == "tool" and previous is not None and previous.role == "tool":
            merged = {**self._rendered[-1], "content": [*self._rendered[-1]["content"], *rendered["content"]]}
            self.data_keys -= self._keys[-1]
            self._rendered[-1], self._keys[-1] = merged, count_cache_breakpoints(merged)
            self._starts.append(len(self._rendered) - 1)
        else:
            self._starts.append(len(self._rendered))
            self._rendered.append(rendered)
            self._keys.append(count_cache_breakpoints(rendered))
        self.data_keys += self._keys[-1]
        self._messages.append(message)


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """A copy in Anthropic's shape: OpenAI function tools converted, Anthropic tools (server
    tools with a ``type`` included) kept as they are, without any breakpoint of their own."""
    if tool.get("type") == "function" and isinstance(tool.get("function"), dict):
        name, description, schema = tool_parts(tool)
        out: dict[str, Any] = {"name": name, "input_schema": schema or {"type": "object", "properties": {}}}
        return out | ({"description": description} if description else {})
    return {key: value for key, value in tool.items() if key != "cache_control"}


def _with_summary(prompt: AssembledPrompt, max_tokens: int, summary: str | None) -> AssembledPrompt:
    """The prompt a request body sends (``summary`` as its section), after checking ``max_tokens``."""
    if max_tokens <= 0:
        raise ValidationError(f"max_tokens must be > 0, got {max_tokens}", field="max_tokens")
    return prompt if summary is None else prompt.with_summary(summary)


def to_anthropic_request(
    prompt: AssembledPrompt,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    *,
    model: str,
    max_tokens: int,
    summary: str | None = None,
) -> dict[str, Any]:
    """A Messages API body: system as text blocks with ``cache_control`` at the prompt's
    breakpoints, cache_control on the last tool and on the conversation's last cacheable
    block, never more than MAX_CACHE_BREAKPOINTS in all. ``summary`` becomes the system
    section "Summary of earlier conversation", never a made-up history message."""
    body, _ = build_anthropic_request(
        prompt, messages, tools, model=model, max_tokens=max_tokens, summary=summary
    )
    return body


def build_anthropic_request(
    prompt: AssembledPrompt,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    *,
    model: str,
    max_tokens: int,
    summary: str | None = None,
    history: AnthropicHistory | None = None,
) -> tuple[dict[str, Any], int]:
    """(body, count_cache_breakpoints(body)) as :func:`to_anthropic_request` builds it; with an
    :class:`AnthropicHistory` only messages it has not rendered yet are converted, and the count
    is kept without walking the conversation."""
    prompt = _with_summary(prompt, max_tokens, summary)
    body: dict[str, Any] = {"model": model, "max_tokens": max_tokens}
    sent_tools = [_anthropic_tool(t) for t in tools]
    history = history or AnthropicHistory()
    rendered = history.render(messages)
    data_keys = history.data_keys
    used = 0
    if sent_tools:
        sent_tools[-1]["cache_control"] = dict(EPHEMERAL)
        used += 1
    marked = _mark_last_cacheable_message(rendered)
    used += marked
    # The builder leaves room for these two; a prompt built with more keeps its last ones.
    allowed = MAX_CACHE_BREAKPOINTS - used
    system_points = set(prompt.breakpoints[max(0, len(prompt.breakpoints) - allowed) :])
    system_blocks = list(prompt.blocks)
    tail = volatile_tail(prompt)
    if tail and rendered and rendered[-1].get("role") == "user":
        # What changes every call (the context status) goes after the conversation's breakpoint:
        # in the system prompt it would sit before every cached message and rebuild them all.
        system_blocks = system_blocks[: len(system_blocks) - tail]
        rendered[-1] = _with_trailing_text(rendered[-1], SECTION_SEPARATOR.join(prompt.blocks[-tail:]))
    if system_blocks:
        body["system"] = [
            {"type": "text", "text": text}
            | ({"cache_control": dict(EPHEMERAL)} if i in system_points else {})
            for i, text in enumerate(system_blocks)
        ]
    if sent_tools:
        body["tools"] = sent_tools
    body["messages"] = rendered
    breakpoints = data_keys + count_cache_breakpoints({k: v for k, v in body.items() if k != "messages"})
    return body, breakpoints + marked


def count_cache_breakpoints(body: Any) -> int:
    """``cache_control`` keys anywhere in a request body (an upper bound on its breakpoints)."""
    if isinstance(body, dict):
        return ("cache_control" in body) + sum(count_cache_breakpoints(v) for v in body.values())
    if isinstance(body, list):
        return sum(count_cache_breakpoints(v) for v in body)
    return 0


def to_openai_request(
    prompt: AssembledPrompt,
    messages: Sequence[Message],
    tools: Sequence[dict[str, Any]],
    *,
    model: str,
    max_tokens: int,
    summary: str | None = None,
) -> dict[str, Any]:
    """A Chat Completions body: the system prompt as the first message (OpenAI caches prefixes
    itself, so no breakpoints), tools as functions, ``summary`` as a system prompt section."""
    prompt = _with_summary(prompt, max_tokens, summary)
    history = to_openai(messages)
    if prompt.blocks:
        history.insert(0, {"role": "system", "content": prompt.text})
    body: dict[str, Any] = {"model": model, "max_completion_tokens": max_tokens, "messages": history}
    if tools:
        body["tools"] = [
            {"type": "function", "function": {"name": n, "description": d, "parameters": s}}
            for n, d, s in (tool_parts(t) for t in tools)
        ]
    return body
