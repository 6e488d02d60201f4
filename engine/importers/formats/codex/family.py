"""What a Codex rollout needs from beside it: its sub-agents' rollouts and the agent's settings.

A sub-agent (``[features] multi_agent_v2``) writes a rollout of its own whose ``session_meta``
names the spawning thread (``parent_thread_id``); the parent's rollout names each child it
started (``SubAgentActivity``: the child's thread id and the ``spawn_agent`` call). Children
import with their parent (linked to it and to the call that started them); a child whose parent
rollout lies beside it only accompanies it (a folder import skips it), one given alone imports
as its own session, still naming its parent thread. ``$CODEX_HOME/config.toml`` holds the
settings a rollout does not record (``model_auto_compact_token_limit``).
"""

from __future__ import annotations

import hashlib
import re
import tomllib
from pathlib import Path
from typing import Any

from engine.importers.lines import read_lines

#: Bytes of a rollout's first line read to find the thread it belongs to (ids come first).
HEAD_BYTES = 2_048
_ID = re.compile(r'"id"\s*:\s*"([^"]+)"')
_PARENT = re.compile(r'"parent_thread_id"\s*:\s*"([^"]+)"')
#: Settings read from config.toml: the ones a compaction explanation needs.
SETTING_KEYS = ("model_auto_compact_token_limit", "model_context_window")


def rollout_head(path: Path) -> tuple[str | None, str | None]:
    """(thread id, parent thread id) of a rollout, from the start of its first line."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES).decode("utf-8", "replace").split("\n", 1)[0]
    except OSError:
        return None, None
    own, parent = _ID.search(head), _PARENT.search(head)
    return (own.group(1) if own else None), (parent.group(1) if parent else None)


def _rollouts_beside(path: Path) -> list[Path]:
    return sorted(p for p in path.parent.glob("rollout-*.jsonl") if p != path)


def child_rollouts(path: Path, children: dict[str, str]) -> list[Path]:
    """The rollouts of the sub-agents a parent names (thread ids), found by name beside it, else
    anywhere in its sessions folder (a sub-agent started after midnight writes under the next day)."""
    found: dict[str, Path] = {}
    for candidate in _rollouts_beside(path):
        thread = next((t for t in children if candidate.name.endswith(f"-{t}.jsonl")), None)
        if thread is not None:
            found[thread] = candidate
    missing = [t for t in children if t not in found]
    root = sessions_root(path)
    if missing and root is not None:
        for thread in missing:
            match = sorted(root.rglob(f"rollout-*-{thread}.jsonl"))
            if match:
                found[thread] = match[0]
    return [found[t] for t in children if t in found]


def accompanies_a_parent(path: Path) -> bool:
    """A sub-agent's rollout whose parent's rollout is beside it: it imports with its parent."""
    if not (path.name.startswith("rollout-") and path.suffix == ".jsonl"):
        return False
    _, parent = rollout_head(path)
    return parent is not None and any(p.name.endswith(f"-{parent}.jsonl") for p in _rollouts_beside(path))


def companion_state(path: Path) -> str | None:
    """A digest of the size and time of the sub-agent rollouts beside a rollout that name it as
    their parent (None: none): a re-import compares it, since a child can grow alone."""
    if not (path.name.startswith("rollout-") and path.suffix == ".jsonl"):
        return None
    own, parent = rollout_head(path)
    if own is None or parent is not None:
        return None
    digest = hashlib.sha256()
    found = False
    for candidate in _rollouts_beside(path):
        if rollout_head(candidate)[1] == own:
            stat = candidate.stat()
            digest.update(f"{candidate.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
            found = True
    return digest.hexdigest() if found else None


def sessions_root(path: Path) -> Path | None:
    """``$CODEX_HOME/sessions`` (or ``archived_sessions``) above a rollout, when it lies in one."""
    for parent in path.parents:
        if parent.name in ("sessions", "archived_sessions"):
            return parent
    return None


def codex_settings(path: Path) -> dict[str, Any]:
    """The settings of the Codex home a rollout lies in (``config.toml`` beside ``sessions/``),
    the ones a rollout does not record; empty when there is none or it is not TOML."""
    root = sessions_root(path)
    config = root.parent / "config.toml" if root is not None else None
    if config is None or not config.is_file():
        return {}
    try:
        values = tomllib.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return {}
    settings = {k: values[k] for k in SETTING_KEYS if isinstance(values.get(k), int) and values[k] > 0}
    if settings:
        settings["source"] = str(config)
    return settings


def read_rollout(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of a rollout's complete lines, through the importers' capped line
    reader (a last line still being written is left)."""
    with path.open("rb") as fh:
        return read_lines(fh, live=True).lines
