"""Every dashboard page driven through streamlit.testing.v1.AppTest over the fixture database."""

from __future__ import annotations

import json
import os
import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pandas as pd
import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard.data import DB_PATHS_ENV_VAR, DEFAULT_DATA_DIR
from engine.settings import SETTINGS_ENV_VAR, load_settings
from tests.dashboard_fixture import HOSTILE_TEXT, copy_dashboard_db
from tests.dashboard_real_sessions import (
    Session,
    all_sessions,
    copy_real_sessions_db,
    representative_sessions,
    walk_parts,
)

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
TIMEOUT = 60


@pytest.fixture
def db(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = copy_dashboard_db(tmp_path_factory.getbasetemp(), tmp_path / "sample.db")
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(target))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return target


@pytest.fixture(scope="module")
def _read_only_sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """One copy of the fixture database and a settings path (no file) for the module's tests that only
    read; no page they open may write to either."""
    base = tmp_path_factory.mktemp("read_only")
    db = copy_dashboard_db(tmp_path_factory.getbasetemp(), base / "sample.db")
    settings = base / "config" / "settings.toml"
    before = db.read_bytes()
    yield db, settings
    assert db.read_bytes() == before, "a page the read-only tests opened wrote to the database"
    assert not settings.exists(), "a page the read-only tests opened wrote the settings file"


@pytest.fixture
def read_db(_read_only_sample: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The fixture database of the tests that only read it, shared by them with Streamlit's caches, as one
    dashboard server's users share them: a page's first run over a new database computes its queries (the
    Sessions page ~8 s on the loaded 2-core box, ~1.5 s with warm caches). A test that writes uses ``db``."""
    db, settings = _read_only_sample
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(settings))
    return db


def _app(session: str | None = "sess-refactor", page: str | None = None) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    _ok(at)
    if session is not None:
        at.session_state["selected_session"] = f"sample::{session}"
    if page is not None:
        at.switch_page(f"views/{page}.py").run()
        _ok(at)
    return at


def _ok(at: AppTest) -> None:
    assert not at.exception, [e.value for e in at.exception]


def _plain(markdown: object) -> str:
    """Markdown-escaped recorded text (dashboard.display.md) read back as the user sees it."""
    return re.sub(r"\\(.)", r"\1", str(markdown))


def _texts(at: AppTest) -> str:
    return _plain("\n".join(
        [t.value for t in at.text] + [c.value for c in at.code] + [str(i.value) for i in at.info]
        + [str(s.value) for s in at.success] + [str(e.value) for e in at.error]
    ))  # fmt: skip


def _field(at: AppTest, label: str):
    """The Model settings text field with this label (its key carries a reload generation)."""
    return next(t for t in at.text_input if t.label == label)


def _no_markdown_holds_raw_html(at: AppTest) -> None:
    for element in [*at.markdown, *at.caption, *at.title, *at.subheader]:
        assert "<script>" not in str(element.value)
        assert "onerror" not in str(element.value)


def test_app_opens_on_sessions_listing_every_session(read_db: Path) -> None:
    at = _app(session=None)
    assert at.title[0].value == "Sessions"
    table = at.dataframe[0].value
    assert set(table["session_id"]) == {"sess-refactor", "sess-report", "sess-small"}
    assert {"peak_usage_pct", "compactions", "forced_final", "offloaded_bytes", "turns"} <= set(table.columns)
    assert at.metric[0].value == "3"
    assert at.sidebar.selectbox[0].value == at.session_state["selected_session"]


@pytest.mark.parametrize(("opened", "charts"), [(False, 0), (True, 1)], ids=["closed", "opened"])
def test_the_sessions_peak_usage_chart_is_built_only_while_its_expander_is_open(
    read_db: Path, opened: bool, charts: int
) -> None:
    """The Sessions page computes only what it shows (#36.12): a closed expander's chart is not built."""
    at = _app(session=None)
    assert any(e.label == "Peak usage by session" for e in at.expander)
    if opened:
        at.session_state["sessions_peak_chart"] = True  # what opening it in the browser sets
        at.run()
        _ok(at)
    charts_drawn = at.get("plotly_chart")
    assert len(charts_drawn) == charts
    assert all("Peak usage" in c.proto.spec for c in charts_drawn)


def test_sessions_filters_and_sorts(read_db: Path) -> None:
    at = _app(session=None)
    at.text_input(key="sessions_search").input("quarterly").run()
    assert list(at.dataframe[0].value["session_id"]) == ["sess-report"]
    at.text_input(key="sessions_search").input("").run()
    at.multiselect(key="sessions_ended").set_value(["forced"]).run()
    assert set(at.dataframe[0].value["session_id"]) == {"sess-refactor"}
    sort = at.selectbox(key="sessions_sort")
    assert sort.options[:2] == ["Last active (UTC)", "Peak usage"]  # the table's labels, not column names
    sort.set_value("turns").run()
    at.toggle(key="sessions_desc").set_value(False).run()
    assert list(at.dataframe[0].value["turns"]) == sorted(at.dataframe[0].value["turns"])


def test_sidebar_pick_selects_the_session_for_every_page(read_db: Path) -> None:
    at = _app(session=None)
    at.sidebar.selectbox[0].set_value("sample::sess-report").run()
    _ok(at)
    assert at.session_state["selected_session"] == "sample::sess-report"
    at.switch_page("views/why_stop.py").run()
    assert "Summarise the quarterly report" in _texts(at)


def test_timeline_charts_components_and_shows_what_a_turn_sent(read_db: Path) -> None:
    at = _app(page="timeline")
    chart = at.get("plotly_chart")[0]
    assert "Tool results" in chart.proto.spec and "Effective limit" in chart.proto.spec
    assert "Forced final turn" in chart.proto.spec and "Compaction" in chart.proto.spec
    at.number_input(key="timeline_turn").set_value(4).run()
    _ok(at)
    assert at.subheader[0].value == "What was sent at turn 4"
    sent = next(df.value for df in at.dataframe if "tokens" in df.value.columns)
    assert list(sent["tokens"]) == sorted(sent["tokens"], reverse=True)
    assert at.selectbox(key="timeline_message").value == int(sent.iloc[0]["seq"])
    assert "auth/part3.py" in at.code[0].value  # the largest message, read in full


def test_hostile_message_text_is_shown_literally_never_as_markup(read_db: Path) -> None:
    at = _app(page="timeline")
    at.number_input(key="timeline_turn").set_value(1).run()
    seq = next(o for o in at.selectbox(key="timeline_message").options if "user_input" in o)
    at.selectbox(key="timeline_message").set_value(int(seq.split()[0].lstrip("#"))).run()
    _ok(at)
    assert HOSTILE_TEXT in at.code[0].value
    _no_markdown_holds_raw_html(at)


def test_why_did_it_stop_explains_the_forced_final_turn(read_db: Path) -> None:
    at = _app(page="why_stop")
    text = _texts(at)
    assert "limit = context_window 13,500 - max_output_tokens 1,024 - buffer_tokens 256 = 12,220" in text
    assert "Message 22 (tool_result" in text
    assert "context_window ≥" in text
    assert "result_offload_threshold ≤" in text
    assert "compact_threshold 0." in text
    sources = at.dataframe[0].value
    assert "model:claude-sonnet-4-20250514 (settings.toml)" in set(sources["came from"])
    growth = at.dataframe[1].value
    assert growth.iloc[0]["component"] == "Tool results"


def test_why_did_it_stop_for_a_skipped_provider_and_for_a_clean_session(read_db: Path) -> None:
    at = _app(session="sess-report", page="why_stop")
    assert "Skipped provider" in _texts(at) + "".join(str(m.value) for m in at.markdown)
    assert "provider:openai (settings.toml)" in set(at.dataframe[0].value["came from"])
    at = _app(session="sess-small", page="why_stop")
    assert "never hit a forced final turn" in str(at.success[0].value)


def test_compaction_preview_writes_nothing_and_apply_writes_a_snapshot(db: Path) -> None:
    at = _app(session="sess-report", page="compaction")
    before = db.read_bytes()
    at.button(key="cmp_preview").click().run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert at.markdown[0].value == "**Preview** (nothing written)"
    assert "Compacted" in _texts(at) or "Nothing compacted" in _texts(at)
    assert db.read_bytes() == before
    at.selectbox(key="cmp_strategy").set_value("sliding_window").run()
    at.number_input(key="cmp_sliding_window_keep_messages").set_value(4).run()
    at.button(key="cmp_apply").click().run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert "snapshot #" in str(at.success[0].value)
    rows = (
        sqlite3.connect(db)
        .execute("SELECT strategy FROM session_snapshots WHERE session_id = 'sess-report'")
        .fetchall()
    )
    assert rows == [("sliding_window",)]
    at.run()
    assert "Past compactions" in [s.value for s in at.subheader]
    past = next(d.value for d in at.dataframe if "trigger" in d.value.columns)
    assert list(past["trigger"]) == ["manual"]
    # Message by message: what the applied sliding window removed, the rest kept.
    changed = next(d.value for d in at.dataframe if {"change", "text_preview"} <= set(d.value.columns))
    assert set(changed["change"]) == {"removed or summarized"} and len(changed) == 16 - 4


def test_restore_writes_a_restore_snapshot(db: Path) -> None:
    at = _app(page="compaction")
    at.button(key="cmp_restore").click().run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    rows = (
        sqlite3.connect(db)
        .execute("SELECT strategy FROM session_snapshots WHERE session_id = 'sess-refactor' ORDER BY id")
        .fetchall()
    )
    assert rows == [("chain",), ("restore",)]


def test_offloaded_results_page_reads_searches_and_downloads(read_db: Path) -> None:
    at = _app(page="offloaded")
    assert len(at.dataframe[0].value) == 1
    assert at.get("download_button")
    at.text_input(key="blob_search").input("handler_42").run()
    _ok(at)
    assert any("handler_42" in c.value for c in at.code)
    at.selectbox(key="blob_page_size").set_value(100).run()
    at.number_input(key="blob_page").set_value(2).run()
    assert "Lines 101-200" in "".join(c.value for c in at.caption)
    at.radio(key="blobs_scope").set_value("All sessions").run()
    at.selectbox(key="blobs_tool").set_value("bash").run()
    _ok(at)
    assert "Binary output" in _texts(at)


def test_tools_page_shows_costs_deferrals_and_searches(read_db: Path) -> None:
    at = _app(page="tools")
    assert len(at.get("plotly_chart")) == 2
    frames = [d.value for d in at.dataframe]
    servers = frames[0].set_index("server")
    assert servers.loc["github", "tokens"] == 1160
    assert frames[1].set_index("name").loc["read_file", "calls"] == 6
    assert list(frames[2]["hit"]) == [True, False]
    # both tool tables head their columns in words and print counts with thousands separators
    for table in at.dataframe[:2]:
        config = json.loads(table.proto.columns)
        assert config["tokens"]["label"] == "Definition tokens"
        assert config["tokens"]["type_config"]["format"] == "localized"
        assert not any("_" in config[c]["label"] for c in table.value.columns if c in config)
    at = _app(session="sess-small", page="tools")
    assert "No deferral events" in _texts(at)


def test_model_settings_validates_as_you_type_saves_and_reprojects_the_timeline(
    db: Path, tmp_path: Path
) -> None:
    at = _app(page="model_settings")
    _field(at, "compact_threshold").input("1.5").run()
    _ok(at)
    assert any("compact_threshold" in _plain(e.value) for e in at.error)
    assert at.button[-1].disabled  # save
    _field(at, "compact_threshold").input("0.85").run()
    _field(at, "context_window").input("16000").run()
    _field(at, "max_output_tokens").input("2000").run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert "Under edited settings: limit 13,744, would compact at turn 5" in _texts(at)
    at.button[-1].click().run()
    _ok(at)
    saved = load_settings(tmp_path / "config" / "settings.toml")
    assert saved.models["claude-sonnet-4-20250514"].context_window == 16_000
    at.switch_page("views/timeline.py").run()
    _ok(at)
    assert "Under edited settings: limit 13,744, would compact at turn 5" in _texts(at)
    assert "would compact" in at.get("plotly_chart")[0].proto.spec


def test_a_value_typed_in_the_run_that_finds_the_file_changed_on_disk_is_kept(
    db: Path, tmp_path: Path
) -> None:
    """The fields are made anew when the file changes on disk (to show it): a value typed in the same run
    was read from the old fields after that and lost, and Save wrote the file without it (the browser
    test of following the file failed so in a fresh-clone CI, its file written while the page read it)."""
    settings = tmp_path / "config" / "settings.toml"
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text('[models."gpt-4o"]\ncontext_window = 128000\n')
    at = _app(page="model_settings")
    _field(at, "max_output_tokens").input("8000")
    settings.write_text('[models."gpt-4o"]\ncontext_window = 64000\n')  # before the run that reads the 8000
    at.run()
    _ok(at)
    assert _field(at, "max_output_tokens").value == "8000"
    at.button[-1].click().run()
    _ok(at)
    saved = load_settings(settings)
    assert saved.models["claude-sonnet-4-20250514"].max_output_tokens == 8_000
    assert saved.models["gpt-4o"].context_window == 64_000


def test_the_timeline_says_what_the_import_noted_of_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old Copilot CLI's file keeps no usage per call (tests/fixtures/real_agents/copilot/releases): the
    timeline's numbers are then ctxdesk's own count, and the page says so in the importer's words."""
    from engine.importers import import_file
    from engine.store import SessionStore

    releases = Path(__file__).resolve().parent / "fixtures" / "real_agents" / "copilot" / "releases"
    events = next(releases.glob("*/session-state/*/events.jsonl"))
    with SessionStore(tmp_path / "old.db") as store:
        (session,) = import_file(events, store).sessions
        notes = store.get_session(session.session_id).metadata["import_notes"]
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(tmp_path / "old.db"))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    at.session_state["selected_session"] = f"old::{session.session_id}"
    at.switch_page("views/timeline.py").run()
    _ok(at)
    (noted,) = [e for e in at.expander if e.label.startswith("What the import noted")]
    assert noted.label == f"What the import noted ({len(notes)})"
    shown = [t.value for t in noted.text]
    assert shown == ["• " + n for n in notes] and any("keeps no usage per call" in n for n in shown)


def test_a_bad_database_path_shows_an_error_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "bad.db"
    bad.write_text("hello")
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(bad))
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    assert not at.exception
    assert "Cannot open the session databases" in str(at.error[0].value)


def test_one_junk_database_in_a_folder_is_skipped_with_a_warning_and_the_rest_load(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "dbs"
    folder.mkdir()
    copy_dashboard_db(tmp_path_factory.getbasetemp(), folder / "sample.db")
    (folder / "junk.db").write_bytes(b"not a database at all" * 100)
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(folder))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT).run()
    _ok(at)
    assert not at.error, [e.value for e in at.error]
    assert any("junk.db" in _plain(w.value) for w in at.sidebar.warning)
    assert set(at.dataframe[0].value["session_id"]) == {"sess-refactor", "sess-report", "sess-small"}


def test_timeline_by_model_call_shows_the_turn_each_call_belongs_to(read_db: Path) -> None:
    at = _app(page="timeline")
    at.radio(key="timeline_step").set_value("model call").run()
    _ok(at)
    chart = at.get("plotly_chart")[0]
    assert '"title":{"text":"Call"}' in chart.proto.spec.replace(" ", "")
    at.number_input(key="timeline_call").set_value(3).run()
    _ok(at)
    assert at.subheader[0].value == "What was sent at turn 1 (call 3)"


@pytest.mark.skipif(
    not any(DEFAULT_DATA_DIR.glob("*.db")), reason="no bundled sample data in data/ (ctxdesk demo)"
)
def test_opens_on_the_bundled_sample_data_with_no_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(DB_PATHS_ENV_VAR, raising=False)
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    before = {p: p.stat().st_mtime_ns for p in DEFAULT_DATA_DIR.glob("*.db")}
    at = _app(session=None)
    assert len(at.dataframe[0].value) >= 1
    for page in ("timeline", "why_stop", "tools"):
        at.switch_page(f"views/{page}.py").run()
        _ok(at)
        assert not at.error, [e.value for e in at.error]
    assert {p: p.stat().st_mtime_ns for p in DEFAULT_DATA_DIR.glob("*.db")} == before


# -- findings, links, recorded settings --------------------------------------------------------


def test_sessions_page_lists_the_selected_sessions_findings_largest_first(read_db: Path) -> None:
    at = _app(session="sess-report", page="sessions")
    assert "Findings" in [s.value for s in at.subheader]
    table = at.dataframe(key="sessions_findings").value
    assert list(table["tokens"]) == sorted(table["tokens"], reverse=True)
    assert {"Unused tools", "Repeated read"} <= set(table["kind"])
    assert "fixing them would save" in "".join(c.value for c in at.caption)
    at = _app(session="sess-small", page="sessions")
    assert "No wasted context found" in _texts(at)


def test_a_picked_finding_shows_its_details_and_opens_its_turn_on_the_timeline(read_db: Path) -> None:
    at = _app(session="sess-report", page="sessions")
    table = at.dataframe(key="sessions_findings").value
    row = int(table.index[table["kind"] == "Repeated read"][0])
    at.session_state["sessions_findings"] = {"selection": {"rows": [row], "columns": [], "cells": []}}
    at.run()
    _ok(at)
    text = _texts(at)
    assert "Repeated read at turn 3: bash" in text
    assert "Fix: clear_tool_results keep=3" in text
    at.button(key="findings_open").click().run()
    _ok(at)
    assert at.title[0].value == "Context timeline"
    assert at.number_input(key="timeline_turn").value == 3


def test_timeline_marks_findings_and_the_turn_panel_lists_them(read_db: Path) -> None:
    at = _app(session="sess-report", page="timeline")
    spec = at.get("plotly_chart")[0].proto.spec
    assert "Findings (hover" in spec and "tokens to save" in spec
    at.number_input(key="timeline_turn").set_value(3).run()
    _ok(at)
    assert "**Findings at turn 3** (1)" in [m.value for m in at.markdown]
    text = _texts(at)
    assert "Repeated read: bash" in text and "read 2 times with identical output" in text
    assert "Would save" in text and "Fix: clear_tool_results keep=3" in text
    at.number_input(key="timeline_turn").set_value(1).run()
    assert not any("Findings at turn" in str(m.value) for m in at.markdown)


def test_findings_follow_the_model_call_axis(read_db: Path) -> None:
    at = _app(session="sess-report", page="timeline")
    at.radio(key="timeline_step").set_value("model call").run()
    _ok(at)
    assert "Findings (hover; click the call" in at.get("plotly_chart")[0].proto.spec


def test_findings_refresh_when_the_database_changes(db: Path) -> None:
    from engine.events import ComponentTokens, ContextEvent
    from engine.messages import assistant, tool_result, tool_use
    from engine.store import SessionStore
    from engine.tokens import get_tokenizer

    at = _app(session="sess-small", page="sessions")
    assert "No wasted context found" in _texts(at)
    dump = "\n".join(f"notes.md:{i}: the quarterly numbers for region {i} were revised" for i in range(60))
    with SessionStore(db) as store:  # an agent reads the same file twice, then calls the model again
        for n in (1, 2):
            store.append_messages(
                "sess-small",
                [assistant("", tool_use(f"t{n}", "read_file", path="notes.md")), tool_result(f"t{n}", dump)],
                tokenizer=get_tokenizer("gpt-4.1-mini"),
            )
        last = store.message_count("sess-small") - 1
        store.record_event(
            "sess-small",
            ContextEvent(
                kind="request", turn_index=1, components=ComponentTokens(conversation=2_000), message_seq=last
            ),
        )
    at.run()
    _ok(at)
    assert "Repeated read" in set(at.dataframe(key="sessions_findings").value["kind"])


def test_a_plain_session_id_link_selects_the_session(read_db: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["session"] = "sess-report"
    at.run()
    _ok(at)
    assert at.session_state["selected_session"] == "sample::sess-report"
    assert at.sidebar.selectbox[0].value == "sample::sess-report"


def test_an_ambiguous_or_unknown_link_warns_and_keeps_the_default(
    db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.dashboard_fixture import write_dashboard_db

    other = tmp_path / "other" / "sample.db"
    other.parent.mkdir()
    write_dashboard_db(other)
    monkeypatch.setenv(DB_PATHS_ENV_VAR, os.pathsep.join([str(db), str(other)]))
    for link, warning in (
        ("sess-report", "is in 2 databases"),
        ("<b>nope</b>", "not in the loaded databases"),
    ):
        at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
        at.query_params["session"] = link
        at.run()
        _ok(at)
        assert warning in str(at.sidebar.warning[0].value)
        assert "<b>" not in str(at.sidebar.warning[0].value)


def test_why_did_it_stop_shows_every_recorded_setting_value(read_db: Path) -> None:
    from engine.tokens import get_tokenizer

    at = _app(page="why_stop")
    values = dict(zip(at.dataframe[0].value["setting"], at.dataframe[0].value["value"], strict=True))
    assert values["tokenizer"] == get_tokenizer("claude-sonnet-4-20250514").id
    assert values["note_threshold"] == "0.8"
    assert values["tool_response_max_bytes"] == "not set"
    assert values["result_offload_threshold"] == "16,384"
    assert "" not in set(values.values())


def test_why_did_it_stop_lists_close_calls_of_a_session_that_went_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.events import ContextEvent
    from engine.store import SessionStore

    path = tmp_path / "close.db"
    with SessionStore(path) as store:
        store.create_session(session_id="s", title="recovered", model="gpt-4o")
        store.record_event(
            "s",
            ContextEvent(kind="compaction", trigger="provider_error", outcome="compacted", turn_index=2,
                         reason="provider context-length error " + HOSTILE_TEXT),
        )  # fmt: skip
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(path))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = _app(session=None, page="why_stop")
    assert "never hit a forced final turn" in str(at.success[0].value)
    assert "**Close calls**" in [m.value for m in at.markdown]
    assert "Turn 2: the provider refused the request as too long" in _texts(at)
    assert HOSTILE_TEXT in _texts(at)
    _no_markdown_holds_raw_html(at)


def test_model_settings_show_what_the_session_ran_with_beside_the_resolved_values(read_db: Path) -> None:
    at = _app(page="model_settings")
    table = at.dataframe[0].value.set_index("setting")
    assert table.loc["context_window", "the session ran with"] == "13,500"
    assert table.loc["tool_response_max_bytes", "the session ran with"] == "not set"
    assert table.loc["tool_response_max_bytes", "value"] == "not set"
    assert "Under these settings:" in _texts(at)
    # the limit in words, by engine.limit's rule from the values in the table above
    window, reserve, buffer = (int(table.loc[f, "value"].replace(",", "")) for f in
                               ("context_window", "max_output_tokens", "buffer_tokens"))  # fmt: skip
    assert (
        f"Limit: {window - reserve - buffer:,} tokens (window {window:,} less {reserve:,} output reserve and "
        f"{buffer:,} buffer)"
    ) in _texts(at)


def test_a_suggested_fix_opens_model_settings_with_it_filled_in_unsaved(read_db: Path) -> None:
    at = _app(page="why_stop")
    suggestion = next(t.value for t in at.text if t.value.startswith("• context_window ≥"))
    wanted = int(suggestion.split("≥ ")[1].split(" ")[0].replace(",", ""))
    at.button(key=next(b.key for b in at.button if b.key and b.key.startswith("fix_"))).click().run()
    _ok(at)
    assert at.title[0].value == "Model settings"
    assert _field(at, "context_window").value == str(wanted)
    assert any("unsaved change" in str(c.value) for c in at.caption)
    assert not Path(os.environ[SETTINGS_ENV_VAR]).exists()  # nothing written until Save


def test_session_filters_live_in_the_url_both_ways(read_db: Path) -> None:
    at = AppTest.from_file(str(APP), default_timeout=TIMEOUT)
    at.query_params["q"] = "quarterly"
    at.query_params["sort"] = "turns"
    at.run()
    _ok(at)
    assert list(at.dataframe[0].value["session_id"]) == ["sess-report"]
    assert at.selectbox(key="sessions_sort").value == "turns"
    at.text_input(key="sessions_search").input("").run()
    at.multiselect(key="sessions_ended").set_value(["forced"]).run()
    assert "q" not in at.query_params
    assert at.query_params["ended"] in ("forced", ["forced"])


def test_timeline_prices_the_selected_call_and_lists_every_calls_cost(read_db: Path) -> None:
    at = _app(page="timeline")
    labels = {m.label: m.value for m in at.metric}
    cost_label = next((label for label in labels if label.startswith("Cost of turn")), None)
    assert cost_label is not None, sorted(labels)
    assert labels[cost_label].startswith("$") and float(labels[cost_label][1:]) > 0
    assert float(labels["Session so far"][1:]) >= float(labels[cost_label][1:])
    every = next(df.value for df in at.dataframe if "total_usd" in df.value.columns)
    assert len(every) > 1 and (every["total_usd"] > 0).all()


def test_compare_shows_two_sessions_and_two_calls_side_by_side_with_what_differs(read_db: Path) -> None:
    at = _app(page="compare")
    assert at.selectbox(key="cmp_a").value == "sample::sess-refactor"  # the selected session is A
    at.selectbox(key="cmp_b").set_value("sample::sess-small").run()
    _ok(at)
    table = at.dataframe[0].value
    assert list(table.columns[:3]) == ["figure", "A", "B"]
    models = table[table["figure"] == "Model"].iloc[0]
    assert (models["A"], models["B"], bool(models["differs"])) == (
        "claude-sonnet-4-20250514",
        "gpt-4.1-mini",
        True,
    )
    assert not table.isin(["None", "nan"]).any().any()
    texts = _texts(at)
    assert "**What differs**" in [m.value for m in at.markdown]
    assert "Model: claude-sonnet-4-20250514 in A, gpt-4.1-mini in B." in texts
    assert at.query_params["b"] == "sample::sess-small"
    # Two calls of the same session: the per-component difference is spelled out.
    at.selectbox(key="cmp_b").set_value("sample::sess-refactor").run()
    at.radio(key="cmp_mode").set_value("Two calls").run()
    _ok(at)
    calls = at.selectbox(key="cmp_call_a").options
    first = int(re.search(r"#(\d+)", calls[0]).group(1))
    at.selectbox(key="cmp_call_a").set_value(first).run()
    _ok(at)
    table = at.dataframe[0].value
    sent = table[table["figure"] == "Sent (tokens, our count)"].iloc[0]
    assert sent["A"] != sent["B"] and sent["differs"]
    assert "Tool results:" in _texts(at)


def test_compaction_page_survives_choices_a_live_rerun_made_stale(db: Path, tmp_path: Path) -> None:
    # A compaction recorded without details or token counts (an agent's own, imported) in another session.
    from engine.events import ContextEvent
    from engine.store import SessionStore

    with SessionStore(db) as store:
        for _ in range(3):  # its event numbers differ from sess-refactor's
            store.record_event(
                "sess-report", ContextEvent(kind="note", trigger="turn_preflight", outcome="ok")
            )
        store.record_event(
            "sess-report", ContextEvent(kind="compaction", trigger="compact_threshold", outcome="compacted")
        )
    at = _app(page="compaction")
    chosen = at.selectbox(key="cmp_past").value
    # Another session selected (or a live rerun changed the list): its own newest event is shown.
    at.session_state["selected_session"] = "sample::sess-report"
    at.run()
    _ok(at)
    past = next(d.value for d in at.dataframe if "trigger" in d.value.columns)
    assert at.selectbox(key="cmp_past").value == int(past["event"].iloc[-1]) != chosen
    assert past["before_tokens"].isna().iloc[-1] and past["snapshot"].isna().iloc[-1]
    assert any("—: not recorded" in c.value for c in at.caption)
    assert "This compaction recorded no message-level changes." in [c.value for c in at.caption]


def test_a_codex_session_draws_the_model_window_it_recorded_as_its_limit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.importers import import_files
    from engine.store import SessionStore

    path = tmp_path / "codex.db"
    fixture = (
        Path(__file__).resolve().parent / "fixtures" / "real_agents" / "codex" / "tools-resume" / "sessions"
    )
    with SessionStore(path) as store:
        import_files(sorted(fixture.rglob("*.jsonl")), store)
        assert len(store.list_sessions()) == 1  # one Codex session, opened first
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(path))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = _app(session=None, page="timeline")
    limit = next(m for m in at.metric if m.label.startswith("Limit"))
    # the import records the limit it knows (engine.settings.limit_for_model): the model's window
    assert limit.value == "258,400"  # model_context_window
    # Codex keeps no list of the tools it offered: how many were never called is not known
    at = _app(session=None, page="tools")
    metrics = {m.label: m.value for m in at.metric}
    assert metrics["Never called"] == "not known" and metrics["Tools named"] == "2"
    assert int(metrics["Tool descriptions, latest call"].replace(",", "")) > 0


# -- every page of every real agent's imported session -----------------------------------------

REAL_PAGES = (
    "sessions", "timeline", "why_stop", "compaction", "offloaded", "tools", "requests", "data_browser",
    "compare", "model_settings",
)  # fmt: skip
RAW_MISSING = re.compile(r"\b(None|nan|NaN|<NA>|NaT)\b")


def _page_problems(at: AppTest, recorded: list[str], provider_errors: Sequence[str] = ()) -> list[str]:
    """What a user must never see on a page: an exception, an error (but a failed call's recorded
    provider error), no title, or None/nan shown as text (messages' own text in code blocks, and the
    session's recorded id, title, model and errors, left out)."""
    problems = [f"exception: {e.value[:500]}" for e in at.exception]
    problems += [
        f"error: {e.value}" for e in at.error if not any(m in _plain(e.value) for m in provider_errors)
    ]
    if not at.title:
        problems.append("no page title")
    shown = [*at.markdown, *at.caption, *at.title, *at.header, *at.subheader, *at.text, *at.info]
    shown += [*at.warning, *at.success, *at.error]
    texts = [str(e.value) for e in shown] + [f"{m.label} {m.value}" for m in at.metric]
    for text in texts:
        for known in recorded:
            text = text.replace(known, "")
        problems += [f"{m.group(0)} in {text[:80]!r}" for m in RAW_MISSING.finditer(_plain(text))]
    return problems


def _table_problems(at: AppTest) -> list[str]:
    """Every table a page shows names its columns in words and groups numbers of four digits or more
    (the SQL page shows its tables' own column names, and is not checked)."""
    problems = []
    for table in at.dataframe:
        config = json.loads(table.proto.columns) if table.proto.columns else {}
        order = list(table.proto.column_order)
        for column in table.value.columns:
            spec = config.get(column, {})
            if spec.get("hidden") or (order and column not in order):
                continue
            label = spec.get("label") or column
            if "_" in label:
                problems.append(f"column headed {label!r}")
            values = table.value[column]
            numeric = pd.api.types.is_numeric_dtype(values) and not pd.api.types.is_bool_dtype(values)
            if numeric and (values.abs() >= 1000).any() and not spec.get("type_config", {}).get("format"):
                problems.append(f"{label!r} shows {values.abs().max()} without thousands separators")
    return problems


def test_every_table_on_every_page_names_its_columns_in_words(read_db: Path) -> None:
    at = _app()
    failures = {}
    for session in ("sess-refactor", "sess-small"):
        for name in REAL_PAGES:
            if name == "data_browser":
                continue
            at.session_state["selected_session"] = f"sample::{session}"
            at.switch_page(f"views/{name}.py").run()
            _ok(at)
            if problems := _table_problems(at):
                failures[(session, name)] = problems
    assert not failures, failures


#: The sessions beyond the representatives are walked in this many parts, each its own xdist group (and so
#: on either worker): the whole walk, 91 sessions at ~6 s each (the Sessions and Why pages ~2 s), was the
#: longest test of the suite, ~10 minutes on one worker (~30 at load 7). Part ``i`` walks the others'
#: sessions ``i``, ``i + FULL_WALK_PARTS``, ...: with the representatives, every page of every session.
FULL_WALK_PARTS = 2


def _walk_real_sessions(
    pick: Callable[[list[Session]], list[Session]],
    tmp_path: Path,
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every page of the sessions ``pick`` chooses among every real agent's imported sessions: no
    exception, no error but a failed call's recorded provider error, a title, no raw None/nan, every table
    in words, and the session stays selected."""
    (tmp_path / "data").mkdir()
    db = copy_real_sessions_db(tmp_path_factory.getbasetemp(), tmp_path / "data" / "real.db")
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db.parent))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    sessions = all_sessions(db)
    sources = {s.source for s in sessions}
    assert len(sources) >= 15 and len(sessions) >= 60, (len(sources), len(sessions))  # every fixture came in
    walked = pick(sessions)
    assert walked, "no session to walk"
    at = _app(session=None)
    failures: dict[tuple[str, str], list[str]] = {}
    for session in walked:
        for name in REAL_PAGES:
            at.session_state["selected_session"] = f"real::{session.session_id}"
            at.switch_page(f"views/{name}.py").run()
            problems = _page_problems(at, session.recorded, session.provider_errors)
            if name != "data_browser":
                problems += _table_problems(at)
            if at.session_state["selected_session"] != f"real::{session.session_id}":
                problems.append(f"the page switched the session to {at.session_state['selected_session']}")
            if problems:
                failures[(session.session_id, name)] = problems
    assert not failures, failures


def _others(sessions: list[Session]) -> list[Session]:
    """The imported sessions that are not representatives, by id."""
    chosen = {s.session_id for s in representative_sessions(sessions)}
    return [s for s in sessions if s.session_id not in chosen]


@pytest.mark.timeout(1800)
def test_every_page_of_the_representative_real_sessions_opens_without_an_error_or_a_raw_none(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page scripts, their queries and their text for one session of every import format and those
    showing what the others do not (compactions, sub-agents, parents, failed calls), imported by ``ctxdesk
    import`` from every real agent's fixture (the browser opens the same sessions' pages:
    tests/browser/test_dashboard_browser.py)."""

    def representatives(sessions: list[Session]) -> list[Session]:
        chosen = representative_sessions(sessions)
        assert {s.source for s in chosen} == {s.source for s in sessions}
        return chosen

    _walk_real_sessions(representatives, tmp_path, tmp_path_factory, monkeypatch)


@pytest.mark.full_walk
@pytest.mark.timeout(1800)
@pytest.mark.cost(240)
@pytest.mark.parametrize("part", walk_parts(FULL_WALK_PARTS, "apptest:walk"))
def test_every_page_of_every_other_imported_real_session_opens_without_an_error_or_a_raw_none(
    part: int, tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The walk above over every session it does not open (``-m "not full_walk"`` leaves these out)."""

    def my_part(sessions: list[Session]) -> list[Session]:
        return _others(sessions)[part::FULL_WALK_PARTS]

    _walk_real_sessions(my_part, tmp_path, tmp_path_factory, monkeypatch)


def test_the_two_walks_open_every_imported_real_session_once(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The representatives and the parts of the full walk together are every session, none twice."""
    sessions = all_sessions(copy_real_sessions_db(tmp_path_factory.getbasetemp(), tmp_path / "real.db"))
    walked = [s.session_id for s in representative_sessions(sessions)]
    for part in range(FULL_WALK_PARTS):
        walked += [s.session_id for s in _others(sessions)[part::FULL_WALK_PARTS]]
    assert sorted(walked) == sorted(s.session_id for s in sessions)


def test_a_compare_pair_stays_when_a_new_session_appears(db: Path) -> None:
    """#36.1: a session written meanwhile changes the pickers' options; the pair the link or the user
    chose stays (Streamlit falls back to a changed selectbox's first option, the newest session)."""
    from engine.messages import assistant, user
    from engine.store import SessionStore
    from engine.tokens import get_tokenizer

    at = _app(page="compare")
    at.selectbox(key="cmp_b").set_value("sample::sess-small").run()
    _ok(at)
    with SessionStore(db) as store:
        store.create_session(session_id="written-meanwhile", model="gpt-4o", title="A session being written")
        store.append_messages(
            "written-meanwhile", [user("hi"), assistant("ok")], tokenizer=get_tokenizer("gpt-4o")
        )
    st.cache_data.clear()
    at.run()
    _ok(at)
    assert (
        at.selectbox(key="cmp_a").options[0] == "A session being written · gpt-4o · sample"
    )  # the newest first
    assert (at.selectbox(key="cmp_a").value, at.selectbox(key="cmp_b").value) == (
        "sample::sess-refactor",
        "sample::sess-small",
    )
    assert (at.query_params["a"], at.query_params["b"]) == ("sample::sess-refactor", "sample::sess-small")
