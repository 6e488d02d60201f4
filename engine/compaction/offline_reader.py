"""How the offline summarizer reads a history: each user, assistant and tool message turned
into ranked lines of the handover's sections, errors paired with the fixes that resolved them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from engine.compaction.constraints import holds_constraint, is_constraint
from engine.compaction.extract import (
    CHANGES,
    LINE_CHARS,
    ToolCall,
    describe_call,
    error_line,
    find_paths,
    is_failure_line,
    is_failure_output,
    result_payload,
    salient_lines,
)
from engine.compaction.offline_lines import (
    _DECISION_WORDS,
    _DONE,
    _FIX_WORDS,
    _STRONG_FIX,
    _STRONG_TASK,
    _STRONG_TASK_WORDS,
    _TENTATIVE,
    _WEAK_TASK,
    CARRIED_PENALTY,
    COMMANDS,
    CONSTRAINTS,
    DECISIONS,
    ERRORS,
    FACTS,
    FILES,
    MAX_FACT_LINES,
    OLD_USER_CHARS,
    PASTED_CHARS,
    PASTED_REQUEST_CHARS,
    REQUEST_CHARS,
    REQUESTS,
    SECTION_PRIORITY,
    SECTIONS,
    TASKS,
    WEAK_TASK_MIN_CHARS,
    _clip,
    _Command,
    _distinctive,
    _Error,
    _error_terms,
    _File,
    _file_line,
    _file_priority,
    _Item,
    _searchers,
    _sentences,
    user_words,
)
from engine.compaction.summarizers import describe_media
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    ToolResultBlock,
    ToolUseBlock,
)


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
