"""Gemini CLI chats (``~/.gemini/tmp/<project>/chats/session-*.json`` or ``.jsonl``): the format.

``history`` replays a chat log into what the model saw (contexts: compressions, rewritten
resumed histories), ``chat`` turns it into a session. A chat's sub-agents write
``chats/<session id>/<agent id>.jsonl`` (``kind: subagent``): they import with it, linked to it
and to the ``invoke_agent`` call that names their ``agentId``. ``~/.gemini/settings.json`` holds
the ``model.compressionThreshold`` a chat does not record.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import Beside, ImportFormat, Locations, head_lines
from engine.importers.formats.gemini.chat import agent_calls_of, is_gemini_chat, is_gemini_line, session_of
from engine.importers.formats.gemini.history import replay_document, replay_lines
from engine.importers.lines import read_lines
from engine.importers.parsing.parsed import ParsedSession, SourceProblem

__all__ = ["FORMAT", "is_gemini_chat", "is_gemini_line", "parse_gemini_path"]


def parse_gemini_path(path: Path | None, doc: Document, *, key: str) -> list[ParsedSession]:
    """A chat's session, then its sub-agents' (from ``chats/<session id>/``)."""
    settings = gemini_settings(path) if path is not None else {}
    log = replay_lines(doc.lines) if doc.lines is not None else replay_document(doc.value)
    main = session_of(log, key=key, settings=settings)
    if settings:
        main.metadata["agent_settings"] = settings
    sessions = [main]
    session_id = main.metadata.get("gemini_session_id")
    if path is not None and is_subagent_chat(path):  # read alone: its folder names its parent
        main.parent_key = path.parent.name
    if path is None or not session_id or is_subagent_chat(path):
        return sessions
    calls = agent_calls_of(log)
    for child_path in subagent_chats(path, str(session_id)):
        try:
            lines = _read_lines(child_path)
        except (OSError, SourceProblem) as exc:
            main.notes.append(f"sub-agent chat {child_path.name} not read: {exc}")
            continue
        try:
            child = session_of(replay_lines(lines), key=child_path.stem, settings=settings)
        except SourceProblem as exc:
            raise SourceProblem(f"{child_path.name}: {exc}", line=exc.line) from exc
        child.parent_key = main.key
        call = calls.get(child.key)
        if call is not None:
            child.metadata.update(parent_tool_use_id=call[0], agent_name=call[1])
            child.title = ": ".join(part for part in call[1:] if part) or None
        child.metadata["source_file"] = str(child_path)
        sessions.append(child)
    return sessions


def subagent_chats(path: Path, session_id: str) -> list[Path]:
    """The sub-agent chats of a main chat: ``chats/<session id>/*.jsonl`` beside it."""
    folder = path.parent / session_id
    return sorted(p for p in folder.glob("*.json*") if p.is_file()) if folder.is_dir() else []


def is_subagent_chat(path: Path) -> bool:
    """A sub-agent's chat: ``chats/<session id>/<agent id>.jsonl``."""
    return path.parent.parent.name == "chats" and path.suffix in (".json", ".jsonl")


def companion_state(path: Path) -> str | None:
    """A digest of the sub-agent chats kept for a main chat (None: none), so a re-import sees a
    sub-agent's chat grow alone."""
    if path.parent.name != "chats" or not path.name.startswith("session-"):
        return None
    short = path.stem.rsplit("-", 1)[-1]  # session-<time>-<first 8 of the session id>
    digest = hashlib.sha256()
    found = False
    for folder in sorted(path.parent.glob(f"{short}*")):
        for child in sorted(folder.glob("*.json*")) if folder.is_dir() else ():
            stat = child.stat()
            digest.update(f"{folder.name}/{child.name}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
            found = True
    return digest.hexdigest() if found else None


def gemini_settings(path: Path) -> dict[str, Any]:
    """``model.compressionThreshold`` of the Gemini home a chat lies in (``settings.json`` beside
    ``tmp/``), which the chat does not record; empty when none."""
    home = next((p.parent for p in path.parents if p.name == "tmp"), None)
    config = home / "settings.json" if home is not None else None
    if config is None or not config.is_file():
        return {}
    try:
        values = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    model = values.get("model") if isinstance(values, dict) else None
    threshold = model.get("compressionThreshold") if isinstance(model, dict) else None
    if isinstance(threshold, (int, float)) and not isinstance(threshold, bool):
        return {"compressionThreshold": threshold, "source": str(config)}
    return {}


def _read_lines(path: Path) -> tuple[tuple[int, Any], ...]:
    """A sub-agent chat's complete lines, through the importers' capped line reader."""
    with path.open("rb") as fh:
        return tuple(read_lines(fh, live=True).lines)


def sniff(doc: Document) -> bool:
    if doc.lines is not None:
        return any(is_gemini_line(v) for v in head_lines(doc))
    return is_gemini_chat(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_gemini_path(doc.path, doc, key=key)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else home
    return [base / ".gemini" / "tmp"]


def files_under(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/chats/session-*") if p.suffix in (".json", ".jsonl"))


FORMAT = ImportFormat(
    name="gemini",
    agent="Gemini CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="`~/.gemini/tmp/<project>/chats/session-*.json(l)`",
    locations=Locations(roots=roots, files_under=files_under),
    companions=Beside("chats/session-*", companion_state),
    accompanies=lambda path: is_subagent_chat(Path(path)),
)
