"""Reading agents' tool calls and outputs: which files a call changed, which command it ran,
whether its output reports a failure, and the line that tells what failed.

Agents speak different dialects for the same acts: Claude Code (Edit, Write, Bash, TodoWrite),
Codex (shell/exec_command with argv lists, apply_patch, update_plan, "Process exited with code
N"), Cline (write_to_file with absolutePath, replace_in_file, execute_command), OpenHands and
SWE-agent (str_replace_editor with a ``command`` sub-command, execute_bash), Gemini CLI
(write_file, replace, run_shell_command, "Exit Code: N"). ``describe_call`` maps each to one shape.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any


class Prefiltered:
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


LINE_CHARS = 240
COMMAND_CHARS = 160
#: Failures are reported at the end of an output; only this many last lines are looked at.
FAILURE_TAIL_LINES = 30
#: An error line shorter than this ("ERROR:") is read with the line under it.
SHORT_ERROR_CHARS = 12

# -- failures and the line that tells what failed ----------------------------------------------

#: A line that only says a process ended (OpenHands, Codex, Gemini, Claude Code wrappers).
_EXIT_LINE = re.compile(
    r"^\s*\[?(?:The command completed with exit code|Process exited with code|Exit Code:|Exit code:?|"
    r"exit (?:code|status):?)\s*(-?\d+)\.?\]?\s*$",
    re.IGNORECASE,
)
_EXIT_ANYWHERE = re.compile(
    r"\b(?:exit(?:ed with)? (?:code|status):?|Exit Code:|\"exit_code\":)\s*(-?\d+)", re.IGNORECASE
)
#: A test that failed, by name: pytest, go test, .NET, jest/vitest, cargo/rspec.
_TEST_FAILED = re.compile(
    r"^\s*(?:FAILED\s+\S+::\S+|--- FAIL: \S+|Failed\s+[\w.`<>\[\]]+(?:\(.*\))?\s*\[|[●✕×]\s+\S.*|"
    r"test \S+ \.\.\. FAILED|rspec \./\S+)"
)
#: A compiler's or runtime's own error line (tsc TS2345, rustc E0308, C# CS1002, gcc, Python).
_COMPILER_ERROR = re.compile(r"\berror(?: ?TS\d+| CS\d+|\[E\d+\])?:\s*\S")
_EXCEPTION_LINE = re.compile(r"^[\w.]*(?:Error|Exception|Failure|Interrupt)\b:?\s*\S?")
_INDENTED_EXCEPTION = re.compile(r"^\s*(?:E\s+)?[\w.]*(?:Error|Exception|Failure)\b:\s*\S")
_FAILURE_HEAD = re.compile(
    r"^(?:E\s+)?[\w.]*(?:Error|Exception)\b:|^\s*(?:error(?:\[\w+\])?:|fatal:|panic:|FAILED\b|FAIL\b|Failed!|"
    r"Build FAILED|Test Run Failed|npm ERR!|Segmentation fault)",
    re.IGNORECASE,
)
_FAILURE_ANYWHERE = Prefiltered(
    re.compile(
        r"\bcommand not found\b|No such file or directory|Permission denied|\berror TS\d+:|"
        r"\bexit(?:ed with)? (?:code|status):? [1-9]|\bExit Code: [1-9]",
        re.IGNORECASE,
    ),
    *("command not found", "no such file or directory", "permission denied", "error ts", "exit"),
)
_ERROR_TEXT = re.compile(
    r"(\b\w*(?:Error|Exception)\b[:(]|\berror\b\s*[:\[]|\bERROR\b|\bFAILED\b|\bfatal:|\bpanic:|"
    r"No such file or directory|command not found|Permission denied|Segmentation fault)",
)


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def exit_code(text: str) -> int | None:
    """The exit code an output reports (the last one stated), if any."""
    tail = text[-4_000:]
    if "exit" not in tail.lower():
        return None
    found = _EXIT_ANYWHERE.findall(tail)
    return int(found[-1]) if found else None


def is_failure_line(line: str) -> bool:
    """True when one line (no newline in it) reports a failure."""
    return bool(_FAILURE_HEAD.match(line) or _FAILURE_ANYWHERE.search(line))


def is_failure_output(text: str, *, reads_file: bool = False) -> bool:
    """True when tool output reports a failure: a non-zero exit code, a traceback, or a failure
    line near its end.

    An output that merely contains the words (code with ``raise ValueError(``, a log read back
    with ERROR lines in the middle, a file whose doctest shows a traceback) is not a failure of
    the call; neither is an output that states exit code 0. With ``reads_file`` (the call read a
    file) only a short error answer counts.
    """
    code = exit_code(text)
    if code is not None:
        return code != 0
    lines = text[-20_000:].splitlines()
    if reads_file:
        lines = [line for line in lines if line.strip()]
        return len(lines) <= 3 and any(is_failure_line(line) for line in lines)
    head = text[:50_000]
    if head.startswith("Traceback (most recent call last)") or "\nTraceback (most recent call last)" in head:
        return True
    tail = lines[-FAILURE_TAIL_LINES:]
    joined = "\n".join(tail)
    anywhere = _FAILURE_ANYWHERE.within(joined.lower() if joined.isascii() else None)
    return any(_FAILURE_HEAD.match(line) or anywhere(line) for line in tail)


def _line_rank(line: str) -> int:
    """How well a line tells what failed: a named failing test (5), a compiler's or runtime's
    error (4), any failure line (3), a word of error (2), an exit-code wrapper (1), else 0."""
    if _EXIT_LINE.match(line):
        return 1
    if _TEST_FAILED.match(line) and not line.lstrip().startswith(("Failed!", "FAILED (")):
        return 5
    if _COMPILER_ERROR.search(line) or _EXCEPTION_LINE.match(line) or _INDENTED_EXCEPTION.match(line):
        return 4
    if is_failure_line(line):
        return 3
    if _ERROR_TEXT.search(line) and not line.lstrip().startswith("Traceback"):
        return 2
    return 0


def error_line(text: str) -> str | None:
    """The most telling line of an error output.

    A named failing test beats the assertion under it (and carries it, with how many other
    tests failed); a compiler's own error beats the ``Exit code 2`` wrapper above it; of
    several exception lines the last (Python's final line) wins, of compiler errors the first.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return None
    ranks = [_line_rank(line) for line in lines]
    best = max(ranks)
    if best == 0:
        return _clip(lines[0], LINE_CHARS)
    if best == 5:
        tests = list(dict.fromkeys(line.strip() for line, r in zip(lines, ranks, strict=True) if r == 5))
        line = tests[0]
        detail = _detail_after(lines, ranks)
        if detail and detail.strip() not in line:
            line += f": {detail.strip()}"
        if len(tests) > 1:
            line += f" (+{len(tests) - 1} more failed)"
        return _clip(line, LINE_CHARS)
    candidates = [i for i, r in enumerate(ranks) if r == best]
    pick = candidates[0]
    if best == 4:
        python = [
            i for i in candidates if _EXCEPTION_LINE.match(lines[i]) or _INDENTED_EXCEPTION.match(lines[i])
        ]
        if python and not any(_COMPILER_ERROR.search(lines[i]) for i in candidates):
            pick = python[-1]
    line = lines[pick].strip()
    if len(line) < SHORT_ERROR_CHARS and pick + 1 < len(lines):  # "ERROR:" alone: its message is below
        line += f" {lines[pick + 1].strip()}"
    return _clip(line, LINE_CHARS)


def _detail_after(lines: list[str], ranks: list[int]) -> str | None:
    """The error a named test failure came with: the last exception or error line, or the
    message under a .NET ``Error Message:`` heading."""
    for i, line in enumerate(lines[:-1]):
        if line.strip() == "Error Message:":
            return lines[i + 1]
    found = [line for line, r in zip(lines, ranks, strict=True) if r == 4]
    if not found:
        return None
    return found[-1].strip().removeprefix("E").strip()


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


# -- facts stated by tool output --------------------------------------------------------------------

#: Lines of one tool output kept as facts; only outputs of a call that did not fail.
FACT_LINES_PER_OUTPUT = 2
FACT_LINE_CHARS = 200
#: Lines of a long output read for facts: half from its start, half from its end.
FACT_SCAN_LINES = 60
_NOT_LETTERS = re.compile(r"[^A-Za-z]+")
_DIGIT = re.compile(r"\d")
#: A line scoring below this states no fact worth keeping.
FACT_MIN_SCORE = 3.0
#: ``key = value`` / ``key: value`` (a grep ``file:line:`` prefix allowed): a setting and its value.
_KEY_VALUE = re.compile(
    r"^(?:[\w./-]+:(?:\d+:)?)?\s*[\"']?(?P<key>[A-Za-z_][\w.\-]{1,40})[\"']?\s*(?:=|:|->|=>)\s*(?P<value>[^\s{(\[].*)$"
)
_IDENTIFIER_KEY = re.compile(r"[a-z][A-Z]|_|\.|^[A-Z0-9_]{3,}$")
_HOST_PORT = re.compile(r"(?<=[\w.\-]):\d{2,5}\b|\bport \d{2,5}\b", re.IGNORECASE)
#: Every fact line holds a digit, "=" or ":" (a line without one scores below FACT_MIN_SCORE).
_FACT_SIGNAL = re.compile(r"[\d=:]")
_VERSION = re.compile(r"\b\d+\.\d+(?:\.\d+)+\b|\bv\d+\.\d+\b")
_FACT_WORDS = re.compile(
    r"\b(version|port|host|url|endpoint|user(?:name)?|owner|total|count|size|limit|timeout|default|"
    r"set to|listening|running on|located|configured|enabled|disabled|expected|installed|database|"
    r"schema|region|branch|release|max|min)\b",
    re.IGNORECASE,
)
#: A row of a columnar listing (``pip list``, ``kubectl get``, ``docker ps``): a name, then columns
#: set apart by two spaces or a tab.
_TABLE_ROW = re.compile(r"^[\w.@/+:-]+(?: {2,}|\t)\S")
_TABLE_ROW_3 = re.compile(r"^[\w.@/+:-]+(?: {2,}|\t)\S+(?: {2,}|\t)\S")
SHORT_VALUE_CHARS = 40
#: A version stated in a line this short is the line's fact.
SHORT_VERSION_LINE_CHARS = 100
_FILE_LISTING = re.compile(r"^(?:[dlcbps-][rwxsStT-]{9}[.+@]?\s|total \d+$)")
_CODE_START = (
    "def ", "class ", "import ", "from ", "#", "//", "/*", "*", "}", "{", ")", "]", "return ", "if ", "for ",
    "while ", "else", "elif ", "try:", "except", "@", "<", "---", "+++", "@@", "self.", "assert ", "raise ",
    'File "', "at ", "Traceback", "diff ", "index ", "+", "-",
)  # fmt: skip
_LINE_NUMBER = re.compile(r"^\s*\d+(?:\t|→|:\s| +\|)")


def _fact_score(line: str) -> float:
    score = 0.0
    match = _KEY_VALUE.match(line)
    if match and not match.group("value").rstrip().endswith((";", "{", "(", ",")):
        value = match.group("value").strip()
        score += 2.5 if _IDENTIFIER_KEY.search(match.group("key")) else 1.5
        score += 0.5 if len(value) <= SHORT_VALUE_CHARS else 0  # a listing's "Replicas: 3"
    elif _TABLE_ROW.match(line):
        score += 2.0 + (0.5 if _TABLE_ROW_3.match(line) else 0)  # a row of columns: name, version, state
    if _HOST_PORT.search(line):
        score += 2
    if _VERSION.search(line):
        score += 2.5 if len(line) <= SHORT_VERSION_LINE_CHARS else 1  # "3.12.4", "orjson 3.10.2"
    if _DIGIT.search(line):
        score += 0.5
    if _FACT_WORDS.search(line):
        score += 1
    if line.endswith((";", "{", "(", ",", "\\")) or line.count("(") > 1:
        score -= 1.5
    return score


def salient_lines(text: str, limit: int = FACT_LINES_PER_OUTPUT) -> list[str]:
    """Up to ``limit`` lines of a tool output that state a fact (a setting and its value, a host
    and port, a version), in output order: settings, hosts, versions, numbers and fact words
    score; code, file listings and diffs do not. Only the first and last lines of a long output
    are read; the same output asked twice (clearing, then summarizing) is read once."""
    return list(_salient_lines(text, limit))


@functools.lru_cache(maxsize=8_192)
def _salient_lines(text: str, limit: int) -> tuple[str, ...]:
    lines = text.splitlines()
    if len(lines) > FACT_SCAN_LINES:
        lines = lines[: FACT_SCAN_LINES // 2] + lines[-FACT_SCAN_LINES // 2 :]
    scored: list[tuple[float, int, str]] = []
    for position, raw in enumerate(lines):
        line = _LINE_NUMBER.sub("", raw).strip() if raw[:1].isspace() or raw[:1].isdigit() else raw.strip()
        if not 8 <= len(line) <= FACT_LINE_CHARS or not _FACT_SIGNAL.search(line):
            continue
        if line.startswith(_CODE_START) or _FILE_LISTING.match(line):
            continue
        if line.count(" ") > 30:
            continue
        solid = len(line) - line.count(" ")  # a table's padding is not content
        if len(_NOT_LETTERS.sub("", line)) < solid * 0.4 and not (
            len(line) <= SHORT_VERSION_LINE_CHARS and _VERSION.search(line)
        ):
            continue
        score = _fact_score(line)
        if score >= FACT_MIN_SCORE:
            scored.append((score, -position, line))
    best = sorted(scored, reverse=True)[:limit]
    return tuple(line for _, _, line in sorted(best, key=lambda s: -s[1]))
