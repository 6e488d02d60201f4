"""Prompt assembly: the system prompt built from typed sections, cacheable ones first, with
Anthropic cache breakpoints placed where the stable prefix ends.

``PromptBuilder.build()`` returns an :class:`AssembledPrompt` (text, per-section tokens, cache
breakpoints); ``to_anthropic_request`` / ``to_openai_request`` turn it, the history and the
tools into a request body. ``build_prompt_or_concat`` is what the session manager calls: if
assembly fails, the sections' texts are joined plainly and a ``degraded`` event says why.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from engine.convert import to_anthropic, to_openai
from engine.errors import ContextDeskError, TokenizerError, ValidationError
from engine.events import ContextEvent, degraded_event
from engine.messages import Message
from engine.tokens import Tokenizer, tool_parts

SectionKind = Literal[
    "base_instructions",
    "project_rules",
    "memories",
    "skills",
    "summary",
    "scratchpad",
    "context_status",
]
#: Sections in prompt order (within the cacheable run and after it).
SECTION_ORDER: tuple[str, ...] = get_args(SectionKind)
#: Whether a kind is cacheable unless the section says otherwise: what changes every turn is not.
DEFAULT_CACHEABLE: dict[str, bool] = {
    "base_instructions": True,
    "project_rules": True,
    "memories": True,
    "skills": True,
    "summary": True,
    "scratchpad": False,
    "context_status": False,
}
#: Budget component each kind counts towards (engine.events.ComponentTokens field names).
SECTION_COMPONENT: dict[str, str] = {kind: "system" for kind in SECTION_ORDER} | {
    "skills": "skills",
    "summary": "summary",
}
SUMMARY_TITLE = "Summary of earlier conversation"
SECTION_SEPARATOR = "\n\n"
#: Anthropic accepts at most this many cache_control blocks in one request.
MAX_CACHE_BREAKPOINTS = 4
#: Breakpoints the system prompt may use: the rest are one at the end of the tools and one on
#: the conversation's last message.
MAX_SYSTEM_BREAKPOINTS = MAX_CACHE_BREAKPOINTS - 2
EPHEMERAL = {"type": "ephemeral"}
#: Blocks that may carry cache_control (thinking blocks may not).
_CACHEABLE_BLOCK_TYPES = frozenset({"text", "tool_use", "tool_result", "image", "document"})


def _with_title(title: str | None, text: str) -> str:
    return f"# {title}\n\n{text}" if title else text


@dataclass(frozen=True)
class PromptSection:
    """One part of the system prompt. ``cacheable`` None takes the kind's default.

    Subclasses may compute their text in ``render()`` (a context-status line, say); a render
    that raises makes ``build_prompt_or_concat`` fall back to joining the raw ``text``.
    """

    kind: SectionKind
    text: str
    title: str | None = None
    cacheable: bool | None = None

    def render(self) -> str:
        return _with_title(self.title, self.text)

    @property
    def is_cacheable(self) -> bool:
        return DEFAULT_CACHEABLE[self.kind] if self.cacheable is None else self.cacheable


@dataclass(frozen=True)
class AssembledPrompt:
    """The system prompt as sent: one rendered block per section, in order.

    ``breakpoints`` are indices of sections whose block carries a cache breakpoint.
    """

    sections: tuple[PromptSection, ...]
    blocks: tuple[str, ...]
    section_tokens: tuple[int, ...]
    breakpoints: tuple[int, ...]
    tokenizer: Tokenizer = field(repr=False, compare=False)
    degraded: bool = False

    @property
    def text(self) -> str:
        return SECTION_SEPARATOR.join(self.blocks)

    @property
    def tokens(self) -> int:
        return sum(self.section_tokens)

    @property
    def components(self) -> dict[str, int]:
        """Tokens by budget component: ``system``, ``skills`` and ``summary``."""
        totals = {"system": 0, "skills": 0, "summary": 0}
        for section, tokens in zip(self.sections, self.section_tokens, strict=True):
            totals[SECTION_COMPONENT[section.kind]] += tokens
        return totals

    def with_summary(self, summary: str | None) -> AssembledPrompt:
        """This prompt with its summary section replaced by ``summary`` (removed when None)."""
        kept = [s for s in self.sections if s.kind != "summary"]
        if summary:
            kept.append(PromptSection("summary", summary, title=SUMMARY_TITLE))
        if self.degraded:
            return concat_prompt(kept, tokenizer=self.tokenizer)
        return PromptBuilder(self.tokenizer, sections=kept).build()


class PromptBuilder:
    """Collects sections and assembles them; ``add`` returns the builder for chaining."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        sections: Iterable[PromptSection] = (),
        max_breakpoints: int = MAX_SYSTEM_BREAKPOINTS,
    ) -> None:
        if not 0 <= max_breakpoints <= MAX_SYSTEM_BREAKPOINTS:
            raise ValidationError(
                f"max_breakpoints must be 0..{MAX_SYSTEM_BREAKPOINTS}, got {max_breakpoints}",
                field="max_breakpoints",
            )
        self.tokenizer = tokenizer
        self.max_breakpoints = max_breakpoints
        self.sections: list[PromptSection] = list(sections)

    def add(
        self, kind: SectionKind, text: str, *, title: str | None = None, cacheable: bool | None = None
    ) -> PromptBuilder:
        return self.add_section(PromptSection(kind, text, title=title, cacheable=cacheable))

    def add_section(self, section: PromptSection) -> PromptBuilder:
        self.sections.append(section)
        return self

    def build(self) -> AssembledPrompt:
        """Cacheable sections first, each run in SECTION_ORDER (stable within a kind); empty
        sections dropped; breakpoints at the end of the cacheable run and, when there is room,
        before the summary (which changes at each compaction while what precedes it does not)."""
        checked = [self._check(i, s) for i, s in enumerate(self.sections)]
        ordered = sorted(
            (s for s in checked if s[1].strip()),
            key=lambda s: (not s[0].is_cacheable, SECTION_ORDER.index(s[0].kind)),
        )
        sections = tuple(s for s, _ in ordered)
        blocks = tuple(text for _, text in ordered)
        return AssembledPrompt(
            sections=sections,
            blocks=blocks,
            section_tokens=tuple(self.tokenizer.count(text) for text in blocks),
            breakpoints=self._breakpoints(sections),
            tokenizer=self.tokenizer,
        )

    def _check(self, index: int, section: PromptSection) -> tuple[PromptSection, str]:
        kind = getattr(section, "kind", None)
        if kind not in SECTION_ORDER:
            raise ValidationError(
                f"prompt section {index} has kind {kind!r}; expected one of {', '.join(SECTION_ORDER)}",
                field=f"sections[{index}].kind",
                value=kind,
            )
        try:
            text = section.render()
        except (ContextDeskError, LookupError, TypeError, ValueError, OSError) as exc:
            raise ValidationError(
                f"prompt section {index} ({kind}) failed to render: {type(exc).__name__}: {exc}",
                field=f"sections[{index}]",
            ) from exc
        if not isinstance(text, str):
            raise ValidationError(
                f"prompt section {index} ({kind}) rendered {type(text).__name__}, not str",
                field=f"sections[{index}]",
            )
        return section, text

    def _breakpoints(self, sections: Sequence[PromptSection]) -> tuple[int, ...]:
        cacheable = [i for i, s in enumerate(sections) if s.is_cacheable]
        if not cacheable or self.max_breakpoints == 0:
            return ()
        points = [cacheable[-1]]
        summary = next((i for i in cacheable if sections[i].kind == "summary"), None)
        if self.max_breakpoints > 1 and summary is not None and summary > 0:
            points.insert(0, summary - 1)
        return tuple(sorted(set(points)))


def concat_prompt(sections: Iterable[Any], *, tokenizer: Tokenizer) -> AssembledPrompt:
    """The plain behaviour: the sections' raw texts joined in the order given, as one
    uncached block (sections without a str ``text`` are left out)."""
    texts = [
        _with_title(getattr(s, "title", None), s.text)
        for s in sections
        if isinstance(getattr(s, "text", None), str) and s.text.strip()
    ]
    text = SECTION_SEPARATOR.join(texts)
    blocks = (text,) if text else ()
    section = PromptSection("base_instructions", text, cacheable=False)
    return AssembledPrompt(
        sections=(section,) if text else (),
        blocks=blocks,
        section_tokens=tuple(tokenizer.count(b) for b in blocks),
        breakpoints=(),
        tokenizer=tokenizer,
        degraded=True,
    )


def build_prompt_or_concat(
    sections: Iterable[PromptSection], *, tokenizer: Tokenizer
) -> tuple[AssembledPrompt, list[ContextEvent]]:
    """(prompt, events): the assembled prompt, or on failure the plain concatenation and a
    ``degraded`` event naming the error."""
    sections = list(sections)
    try:
        return PromptBuilder(tokenizer, sections=sections).build(), []
    except (ValidationError, TokenizerError) as exc:
        prompt = concat_prompt(sections, tokenizer=tokenizer)
        return prompt, [degraded_event("prompt", exc, fallback="plain_concatenation", sections=len(sections))]


# -- request bodies ---------------------------------------------------------------------------


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
    if max_tokens <= 0:
        raise ValidationError(f"max_tokens must be > 0, got {max_tokens}", field="max_tokens")
    if summary is not None:
        prompt = prompt.with_summary(summary)
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
    if max_tokens <= 0:
        raise ValidationError(f"max_tokens must be > 0, got {max_tokens}", field="max_tokens")
    if summary is not None:
        prompt = prompt.with_summary(summary)
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
