"""One Claude Code session with the files kept beside it, found on disk and parsed together.

Claude Code writes ``<project>/<session>.jsonl`` and, beside it, ``<project>/<session>/subagents/
agent-<id>.jsonl`` (+ ``agent-<id>.meta.json``: agentType, description, toolUseId) and
``<project>/<session>/tool-results/<name>.txt`` (large outputs sent as a ``<persisted-output>``
preview). Older versions wrote sub-agents as ``<project>/agent-<id>.jsonl`` whose lines carry the
parent's ``sessionId``. ``find_claude_code_bundles(folder)`` gathers them; ``claude_code_bundle(path)``
gathers one session file's; ``parse_claude_code_bundle(bundle)`` returns the parsed sessions (main
first, sub-agents with ``parent_key``), with stable keys so a re-import replaces, never duplicates.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.importers.formats.claude_code.session import SubagentFile, ToolResultFile, parse_claude_code
from engine.importers.formats.claude_code.thread import Line
from engine.importers.lines import next_line, read_lines
from engine.importers.parsing.parsed import ParsedSession, SourceProblem

#: Lines read to find a file's sessionId (a summary line may come first).
_SNIFF_LINES = 20


@dataclass(frozen=True)
class ClaudeCodeBundle:
    """A session file and the files Claude Code keeps for it."""

    session_file: Path
    subagent_files: tuple[Path, ...] = ()
    tool_result_files: tuple[Path, ...] = ()
    legacy_agent_files: tuple[Path, ...] = field(default=())

    @property
    def session_id(self) -> str:
        return self.session_file.stem

    @property
    def paths(self) -> tuple[Path, ...]:
        """Every file of the bundle (for change detection on re-import)."""
        return (self.session_file, *self.subagent_files, *self.tool_result_files, *self.legacy_agent_files)


def read_jsonl(path: Path) -> list[Line]:
    """(line number, object) of each non-empty line of a file beside the session, read as the
    session file is (engine.importers.lines: streamed, no line past the cap; a last line still
    being written is left for the next read); a bad line is a SourceProblem naming the file."""
    try:
        with path.open("rb") as fh:
            return read_lines(fh, live=True).lines
    except SourceProblem as exc:
        raise SourceProblem(f"{path.name}: {exc}", line=exc.line) from exc


def _first_session_id(path: Path) -> str | None:
    """The ``sessionId`` of the first lines of a file (None when they hold none, or are not JSON)."""
    try:
        with path.open("rb") as fh:
            for _ in range(_SNIFF_LINES):
                raw = next_line(fh)
                if not raw:
                    return None
                value = json.loads(raw) if raw.strip() else None
                if isinstance(value, dict) and value.get("sessionId"):
                    return str(value["sessionId"])
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return None


def claude_code_bundle(session_file: str | os.PathLike[str]) -> ClaudeCodeBundle:
    """The bundle of one main session file: its session folder and legacy agent files beside it."""
    path = Path(session_file)
    folder = path.parent / path.stem
    subagents = tuple(sorted((folder / "subagents").glob("*.jsonl"))) if folder.is_dir() else ()
    results = (
        tuple(sorted(p for p in (folder / "tool-results").glob("*") if p.is_file()))
        if folder.is_dir()
        else ()
    )
    legacy = tuple(
        p
        for p in sorted(path.parent.glob("agent-*.jsonl"))
        if _first_session_id(p) == path.stem and p != path
    )
    return ClaudeCodeBundle(path, subagents, results, legacy)


def companion_state(session_file: str | os.PathLike[str]) -> str | None:
    """A digest of the name, size and modification time of every file Claude Code keeps for a
    session beside its file (``<session>/subagents/``, ``<session>/tool-results/``, legacy
    ``agent-*.jsonl``), or None when it keeps none: a re-import compares it as well as the main
    file's own size and time, since a sub-agent file or a saved output can grow alone."""
    path = Path(session_file)
    if path.suffix != ".jsonl" or not is_session_file(path):
        return None
    folder = path.parent / path.stem
    files = [p for p in folder.rglob("*") if p.is_file()] if folder.is_dir() else []
    files += [
        p for p, first in _legacy_agent_files(path.parent)
        if (first if first is not None else _first_session_id(p)) == path.stem
    ]  # fmt: skip
    if not files:
        return None
    digest = hashlib.sha256()
    for file in sorted(files):
        try:
            stat = file.stat()
        except OSError:
            continue
        digest.update(f"{file.relative_to(path.parent)}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _legacy_agent_files(project: Path) -> tuple[tuple[Path, str | None], ...]:
    """The ``agent-*.jsonl`` files of a project folder, each with the session its first lines name
    (None: none yet, asked again), read once while the folder's entries stay the same: every
    session file of the folder asks (a folder of 200 sessions listed and read 200 times)."""
    try:
        listed = project.stat().st_mtime_ns
    except OSError:
        return ()
    return _agent_files_listed(str(project), listed)


@functools.lru_cache(maxsize=256)
def _agent_files_listed(project: str, mtime_ns: int) -> tuple[tuple[Path, str | None], ...]:
    return tuple((p, _first_session_id(p)) for p in sorted(Path(project).glob("agent-*.jsonl")))


def is_session_file(path: Path) -> bool:
    """A main session file: ``<uuid>.jsonl`` directly in a project folder (not a sub-agent's)."""
    return path.suffix == ".jsonl" and not path.name.startswith("agent-") and path.parent.name != "subagents"


def find_claude_code_bundles(folder: str | os.PathLike[str]) -> list[ClaudeCodeBundle]:
    """Every session under ``folder`` (a project folder, or ~/.claude/projects), with its files."""
    root = Path(folder)
    if root.is_file():
        return [claude_code_bundle(root)]
    return [claude_code_bundle(p) for p in _walk_sessions(root)]


def _walk_sessions(root: Path) -> Iterator[Path]:
    for path in sorted(root.rglob("*.jsonl")):
        if is_session_file(path) and path.parent.name != "tool-results" and _first_session_id(path):
            yield path


def _meta(path: Path) -> dict[str, Any]:
    meta_path = path.with_suffix(".meta.json")
    if not meta_path.is_file():
        return {}
    try:
        value = json.loads(meta_path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise SourceProblem(f"{meta_path.name}: not JSON ({exc.msg})") from exc
    return value if isinstance(value, dict) else {}


def _agent_id(path: Path, lines: list[Line]) -> str:
    for _, obj in lines:
        if obj.get("agentId"):
            return str(obj["agentId"])
    return path.stem.removeprefix("agent-")


def parse_claude_code_bundle(bundle: ClaudeCodeBundle) -> list[ParsedSession]:
    """Parsed sessions of a bundle: the main thread, then each sub-agent (file order by name)."""
    return parse_claude_code_path(
        bundle.session_file, read_jsonl(bundle.session_file), fallback_id=bundle.session_id
    )


def parse_claude_code_path(
    path: str | os.PathLike[str] | None, lines: list[Line], *, fallback_id: str
) -> list[ParsedSession]:
    """Sessions of a main session file whose lines are read already, with the files beside it
    (sub-agents, saved tool outputs). A sub-agent file given alone parses as its own thread."""
    if path is None:
        return parse_claude_code(lines, fallback_id=fallback_id)
    if is_subagent_file(Path(path), lines):  # its own session, keyed and linked as with its parent
        agent = SubagentFile(_agent_id(Path(path), lines), lines, _meta(Path(path)), str(path))
        return parse_claude_code([], fallback_id=fallback_id, subagents=[agent], main_id=_session_id(lines))
    bundle = claude_code_bundle(path)
    subagents = []
    for agent_path in (*bundle.subagent_files, *bundle.legacy_agent_files):
        agent_lines = read_jsonl(agent_path)
        subagents.append(
            SubagentFile(_agent_id(agent_path, agent_lines), agent_lines, _meta(agent_path), str(agent_path))
        )
    results = [ToolResultFile(p.name, p.read_bytes(), str(p)) for p in bundle.tool_result_files]
    return parse_claude_code(lines, fallback_id=fallback_id, subagents=subagents, tool_results=results)


def is_subagent_file(path: Path, lines: list[Line]) -> bool:
    """A sub-agent's transcript: under ``subagents/``, or a legacy ``agent-*.jsonl`` of sidechain
    lines; it names its parent's session in ``sessionId``."""
    if _session_id(lines) is None:
        return False
    if path.parent.name == "subagents":
        return True
    message_lines = [o for _, o in lines if o.get("type") in ("user", "assistant")]
    return (
        path.name.startswith("agent-")
        and bool(message_lines)
        and all(o.get("isSidechain") for o in message_lines)
    )


def _session_id(lines: list[Line]) -> str | None:
    return next((str(o["sessionId"]) for _, o in lines if o.get("sessionId")), None)


def accompanies_a_session(path: str | os.PathLike[str]) -> bool:
    """A Claude Code sub-agent file that imports with its session, never alone: one under
    ``subagents/``, or a legacy ``agent-*.jsonl`` whose sessionId names a session file beside it."""
    path = Path(path)
    if path.suffix != ".jsonl":
        return False
    if path.parent.name == "subagents":
        return True
    if not path.name.startswith("agent-"):
        return False
    session_id = _first_session_id(path)
    return bool(session_id) and (path.parent / f"{session_id}.jsonl").is_file()
