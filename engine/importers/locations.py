"""Where agents keep their transcripts, and which files of a folder are transcripts.

``agent_files(agent)`` lists the session files of an agent of :data:`AGENTS` (the registered
formats with locations: Claude Code, Codex, Gemini CLI, Cline and its forks, ...) where the
tools write them, honouring their environment variables (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ...);
``folder_files(folder)`` the transcript files under a folder, in a stable order (an agent's
SQLite database included), leaving out files that only accompany a transcript (a Cline task's UI log, Claude Code's saved tool
outputs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from engine.importers.documents import is_sqlite
from engine.importers.formats import Locations
from engine.importers.formats.opencode.database import app_of
from engine.importers.parsing.parsed import SourceProblem
from engine.importers.registry import AGENTS, FORMATS, REGISTRY, format_named

_SUFFIXES = (".jsonl", ".json", ".traj", ".af")
_SKIP_NAMES = frozenset({"ui_messages.json", "task_metadata.json", "settings.json", "package.json"})
# Claude Code's subagents/ files are imported with their session; tool-results/ are its saved outputs
_SKIP_DIRS = frozenset({"tool-results", "subagents", "node_modules", ".git", "__pycache__"})


def agent_roots(agent: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """The folders ``agent`` writes its sessions under (existing or not)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    return _locations(agent).roots(env, home)


def agent_files(agent: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """Session files of ``agent`` (or of every agent for ``all``), oldest first within a root."""
    agents = AGENTS if agent == "all" else (agent,)
    files: list[Path] = []
    for name in agents:
        locations = _locations(name)
        for root in agent_roots(name, env, home):
            if root.is_dir():
                files.extend(locations.files_under(root))
    return list(dict.fromkeys(files))


def _locations(agent: str) -> Locations:
    locations = format_named(agent).locations if agent in FORMATS else None
    if locations is None:
        raise ValueError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)} or all")
    return locations


def _accompanies_a_transcript(path: Path) -> bool:
    return any(f.accompanies is not None and f.accompanies(path) for f in REGISTRY)


def folder_files(folder: Path) -> list[Path]:
    """Transcript candidates under ``folder``: JSON / JSON Lines / .traj / .af files, Aider
    chat logs and OpenCode-like session databases, without the files that only accompany a transcript."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name in _SKIP_NAMES or name.endswith(".meta.json") or _accompanies_a_transcript(path):
                continue
            if name.endswith(_SUFFIXES) or name == ".aider.chat.history.md" or _agent_database(path):
                found.append(path)
    return found


def _agent_database(path: Path) -> bool:
    """An agent's SQLite session database (OpenCode's ``opencode.db``, Kilo CLI's ``kilo.db``):
    a ``.db`` file holding OpenCode's tables. Other ``.db`` files (a ctxdesk session database,
    any app's cache) are not transcripts."""
    if path.suffix != ".db" or not path.is_file():  # a fifo named .db would block the walk
        return False
    try:
        return is_sqlite(path) and app_of(path) is not None
    except (OSError, SourceProblem):  # unreadable: not ours to report here (the walk goes on)
        return False
