"""Codex CLI rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``): the format's entry.

``rollout`` reads one rollout (messages, calls with their usage, compactions, failed calls);
``family`` finds what lies beside it: the rollouts of the sub-agents it started (imported with
it, linked to it and to their ``spawn_agent`` call) and the agent's own settings
(``config.toml``: the auto-compaction limit a rollout does not record).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import Beside, ImportFormat, Locations, head_lines
from engine.importers.formats.codex.family import (
    accompanies_a_parent,
    child_rollouts,
    codex_settings,
    companion_state,
    read_rollout,
)
from engine.importers.formats.codex.rollout import (
    ENVELOPE_TYPES,
    ITEM_TYPES,
    RolloutReader,
    codex_usage,
    parse_codex,
)
from engine.importers.parsing.parsed import ParsedSession, SourceProblem
from engine.messages import ToolUseBlock

__all__ = ["FORMAT", "ITEM_TYPES", "RolloutReader", "codex_usage", "is_codex_line", "parse_codex_file"]


def is_codex_line(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("type"), str) and value["type"] in ENVELOPE_TYPES and "payload" in value:
        return True
    return "instructions" in value and "id" in value and "timestamp" in value and "type" not in value


def parse_codex_file(path: Path | None, lines: list[tuple[int, Any]], *, key: str) -> list[ParsedSession]:
    """A rollout's session, then its sub-agents' (each linked to the call that started it)."""
    settings = codex_settings(path) if path is not None else {}
    main = parse_codex(lines, key=key, settings=settings)
    if settings:
        main.metadata["agent_settings"] = settings
    sessions = [main]
    if path is None or not main.metadata.get("codex_session_id"):
        return sessions
    pending = [(main, path)]
    while pending:  # sub-agents may start sub-agents of their own
        parent, parent_path = pending.pop(0)
        children = _children(parent)
        for child_path in child_rollouts(parent_path, children):
            try:
                child_lines = read_rollout(child_path)
            except (OSError, SourceProblem) as exc:
                parent.notes.append(f"sub-agent rollout {child_path.name} not read: {exc}")
                continue
            try:
                child = parse_codex(child_lines, key=child_path.stem, settings=settings)
            except SourceProblem as exc:
                raise SourceProblem(f"{child_path.name}: {exc}", line=exc.line) from exc
            child.parent_key = parent.key
            call_id = children.get(child.key)
            if call_id:
                child.metadata["parent_tool_use_id"] = call_id
                child.title = subagent_title(child, spawn_input(parent, call_id))
            child.metadata["source_file"] = str(child_path)
            sessions.append(child)
            pending.append((child, child_path))
    return sessions


def spawn_input(parent: ParsedSession, call_id: str) -> dict[str, Any]:
    """The input of the ``spawn_agent`` call that started a sub-agent."""
    for pm in parent.messages:
        for block in pm.message.blocks:
            if isinstance(block, ToolUseBlock) and block.id == call_id:
                return block.input
    return {}


def subagent_title(child: ParsedSession, spawned: dict[str, Any]) -> str | None:
    """``/root/counter: Count the files…``: the sub-agent's path and the task it was given."""
    name = child.metadata.get("agent_path") or spawned.get("task_name")
    task = spawned.get("message")
    if not name and not task:
        return None
    return ": ".join(str(p) for p in (name, task) if p)


def _children(session: ParsedSession) -> dict[str, str]:
    """{sub-agent thread id: spawn call id} a parsed rollout started."""
    started = session.metadata.get("subagents_started")
    return dict(started) if isinstance(started, dict) else {}


def sniff(doc: Document) -> bool:
    if doc.lines is not None:
        return any(is_codex_line(v) for v in head_lines(doc))
    return is_codex_line(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    if doc.lines is None:
        return [parse_codex(((1, doc.value),), key=key)]
    return parse_codex_file(doc.path, list(doc.lines), key=key)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    return [base / "sessions", base / "archived_sessions"]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("rollout-*.jsonl") if not accompanies_a_parent(p))


FORMAT = ImportFormat(
    name="codex",
    agent="Codex CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (default `~/.codex`; also `archived_sessions/`)",
    locations=Locations(roots=roots, files_under=files_under),
    companions=Beside("rollout-*.jsonl", companion_state),
    accompanies=lambda path: accompanies_a_parent(Path(path)),
)
