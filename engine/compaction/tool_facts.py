"""Facts stated by tool output: the few lines of an output that give a setting and its value,
a host and port, a version (``salient_lines``); code, listings and diffs score nothing.
"""

from __future__ import annotations

import functools
import re

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
