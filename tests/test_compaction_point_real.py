"""One point per call: the timeline's auto-compact point of an imported agent's session is the one the
"Why did it stop?" page gives that agent's compactions (real agents' runs, tests/fixtures/real_agents)."""

from __future__ import annotations

from pathlib import Path

from dashboard import analysis, data
from engine.explain import explain_store
from engine.importers import import_files
from engine.importers.locations import folder_files
from engine.store import SessionStore
from tests.conftest import FIXTURES


def test_the_timelines_compaction_point_is_the_why_pages(tmp_path: Path) -> None:
    db = tmp_path / "real.db"
    store = SessionStore(db)
    import_files(folder_files(FIXTURES / "real_agents"), store, on_error=lambda _path, _error: None)
    sessions = [s.id for s in store.list_sessions()]
    why = explain_store(store, sessions).sessions
    store.close()
    con = data.connect([db])
    compared = []
    for session in why:
        for c in session.compactions:
            if c.by != "agent" or c.threshold_rule in (None, "recorded with the compaction"):
                continue
            point = analysis.compaction_point(
                data.agent_context(con, "real", session.session_id),
                window=c.window_tokens, limit=c.limit_tokens, compact_threshold=0.95,
            )  # fmt: skip
            compared.append((session.agent, c.threshold_tokens, point.tokens))
            assert point.tokens == c.threshold_tokens, (session.session_id, c.threshold_rule, point.rule)
            assert point.rule.endswith(c.threshold_rule), (point.rule, c.threshold_rule)
    assert {agent for agent, _, _ in compared} >= {"claude-code", "codex", "gemini", "qwen"}, compared
