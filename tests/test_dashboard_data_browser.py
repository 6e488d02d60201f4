"""The Data page: raw tables with filters, read-only SQL that can touch nothing but the session tables,
exports, and the view kept in the URL."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard.data import DB_PATHS_ENV_VAR, sql_browser
from engine.errors import ValidationError
from engine.settings import SETTINGS_ENV_VAR
from tests.dashboard_fixture import copy_dashboard_db

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo-guard-limits.db"


@pytest.fixture(scope="module")
def locked():
    return sql_browser.lock_down(data.connect([DEMO]))


@pytest.mark.parametrize(
    ("sql", "message"),
    [
        ("DELETE FROM messages", "only SELECT"),
        ("ATTACH '/tmp/x.db' AS x", "only SELECT"),
        ("SELECT 1; SELECT 2", "one statement"),
        ("   ", "empty"),
        ("SELEC oops", "cannot parse"),
    ],
)
def test_only_one_select_is_accepted(sql, message):
    with pytest.raises(ValidationError, match=message):
        sql_browser.check_read_only(sql)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT * FROM read_text('/etc/passwd')",
        "SELECT * FROM read_csv('/etc/hostname')",
        "SELECT current_setting('enable_external_access') AS x, * FROM read_blob('/etc/hostname')",
    ],
)
def test_a_locked_connection_reads_no_file(locked, sql):
    with pytest.raises(ValidationError, match=r"Permission|Cannot access"):
        sql_browser.run_sql(locked, sql)


def test_the_session_tables_stay_readable_and_results_are_capped(locked):
    result = sql_browser.run_sql(locked, "SELECT db, seq, role FROM messages ORDER BY seq", limit=5)
    assert len(result.rows) == 5 and result.truncated
    full = sql_browser.run_sql(locked, "SELECT count(*) AS n FROM messages")
    assert not full.truncated and int(full.rows["n"][0]) > 5


def test_browse_filters_order_and_checks_column_names(locked):
    columns = sql_browser.table_columns(locked, "context_events", data.TABLES)
    filters = [
        sql_browser.ColumnFilter.parse("kind:eq:compaction"),
        sql_browser.ColumnFilter("turn_index", "gt", "0"),
    ]
    sql, params = sql_browser.browse_sql("context_events", columns, filters, order_by="seq", descending=True)
    result = sql_browser.run_sql(locked, sql, params)
    assert set(result.rows["kind"]) == {"compaction"} and (result.rows["turn_index"] > 0).all()
    assert list(result.rows["seq"]) == sorted(result.rows["seq"], reverse=True)
    with pytest.raises(ValidationError, match="no column"):
        sql_browser.browse_sql("context_events", columns, [sql_browser.ColumnFilter("x; DROP", "eq", "1")])
    with pytest.raises(ValidationError, match="not a filter"):
        sql_browser.ColumnFilter.parse("kind:like:x")


def test_exports_are_csv_and_json_with_nulls_and_blobs(locked):
    result = sql_browser.run_sql(locked, "SELECT ref_id, content, tokens FROM tool_result_blobs LIMIT 3")
    rows = json.loads(sql_browser.to_json(result.rows))
    assert len(rows) == len(result.rows)
    assert all(isinstance(r["content"], str) and r["content"].endswith("bytes>") for r in rows)
    assert sql_browser.to_csv(result.rows).decode().splitlines()[0] == "ref_id,content,tokens"


@pytest.fixture
def db(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    target = copy_dashboard_db(tmp_path_factory.getbasetemp(), tmp_path / "sample.db")
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(target))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return target


def _page(params: dict[str, str | list[str]]) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    for key, value in params.items():
        at.query_params[key] = value
    at.switch_page("views/data_browser.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_the_page_opens_a_table_from_the_url_with_its_filters(db):
    at = _page({"mode": "browse", "table": "messages", "filter": ["role:eq:assistant"]})
    (frame,) = at.dataframe
    assert len(frame.value) > 0 and set(frame.value["role"]) == {"assistant"}
    assert at.query_params["table"] in ("messages", ["messages"])
    assert at.query_params["filter"] in ("role:eq:assistant", ["role:eq:assistant"])


def test_the_page_runs_sql_from_the_url_and_refuses_writes(db):
    at = _page({"mode": "sql", "sql": "SELECT id, model FROM sessions"})
    (frame,) = at.dataframe
    assert list(frame.value.columns) == ["id", "model"] and len(frame.value) > 0
    at = _page({"mode": "sql", "sql": "DROP TABLE messages"})
    assert any("only SELECT" in str(e.value) for e in at.error)
    assert not at.dataframe
