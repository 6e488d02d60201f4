"""The timeline opens call by call when drawing it turn by turn would hide a larger call (a compaction
within a turn): on real agents' sessions, read through DuckDB as the page reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from dashboard import data
from dashboard.analysis import hides_a_larger_call
from engine.importers import import_files
from engine.importers.locations import folder_files
from engine.store import SessionStore

REAL = Path(__file__).parent / "fixtures" / "real_agents"


@pytest.mark.parametrize(
    ("scenario", "hidden"),
    [
        ("qwen/compress", True),  # 99,769 tokens at turn 0's first call; the turn's last call 20,856
        ("copilot/compact", True),  # its compaction runs inside a turn
        ("claude-code/compact_auto", False),  # one call a turn: the compaction falls between turns
        ("qwen/tools-resume", False),  # calls only grow within a turn
        ("opencode/tools-resume", False),
    ],
)
def test_a_turn_that_holds_a_larger_call_than_its_last_is_seen(
    tmp_path: Path, scenario: str, hidden: bool
) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        results = import_files(folder_files(REAL / scenario), store, on_error=lambda _path, _error: None)
        main = [s.id for s in store.list_sessions() if s.parent_session_id is None]
    assert results and len(main) == 1
    con = data.connect([db])
    turns = data.timeline(con, data.db_labels([db])[0], main[0])
    assert not turns.empty
    assert hides_a_larger_call(turns) is hidden, turns[["turn", "projected_tokens", "peak_projected"]]
    if hidden:  # the session's largest call is not on the chart drawn turn by turn
        assert turns["peak_projected"].max() > turns["projected_tokens"].max()
