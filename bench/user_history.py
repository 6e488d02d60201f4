"""A heavy user's history of agent transcripts, grown from the real ones, for the import benchmarks.

``build_history(home, megabytes)`` lays out a HOME as the agents keep it: Claude Code transcripts
(with their sub-agent and tool-result folders) under ``.claude/projects/<project>/``, Codex rollouts
under ``.codex/sessions/YYYY/MM/DD/``, and Gemini CLI, OpenHands and SWE-agent files under ``other/``.
Every file is a copy of a real transcript (the real-CLI fixtures and ../shared/sessions) with every
UUID replaced by a fresh one derived from the copy's number, so each copy is a session of its own,
(and so every provider id: answers, requests, tool calls), and a share of the Codex copies has its turns repeated (fresh call ids) into long rollouts: sizes
range from a few KB to tens of MB, as in a real history. The same (megabytes, seed) gives the same
bytes on any machine.
"""

from __future__ import annotations

import json
import random
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT

FIXTURES = ROOT / "tests" / "fixtures" / "real_agents"
SHARED = ROOT.parent / "shared" / "sessions"
MB = 1_000_000

_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
#: Provider ids of answers, requests and tool calls: ccusage (and the importers) take two lines with
#: the same answer and request id for one call, so each copy needs its own.
_PROVIDER_ID = re.compile(rb"\b(?:msg|req|toolu|resp|call)_[A-Za-z0-9]{8,}")
#: A call id's start (not the key "call_id", not the type "function_call_output").
_CALL_ID = re.compile(rb'"call_(?=[0-9a-f]{8})')
#: Share of the bytes by agent (ccusage reads the first two; the rest is what else a user keeps).
_SHARES = {"claude": 0.55, "codex": 0.35, "other": 0.10}
#: A Codex copy is grown into a long rollout this often, to this many MB at most.
_LONG_CODEX_P = 0.12
_LONG_CODEX_MB = (2.0, 24.0)


@dataclass
class History:
    """What :func:`build_history` wrote: files by agent and their bytes."""

    home: Path
    files: dict[str, list[Path]] = field(default_factory=dict)

    @property
    def claude_dir(self) -> Path:
        return self.home / ".claude"

    @property
    def codex_dir(self) -> Path:
        return self.home / ".codex"

    def bytes_of(self, *agents: str) -> int:
        """Bytes of the transcripts of ``agents`` (all when none), companions included."""
        chosen = agents or tuple(self.files)
        return sum(_tree_bytes(p) for a in chosen for p in self.files.get(a, []))

    @property
    def all_files(self) -> list[Path]:
        return [p for paths in self.files.values() for p in paths]


def build_history(home: Path, megabytes: float, *, seed: int = 0) -> History:
    """Write about ``megabytes`` MB of transcripts under ``home`` (see the module's docstring)."""
    rng = random.Random(seed)
    history = History(home=home)
    sources = _sources()
    copy_no = 0
    for agent, share in _SHARES.items():
        budget = megabytes * MB * share
        written = 0
        pool = sources[agent]
        if not pool:
            continue
        paths: list[Path] = []
        while written < budget:
            source = rng.choice(pool)
            copy_no += 1
            fresh = _Fresh(seed, copy_no)
            if agent == "claude":
                made = _claude_copy(
                    source, home / ".claude" / "projects" / f"-work-proj{copy_no % 40}", fresh
                )
            elif agent == "codex":
                long_mb = rng.uniform(*_LONG_CODEX_MB) if rng.random() < _LONG_CODEX_P else 0.0
                made = _codex_copy(source, home / ".codex" / "sessions", fresh, copy_no, long_mb)
            else:
                made = _plain_copy(source, home / "other" / f"{copy_no:05d}", fresh)
            paths.append(made)
            written += _tree_bytes(made)
        history.files[agent] = paths
    return history


class _Fresh:
    """Fresh UUIDs for one copy: each original UUID maps to the same new one within the copy."""

    def __init__(self, seed: int, copy_no: int) -> None:
        self.space = uuid.uuid5(uuid.NAMESPACE_OID, f"ctxdesk-bench-{seed}-{copy_no}")

    def __call__(self, data: bytes) -> bytes:
        data = _UUID.sub(lambda m: str(uuid.uuid5(self.space, m.group().decode())).encode(), data)
        return _PROVIDER_ID.sub(self._provider_id, data)

    def _provider_id(self, match: re.Match[bytes]) -> bytes:
        prefix, _, rest = match.group().partition(b"_")
        digest = uuid.uuid5(self.space, match.group().decode()).hex.encode()
        return prefix + b"_" + (digest * 2)[: len(rest)]


def _sources() -> dict[str, list[Path]]:
    """Real transcripts by agent: the real-CLI fixtures and ../shared/sessions."""
    claude = sorted(
        p
        for p in (FIXTURES / "claude-code").glob("*/transcripts/*.jsonl")
        if p.is_file()  # sub-agent files travel with their parent (its folder of the same name)
    )
    codex = sorted((FIXTURES / "codex").glob("*/sessions/**/rollout-*.jsonl"))
    other = sorted((FIXTURES / "gemini").glob("*/tmp/*/chats/session-*.json*"))
    if SHARED.is_dir():
        claude += sorted(SHARED.glob("claude-code__*.jsonl"))
        other += sorted(p for p in SHARED.iterdir() if p.name.startswith(("openhands__", "swe-agent__")))
    return {"claude": claude, "codex": codex, "other": other}


def _claude_copy(source: Path, project: Path, fresh: _Fresh) -> Path:
    """A transcript with its ``<session>/`` folder (sub-agents, saved tool outputs), ids renewed."""
    project.mkdir(parents=True, exist_ok=True)
    target = project / fresh(source.name.encode()).decode()
    target.write_bytes(fresh(source.read_bytes()))
    folder = source.with_suffix("")
    if folder.is_dir():
        for item in folder.rglob("*"):
            if item.is_file():
                into = target.with_suffix("") / fresh(str(item.relative_to(folder)).encode()).decode()
                into.parent.mkdir(parents=True, exist_ok=True)
                into.write_bytes(fresh(item.read_bytes()))
    return target


def _codex_copy(source: Path, sessions: Path, fresh: _Fresh, copy_no: int, long_mb: float) -> Path:
    """A rollout renamed and re-dated, ids renewed; ``long_mb`` > 0: its turns repeated (fresh
    call ids each round) until the file holds that many MB."""
    day = sessions / "2026" / f"{1 + copy_no % 12:02d}" / f"{1 + copy_no % 28:02d}"
    day.mkdir(parents=True, exist_ok=True)
    target = day / fresh(source.name.encode()).decode()
    data = fresh(source.read_bytes())
    if long_mb <= 0:
        target.write_bytes(data)
        return target
    lines = data.splitlines(keepends=True)
    head = [line for line in lines if json.loads(line).get("type") == "session_meta"]
    body = b"".join(
        line
        for line in lines
        if json.loads(line).get("type") in ("response_item", "event_msg", "turn_context")
    )
    with target.open("wb") as fh:
        fh.write(b"".join(head))
        size, round_ = 0, 0
        while size < long_mb * MB:
            chunk = _CALL_ID.sub(f'"call_r{round_}_'.encode(), body)
            fh.write(chunk)
            size += len(chunk)
            round_ += 1
    return target


def distinct_sources() -> list[Path]:
    """The real transcripts the history is grown from, each once (distinct sessions)."""
    return [path for paths in _sources().values() for path in paths]


def repeated_text_share(paths: list[Path], *, min_chars: int = 256, max_bytes: int = 500 * MB) -> float:
    """The share of the characters of the long strings (``min_chars`` or more) in these files' JSON
    that repeat an earlier string of the files: what the importer's memories of texts (token counts,
    redaction verdicts) find again. Read up to ``max_bytes`` of the files, in their order."""
    seen: set[int] = set()
    repeated = total = read = 0

    def walk(value: object) -> None:
        nonlocal repeated, total
        if isinstance(value, str):
            if len(value) >= min_chars:
                total += len(value)
                key = hash(value)
                if key in seen:
                    repeated += len(value)
                seen.add(key)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in (f for p in paths for f in [p, *_companions(p)]):
        if read >= max_bytes:
            break
        data = path.read_bytes()
        read += len(data)
        try:
            walk(json.loads(data))
        except ValueError:  # JSON Lines (or not JSON: skipped)
            for line in data.splitlines():
                try:
                    walk(json.loads(line))
                except ValueError:
                    continue
    return repeated / total if total else 0.0


def _companions(path: Path) -> list[Path]:
    folder = path.with_suffix("")
    return sorted(f for f in folder.rglob("*") if f.is_file()) if folder.is_dir() else []


def _plain_copy(source: Path, folder: Path, fresh: _Fresh) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / source.name
    target.write_bytes(fresh(source.read_bytes()))
    return target


def _tree_bytes(path: Path) -> int:
    """A transcript's bytes and its companion folder's (Claude Code: ``<session>/``)."""
    size = path.stat().st_size
    folder = path.with_suffix("")
    if folder.is_dir():
        size += sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    return size
