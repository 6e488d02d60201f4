"""Real agents' sessions for the dashboard's tests: every real-agent fixture under tests/fixtures imported
with ``ctxdesk import`` (as a user would), and the few sessions that stand for all of them in a browser.

AppTest opens every page of every imported session (tests/test_dashboard_app.py): the page scripts, their
queries and their text, for each session, at a fraction of a browser's cost. The real browser opens every
page of the representatives (tests/browser/): one session of every import format, and sessions that
show what the others do not (the agent's own compactions, a sub-agent, a parent of sub-agents, a failed
call), so each way a page can be drawn is drawn by the browser at least once.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).resolve().parent / "fixtures"

#: What a representative session can show, beyond its import format (SQL over the session database:
#: true for the session ``s.id``).
FEATURES: dict[str, str] = {
    "compaction": "EXISTS (SELECT 1 FROM context_events e WHERE e.session_id = s.id AND e.kind = 'compaction')",
    "sub-agent": "s.parent_session_id IS NOT NULL",
    "parent of sub-agents": "EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id)",
    "failed call": "EXISTS (SELECT 1 FROM context_events e WHERE e.session_id = s.id AND e.kind = 'request'"
    " AND e.outcome <> 'ok')",
}


def real_inputs() -> list[Path]:
    """One ``ctxdesk import`` input per real-agent fixture: Claude Code runs (compactions, sub-agents,
    resume, failed calls), Codex and Gemini CLI sessions, the other real CLIs' runs (the SQLite database
    of those that keep one: OpenCode, Kilo CLI), and the small files derived from real SWE-agent,
    OpenHands and Claude Code sessions and each supported agent's format. ``_shapes`` folders (request
    shapes, no transcript) are left out. New fixtures are picked up as they land."""
    real = FIXTURES / "real_agents"
    inputs = sorted(real.glob("claude-code/*/transcripts"))
    inputs += sorted(real.glob("codex/*/sessions")) + sorted(real.glob("codex/releases/*/sessions"))
    inputs += sorted(p for p in real.glob("gemini/*") if p.is_dir() and p.name != "_shapes")
    for agent in sorted(p for p in real.iterdir() if p.is_dir()):
        if agent.name in {"claude-code", "codex", "gemini"}:
            continue
        databases = sorted(agent.glob("*/data/*/*.db"))  # a folder import reads transcripts, not databases
        inputs += databases or [agent]
    inputs += sorted(p for p in (FIXTURES / "agents").iterdir() if p.name != "README.md")
    inputs += sorted(p for p in (FIXTURES / "sessions").iterdir() if p.suffix != ".md")
    return inputs


def import_claude_code_scenarios(db: Path, *scenarios: str, also: tuple[Path, ...] = ()) -> Path:
    """``db`` with the transcripts of the real Claude Code fixture ``scenarios`` (then ``also``) imported."""
    from engine.importers import import_file
    from engine.store import SessionStore

    claude_code = FIXTURES / "real_agents" / "claude-code"
    with SessionStore(db) as store:
        for scenario in scenarios:
            for transcript in sorted((claude_code / scenario / "transcripts").glob("*.jsonl")):
                import_file(transcript, store)
        for path in also:
            import_file(path, store)
    return db


def import_real_sessions(db: Path) -> Path:
    """Every real-agent fixture imported into ``db`` by the ``ctxdesk import`` command."""
    from engine.cli import main as ctxdesk

    failed = [str(p) for p in real_inputs() if ctxdesk(["import", str(p), "--db", str(db)]) != 0]
    assert not failed, f"ctxdesk import failed for {failed}"
    return db


_template: dict[str, Path] = {}


def copy_real_sessions_db(template_dir: Path, target: Path) -> Path:
    """A fresh copy at ``target`` of every real-agent fixture imported by ``ctxdesk import``; the import
    runs once per test process (into ``template_dir``)."""
    if "db" not in _template or not _template["db"].exists():
        _template["db"] = import_real_sessions(template_dir / "real_sessions_template.db")
    # Through SQLite's backup, so commits still in the template's WAL come along.
    with (
        closing(sqlite3.connect(f"{_template['db'].resolve().as_uri()}?mode=ro", uri=True)) as src,
        closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)
    return target


@dataclass(frozen=True)
class Session:
    """A session as the pages name it: its id, and the recorded strings a page may show verbatim."""

    session_id: str
    source: str
    title: str | None
    model: str | None
    shows: tuple[str, ...] = ()
    #: The providers' error messages recorded for its calls (a page shows a failed call's as an error).
    provider_errors: tuple[str, ...] = ()

    @property
    def recorded(self) -> list[str]:
        """Recorded text (id, title, model, provider errors) that may hold the words None or nan."""
        return [t for t in (self.session_id, self.title, self.model, *self.provider_errors) if t]


def all_sessions(db: Path) -> list[Session]:
    """Every session in ``db`` with the features of FEATURES it shows, by id."""
    features = ", ".join(f"({sql}) AS {_column(name)}" for name, sql in FEATURES.items())
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        errors: dict[str, list[str]] = {}
        for sid, message in conn.execute(
            "SELECT DISTINCT session_id, error_message FROM model_requests WHERE error_message IS NOT NULL"
        ):
            errors.setdefault(sid, []).append(message)
        rows = conn.execute(
            f"SELECT s.id, s.source, s.title, s.model, {features} FROM sessions s ORDER BY s.id"
        )
        return [
            Session(
                sid,
                source,
                title,
                model,
                tuple(n for n, has in zip(FEATURES, flags, strict=True) if has),
                tuple(sorted(errors.get(sid, ()))),
            )
            for sid, source, title, model, *flags in rows
        ]


def representative_sessions(sessions: list[Session]) -> list[Session]:
    """Per import format (``source``) the session showing the most features of FEATURES, then (greedily)
    the fewest more sessions until every feature any session shows is shown by a chosen one. Ties go to
    the first by id."""
    chosen: list[Session] = []
    for source in sorted({s.source for s in sessions}):
        chosen.append(max((s for s in sessions if s.source == source), key=lambda s: len(s.shows)))
    missing = set().union(*(s.shows for s in sessions)) - set().union(*(s.shows for s in chosen))
    while missing:
        best = max(sessions, key=lambda s: len(missing & set(s.shows)))  # max keeps the first of equals
        chosen.append(best)
        missing -= set(best.shows)
    return chosen


def _column(feature: str) -> str:
    return "has_" + feature.replace(" ", "_").replace("-", "_")


def walk_parts(count: int, group: str) -> list[Any]:
    """``count`` parameters (0, 1, ...) of a walk split in parts, each part its own xdist group
    (``<group>-1``, ...) so two workers walk two parts at once; ids "part 1 of 2", ...."""
    return [
        pytest.param(i, marks=pytest.mark.xdist_group(f"{group}-{i + 1}"), id=f"part {i + 1} of {count}")
        for i in range(count)
    ]
