"""One rule for "what did request N send?": the dashboard (DuckDB) and the engine's readers
(findings, reports) agree on every request of every bundled database and of a fresh session."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dashboard import data
from engine.findings import load_session_view
from engine.sent import sent_end
from engine.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
BUNDLED = sorted((ROOT / "data").glob("*.db"))


def engine_sent(store: SessionStore, session_id: str) -> dict[int, tuple[int, list[int]]]:
    """event seq -> (turn, seqs sent) by the engine's request views."""
    view = load_session_view(store, session_id)
    seqs = [m.seq for m in view.messages]
    return {r.event_seq: (r.turn_index, [s for s in seqs if r.sends(s)]) for r in view.requests}


def assert_readers_agree(path: Path) -> int:
    con = data.connect([path])
    checked = 0
    try:
        label = data.db_labels([path])[0]
        with SessionStore(path, read_only=True) as store:
            for session in store.list_sessions():
                for event_seq, (turn, seqs) in engine_sent(store, session.id).items():
                    if event_seq < 0:
                        continue
                    shown = data.sent_messages(con, label, session.id, turn, event_seq)
                    assert sorted(shown["seq"]) == seqs, (path.name, session.id, event_seq)
                    checked += 1
    finally:
        con.close()
    return checked


@pytest.mark.parametrize("bundled", BUNDLED, ids=[p.name for p in BUNDLED])
def test_the_dashboard_and_the_engine_agree_on_what_each_bundled_request_sent(
    bundled: Path, tmp_path: Path
) -> None:
    copy = tmp_path / bundled.name
    shutil.copy(bundled, copy)
    assert assert_readers_agree(copy) > 0


def test_a_request_never_lists_the_reply_it_produced(tmp_path: Path) -> None:
    from engine.clients import ScriptedClient
    from engine.compaction import OfflineSummarizer
    from engine.messages import assistant, tool_use
    from engine.session import SessionManager

    path = tmp_path / "s.db"
    steps = [assistant("Looking.", tool_use("t1", "shell", cmd="ls")), "Two files."]
    shell = {"name": "shell", "description": "Run a command.", "input_schema": {"type": "object"}}
    with SessionStore(path) as store:
        with SessionManager(
            ScriptedClient(steps, model="gpt-4o"), store, tools=[shell],
            tool_handlers={"shell": lambda _: "a.py\nb.py"}, summarizer=OfflineSummarizer(),
        ) as m:  # fmt: skip
            m.run_turn("What is here?")
            sid = m.session_id
        kinds = {row.seq: row.kind for row in store.load_messages(sid)}
        for event in store.list_events(sid, kind="request"):
            end = sent_end(
                event.details, event.message_seq, event.turn_index, kind_of=kinds.get, turn_end=len
            )
            assert kinds[end] == "tool_use" or kinds[end] == "assistant"  # the reply is the first not sent
    assert assert_readers_agree(path) == 2


@pytest.mark.parametrize(
    ("details", "message_seq", "kind", "expected"),
    [
        ({"messages_sent": 7}, 9, "assistant", 7),  # recorded: wins
        ({}, 9, "assistant", 9),  # the reply it produced is not sent
        ({}, 9, "user_input", 10),  # a message it sent
        ({}, None, None, 12),  # the end of its turn
        ({"messages_sent": True}, None, None, 12),  # not a count
    ],
)
def test_sent_end_rule(details: dict, message_seq: int | None, kind: str | None, expected: int) -> None:
    assert sent_end(details, message_seq, 3, kind_of=lambda _: kind, turn_end=lambda turn: 12) == expected


@pytest.mark.parametrize("bundled", BUNDLED, ids=[p.name for p in BUNDLED])
def test_requests_share_one_removed_set_per_compaction(bundled: Path, tmp_path: Path) -> None:
    """Memory stays linear on long compacted sessions: the requests after a compaction share its
    sets of removed and cleared seqs instead of each holding a copy."""
    copy = tmp_path / bundled.name
    shutil.copy(bundled, copy)
    with SessionStore(copy, read_only=True) as store:
        for session in store.list_sessions():
            view = load_session_view(store, session.id)
            compactions = sum(1 for e in view.events if e.kind == "compaction" and e.outcome == "compacted")
            assert len({id(r.removed) for r in view.requests}) <= compactions + 1
            assert len({id(r.cleared) for r in view.requests}) <= compactions + 1


#: Real-CLI runs whose calls leave messages out below their bound (messages_excluded): Claude Code's
#: compaction summarizers, and Gemini CLI's first run after --resume added second copies of results.
EXCLUDING_RUNS = [
    "claude-code/compact_auto", "claude-code/compact_manual", "claude-code/compact_reactive",
    "gemini/tools-resume",
]  # fmt: skip


@pytest.mark.parametrize("run", EXCLUDING_RUNS)
def test_the_dashboard_leaves_out_what_a_real_call_left_out_below_its_bound(run: str, tmp_path: Path) -> None:
    from engine.importers import import_files
    from engine.importers.locations import folder_files

    path = tmp_path / "real.db"
    with SessionStore(path) as store:
        import_files(
            folder_files(ROOT / "tests" / "fixtures" / "real_agents" / run), store, on_error=lambda p, e: None
        )
        assert any(
            e.messages_excluded
            for s in store.list_sessions()
            for e in store.list_events(s.id, kind="request")
        )
    assert assert_readers_agree(path) > 0
