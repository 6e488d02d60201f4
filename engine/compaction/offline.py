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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.compaction.config import DEFAULT_SUMMARY_MAX_TOKENS
from engine.compaction.constraints import STOPWORDS, holds_constraint, is_constraint, words
from engine.compaction.extract import (
    CHANGES,
    LINE_CHARS,
    Prefiltered,
    ToolCall,
    describe_call,
    error_line,
    find_paths,
    is_failure_line,
    is_failure_output,
    result_payload,
    salient_lines,
)
from engine.compaction.result import is_summary_message
from engine.compaction.summarizers import SUMMARY_SECTIONS, check_summarize_args, describe_media
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
#: A summary reads every message of the newest this-many in full. Older ones are read for what
#: could still outrank the newer lines of their section when trimmed (the first request, the
#: user's constraints, carried summaries): at 100,000 messages everything else an old message
#: adds (commands, files, outputs, resolved errors) is dropped by newer lines of equal rank, and
#: reading it all made cold planning ~10x slower.
FULL_READ_MESSAGES = 3_000
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
_WRAPPER_TAGS = re.compile(
    r"<(command-name|command-message|command-args|local-command-stdout|local-command-stderr|system-reminder|"
    r"user-prompt-submit-hook|bash-input|bash-stdout|bash-stderr|environment_context|skills_instructions|"
    r"session_context|environment_details)>.*?</\1>",
    re.DOTALL,
)
_NOT_REQUESTS = ("Caveat: The messages below were generated by the user", "[Request interrupted by user")
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


def user_words(text: str) -> str:
    """The user's own words in a user message: Claude Code's command wrappers and caveats removed."""
    if text.lstrip().startswith(_NOT_REQUESTS):
        return ""
    return _WRAPPER_TAGS.sub("", text).strip() if "<" in text else text.strip()


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


class _Pending:
    """Unresolved errors, oldest first, found by key, term or name without a scan of them all
    (a long session leaves thousands unresolved: a scan per sentence would be quadratic)."""

    def __init__(self) -> None:
        self.errors: dict[int, _Error] = {}
        self.index: dict[tuple[str, str], dict[int, _Error]] = {}

    def __bool__(self) -> bool:
        return bool(self.errors)

    @staticmethod
    def _keys(error: _Error) -> list[tuple[str, str]]:
        return [("key", error.key), *(("term", t) for t in error.terms), *(("name", n) for n in error.names)]

    def add(self, error: _Error) -> None:
        self.errors[id(error)] = error
        for key in self._keys(error):
            self.index.setdefault(key, {})[id(error)] = error

    def remove(self, error: _Error) -> None:
        del self.errors[id(error)]
        for key in self._keys(error):
            self.index[key].pop(id(error), None)

    def find(self, kind: str, values: Iterable[str]) -> list[_Error]:
        found: dict[int, _Error] = {}
        for value in values:
            found.update(self.index.get((kind, value), {}))
        return sorted(found.values(), key=lambda e: e.item.order)

    def latest(self) -> list[_Error]:
        return [next(reversed(self.errors.values()))] if self.errors else []


class _Extractor:
    """One pass over the messages, collecting items by section."""

    def __init__(self) -> None:
        self.items: list[_Item] = []
        self.order = 0
        self.calls: dict[str, tuple[ToolCall, _Command | None, dict[str, Any]]] = {}
        self.errors: list[_Error] = []
        # Unresolved errors, oldest first: a fix sentence resolves the ones it names, else the latest.
        self.pending = _Pending()
        self.commands: dict[str, _Command] = {}
        self.files: dict[str, _File] = {}
        self.plan: tuple[tuple[str, str], ...] | None = None
        self.outputs: list[tuple[int, str, str]] = []  # (order, tool, text) of successful outputs
        self.last_request: _Item | None = None
        self.last_assistant = ""
        self.answered = True
        self.question = False

    def _next(self) -> int:
        self.order += 1
        return self.order

    def add(self, section: str, text: str, priority: float | None = None) -> _Item:
        item = _Item(section, text, SECTION_PRIORITY[section] if priority is None else priority, self._next())
        self.items.append(item)
        return item

    def file(self, path: str, action: str, tool: str = "") -> None:
        path = path.strip().strip("`'\"")
        entry = self.files.get(path)
        if entry is None:
            entry = self.files[path] = _File(path, self._next())
        entry.actions.setdefault(action, []).append(tool)
        if action in CHANGES:
            entry.order = self._next()  # a file changed late matters as of its last change

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

    def old_user_text(self, text: str) -> None:
        """A user message older than the fully read ones: the first request and constraints."""
        text = user_words(text)
        if not text:
            return
        if self.last_request is None:
            self.user_text(text)
            return
        pasted = len(text) > PASTED_CHARS
        text = text[:OLD_USER_CHARS]
        if not holds_constraint(text):  # one search of the whole text; most hold none
            return
        for sentence in _sentences(text):
            if is_constraint(sentence):
                line = _clip(sentence, LINE_CHARS)
                self.add(CONSTRAINTS, line, SECTION_PRIORITY[CONSTRAINTS] - (2.5 if pasted else 0))

    def user_text(self, text: str) -> None:
        text = user_words(text)
        if not text:
            return
        pasted = len(text) > PASTED_CHARS
        request = _clip(text, PASTED_REQUEST_CHARS if pasted else REQUEST_CHARS)
        first = self.last_request is None
        priority = (
            SECTION_PRIORITY[REQUESTS] + (0.5 if first else 0) - (0.5 if len(text) > PASTED_CHARS else 0)
        )
        self.last_request = self.add(REQUESTS, request, priority)
        self.answered = False
        self.question = text.rstrip().endswith("?")
        decision, strong = _searchers(text, _DECISION_WORDS, _STRONG_TASK_WORDS)
        for sentence in _sentences(text):
            line = _clip(sentence, LINE_CHARS)
            if is_constraint(sentence):
                # A long pasted task holds many "must"s of its own; the user's short rules rank higher.
                self.add(CONSTRAINTS, line, SECTION_PRIORITY[CONSTRAINTS] - (2.5 if pasted else 0))
            elif strong(sentence):
                self.add(TASKS, line)
            elif decision(sentence):
                self.add(DECISIONS, line)
        for line in text.splitlines():
            if is_failure_line(line) or line.lstrip().startswith("Traceback"):
                self._error(_Error(self.add(ERRORS, f"user reported: {_clip(line, LINE_CHARS)}"), key=""))
        for path in find_paths(text):
            self.file(path, "mentioned by user")

    def assistant_text(self, text: str) -> None:
        if not text.strip():
            return
        answer = self.question and not self.answered
        if answer:
            self.add(DECISIONS, f"answered: {_clip(text, LINE_CHARS)}")
        self.answered = True
        self.question = False
        self.last_assistant = text
        strong, decision, fix = _searchers(text, _STRONG_TASK_WORDS, _DECISION_WORDS, _FIX_WORDS)
        for sentence in _sentences(text):
            line = _clip(sentence, LINE_CHARS)
            if strong(sentence):
                self.add(TASKS, line)
                continue
            if self.pending and not _TENTATIVE.search(sentence):
                if fix(sentence):
                    self._resolve(line, strong=bool(_STRONG_FIX.search(sentence)))
                else:
                    self._explain(sentence, line)
            if decision(sentence) and not answer:
                self.add(DECISIONS, line)
            elif _DONE.match(sentence) and not answer:
                self.add(DECISIONS, line, SECTION_PRIORITY[DECISIONS] - 0.5)  # a change the agent made
        for path in find_paths(text):
            self.file(path, "mentioned")

    def _error(self, error: _Error) -> None:
        self.errors.append(error)
        self.pending.add(error)

    def _resolve(self, resolution: str, *, strong: bool = True) -> None:
        """A fix sentence resolves the pending errors it names (a file, a test, an error type);
        naming none, it resolves only the latest one."""
        terms = _error_terms(resolution)
        named = self.pending.find("term", terms)
        for error in named or (self.pending.latest() if strong else []):
            error.resolution = resolution
            self.pending.remove(error)

    def _explain(self, sentence: str, line: str) -> None:
        """A sentence naming an open error's identifiers (``E1234``, ``ix_tenant_7``) is what the
        agent made of it: it becomes that error's resolution."""
        names = _distinctive(sentence)
        if not names:
            return
        for error in self.pending.find("name", names):
            error.resolution = line
            self.pending.remove(error)

    def tool_use(self, block: ToolUseBlock) -> None:
        call = describe_call(block.name, block.input)
        command: _Command | None = None
        if call.command is not None:
            command = self.commands.get(call.command)
            if command is None:
                command = self.commands[call.command] = _Command(call.command, self._next())
            else:
                command.runs += 1
        for path, action in call.files:
            self.file(path, action, call.name)
        if call.tasks is not None:
            self.plan = call.tasks
        self.calls[block.id] = (call, command, block.input)

    def tool_result(self, block: ToolResultBlock) -> None:
        unknown = ToolCall(block.tool_use_id if block.tool_use_id == "environment" else "tool")
        call, command, arguments = self.calls.get(block.tool_use_id, (unknown, None, {}))
        text = result_payload(block.text)
        failed = block.is_error or is_failure_output(text, reads_file=call.reads_file)
        key = command.text if command else f"{call.name}:{sorted(arguments.items())!r}"[:200]
        if command is not None:
            command.outcomes.append("failed" if failed else "ok")
        if failed:
            line = error_line(text) or "failed with no output"
            subject = f"`{command.text}`" if command else call.name
            targets = " ".join(path for path, _ in call.files)
            error = _Error(self.add(ERRORS, f"{subject}: {line}"), key=key)
            error.terms = _error_terms(f"{subject} {targets} {line}")
            error.names = _distinctive(line)
            self._error(error)
        else:
            for error in self.pending.find("key", [key]):
                error.resolution = "re-ran successfully"
                self.pending.remove(error)
            if call.tasks is None and text.strip():
                self.outputs.append((self._next(), call.name, text))
        if not isinstance(block.content, str):
            for media in block.content:
                if isinstance(media, ImageBlock | DocumentBlock):
                    self.add(FILES, f"{describe_media(media)} returned by {call.name}")

    # -- results ----------------------------------------------------------------------------
    def finish(self) -> list[_Item]:
        # Facts from tool output, newest first, until more were found than any summary keeps
        # (older ones are trimmed first): a long history's old outputs are not read for nothing.
        found = 0
        for order, name, text in reversed(self.outputs):
            if found >= MAX_FACT_LINES:
                break
            for fact in salient_lines(text):
                self.items.append(
                    _Item(FACTS, f"{name}: {_clip(fact, LINE_CHARS)}", SECTION_PRIORITY[FACTS], order)
                )
                found += 1
        for error in self.errors:
            if error.resolution:
                error.item.text += f" → {_clip(error.resolution, LINE_CHARS)}"
            elif error.key:
                error.item.text += " → unresolved"
        for entry in self.files.values():
            line = _file_line(entry)
            self.items.append(_Item(FILES, line, _file_priority(entry.actions), entry.order))
        for command in self.commands.values():
            runs = f" ×{command.runs}" if command.runs > 1 else ""
            outcome = _outcome(command.outcomes)
            priority = SECTION_PRIORITY[COMMANDS] + (0.5 if "failed" in command.outcomes else 0)
            self.items.append(_Item(COMMANDS, f"`{command.text}`{runs} → {outcome}", priority, command.order))
        for text, status in self.plan or ():
            if status not in ("completed", "done", "cancelled"):
                self.add(TASKS, f"[{status}] {_clip(text, LINE_CHARS)}", SECTION_PRIORITY[TASKS] + 0.25)
        last = self.last_assistant
        for sentence in _sentences(last) if last else ():
            if (
                _WEAK_TASK.search(sentence)
                and len(sentence) >= WEAK_TASK_MIN_CHARS
                and not sentence.endswith("?")
                and not _STRONG_TASK.search(sentence)
            ):
                self.add(TASKS, f"planned: {_clip(sentence, LINE_CHARS)}", SECTION_PRIORITY[TASKS] - 0.5)
        if self.last_request is not None and not self.answered:
            self.add(TASKS, f"answer the last request: {_clip(self.last_request.text, LINE_CHARS)}", 5.0)
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
