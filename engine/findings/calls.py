"""Tool calls as the detectors see them: each tool_use paired with its result, and what it
read or ran (a file path, a command) so that repeats and stale outputs can be told apart."""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.compaction.tool_calls import describe_call
from engine.findings.view import SessionView
from engine.messages import (
    ToolResultBlock,
    ToolUseBlock,
)
from engine.session.tools import BUILTIN_TOOL_NAMES
from engine.store import StoredMessage

#: ctxdesk's own tools (the session manager's built-ins): sent only when needed, never "unused" offers.
ENGINE_TOOL_NAMES = BUILTIN_TOOL_NAMES
#: Tools whose calls change things; a second call is not a re-read and an earlier output is not stale.
MUTATING_TOOLS = frozenset(
    {"Write", "Edit", "MultiEdit", "NotebookEdit", "TodoWrite", "KillBash", "KillShell", "Task", "Agent",
     "finish", "think", "write_file", "edit_file", "create_file"}
)  # fmt: skip
_READ_TOOLS = {"read": "file_path", "read_file": "path", "view_file": "path", "open_file": "path"}
_EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "text_editor"})
#: Harness text an agent folds into a tool result (Claude Code's reminders): not the tool's output.
_HARNESS_TEXT = re.compile(r"\s*<system-reminder>.*?</system-reminder>", re.S)
_SHELL_TOOLS = frozenset({"bash", "execute_bash", "shell", "run", "run_command", "terminal"})


# -- tool calls -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCall:
    """A tool_use and the result that answered it."""

    use_seq: int
    result_seq: int
    turn_index: int
    name: str
    input: dict[str, Any]
    key: str
    label: str
    text: str
    digest: str
    tokens: int
    size_bytes: int
    is_error: bool

    @property
    def is_mutating(self) -> bool:
        if self.name in MUTATING_TOOLS:
            return True
        return self.name in _EDITOR_TOOLS and self.input.get("command") not in (None, "view")


def tool_calls(view: SessionView) -> list[ToolCall]:
    """Every answered tool call of the transcript, in order of its result."""
    uses: dict[str, tuple[StoredMessage, ToolUseBlock]] = {}
    calls: list[ToolCall] = []
    for row in view.messages:
        for block in row.message.blocks:
            if isinstance(block, ToolUseBlock):
                uses[block.id] = (row, block)
            elif isinstance(block, ToolResultBlock) and block.tool_use_id in uses:
                use_row, use = uses[block.tool_use_id]
                key, label = call_target(use.name, use.input)
                text = _HARNESS_TEXT.sub("", block.text)  # the tool's own output
                calls.append(
                    ToolCall(
                        use_seq=use_row.seq, result_seq=row.seq, turn_index=row.turn_index, name=use.name,
                        input=use.input, key=key, label=label, text=text,
                        digest=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                        tokens=view.tokenizer.count_block(block),
                        size_bytes=len(text.encode("utf-8", "surrogatepass")), is_error=block.is_error,
                    )
                )  # fmt: skip
    return calls


def call_target(name: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """(key, label) of what a tool call reads: ``file:PATH`` for a whole-file read (Read, an
    editor's view, ``cat PATH``), else the tool name and its canonical arguments."""
    path = _whole_file_path(name, arguments)
    if path:
        return f"file:{path}", path
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    shown = arguments.get("command") or arguments.get("pattern") or arguments.get("path") or canonical
    shown = " ".join(str(shown).split())
    return f"call:{name}:{canonical}", f"{name} {shown[:80]}{'…' if len(shown) > 80 else ''}"


def _whole_file_path(name: str, arguments: dict[str, Any]) -> str | None:
    lowered = name.lower()
    if lowered in _READ_TOOLS:
        path = arguments.get(_READ_TOOLS[lowered]) or arguments.get("file_path") or arguments.get("path")
        partial = any(arguments.get(k) for k in ("offset", "limit", "view_range", "start_line", "end_line"))
        return str(path) if isinstance(path, str) and path and not partial else None
    if lowered in _EDITOR_TOOLS and arguments.get("command") == "view":
        path = arguments.get("path")
        whole = arguments.get("view_range") in (None, [], [1, -1])
        return str(path) if isinstance(path, str) and path and whole else None
    if lowered in _SHELL_TOOLS and isinstance(arguments.get("command"), str):
        try:
            words = shlex.split(arguments["command"])
        except ValueError:
            return None
        if len(words) == 2 and words[0] == "cat" and not words[1].startswith("-"):
            return words[1]
    return None


# -- files the calls touch --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FileUse:
    """One tool call naming a file: where (the tool_use's seq), which file, what it did to it."""

    seq: int
    path: str
    action: str
    tool: str


def file_uses(messages: Sequence[StoredMessage]) -> list[FileUse]:
    """Every file a tool call of the transcript names (read, edited, written, a path in a command),
    in transcript order (``engine.compaction.tool_calls.describe_call`` reads every dialect)."""
    out = []
    for row in messages:
        if row.message.role != "assistant":
            continue
        for block in row.message.blocks:
            if isinstance(block, ToolUseBlock):
                for path, action in describe_call(block.name, block.input).files:
                    out.append(FileUse(row.seq, path, action, block.name))
    return out


def same_file(a: str, b: str) -> bool:
    """True when two paths name the same file: equal, or one is the other's relative tail."""
    a, b = a.rstrip("/"), b.rstrip("/")
    if a.startswith("./"):
        a = a[2:]
    if b.startswith("./"):
        b = b[2:]
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def later_use(uses: Sequence[FileUse], path: str, after_seq: int) -> FileUse | None:
    """The first use of ``path`` by a tool call after transcript seq ``after_seq``, if any."""
    return next((u for u in uses if u.seq > after_seq and same_file(u.path, path)), None)
