"""Tool calls in every agent's dialect mapped to one shape (``describe_call``): which files a
call read or changed, which command it ran, which plan it set; and file paths in free text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.compaction.failures import COMMAND_CHARS, _clip

# -- file paths in free text --------------------------------------------------------------------

_EXTENSIONS = (
    "py|pyi|js|mjs|ts|tsx|jsx|go|rs|java|kt|c|h|cc|cpp|hpp|rb|php|cs|swift|md|rst|txt|json|jsonl|toml|"
    "yaml|yml|ini|cfg|conf|sql|sh|bash|zsh|html|css|scss|lock|csv|ipynb|xml|env|log|db|sqlite|csproj"
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


def looks_like_path(value: str) -> bool:
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
        if looks_like_path(path) and path not in found:
            found.append(path)
    return found


# -- tool calls in every dialect ------------------------------------------------------------------

READ, EDITED, WRITTEN, DELETED, SEARCHED = "read", "edited", "written", "deleted", "searched"
CHANGES = (EDITED, WRITTEN, DELETED)
_FILE_KEYS = (
    "path",
    "file_path",
    "filepath",
    "filename",
    "file",
    "notebook_path",
    "target_file",
    "absolutePath",
    "absolute_path",
    "relative_path",
    "relativePath",
    "source",
    "destination",
    "dest",
    "src",
)
_FILE_LIST_KEYS = ("paths", "files", "file_paths")
_COMMAND_KEYS = ("command", "cmd", "script", "shell_command")
#: str_replace_editor (OpenHands, SWE-agent, Anthropic's text editor): sub-command -> what it did.
_EDITOR_COMMANDS = {
    "view": READ,
    "create": WRITTEN,
    "str_replace": EDITED,
    "insert": EDITED,
    "undo_edit": EDITED,
    "write": WRITTEN,
    "edit": EDITED,
    "delete": DELETED,
}
_PATCH_FILE = re.compile(
    r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$|^\*\*\* Move to: (.+?)\s*$", re.MULTILINE
)
_PATCH_ACTIONS = {"Add": WRITTEN, "Update": EDITED, "Delete": DELETED}
_SHELL_WRAPPERS = ("bash", "sh", "zsh", "/bin/bash", "/bin/sh", "/usr/bin/bash", "powershell", "pwsh")
_READ_COMMANDS = ("cat", "head", "tail", "less", "more", "nl", "bat", "type", "Get-Content")
_TASK_LIST_KEYS = ("todos", "plan", "tasks", "todo_list")


@dataclass(frozen=True)
class ToolCall:
    """What one tool call did, whatever the agent's dialect.

    ``files`` pairs each path with what the call did to it (read, edited, written, deleted,
    searched, or ``used``); ``command`` is the shell command line it ran; ``tasks`` the plan
    it set (text, status), when it is a to-do/plan tool; ``reads_file`` is True when its
    output is a file's content (a traceback in there is the file's, not the call's).
    """

    name: str
    command: str | None = None
    files: tuple[tuple[str, str], ...] = ()
    tasks: tuple[tuple[str, str], ...] | None = None
    reads_file: bool = False


def _file_action(tool: str) -> str:
    name = tool.lower()
    for words, action in (
        (("edit", "replace", "patch", "update", "modify", "insert"), EDITED),
        (("write", "create", "save", "new"), WRITTEN),
        (("delete", "remove", "rm"), DELETED),
        (("read", "view", "cat", "open", "show"), READ),
        (("grep", "glob", "search", "find", "list", "ls"), SEARCHED),
    ):
        if any(w in name for w in words):
            return action
    return "used"


def _command_text(value: Any) -> str | None:
    """A command line from a string or an argv list (``["bash", "-lc", "pytest -x"]`` -> "pytest -x")."""
    if isinstance(value, list):
        argv = [str(v) for v in value]
        if len(argv) >= 3 and argv[0].rsplit("/", 1)[-1] in _SHELL_WRAPPERS and argv[1].startswith("-"):
            return argv[2]
        return " ".join(argv)
    return value if isinstance(value, str) and value.strip() else None


def patch_files(text: str) -> list[tuple[str, str]]:
    """(path, action) of each file an apply_patch envelope (``*** Begin Patch``) touches."""
    out: list[tuple[str, str]] = []
    for match in _PATCH_FILE.finditer(text):
        if match.group(3):
            out.append((match.group(3), WRITTEN))
        else:
            out.append((match.group(2), _PATCH_ACTIONS[match.group(1)]))
    return out


def _strings(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, Mapping):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _tasks(value: Any) -> tuple[tuple[str, str], ...] | None:
    if not isinstance(value, list) or not value or not all(isinstance(v, Mapping) for v in value):
        return None
    out = []
    for item in value:
        text = item.get("content") or item.get("step") or item.get("description") or item.get("title")
        if isinstance(text, str) and text.strip():
            out.append((text.strip(), str(item.get("status", "pending"))))
    return tuple(out) or None


def describe_call(name: str, arguments: Mapping[str, Any]) -> ToolCall:
    """What a tool call did, read from its name and input (see the module docstring for dialects)."""
    sub = arguments.get("command")
    if isinstance(sub, str) and sub in _EDITOR_COMMANDS and isinstance(arguments.get("path"), str):
        action = _EDITOR_COMMANDS[sub]
        return ToolCall(name, files=((arguments["path"], action),), reads_file=action == READ)
    for key in _TASK_LIST_KEYS:
        tasks = _tasks(arguments.get(key))
        if tasks is not None:
            return ToolCall(name, tasks=tasks)
    patched = [f for s in _strings(arguments) if "*** Begin Patch" in s for f in patch_files(s)]
    if patched or name.lower() == "apply_patch":
        return ToolCall("apply_patch", files=tuple(dict.fromkeys(patched)))
    command = next((c for c in (_command_text(arguments.get(k)) for k in _COMMAND_KEYS) if c), None)
    files: list[tuple[str, str]] = []
    reads_file = False
    if command is not None:
        files += [(path, "used") for path in find_paths(command)]
        first = command.split(maxsplit=1)[0] if command.split() else ""
        reads_file = first in _READ_COMMANDS and "|" not in command and "&&" not in command
        command = _clip(command, COMMAND_CHARS)
    action = _file_action(name) if command is None else "used"
    for key in _FILE_KEYS:
        value = arguments.get(key)
        if isinstance(value, str) and looks_like_path(value):
            files.append((value, action))
    for key in _FILE_LIST_KEYS:
        values = arguments.get(key)
        if isinstance(values, list):
            files += [(v, action) for v in values if isinstance(v, str) and looks_like_path(v)]
    reads_file = reads_file or (command is None and action == READ)
    return ToolCall(name, command=command, files=tuple(dict.fromkeys(files)), reads_file=reads_file)


def result_payload(text: str) -> str:
    """The output inside a Codex-style JSON envelope (``{"output": ..., "metadata": ...}``), else ``text``."""
    if text.startswith('{"output"'):
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if isinstance(value, dict) and isinstance(value.get("output"), str):
            code = (value.get("metadata") or {}).get("exit_code")
            suffix = f"\nProcess exited with code {code}" if isinstance(code, int) else ""
            return value["output"] + suffix
    return text
