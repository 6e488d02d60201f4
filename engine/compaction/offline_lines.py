"""The offline summarizer's vocabulary: its sections and their weights, the patterns that
tell a request, a decision, a fix or a task, and the records (items, errors, commands, files)
it ranks.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from engine.compaction.constraints import STOPWORDS, user_words, words  # noqa: F401 (user_words: re-exported, defined once in constraints)
from engine.compaction.extract import (
    CHANGES,
    Prefiltered,
    find_paths,
)
from engine.compaction.summarizers import SUMMARY_SECTIONS

SECTIONS = SUMMARY_SECTIONS
REQUESTS, CONSTRAINTS, DECISIONS, FILES, COMMANDS, ERRORS, FACTS, TASKS = SECTIONS
HEADER_PREFIX = "Summary of earlier conversation"

#: Importance of a line by section; within a section trimming drops the lowest first (then the oldest).
SECTION_PRIORITY = {
    REQUESTS: 6.0,
    CONSTRAINTS: 6.5,
    ERRORS: 5.0,
    DECISIONS: 5.0,
    TASKS: 4.5,
    FILES: 3.0,
    FACTS: 4.0,
    COMMANDS: 2.0,
}
#: Share of the budget each section may hold before its lines start to rank lower when trimming.
SECTION_SHARE = {
    REQUESTS: 0.16,
    CONSTRAINTS: 0.1,
    DECISIONS: 0.14,
    ERRORS: 0.18,
    TASKS: 0.08,
    FILES: 0.12,
    FACTS: 0.16,
    COMMANDS: 0.06,
}
#: Lines carried over from an earlier summary rank a little below fresh ones of their section.
CARRIED_PENALTY = 0.25
#: Lines that match the caller's instructions rank this much higher.
FOCUS_BONUS = 1.5
REQUEST_CHARS = 200
#: A pasted message (logs, a long task) is named by its start only.
PASTED_REQUEST_CHARS = 120
#: A user message longer than this is mostly pasted material (logs, code), not an instruction.
PASTED_CHARS = 600
#: Facts from tool output collected at most (newest first): more than any summary budget holds.
MAX_FACT_LINES = 400
#: Of an older user message, the start is read for constraints (what follows is pasted material,
#: whose constraints rank low).
OLD_USER_CHARS = 2_000
#: Shorter "I'll ..." sentences are chatter ("I will look at it."), not commitments.
WEAK_TASK_MIN_CHARS = 30

_COVERED = re.compile(rf"^{HEADER_PREFIX} \(([\d,]+) messages")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`(\[])|\n+")
_DECISION = re.compile(
    r"\b(decided|decide to|decision|go with|going with|went with|chose|choose|chosen|opted|opt for|"
    r"settled on|will use|we'll use|i'll use|let's use|use \S+ instead|instead of|switch(?:ed|ing)? to|"
    r"moving to|migrat(?:e|ed|ing) to|the plan is|approach is|agreed|picked|selected|stick(?:ing)? with|"
    r"in fav(?:ou)?r of|wins for|the winner)\b",
    re.IGNORECASE,
)
_DECISION_WORDS = Prefiltered(
    _DECISION,
    *("decided", "decide to", "decision", "go with", "going with", "went with", "chose", "choose"),
    *("opted", "opt for", "settled on", "will use", "we'll use", "i'll use", "let's use", "instead"),
    *("switch", "moving to", "migrat", "the plan is", "approach is", "agreed", "picked", "selected"),
    *("stick with", "sticking with", "in favor of", "in favour of", "wins for", "the winner"),
)
_STRONG_TASK = re.compile(
    r"((?-i:\bTODO\b|\bFIXME\b)|\btodo:|\bnext steps?\b|\bstill (?:need|have) to\b|\bstill to do\b|\bleft to do\b|"
    r"\bto-do\b|\bfollow[- ]up\b|\bnot (?:yet )?done\b|- \[ \])",
    re.IGNORECASE,
)
_STRONG_TASK_WORDS = Prefiltered(
    _STRONG_TASK,
    *("todo", "fixme", "next step", "still need to", "still have to", "still to do", "left to do"),
    *("to-do", "follow-up", "follow up", "not done", "not yet done", "- [ ]"),
)
_WEAK_TASK = re.compile(
    r"\b(need to|needs to|I'll|I will|we'll|we will|will (?:add|write|update|fix|implement|run|check)|"
    r"later|afterwards|then I)\b",
    re.IGNORECASE,
)
_FIX = re.compile(
    r"\b(fix(?:ed|es)?|resolv\w*|solved|the (?:issue|problem|cause|bug) (?:was|is)|caused by|because|"
    r"root cause|changed|updated|added|installed|renamed|works now|passes now|now pass\w*|workaround)\b",
    re.IGNORECASE,
)
_FIX_WORDS = Prefiltered(
    _FIX,
    *("fix", "resolv", "solved", "the issue ", "the problem ", "the cause ", "the bug ", "caused by"),
    *("because", "root cause", "changed", "updated", "added", "installed", "renamed", "works now"),
    *("passes now", "now pass", "workaround"),
)
#: A sentence that reports a change the agent made ("Raised the limit to 300", "Pinned urllib3"):
#: part of what changed, beside the files.
_DONE = re.compile(
    r"(?:I |We )?(?:raised|lowered|increased|decreased|set|changed|bumped|pinned|pointed|moved|renamed|"
    r"replaced|removed|added|switched|upgraded|downgraded|enabled|disabled|configured|reverted|disabled)\b"
    r".{8,}",
    re.IGNORECASE,
)
#: A sentence about what might, should or will be done: not a report that something was fixed.
#: Fix words that report a fix on their own; the others ("updated", "because") only resolve an
#: error the sentence names.
_STRONG_FIX = re.compile(
    r"\b(fix(?:ed|es)?|resolv\w*|solved|root cause|caused by|works now|passes now|now pass\w*|workaround)\b",
    re.IGNORECASE,
)
_TENTATIVE = re.compile(
    r"\b(verify|confirm|check|ensure|make sure|whether|if the|if it|to see|let's|let me|we need|need to|"
    r"should|would|could|might|try|trying|will|going to|I'll|we'll)\b|\?$",
    re.IGNORECASE,
)
#: Names that tie a sentence to one error: identifiers with digits, underscores, dots or inner capitals.
_DISTINCTIVE = re.compile(r"\b(?:[A-Za-z_][\w.]*\d[\w.]*|\w+_\w+|[a-z]+[A-Z]\w*|[A-Z][a-z]+[A-Z]\w*)\b")
_OBSERVATION_TAIL = re.compile(r"\(Current directory: [^)\n]*\)\s*$")
#: Wrappers that agents put in user messages (Claude Code's slash commands and local command
#: output, Codex's environment and skills, Gemini's session context): not the user's words.
#: Words too generic to tie a fix sentence to one error rather than another.
_GENERIC_TEXT = """error errors failed failure fails failing test tests file files line exception traceback command
    code exit found run ran running now issue problem bug fix fixed"""
_GENERIC_ERROR_WORDS = frozenset(_GENERIC_TEXT.split())


@dataclass
class _Item:
    section: str
    text: str
    priority: float
    order: int


@dataclass
class _Error:
    item: _Item
    key: str
    terms: frozenset[str] = frozenset()
    names: frozenset[str] = frozenset()
    resolution: str | None = None


@dataclass
class _Command:
    text: str
    order: int
    runs: int = 1
    outcomes: list[str] = field(default_factory=list)


@dataclass
class _File:
    path: str
    order: int
    #: what was done to the file -> the tools that did it (in order)
    actions: dict[str, list[str]] = field(default_factory=dict)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _sentences(text: str) -> list[str]:
    return [s.strip(" -*•\t") for s in _SENTENCE_SPLIT.split(text) if s and len(s.strip()) > 3]


def _searchers(text: str, *patterns: Prefiltered) -> list[Any]:
    """Each pattern's search, for the sentences of ``text``."""
    low = text.lower() if text.isascii() else None
    return [pattern.within(low) for pattern in patterns]


def _distinctive(text: str) -> frozenset[str]:
    return frozenset(m.lower().strip(".") for m in _DISTINCTIVE.findall(text) if len(m) >= 4)


def _error_terms(text: str) -> frozenset[str]:
    """Words that tie an error to a later sentence about it (names, paths, error types)."""
    found = set(words(text))
    for path in find_paths(text):
        found.update(p.lower() for p in re.split(r"[/.]", path) if len(p) >= 3)
    return frozenset(w for w in found if w not in STOPWORDS and w not in _GENERIC_ERROR_WORDS)


def is_observation(text: str) -> bool:
    """True when a user-role message is an environment's output (SWE-agent's observations end
    with its ``(Current directory: ...) bash-$`` prompt; legacy OpenHands writes ``OBSERVATION:``)."""
    tail = text[-300:].rstrip()
    return tail.endswith("bash-$") or bool(_OBSERVATION_TAIL.search(tail)) or text.startswith("OBSERVATION:")


def _file_priority(actions: Iterable[str]) -> float:
    actions = set(actions)
    if actions & set(CHANGES):
        return SECTION_PRIORITY[FILES] + 1.25
    if "mentioned by user" in actions:
        return SECTION_PRIORITY[FILES] + 0.25
    return SECTION_PRIORITY[FILES]


def _file_line(entry: _File) -> str:
    parts = []
    for action, tools in entry.actions.items():
        named = [t for t in dict.fromkeys(tools) if t]
        parts.append(f"{action} by {', '.join(named)}" if named and action in CHANGES else action)
    return f"{entry.path} ({'; '.join(parts)})"
