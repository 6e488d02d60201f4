"""The "Why did it stop?" page and the Sessions page's "ended how" filter, driven through Streamlit's
AppTest over real agents' fixtures imported with ctxdesk's importers (and the bundled demo)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard.data import DB_PATHS_ENV_VAR
from engine.settings import SETTINGS_ENV_VAR
from engine.store import SessionStore
from tests.dashboard_real_sessions import import_claude_code_scenarios

ROOT = Path(__file__).resolve().parents[1]
APP = ROOT / "dashboard" / "app.py"
CLAUDE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
CODEX_COMPACTED = next(
    (ROOT / "tests" / "fixtures" / "real_agents" / "codex" / "auto-compact" / "sessions").rglob(
        "rollout-*.jsonl"
    )
)
TIMEOUT = 90


@pytest.fixture(scope="module")
def agents_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("why") / "agents.db"
    return import_claude_code_scenarios(
        path, "compact_reactive", "compact_auto", "interrupt", also=(CODEX_COMPACTED,)
    )


@pytest.fixture
def served(agents_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(agents_db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return agents_db


def _why_page(db: Path, session_id: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    at.session_state["selected_session"] = f"{db.stem}::{session_id}"
    at.switch_page("views/why_stop.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _plain(text: object) -> str:
    return str(text).replace("\\", "")


def test_a_reactive_claude_code_compaction_says_which_call_was_refused_first(served: Path) -> None:
    with SessionStore(served, read_only=True) as store:
        sid = next(
            s.id for s in store.list_sessions()
            if any(e.details.get("trigger_kind") == "reactive" for e in store.list_events(s.id, kind="compaction"))
        )  # fmt: skip
    at = _why_page(served, sid)
    headline = _plain(at.subheader[0].value)
    assert headline.startswith(
        "The provider refused call 3: prompt is too long; Claude Code then compacted reactively"
    )
    failed = next(d.value for d in at.dataframe if "then" in d.value.columns)
    assert list(failed["cause"]) == ["prompt too long"]
    facts = at.table[0].value["value"].map(_plain)
    assert (facts["who"], facts["trigger"], facts["after failed call"]) == (
        "the agent itself",
        "reactive",
        "3",
    )
    items = next(d.value for d in at.dataframe if "outcome" in d.value.columns)
    assert {"instruction", "file"} <= set(items["kind"])
    assert not at.success  # ctxdesk's guard never watched an imported agent's session: nothing to say of it
    # the timeline and the Compaction page say the same of it as this page
    at.switch_page("views/timeline.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(
        _plain(i.value).startswith(
            "Edited here by the agent itself: the agent compacted reactively after a call was refused as too long"
        )
        for i in at.info
    ), [i.value for i in at.info]
    at.switch_page("views/compaction.py").run()
    past = next(d.value for d in at.dataframe if "by" in d.value.columns)
    assert (list(past["by"]), list(past["trigger"])) == (["agent"], ["reactive"])


def test_an_auto_compaction_shows_the_threshold_in_force(served: Path) -> None:
    with SessionStore(served, read_only=True) as store:
        sid = next(
            s.id for s in store.list_sessions()
            if any(e.details.get("trigger_kind") == "auto" and (e.details.get("source") or "") == "import:claude-code"
                   for e in store.list_events(s.id, kind="compaction"))
        )  # fmt: skip
    at = _why_page(served, sid)
    assert _plain(at.subheader[0].value).startswith(
        "Claude Code compacted itself at call 2: its estimate reached 95,049 of 167,000 tokens (auto-compact at limit 180,000 − 13,000)"
    )
    facts = at.table[0].value["value"].map(_plain)
    # the limit the timeline shows (window less Claude Code's 20,000 summary reserve), and the window beside it
    assert (facts["limit"], facts["window"], facts["threshold in force"]) == ("180,000", "200,000", "167,000")


def test_a_codex_compaction_and_an_interrupted_claude_code_turn(served: Path) -> None:
    with SessionStore(served, read_only=True) as store:
        codex = next(s.id for s in store.list_sessions() if s.source == "import:codex")
        stopped = next(s.id for s in store.list_sessions() if (s.title or "").startswith("Wait two minutes"))
    at = _why_page(served, codex)
    assert _plain(at.subheader[0].value).startswith(
        "Codex compacted itself at call 1: its estimate reached 39,731 tokens, past its compaction point of 20,000 (model_auto_compact_token_limit = 20,000)"
    )
    at = _why_page(served, stopped)
    assert (
        _plain(at.subheader[0].value)
        == "The user stopped the turn after call 1: [Request interrupted by user for tool use]"
    )


def test_sessions_filter_by_how_they_ended_and_say_how_many_each_filter_keeps(served: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception, [e.value for e in at.exception]
    table = at.dataframe[0].value
    assert {"ended_how", "why"} <= set(table.columns)
    at.multiselect(key="sessions_ended").set_value(["interrupted"]).run()
    kept = at.dataframe[0].value
    assert list(kept["title"].str.strip().str.lstrip("└ ").str[:16]) == ["Wait two minutes"]
    assert any("Ended how keeps 1 of" in str(c.value) for c in at.caption)
    at.multiselect(key="sessions_ended").set_value(["compacted"]).run()
    assert len(at.dataframe[0].value) == 3  # Claude Code auto, reactive, Codex
    assert at.query_params["ended"] in ("compacted", ["compacted"])


def test_recorded_instructions_are_shown_as_text_never_markdown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.events import ContextEvent
    from engine.messages import assistant, user
    from engine.tokens import get_tokenizer

    hostile = "**keep** [this](http://evil.example/x.png) <img src=x onerror=alert(1)>"
    path = tmp_path / "hostile.db"
    with SessionStore(path) as store:
        sid = store.create_session(session_id="h", title="hostile", model="claude-sonnet-4-5")
        store.append_messages(
            sid,
            [user("a"), assistant("b"), user("c"), assistant("d")],
            tokenizer=get_tokenizer("claude-sonnet-4-5"),
        )
        store.record_event(
            sid,
            ContextEvent(
                kind="compaction", trigger="manual", outcome="compacted", turn_index=1,
                details={"before_tokens": 900, "after_tokens": 100, "removed_message_seqs": [0, 1], "instructions": hostile},
            ),
        )  # fmt: skip
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(path))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = _why_page(path, "h")
    raw = at.table[0].value["value"]["instructions"]
    # escaped for st.table's Markdown (a bare URL kept from linking by a zero-width space): the same words shown
    assert raw != hostile and _plain(raw).replace("\u200b", "") == hostile
    for element in [
        *at.markdown,
        *at.subheader,
        *at.caption,
    ]:  # Markdown-rendering elements: every mark escaped
        assert not re.search(r"(?<!\\)<|(?<!\\)\]\(", str(element.value)), element.value
