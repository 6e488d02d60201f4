"""Cost on the dashboard: dashboard.data.costs through DuckDB, and the Sessions page's cost section."""

from __future__ import annotations

from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard.data import DB_PATHS_ENV_VAR
from engine.importers import import_file
from engine.settings import SETTINGS_ENV_VAR
from engine.store import SessionStore
from engine.store.costs import project_costs
from tests.conftest import FIXTURES

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
CC = [
    FIXTURES / "sessions" / "claude-code__5c0375b4__head23.jsonl",
    FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl",
]


@pytest.fixture
def cost_db(tmp_path: Path) -> Path:
    path = tmp_path / "costs.db"
    with SessionStore(path) as store:
        for f in CC:
            import_file(f, store)
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


def test_project_of_is_the_cwd_name_else_the_database() -> None:
    assert data.project_of('{"cwd": "/home/me/src/shop/"}', "db1") == "shop"
    assert data.project_of("{}", "db1") == "db1" and data.project_of(None, "db1") == "db1"


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
