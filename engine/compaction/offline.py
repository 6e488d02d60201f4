"""The offline summarizer: deterministic, structured extraction that needs no API.

It reads user text, assistant text, tool calls and tool results in every agent's dialect and
writes a handover a resuming agent can act on: what was asked, the constraints, decisions,
what changed (files, with the tool that changed them), commands, what failed and whether it
was fixed, facts that only tool output held, and what is next. Over budget, it drops the least
important lines first (commands before files before decisions before user requirements; older
before newer), never the whole tail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from engine.compaction.config import DEFAULT_SUMMARY_MAX_TOKENS
from engine.compaction.constraints import STOPWORDS
from engine.compaction.extract import (
    LINE_CHARS,
    error_line,
    find_paths,
    is_failure_output,
    salient_lines,
)
from engine.compaction.offline_lines import (
    _COVERED,
    FILES,
    FOCUS_BONUS,
    HEADER_PREFIX,
    SECTION_SHARE,
    SECTIONS,
    _clip,
    _Item,
    is_observation,
)
from engine.compaction.offline_reader import (
    _Extractor,
)
from engine.compaction.result import is_summary_message
from engine.compaction.summarizers import check_summarize_args, describe_media
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_user_input,
)
from engine.tokens import Tokenizer, get_tokenizer

__all__ = [
    "HEADER_PREFIX",
    "SECTIONS",
    "OfflineSummarizer",
    "error_line",
    "find_paths",
    "is_failure_output",
    "salient_lines",
]


#: A summary reads every message of the newest this-many in full. Older ones are read for what
#: could still outrank the newer lines of their section when trimmed (the first request, the
#: user's constraints, carried summaries): at 100,000 messages everything else an old message
#: adds (commands, files, outputs, resolved errors) is dropped by newer lines of equal rank, and
#: reading it all made cold planning ~10x slower.
FULL_READ_MESSAGES = 3_000


def _focus_words(instructions: str | None) -> set[str]:
    """Stems of the instructions' content words: "the API changes" -> {"api", "chang"}."""
    if not instructions:
        return set()
    stems: set[str] = set()
    for word in re.findall(r"[a-z][\w.-]{2,}", instructions.lower()):
        if word in STOPWORDS:
            continue
        for suffix in ("ing", "es", "ed", "s"):
            if word.endswith(suffix) and len(word) - len(suffix) >= 3:
                word = word[: -len(suffix)]
                break
        stems.add(word)
    return stems


class OfflineSummarizer:
    """Deterministic sectioned summaries built from the messages alone (no API, no clock)."""

    name = "offline"

    def __init__(self, tokenizer: Tokenizer | None = None) -> None:
        self.tokenizer = tokenizer or get_tokenizer("o200k_base")

    def __repr__(self) -> str:
        return f"OfflineSummarizer(tokenizer={self.tokenizer.id!r})"

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        instructions: str | None = None,
        max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    ) -> str:
        check_summarize_args(messages, max_tokens)
        extractor = _Extractor()
        covered = 0
        first_full = len(messages) - FULL_READ_MESSAGES
        for position, message in enumerate(messages):
            if position < first_full and message.role != "user" and not _may_be_summary(message):
                covered += 1  # an old agent or tool message: nothing in it could outrank newer lines
                continue
            if is_summary_message(message) or message.text.startswith(HEADER_PREFIX):
                extractor.carried_summary(message.text)
                counted = _COVERED.search(message.text)
                covered += int(counted.group(1).replace(",", "")) if counted else 0
                continue
            covered += 1
            if position < first_full:
                if (
                    message.role == "user"
                    and is_user_input(message)
                    and not is_observation(text := message.text)
                ):
                    extractor.old_user_text(text)
                continue
            for block in message.blocks:
                if isinstance(block, TextBlock):
                    if is_user_input(message) and is_observation(block.text):
                        extractor.tool_result(ToolResultBlock(tool_use_id="environment", content=block.text))
                    elif is_user_input(message):
                        extractor.user_text(block.text)
                    elif message.role == "assistant":
                        extractor.assistant_text(block.text)
                    elif message.role == "tool":
                        extractor.tool_result(ToolResultBlock(tool_use_id="tool", content=block.text))
                elif isinstance(block, ToolUseBlock):
                    extractor.tool_use(block)
                elif isinstance(block, ToolResultBlock):
                    extractor.tool_result(block)
                elif isinstance(block, ImageBlock | DocumentBlock):
                    extractor.add(FILES, f"{describe_media(block)} sent by {message.role}")
        items = extractor.finish()
        focus = _focus_words(instructions)
        if focus:
            for item in items:
                if any(word in item.text.lower() for word in focus):
                    item.priority += FOCUS_BONUS
        header = f"{HEADER_PREFIX} ({covered:,} messages, offline extractive summary)."
        if focus and instructions:
            header += f"\nFocus requested: {_clip(instructions, LINE_CHARS)}"
        return self._fit(header, items, max_tokens)

    def _fit(self, header: str, items: list[_Item], max_tokens: int) -> str:
        """Render within ``max_tokens``, dropping the line of least effective priority first.

        A line's effective priority is its own, lowered by how far its section is over its
        share of the budget (by log2 of the ratio), so one noisy section cannot crowd out the
        others, while a lone important line outranks a crowd of minor ones.
        """
        count = self.tokenizer.count
        cost = {id(item): count(f"- {item.text}\n") for item in items}
        by_section: dict[str, list[_Item]] = {s: [] for s in SECTIONS}
        for item in sorted(items, key=lambda i: (i.priority, i.order), reverse=True):
            by_section[item.section].append(item)
        used = {s: sum(cost[id(i)] for i in chosen) for s, chosen in by_section.items()}
        overhead = count(header) + sum(count(f"\n## {s}\n") for s in SECTIONS if by_section[s])

        def effective(section: str) -> tuple[float, int]:
            item = by_section[section][-1]
            over = used[section] / max(1.0, SECTION_SHARE[section] * max_tokens)
            return item.priority - math.log2(max(1.0, over)), item.order

        def drop_one() -> None:
            section = min((s for s in SECTIONS if by_section[s]), key=effective)
            item = by_section[section].pop()
            used[section] -= cost[id(item)]

        while any(by_section.values()) and overhead + sum(used.values()) > max_tokens:
            drop_one()
        text = _render(header, [i for chosen in by_section.values() for i in chosen])
        while any(by_section.values()) and count(text) > max_tokens:
            drop_one()
            text = _render(header, [i for chosen in by_section.values() for i in chosen])
        if count(text) > max_tokens:
            text = _cut_to_tokens(text, max_tokens, count)
        return text


def _may_be_summary(message: Message) -> bool:
    """True when the message may carry an earlier summary (its text starts with the header)."""
    if isinstance(message.content, str):
        return message.content.startswith(HEADER_PREFIX)
    first = message.content[0] if message.content else None
    return isinstance(first, TextBlock) and first.text.startswith(HEADER_PREFIX)


def _render(header: str, items: Sequence[_Item]) -> str:
    by_section: dict[str, list[_Item]] = {s: [] for s in SECTIONS}
    for item in items:
        by_section[item.section].append(item)
    parts = [header]
    for section in SECTIONS:
        chosen = sorted(by_section[section], key=lambda i: i.order)
        if chosen:
            parts.append(f"\n## {section}\n" + "\n".join(f"- {i.text}" for i in chosen))
    return "\n".join(parts)


def _cut_to_tokens(text: str, max_tokens: int, count: Any) -> str:
    """The longest prefix of ``text`` within ``max_tokens`` (binary search on characters)."""
    low, high = 0, len(text)
    while low < high:
        mid = (low + high + 1) // 2
        if count(text[:mid]) <= max_tokens:
            low = mid
        else:
            high = mid - 1
    return text[:low]
