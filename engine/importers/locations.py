"""Where agents keep their transcripts, and which files of a folder are transcripts.

``agent_files(agent)`` lists the session files of ``claude-code``, ``codex``, ``gemini`` or
``cline`` (Roo Code and Kilo Code too) where the tools write them, honouring their
environment variables (``CLAUDE_CONFIG_DIR``, ``CODEX_HOME``, ``GEMINI_CLI_HOME``);
``folder_files(folder)`` the transcript files under a folder, in a stable order, leaving out
files that only accompany a transcript (a Cline task's UI log, Claude Code's saved tool
outputs).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from engine.importers.claude_code_bundle import accompanies_a_session

AGENTS = ("claude-code", "codex", "gemini", "cline")
#: VS Code extension ids whose globalStorage holds Cline-style tasks.
CLINE_EXTENSIONS = ("saoudrizwan.claude-dev", "rooveterinaryinc.roo-cline", "kilocode.kilo-code")
_EDITORS = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")
_SUFFIXES = (".jsonl", ".json", ".traj", ".af")
_SKIP_NAMES = frozenset({"ui_messages.json", "task_metadata.json", "settings.json", "package.json"})
# Claude Code's subagents/ files are imported with their session (engine.importers.claude_code_bundle)
_SKIP_DIRS = frozenset({"tool-results", "subagents", "node_modules", ".git", "__pycache__"})


def agent_roots(agent: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """The folders ``agent`` writes its sessions under (existing or not)."""
    env = os.environ if env is None else env
    home = Path(env.get("HOME") or Path.home()) if home is None else home
    if agent == "claude-code":
        roots = [Path(p) / "projects" for p in env.get("CLAUDE_CONFIG_DIR", "").split(",") if p.strip()]
        return roots or [home / ".claude" / "projects", home / ".config" / "claude" / "projects"]
    if agent == "codex":
        base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        return [base / "sessions", base / "archived_sessions"]
    if agent == "gemini":
        base = Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else home
        return [base / ".gemini" / "tmp"]
    if agent == "cline":
        storages = [home / ".config" / e / "User" / "globalStorage" for e in _EDITORS]
        storages += [
            home / "Library" / "Application Support" / e / "User" / "globalStorage" for e in _EDITORS
        ]
        if env.get("APPDATA"):
            storages += [Path(env["APPDATA"]) / e / "User" / "globalStorage" for e in _EDITORS]
        roots = [s / ext / "tasks" for s in storages for ext in CLINE_EXTENSIONS]
        return [*roots, home / ".cline" / "data" / "tasks"]
    raise ValueError(f"unknown agent {agent!r}: one of {', '.join(AGENTS)} or all")


def agent_files(agent: str, env: Mapping[str, str] | None = None, home: Path | None = None) -> list[Path]:
    """Session files of ``agent`` (or of every agent for ``all``), oldest first within a root."""
    agents = AGENTS if agent == "all" else (agent,)
    files: list[Path] = []
    for name in agents:
        for root in agent_roots(name, env, home):
            if root.is_dir():
                files.extend(_agent_files_under(name, root))
    return list(dict.fromkeys(files))


def _agent_files_under(agent: str, root: Path) -> list[Path]:
    if agent == "claude-code":
        return sorted(
            p
            for p in root.rglob("*.jsonl")
            if not _SKIP_DIRS & set(p.relative_to(root).parts) and not accompanies_a_session(p)
        )
    if agent == "codex":
        return sorted(root.rglob("rollout-*.jsonl"))
    if agent == "gemini":
        return sorted(p for p in root.glob("*/chats/session-*") if p.suffix in (".json", ".jsonl"))
    return sorted(root.glob("*/api_conversation_history.json"))


def folder_files(folder: Path) -> list[Path]:
    """Transcript candidates under ``folder``: JSON / JSON Lines / .traj / .af files and Aider
    chat logs, without the files that only accompany a transcript."""
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name in _SKIP_NAMES or name.endswith(".meta.json") or accompanies_a_session(path):
                continue
            if name.endswith(_SUFFIXES) or name == ".aider.chat.history.md":
                found.append(path)
    return found
