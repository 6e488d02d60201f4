"""Telling which format a transcript file is, from its content alone: the registered formats'
sniffs, in registry order (:mod:`engine.importers.registry`), each asked only of the kinds of
document its format declares it reads (``ImportFormat.reads``). The file is read by
:mod:`engine.importers.documents`, whose names are re-exported here.

A file that is a companion of a transcript (an agent's prompt log, a Cline task's UI log) says
what to import instead; a well-formed file that matches no format is reported with what it
holds, so the user sees why it was refused.
"""

from __future__ import annotations

from typing import Any

from engine.importers.documents import (  # noqa: F401  (reading a file: re-exported from here as before)
    AIDER_HEAD,
    COMPANION_FILES,
    Document,
    LineCache,
    read_document,
)
from engine.importers.formats import SNIFF_LINES, kind_of
from engine.importers.parsing.parsed import SourceProblem
from engine.importers.registry import REGISTRY, ImportFormat


def classify(doc: Document) -> str:
    """The format name of a parsed document; raises SourceProblem when it is none of them."""
    return detect(doc).name


def detect(doc: Document) -> ImportFormat:
    """The registered format of a parsed document; raises SourceProblem when it is none of them."""
    candidates = [v for _, v in doc.lines] if doc.lines is not None else doc.value
    companion = _prompt_history(candidates[:SNIFF_LINES]) if isinstance(candidates, list) else None
    if companion:
        raise SourceProblem(f"not a transcript: {companion}")
    kind = kind_of(doc)
    for fmt in REGISTRY:
        if kind in fmt.reads and fmt.sniff(doc):  # the declared kinds first: no other format's module entered
            return fmt
    raise SourceProblem(f"not a transcript: {_what_it_holds(doc)}")


def _what_it_holds(doc: Document) -> str:
    where = "JSON Lines" if doc.lines is not None else "JSON"
    value = [v for _, v in doc.lines] if doc.lines is not None else doc.value
    if isinstance(value, dict):
        keys = ", ".join(sorted(map(str, value))[:8]) or "none"
        return f"a {where} object with keys {keys}"
    if isinstance(value, list):
        if not value:
            return f"an empty {where} list"
        if not all(isinstance(v, dict) for v in value):
            return f"a {where} list of {_kinds(value)}"
        if is_cline_ui_messages(value):
            return COMPANION_FILES["ui_messages.json"]
        keys = ", ".join(sorted({str(k) for v in value[:SNIFF_LINES] for k in v})[:8])
        return f"a {where} list of objects with keys {keys}"
    return f"a {where} {type(value).__name__}"


def _kinds(values: list[Any]) -> str:
    return "/".join(sorted({type(v).__name__ for v in values}))


def is_cline_ui_messages(values: list[Any]) -> bool:
    return all(
        isinstance(v, dict) and "ts" in v and v.get("type") in ("say", "ask") for v in values[:SNIFF_LINES]
    )


#: Prompt logs agents keep beside their transcripts (what the user typed, not what the model saw).
_PROMPT_LOGS = (
    (
        {"display", "timestamp"},
        "Claude Code's prompt history (~/.claude/history.jsonl): import the session files under "
        "~/.claude/projects/<project>/ instead (or ctxdesk import --from claude-code)",
    ),
    (
        {"session_id", "ts", "text"},
        "Codex's prompt history (~/.codex/history.jsonl): import the rollouts under ~/.codex/sessions/ instead "
        "(or ctxdesk import --from codex)",
    ),
    (
        {"sessionId", "messageId", "type", "message"},
        "Gemini CLI's prompt log (~/.gemini/tmp/<project>/logs.json): import chats/session-*.json(l) beside it "
        "instead (or ctxdesk import --from gemini)",
    ),
)


def _prompt_history(values: list[Any]) -> str | None:
    for keys, what in _PROMPT_LOGS:
        if values and all(isinstance(v, dict) and keys <= set(v) for v in values):
            return what
    return None
