"""The offline summarizer: deterministic, structured extraction that needs no API.

It reads user text, assistant text, tool inputs and tool results and writes sectioned notes
(user requests and constraints, decisions, files, commands, errors with their resolutions,
open tasks). Over budget, it drops the least important lines first (commands before files
before decisions before user requirements; older before newer), never the whole tail.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.compaction.config import DEFAULT_SUMMARY_MAX_TOKENS
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

REQUESTS = "User requests"
DECISIONS = "Decisions"
FILES = "Files"
COMMANDS = "Commands run"
ERRORS = "Errors and resolutions"
TASKS = "Open tasks"
SECTIONS = (REQUESTS, DECISIONS, FILES, COMMANDS, ERRORS, TASKS)
HEADER_PREFIX = "Summary of earlier conversation"

#: Importance of a line by section; within a section trimming drops the lowest first (then the oldest).
SECTION_PRIORITY = {REQUESTS: 6.0, ERRORS: 5.0, DECISIONS: 5.0, TASKS: 4.0, FILES: 3.0, COMMANDS: 2.0}
#: Share of the budget each section may hold before its lines start to rank lower when trimming.
SECTION_SHARE = {REQUESTS: 0.28, DECISIONS: 0.2, ERRORS: 0.2, TASKS: 0.1, FILES: 0.14, COMMANDS: 0.08}
#: Lines carried over from an earlier summary rank a little below fresh ones of their section.
CARRIED_PENALTY = 0.25
#: Lines that match the caller's instructions rank this much higher.
FOCUS_BONUS = 1.5
REQUEST_CHARS = 200
#: A user message longer than this is mostly pasted material (logs, code), not an instruction.
PASTED_CHARS = 600
LINE_CHARS = 240
COMMAND_CHARS = 160
#: Shorter "I'll ..." sentences are chatter ("I will look at it."), not commitments.
WEAK_TASK_MIN_CHARS = 30


class _Prefiltered:
    """A case-insensitive regex run only when the text holds one of its needles.

    Every match of ``regex`` on ASCII text contains one of ``needles`` (lower case), so for
    ASCII text a plain substring test rules most texts out first; the regex still decides.
    Other text always goes to the regex: case-insensitive matching there knows equivalences
    (``ſ`` is ``s``) that ``str.lower`` does not.
    """

    __slots__ = ("needles", "regex")

    def __init__(self, regex: re.Pattern[str], *needles: str) -> None:
        self.regex = regex
        self.needles = needles

    def search(self, text: str) -> re.Match[str] | None:
        if text.isascii():
            low = text.lower()
            if not any(needle in low for needle in self.needles):
                return None
        return self.regex.search(text)

    def within(self, low: str | None) -> Callable[[str], re.Match[str] | None]:
        """``search`` for the pieces (sentences) of a text whose lower case is ``low`` (None when
        the text is not ASCII): a piece can only hold the needles its text holds."""
        if low is None:
            return self.search
        present = [needle for needle in self.needles if needle in low]
        if not present:
            return _no_match
        regex = self.regex

        def search(piece: str) -> re.Match[str] | None:
            lowered = piece.lower()
            return regex.search(piece) if any(needle in lowered for needle in present) else None

        return search


def _no_match(piece: str) -> None:
    return None


def _searchers(text: str, *patterns: _Prefiltered) -> list[Callable[[str], re.Match[str] | None]]:
    """Each pattern's search, for the sentences of ``text``."""
    low = text.lower() if text.isascii() else None
    return [pattern.within(low) for pattern in patterns]


_COVERED = re.compile(rf"^{HEADER_PREFIX} \(([\d,]+) messages")
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z\"'`(\[])|\n+")
_CONSTRAINT = re.compile(
    r"\b(must|must not|mustn't|never|always|do not|don't|should not|shouldn't|make sure|ensure|"
    r"require[sd]?|requirement|only use|avoid|prefer|no more than|at most|at least|without|"
    r"keep (?:it|the|them|all)|stick to|not allowed|forbidden)\b",
    re.IGNORECASE,
)
_CONSTRAINT_WORDS = _Prefiltered(
    _CONSTRAINT,
    *("must", "never", "always", "do not", "don't", "should not", "shouldn't", "make sure", "ensure"),
    *("require", "only use", "avoid", "prefer", "no more than", "at most", "at least", "without"),
    *("keep ", "stick to", "not allowed", "forbidden"),
)
_DECISION = re.compile(
    r"\b(decided|decide to|decision|go with|going with|went with|chose|choose|chosen|opted|opt for|"
    r"settled on|will use|we'll use|i'll use|let's use|use \S+ instead|instead of|switch(?:ed|ing)? to|"
    r"moving to|migrat(?:e|ed|ing) to|the plan is|approach is|agreed)\b",
    re.IGNORECASE,
)
_DECISION_WORDS = _Prefiltered(
    _DECISION,
    *("decided", "decide to", "decision", "go with", "going with", "went with", "chose", "choose"),
    *("opted", "opt for", "settled on", "will use", "we'll use", "i'll use", "let's use", "instead"),
    *("switch", "moving to", "migrat", "the plan is", "approach is", "agreed"),
)
_STRONG_TASK = re.compile(
    r"(\bTODO\b|\bFIXME\b|\bnext steps?\b|\bstill (?:need|have) to\b|\bremaining\b|\bleft to do\b|"
    r"\bfollow[- ]up\b|\bnot (?:yet )?done\b|- \[ \])",
    re.IGNORECASE,
)
_STRONG_TASK_WORDS = _Prefiltered(
    _STRONG_TASK,
    *("todo", "fixme", "next step", "still need to", "still have to", "remaining", "left to do"),
    *("follow-up", "follow up", "not done", "not yet done", "- [ ]"),
)
_WEAK_TASK = re.compile(
    r"\b(need to|needs to|I'll|I will|we'll|we will|will (?:add|write|update|fix|implement|run|check)|"
    r"later|afterwards|then I)\b",
    re.IGNORECASE,
)
_WEAK_TASK_WORDS = _Prefiltered(
    _WEAK_TASK, "need", "i'll", "i will", "we'll", "we will", "will ", "later", "afterwards", "then i"
)
_FIX = re.compile(
    r"\b(fix(?:ed|es)?|resolv\w*|solved|the (?:issue|problem|cause|bug) (?:was|is)|caused by|because|"
    r"root cause|changed|updated|added|installed|renamed|works now|passes now|now pass\w*|workaround)\b",
    re.IGNORECASE,
)
_FIX_WORDS = _Prefiltered(
    _FIX,
    *("fix", "resolv", "solved", "the issue ", "the problem ", "the cause ", "the bug ", "caused by"),
    *("because", "root cause", "changed", "updated", "added", "installed", "renamed", "works now"),
    *("passes now", "now pass", "workaround"),
)
_ERROR_TEXT = re.compile(
    r"(Traceback \(most recent call last\)|\b\w*(?:Error|Exception)\b[:(]|\berror\b\s*[:\[]|\bERROR\b|"
    r"\bFAILED\b|\bfatal:|\bpanic:|No such file or directory|command not found|Permission denied|"
    r"Segmentation fault|exit (?:code|status) [1-9])",
)
#: A line that reports a failure when it stands at the start of a line of tool output.
_FAILURE_LINE = re.compile(
    r"^\s*(?:[\w.]*(?:Error|Exception)\b:|error(?:\[\w+\])?:|fatal:|panic:|FAILED\b|FAIL\b|"
    r"Segmentation fault|.*\bcommand not found\b|.*No such file or directory|.*Permission denied|"
    r".*\bexit (?:code|status) [1-9])",
    re.IGNORECASE,
)
# _FAILURE_LINE.match on one line (no "\n"), split in two: its ".*X" alternatives are X found
# anywhere, and Python's backtracking through ".*" per alternative was most of the summarizer's time.
_FAILURE_HEAD = re.compile(
    r"^\s*(?:[\w.]*(?:Error|Exception)\b:|error(?:\[\w+\])?:|fatal:|panic:|FAILED\b|FAIL\b|"
    r"Segmentation fault)",
    re.IGNORECASE,
)
_FAILURE_ANYWHERE = _Prefiltered(
    re.compile(
        r"\bcommand not found\b|No such file or directory|Permission denied|\bexit (?:code|status) [1-9]",
        re.IGNORECASE,
    ),
    *("command not found", "no such file or directory", "permission denied", "exit code ", "exit status "),
)
#: Failures are reported at the end of an output; only this many last lines are looked at.
FAILURE_TAIL_LINES = 30
_ERROR_FINAL_LINE = re.compile(r"^\s*[\w.]*(?:Error|Exception|Failure)\b.*\S")
_EXTENSIONS = (
    "py|pyi|js|mjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|md|rst|txt|json|jsonl|toml|"
    "yaml|yml|ini|cfg|conf|sql|sh|bash|zsh|html|css|scss|lock|csv|ipynb|xml|env|log|db|sqlite"
)
_PATH = re.compile(
    r"(?<![\w/.:-])("
    r"(?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)+(?:[\w.@+-]*[\w@+-])?"
    rf"|(?:\.{{1,2}}/)?[\w-]+(?:\.[\w-]+)*\.(?:{_EXTENSIONS})"
    r")(?![\w/])"
)
#: What a path without "/" must contain: _PATH's second alternative ends so (a cheap first test).
_PATH_HINT = re.compile(rf"\.(?:{_EXTENSIONS})(?![\w/])")
_EXTENSION = re.compile(r"\.[A-Za-z][\w]{0,7}$")
_FILE_KEYS = (
    "path",
    "file_path",
    "filepath",
    "filename",
    "file",
    "notebook_path",
    "target_file",
    "source",
    "destination",
    "dest",
    "src",
)
_FILE_LIST_KEYS = ("paths", "files", "file_paths")
_COMMAND_KEYS = ("command", "cmd", "script", "shell_command")
_STOPWORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "also",
        "and",
        "any",
        "are",
        "because",
        "been",
        "before",
        "being",
        "below",
        "between",
        "both",
        "but",
        "can",
        "could",
        "did",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "few",
        "for",
        "from",
        "further",
        "had",
        "has",
        "have",
        "having",
        "her",
        "here",
        "hers",
        "how",
        "into",
        "its",
        "just",
        "more",
        "most",
        "once",
        "only",
        "other",
        "our",
        "ours",
        "out",
        "over",
        "own",
        "same",
        "she",
        "should",
        "some",
        "such",
        "than",
        "that",
        "the",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "too",
        "under",
        "until",
        "very",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "while",
        "who",
        "whom",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        "yours",
        "focus",
        "summary",
        "summarize",
        "please",
        "keep",
    ]
)


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
    actions: list[str] = field(default_factory=list)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _sentences(text: str) -> list[str]:
    return [s.strip(" -*•\t") for s in _SENTENCE_SPLIT.split(text) if s and len(s.strip()) > 3]


def _looks_like_path(value: str) -> bool:
    if not value or len(value) > 300 or "\n" in value or "://" in value or " " in value.strip():
        return False
    has_ext = bool(_EXTENSION.search(value.rsplit("/", 1)[-1]))
    rooted = value.startswith(("/", "./", "../", "~/"))
    return has_ext or rooted or value.count("/") >= 2


def find_paths(text: str) -> list[str]:
    """File paths mentioned in free text (URLs and ``and/or``-like words are left out)."""
    if "/" not in text and not _PATH_HINT.search(text):
        return []  # every path has a "/" or ends in a known extension
    found: list[str] = []
    for match in _PATH.finditer(text):
        path = match.group(1).rstrip(".,;:")
        start = match.start(1)
        if text[max(0, start - 3) : start].endswith(("://", "//")):
            continue
        if _looks_like_path(path) and path not in found:
            found.append(path)
    return found


def error_line(text: str) -> str | None:
    """The most telling line of an error output: the exception line, else the first error-ish line."""
    lines = [line for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if _ERROR_FINAL_LINE.match(line):
            return _clip(line, LINE_CHARS)
    for reports_failure in (is_failure_line, _ERROR_TEXT.search):
        for line in lines:
            if reports_failure(line) and not line.lstrip().startswith("Traceback"):
                return _clip(line, LINE_CHARS)
    return _clip(lines[0], LINE_CHARS) if lines else None


def is_failure_line(line: str) -> bool:
    """``_FAILURE_LINE.match(line)`` for one line (no newline in it), faster."""
    return bool(_FAILURE_HEAD.match(line) or _FAILURE_ANYWHERE.search(line))


def is_failure_output(text: str) -> bool:
    """True when tool output reports a failure: a traceback, or a failure line near its end.

    An output that merely contains the word (code with ``raise ValueError(``, a log read back
    with ERROR lines in the middle) is not a failure of the call.
    """
    if "Traceback (most recent call last)" in text[:50_000]:
        return True
    tail = text[-20_000:].splitlines()[-FAILURE_TAIL_LINES:]
    joined = "\n".join(tail)
    anywhere = _FAILURE_ANYWHERE.within(joined.lower() if joined.isascii() else None)
    return any(_FAILURE_HEAD.match(line) or anywhere(line) for line in tail)


def _file_action(tool: str) -> str:
    name = tool.lower()
    for words, action in (
        (("edit", "replace", "patch", "update", "modify"), "edited"),
        (("write", "create", "save", "new"), "written"),
        (("delete", "remove", "rm"), "deleted"),
        (("read", "view", "cat", "open", "show"), "read"),
        (("grep", "glob", "search", "find", "list", "ls"), "searched"),
    ):
        if any(w in name for w in words):
            return action
    return f"used by {tool}"


def _file_priority(actions: Sequence[str]) -> float:
    if any(a in ("edited", "written", "deleted") for a in actions):
        return SECTION_PRIORITY[FILES] + 0.5
    if "mentioned by user" in actions:
        return SECTION_PRIORITY[FILES] + 0.25
    return SECTION_PRIORITY[FILES]


class _Extractor:
    """One pass over the messages, collecting items by section."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.order = 0
        self.tools: dict[str, tuple[str, dict[str, Any], _Command | None]] = {}
        self.errors: list[_Error] = []
        # Unresolved errors, in order: a resolution applies to them all (or to one key's), and
        # scanning every error ever seen for each sentence would grow with the history squared.
        self.pending: dict[int, _Error] = {}
        self.pending_by_key: dict[str, list[_Error]] = {}
        self.commands: dict[str, _Command] = {}
        self.files: dict[str, _File] = {}
        self.last_request: _Item | None = None
        self.answered = True

    def _next(self) -> int:
        self.order += 1
        return self.order

    def add(self, section: str, text: str, priority: float | None = None) -> _Item:
        item = _Item(section, text, SECTION_PRIORITY[section] if priority is None else priority, self._next())
        self.items.append(item)
        return item

    def file(self, path: str, action: str) -> None:
        path = path.strip().strip("`'\"")
        entry = self.files.get(path)
        if entry is None:
            entry = self.files[path] = _File(path, self._next())
        if action not in entry.actions:
            entry.actions.append(action)

    # -- message kinds ----------------------------------------------------------------------
    def carried_summary(self, text: str) -> None:
        section: str | None = None
        for raw in text.splitlines():
            line = raw.strip()
            if line.startswith("## "):
                title = line[3:].strip()
                section = title if title in SECTIONS else None
            elif section and line.startswith("- "):
                self.add(section, line[2:], SECTION_PRIORITY[section] - CARRIED_PENALTY)

    def user_text(self, text: str) -> None:
        text = text.strip()
        if not text:
            return
        request = _clip(text, REQUEST_CHARS)
        first = self.last_request is None
        priority = (
            SECTION_PRIORITY[REQUESTS] + (0.5 if first else 0) - (0.5 if len(text) > PASTED_CHARS else 0)
        )
        self.last_request = self.add(REQUESTS, request, priority)
        self.answered = False
        covered = request.rstrip("…")
        constraint, decision, strong = _searchers(
            text, _CONSTRAINT_WORDS, _DECISION_WORDS, _STRONG_TASK_WORDS
        )
        for sentence in _sentences(text):
            line = _clip(sentence, LINE_CHARS)
            if constraint(sentence) and " ".join(sentence.split()) not in covered:
                self.add(REQUESTS, line, SECTION_PRIORITY[REQUESTS] + 0.5)
            elif decision(sentence):
                self.add(DECISIONS, line)
            elif strong(sentence):
                self.add(TASKS, line)
        for line in text.splitlines():
            if is_failure_line(line) or line.lstrip().startswith("Traceback"):
                self._error(_Error(self.add(ERRORS, f"user reported: {_clip(line, LINE_CHARS)}"), key=""))
        for path in find_paths(text):
            self.file(path, "mentioned by user")

    def assistant_text(self, text: str) -> None:
        if text.strip():
            self.answered = True
        strong, decision, fix, weak = _searchers(
            text, _STRONG_TASK_WORDS, _DECISION_WORDS, _FIX_WORDS, _WEAK_TASK_WORDS
        )
        for sentence in _sentences(text):
            line = _clip(sentence, LINE_CHARS)
            if strong(sentence):
                self.add(TASKS, line)
            elif decision(sentence):
                self.add(DECISIONS, line)
            elif fix(sentence) and self._has_pending():
                self._resolve(line)
            elif weak(sentence) and len(sentence) >= WEAK_TASK_MIN_CHARS and not sentence.endswith("?"):
                self.add(TASKS, line, SECTION_PRIORITY[TASKS] - 0.5)
        for path in find_paths(text):
            self.file(path, "mentioned")

    def _error(self, error: _Error) -> None:
        self.errors.append(error)
        self.pending[id(error)] = error
        self.pending_by_key.setdefault(error.key, []).append(error)

    def _has_pending(self) -> bool:
        return bool(self.pending)

    def _resolve(self, resolution: str) -> None:
        for error in self.pending.values():
            error.resolution = resolution
        self.pending.clear()
        self.pending_by_key.clear()

    def tool_use(self, block: ToolUseBlock) -> None:
        command: _Command | None = None
        for key in _COMMAND_KEYS:
            value = block.input.get(key)
            if isinstance(value, list):
                value = " ".join(str(v) for v in value)
            if isinstance(value, str) and value.strip():
                text = _clip(value, COMMAND_CHARS)
                command = self.commands.get(text)
                if command is None:
                    command = self.commands[text] = _Command(text, self._next())
                else:
                    command.runs += 1
                for path in find_paths(value):
                    self.file(path, f"used by {block.name}")
                break
        action = _file_action(block.name)
        for key in _FILE_KEYS:
            value = block.input.get(key)
            if isinstance(value, str) and _looks_like_path(value):
                self.file(value, action)
        for key in _FILE_LIST_KEYS:
            values = block.input.get(key)
            if isinstance(values, list):
                for value in values:
                    if isinstance(value, str) and _looks_like_path(value):
                        self.file(value, action)
        self.tools[block.id] = (block.name, block.input, command)

    def tool_result(self, block: ToolResultBlock) -> None:
        name, arguments, command = self.tools.get(block.tool_use_id, ("tool", {}, None))
        text = block.text
        failed = block.is_error or is_failure_output(text)
        key = command.text if command else f"{name}:{sorted(arguments.items())!r}"[:200]
        if command is not None:
            command.outcomes.append("failed" if failed else "ok")
        if failed:
            line = error_line(text) or "failed with no output"
            subject = f"`{command.text}`" if command else name
            self._error(_Error(self.add(ERRORS, f"{subject}: {line}"), key=key))
        else:
            for error in self.pending_by_key.pop(key, ()):
                error.resolution = "re-ran successfully"
                del self.pending[id(error)]
        if not isinstance(block.content, str):
            for media in block.content:
                if isinstance(media, ImageBlock | DocumentBlock):
                    self.add(FILES, f"{describe_media(media)} returned by {name}", SECTION_PRIORITY[FILES])

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> list[_Item]:
        for error in self.errors:
            if error.resolution:
                error.item.text += f" → {_clip(error.resolution, LINE_CHARS)}"
            elif error.key:
                error.item.text += " → unresolved"
        for path, entry in self.files.items():
            actions = ", ".join(entry.actions)
            self.items.append(_Item(FILES, f"{path} ({actions})", _file_priority(entry.actions), entry.order))
        for command in self.commands.values():
            runs = f" ×{command.runs}" if command.runs > 1 else ""
            outcome = _outcome(command.outcomes)
            priority = SECTION_PRIORITY[COMMANDS] + (0.5 if "failed" in command.outcomes else 0)
            self.items.append(_Item(COMMANDS, f"`{command.text}`{runs} → {outcome}", priority, command.order))
        if self.last_request is not None and not self.answered:
            self.add(TASKS, f"answer the last request: {_clip(self.last_request.text, LINE_CHARS)}", 4.5)
        return _dedupe(self.items)


def _outcome(outcomes: Sequence[str]) -> str:
    """``ok``, ``failed``, ``failed, then ok`` ... (no result yet: ``no result``)."""
    if not outcomes:
        return "no result"
    if len(set(outcomes)) == 1:
        return outcomes[-1]
    return f"{'failed' if 'failed' in outcomes[:-1] else 'ok'}, then {outcomes[-1]}"


def _dedupe(items: Iterable[_Item]) -> list[_Item]:
    seen: dict[tuple[str, str], _Item] = {}
    for item in items:
        key = (item.section, " ".join(item.text.lower().split()).rstrip("…"))
        found = seen.get(key)
        if found is None:
            seen[key] = item
        else:
            found.priority = max(found.priority, item.priority)
    return list(seen.values())


def _focus_words(instructions: str | None) -> set[str]:
    """Stems of the instructions' content words: "the API changes" -> {"api", "chang"}."""
    if not instructions:
        return set()
    stems: set[str] = set()
    for word in re.findall(r"[a-z][\w.-]{2,}", instructions.lower()):
        if word in _STOPWORDS:
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
        for message in messages:
            if is_summary_message(message) or message.text.startswith(HEADER_PREFIX):
                extractor.carried_summary(message.text)
                counted = _COVERED.search(message.text)
                covered += int(counted.group(1).replace(",", "")) if counted else 0
                continue
            covered += 1
            for block in message.blocks:
                if isinstance(block, TextBlock):
                    if is_user_input(message):
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
        overhead = count(header) + sum(count(f"\n## {s}\n") for s in SECTIONS)

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
