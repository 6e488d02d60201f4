"""A grown session's re-import reads its stored messages at most once (#33: the grown history's
re-import; the follower of ``dashboard --from`` does the same at every growth).

The walk over the calls read each kept message by loading it with every message after it: a real
Codex session of 19 MB grown by 10% took more than two minutes to import again (3 s cold), the
whole bench's 3 GB history never finished its grown re-import. Real Codex rollout, real Claude Code
lines, real SQLite; the grown import writes what a fresh import of the whole file writes.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from bench.bench_reliability import claude_code_lines
from engine.importers import folder_files, import_file
from engine.importers.writer import TAIL_CHECK
from engine.store import sql_store
from engine.store.factory import open_store
from tests.import_rows import table_rows

CODEX_RUN = Path(__file__).parent / "fixtures" / "real_agents" / "codex" / "goal-websearch" / "sessions"
_CALL_ID = re.compile(rb'"call_(?=[0-9a-f]{8})')


def long_rollout(rounds: int) -> tuple[str, list[bytes]]:
    """(the rollout's name, its lines): a real Codex session whose turns repeat ``rounds`` times,
    each round's call ids renewed (as the bench's long Codex sessions are made)."""
    source = next(p for p in folder_files(CODEX_RUN) if p.name.startswith("rollout-"))
    lines = source.read_bytes().splitlines(keepends=True)
    head = [line for line in lines if json.loads(line).get("type") == "session_meta"]
    body = [
        line
        for line in lines
        if json.loads(line).get("type") in ("response_item", "event_msg", "turn_context")
    ]
    return source.name, head + [
        _CALL_ID.sub(f'"call_r{n}_'.encode(), line) for n in range(rounds) for line in body
    ]  # fmt: skip


def claude_code(tmp_path: Path) -> tuple[str, list[bytes]]:
    path = tmp_path / "lines.jsonl"
    claude_code_lines(path, 400)
    return "a0b1c2d3-0000-4000-8000-000000000400.jsonl", path.read_bytes().splitlines(keepends=True)


@pytest.fixture
def rows_loaded(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The stored messages every ``load_messages`` call returns, one entry per call."""
    loaded: list[int] = []
    load = sql_store.SqlSessionStore.load_messages

    def counting(self: Any, session_id: str, **kwargs: Any) -> Any:
        rows = load(self, session_id, **kwargs)
        loaded.append(len(rows))
        return rows

    monkeypatch.setattr(sql_store.SqlSessionStore, "load_messages", counting)
    return loaded


@pytest.mark.parametrize("agent", ["codex", "claude-code"])
def test_a_grown_session_reads_its_kept_messages_at_most_once(
    tmp_path: Path, rows_loaded: list[int], agent: str
) -> None:
    name, lines = long_rollout(rounds=30) if agent == "codex" else claude_code(tmp_path)
    grown = tmp_path / "grown" / name
    whole = tmp_path / "whole" / name
    grown.parent.mkdir()
    whole.parent.mkdir()
    grown.write_bytes(b"".join(lines[: len(lines) * 9 // 10]))
    whole.write_bytes(b"".join(lines))
    with open_store(tmp_path / "grown.db") as store:
        first = import_file(grown, store)
        grown.write_bytes(b"".join(lines))
        rows_loaded.clear()
        again = import_file(grown, store)
    kept = first.sessions[0].message_count
    assert again.status == "updated" and again.sessions[0].added_messages > 0
    assert kept > 200
    if agent == "claude-code":
        # its parser measured every call: only the tail check reads stored messages
        assert sum(rows_loaded) <= TAIL_CHECK, rows_loaded
    else:
        # the calls' history needs them (Codex): read once, with the new ones (before: kept²/2 rows)
        assert sum(rows_loaded) <= TAIL_CHECK + again.sessions[0].message_count, (kept, rows_loaded)
    with open_store(tmp_path / "whole.db") as store:
        import_file(whole, store)
    assert table_rows(tmp_path / "grown.db", grown.parent) == table_rows(tmp_path / "whole.db", whole.parent)
