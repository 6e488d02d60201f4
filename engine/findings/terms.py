"""Identifiers in text, for telling whether a result or a constraint was referred to again."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterable

from engine.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

_TERM = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_$.\-/@+]*[A-Za-z0-9_]")


# -- text helpers ----------------------------------------------------------------------------------


def text_terms(text: str) -> set[str]:
    """Identifier-like terms of a text, and the path segments of path-like ones."""
    terms = set()
    for match in _TERM.findall(text):
        for term in (match, *match.split("/")):
            if _is_distinctive(term):
                terms.add(term)
    return terms


def message_terms(message: Message) -> set[str]:
    """Terms of every text, thinking, tool input and tool result of a message."""
    terms: set[str] = set()
    for block in message.blocks:
        if isinstance(block, TextBlock | ToolResultBlock):
            terms |= text_terms(block.text)
        elif isinstance(block, ThinkingBlock):
            terms |= text_terms(block.thinking)
        elif isinstance(block, ToolUseBlock):
            terms |= text_terms(json.dumps(block.input, ensure_ascii=False))
    return terms


def _is_distinctive(term: str) -> bool:
    if len(term) < 4:
        return False
    if any(c in term for c in "_./$@") or (any(c.isdigit() for c in term) and any(c.isalpha() for c in term)):
        return True
    return any(a.islower() and b.isupper() for a, b in itertools.pairwise(term))


def _examples(terms: Iterable[str], n: int = 3) -> list[str]:
    """A few readable terms: the longest that are still short enough to quote."""
    short = [t for t in terms if len(t) <= 40] or [t[:40] + "…" for t in terms]
    return sorted(short, key=lambda t: (-len(t), t))[:n]


def _power_of_two_below(size: int) -> int:
    value = 1_024
    while value * 2 <= size:
        value *= 2
    return value
