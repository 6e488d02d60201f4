"""Claude Code sessions (``~/.claude/projects/<project>/<session>.jsonl``): the format's entry.

One package, one module per job: ``session`` reads a session file (main thread, sub-agents,
compactions), ``thread`` builds its message tree, ``requests`` rebuilds each call's request,
``replay`` + ``exact`` use the requests the file recorded exactly (2.1.3xx), ``subagents`` links
sub-agents to the call that started them, ``titles`` names sessions, ``blobs`` turns saved
outputs into blobs, ``failures`` keeps the calls that got no answer, and ``bundle`` finds the files
Claude Code keeps beside a session.

One line's walk to its stored rows: ``engine.importers.lines`` reads it, ``thread`` makes it (part
of) a message, ``requests`` (``replay`` where the file recorded the request) says which call sent
that message, ``engine.importers.writer`` stores the message and ``request_events`` the call.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import SNIFF_LINES, ImportFormat, Locations, head_lines, str_in
from engine.importers.formats.claude_code.bundle import (
    accompanies_a_session,
    companion_state,
    parse_claude_code_path,
)
from engine.importers.formats.claude_code.session import parse_claude_code
from engine.importers.parsing.parsed import ParsedSession

#: Claude Code line types (message lines and bookkeeping lines the importer skips).
CLAUDE_LINE_TYPES = frozenset({"user", "assistant", "summary", "system", "progress", "file-history-snapshot"})
# subagents/ files import with their session (bundle); tool-results/ are saved outputs
_SKIP_DIRS = frozenset({"tool-results", "subagents", "node_modules", ".git", "__pycache__"})


def is_claude_code_line(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and str_in(value.get("type"), CLAUDE_LINE_TYPES)
        and any(k in value for k in ("uuid", "leafUuid", "sessionId"))
    )


def is_loglines(value: Any) -> bool:
    """The session JSON simonw/claude-code-transcripts reads: ``{"loglines": [...]}``, each entry a
    Claude Code line (``type``, ``timestamp``, ``message``) without its ids."""
    if not isinstance(value, dict) or not isinstance(value.get("loglines"), list) or not value["loglines"]:
        return False
    return all(
        isinstance(e, dict)
        and str_in(e.get("type"), CLAUDE_LINE_TYPES)
        and isinstance(e.get("message"), dict)
        for e in value["loglines"][:SNIFF_LINES]
    )


def sniff(doc: Document) -> bool:
    if doc.lines is not None:
        return any(is_claude_code_line(v) for v in head_lines(doc))
    return is_claude_code_line(doc.value) or is_loglines(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    if is_loglines(doc.value):  # in file order: the entries carry no uuids to follow
        entries = [e for e in doc.value["loglines"] if isinstance(e, dict)]
        return parse_claude_code(list(enumerate(entries, start=1)), fallback_id=key)
    if doc.lines is None:
        return parse_claude_code([(1, doc.value)], fallback_id=key)
    # with the files Claude Code keeps beside the session: subagents/, tool-results/
    return parse_claude_code_path(doc.path, list(doc.lines), fallback_id=key)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    configured = [Path(p) / "projects" for p in env.get("CLAUDE_CONFIG_DIR", "").split(",") if p.strip()]
    return configured or [home / ".claude" / "projects", home / ".config" / "claude" / "projects"]


def files_under(root: Path) -> list[Path]:
    return sorted(
        p
        for p in root.rglob("*.jsonl")
        if not _SKIP_DIRS & set(p.relative_to(root).parts) and not accompanies_a_session(p)
    )


FORMAT = ImportFormat(
    name="claude-code",
    agent="Claude Code",
    sniff=sniff,
    parse=parse,
    files="`$CLAUDE_CONFIG_DIR/projects` or `~/.claude/projects/<project>/<session>.jsonl` "
    '(+ `<session>/subagents/`, `tool-results/`); claude-code-transcripts\' `{"loglines": [...]}` JSON',
    locations=Locations(roots=roots, files_under=files_under),
    companions=companion_state,
    accompanies=accompanies_a_session,
)
