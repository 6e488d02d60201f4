"""Cost on the dashboard: dashboard.data.costs through DuckDB, and the Sessions page's cost section."""

from __future__ import annotations

import json
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard.data import DB_PATHS_ENV_VAR
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.importers import import_file
from engine.messages import assistant, user
from engine.settings import SETTINGS_ENV_VAR
from engine.store import SessionStore
from engine.store.costs import project_costs
from engine.tokens import get_tokenizer
from tests.conftest import FIXTURES

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
CC = [
    FIXTURES / "sessions" / "claude-code__5c0375b4__head23.jsonl",
    FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl",
]


@pytest.fixture(scope="module")
def imported_costs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The two Claude Code sessions imported once for the module (tests get copies: some add sessions)."""
    path = tmp_path_factory.mktemp("costs") / "costs.db"
    with SessionStore(path) as store:
        for f in CC:
            import_file(f, store)
    return path


@pytest.fixture
def cost_db(imported_costs: Path, tmp_path: Path) -> Path:
    path = tmp_path / "costs.db"
    # Through SQLite's backup: the copy holds every commit, wherever SQLite keeps it (WAL or main file).
    with closing(sqlite3.connect(imported_costs)) as src, closing(sqlite3.connect(path)) as dst:
        src.backup(dst)
    return path


def test_duckdb_call_costs_equal_the_engine_costs_of_every_session(cost_db: Path) -> None:
    con = data.connect([cost_db])
    calls = data.call_costs(con.cursor())
    with SessionStore(cost_db, read_only=True) as store:
        engine_rows = [r for s in project_costs(store) for r in s.rows]
    assert len(calls) == len(engine_rows) > 0
    assert calls["total_usd"].sum() == pytest.approx(sum(r["total_usd"] for r in engine_rows))
    assert set(calls["project"]) == {"Demo"}  # the Claude Code sessions' cwd, /path/to/Demo
    per_session = data.session_costs(con.cursor(), calls)
    assert per_session["calls"].sum() == len(calls)
    assert set(per_session["root_session_id"]) <= set(calls["session_id"])


def test_filters_and_rollups_partition_the_cost(cost_db: Path) -> None:
    calls = data.call_costs(data.connect([cost_db]).cursor())
    total = data.cost_totals(calls)["total_usd"]
    by_day = data.rollup(calls, "day")
    assert list(by_day["day"]) == sorted(by_day["day"])
    assert by_day["total_usd"].sum() == pytest.approx(total)
    one_day = data.filter_calls(calls, days=[by_day["day"].iloc[0]])
    assert data.cost_totals(one_day)["total_usd"] == pytest.approx(by_day["total_usd"].iloc[0])
    assert data.filter_calls(calls, models=["no-such-model"]).empty
    assert data.cost_totals(calls.iloc[0:0])["total_usd"] == 0


def test_project_of_is_the_cwd_name_else_says_none_was_recorded() -> None:
    assert data.project_of('{"cwd": "/home/me/src/shop/"}') == "shop"
    assert data.project_of("{}") == data.project_of(None) == data.NO_PROJECT == "no project recorded"


def test_projects_of_the_same_folder_name_are_told_apart_by_the_parts_before_it() -> None:
    from dashboard.data.costs import project_labels

    paths = ["/home/me/a/repo", "/home/me/b/repo/", "/srv/shop", "/home/me/x/api", "/home/you/x/api", None]
    assert project_labels(paths) == {
        "/home/me/a/repo": "a/repo", "/home/me/b/repo/": "b/repo", "/srv/shop": "shop",
        "/home/me/x/api": "me/x/api", "/home/you/x/api": "you/x/api", None: "no project recorded",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("agent", "ours", "calls", "unpriced", "words"),
    [
        pytest.param(0.0609, 0.0587, 3, 0, "agree within a cent", id="a cent apart"),
        pytest.param(0.0352, 0.0256, 5, 0, "differ: ours is 27% lower", id="small sums a cent apart"),
        pytest.param(10.0, 10.15, 3, 0, "agree within 2%", id="close in share"),
        pytest.param(1.0, 0.5, 3, 0, "differ: ours is 50% lower", id="lower"),
        pytest.param(
            1.0, 1.5, 4, 1, "differ: ours is 50% higher (1 of 4 calls unpriced, counted at $0)", id="partly"
        ),
        pytest.param(0.0, 0.25, 2, 0, "differ: the agent recorded $0, we count $0.2500", id="agent zero"),
        pytest.param(
            1.2, None, 0, 0, "no provider usage recorded here: only the agent's figure", id="no usage"
        ),
        pytest.param(
            1.2, 0.0, 5, 5, "its model has no list price here: only the agent's figure", id="unpriced"
        ),
    ],
)
def test_an_agents_own_cost_is_compared_in_words(agent, ours, calls, unpriced, words) -> None:
    from dashboard.data.costs import _agreement

    assert _agreement(agent, ours, calls=calls, unpriced=unpriced) == words


def _add_unpriced_session(path: Path) -> None:
    with SessionStore(path) as store:
        store.create_session(session_id="acme", model="acme-large-1", title="A model with no price")
        store.append_messages("acme", [user("hi"), assistant("hello")], tokenizer=get_tokenizer("gpt-4o"))
        store.record_event("acme", ContextEvent(
            kind="request", trigger="user_input", outcome="ok", model="acme-large-1", turn_index=0,
            components=ComponentTokens(conversation=1_200),
            usage=ProviderUsage(input_tokens=1_200, output_tokens=40),
        ))  # fmt: skip


def _sessions_page(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AppTest:
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_unpriced_calls_are_named_on_the_page_not_costed_in_silence(
    cost_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_unpriced_session(cost_db)
    at = _sessions_page(cost_db, tmp_path, monkeypatch)
    (warning,) = [w.value for w in at.warning if "no list price" in str(w.value)]
    assert "1 of " in warning and "acme-large-1" in warning and "counted at $0" in warning
    metrics = {m.label: m.value for m in at.metric}
    expected = data.cost_totals(data.call_costs(data.connect([cost_db]).cursor()))["total_usd"]
    assert metrics["Cost of priced calls"] == f"${expected:,.2f}"
    at.radio(key="cost_by").set_value("model").run()
    table = next(d for d in at.dataframe if "unpriced_calls" in d.value.columns)
    by_model = table.value.set_index("model")
    assert (
        by_model.loc["acme-large-1", "unpriced_calls"] == 1 and by_model.loc["acme-large-1", "total_usd"] == 0
    )
    assert by_model["unpriced_calls"].sum() == 1


def test_cost_tables_name_their_columns_in_words_and_show_no_database_as_a_project(
    cost_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_unpriced_session(cost_db)  # a session without a working directory
    at = _sessions_page(cost_db, tmp_path, monkeypatch)
    table = next(d for d in at.dataframe if "total_usd" in d.value.columns)
    assert set(table.value["project"]) == {"Demo", "no project recorded"}  # not "costs", the file's name
    config = json.loads(table.proto.columns)
    labels = {c: config[c]["label"] for c in table.value.columns}
    assert labels["total_usd"] == "Cost" and labels["cache_read_tokens"] == "Cache-read tokens"
    assert labels["input_usd"] == "Input" and not any("_" in label for label in labels.values())
    assert config["cache_read_tokens"]["type_config"]["format"] == "localized"
    assert config["total_usd"]["type_config"]["format"] == "$%.4f"


def test_an_agents_own_recorded_cost_is_shown_beside_ours(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cline.db"
    from engine.cli import main as ctxdesk

    assert ctxdesk(["import", str(FIXTURES / "agents" / "cline" / "1764000000000"), "--db", str(path)]) == 0
    con = data.connect([path])
    (row,) = data.beside_agent_costs(
        data.agent_costs(con.cursor()), data.call_costs(con.cursor())
    ).itertuples()
    assert row.agent_cost_usd == pytest.approx(0.05695)  # Cline's own api_req_started costs, summed
    assert row.our_cost_usd == pytest.approx(0.057084, abs=1e-6) and row.comparison == "agree within a cent"
    at = _sessions_page(path, tmp_path, monkeypatch)
    assert any("recorded themselves" in str(m.value) for m in at.markdown)
    shown = next(d for d in at.dataframe if "agent_cost_usd" in d.value.columns).value
    assert list(shown["comparison"]) == ["agree within a cent"]


def test_sessions_page_shows_cost_totals_and_filters(
    cost_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(cost_db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    metrics = {m.label: m.value for m in at.metric}
    expected = data.cost_totals(data.call_costs(data.connect([cost_db]).cursor()))["total_usd"]
    assert metrics["Cost"] == f"${expected:,.2f}"
    at.multiselect(key="cost_models").set_value(["claude-sonnet-4-20250514"]).run()
    assert not at.exception
    assert {m.label: m.value for m in at.metric}["Cost"] == f"${expected:,.2f}"
