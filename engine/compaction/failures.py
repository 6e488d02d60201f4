"""Whether a tool's output reports a failure, and the line that tells what failed (the
compiler error under an ``Exit code 2`` wrapper, the failing test's name); and ``Prefiltered``,
a case-insensitive regex run only on texts that hold one of its words.
"""

from __future__ import annotations

import re
from collections.abc import Callable


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
