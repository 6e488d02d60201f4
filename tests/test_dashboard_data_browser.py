"""The Data page: raw tables with filters, read-only SQL that can touch nothing but the session tables
(run apart, under a time, row and size limit, only on a click), exports, and the view kept in the URL."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard import data
from dashboard.data import DB_PATHS_ENV_VAR, sql_browser, user_sql
from engine.errors import ValidationError
from engine.settings import SETTINGS_ENV_VAR
from tests.dashboard_fixture import copy_dashboard_db

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo-guard-limits.db"


@pytest.fixture(scope="module")
def shared():
    """The dashboard's own connection, as every page reads it."""
    return data.connect([DEMO])


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


@pytest.fixture(scope="module")
def other_sqlite(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SQLite file the user can read that is not a loaded session database."""
    path = tmp_path_factory.mktemp("other") / "secrets.sqlite"
    with sqlite3.connect(path) as con:
        con.execute("CREATE TABLE t (secret TEXT)")
        con.execute("INSERT INTO t VALUES ('hunter2')")
    return path


ESCAPES = {
    "a scanner reads any SQLite file": "SELECT * FROM sqlite_scan('{other}', 't')",
    "an attach replaces the sessions view": "SELECT * FROM sqlite_attach('{other}', overwrite=true)",
    "the catalog names every database": "SELECT * FROM duckdb_databases()",
    "the databases table holds paths and URLs": "SELECT * FROM databases",
    "an attached file by its alias": "SELECT * FROM db_0.sessions",
    "a file as a table": "SELECT * FROM '{other}'",
    "a file reader": "SELECT * FROM read_text('/etc/hostname')",
    "SQL run by a table function": "SELECT * FROM query('SELECT 42')",
    "a server reached by a string": "SELECT * FROM postgres_query('host=127.0.0.1', 'SELECT 1')",
    "a server scanned by a string": "SELECT * FROM postgres_scan('host=127.0.0.1', 'public', 't')",
    "a setting": "SELECT current_setting('memory_limit') AS x",
    "a scanner function in a subquery": "SELECT * FROM sessions WHERE id IN (SELECT secret FROM sqlite_scan('{other}', 't'))",
    "a scanner inside a CTE": "WITH s AS (SELECT * FROM sqlite_scan('{other}', 't')) SELECT * FROM s",
}


@pytest.mark.parametrize("sql", list(ESCAPES.values()), ids=list(ESCAPES))
def test_user_sql_reaches_nothing_but_the_session_tables(sql, other_sqlite):
    with pytest.raises(ValidationError, match="not allowed"):
        user_sql.run_user_sql([DEMO], sql.format(other=other_sqlite))


def test_the_session_tables_stay_readable_and_results_are_capped():
    result = user_sql.run_user_sql([DEMO], "SELECT db, seq, role FROM messages ORDER BY seq", limit=5)
    assert len(result.rows) == 5 and result.truncated
    full = user_sql.run_user_sql(
        [DEMO],
        "WITH m AS (SELECT * FROM messages) SELECT count(*) AS n, max(s.range) AS r FROM m, range(3) AS s",
    )
    assert not full.truncated and int(full.rows["n"][0]) > 5 and int(full.rows["r"][0]) == 2
    with pytest.raises(user_sql.SqlLimitError, match="over 1,000 bytes") as caught:
        user_sql.run_user_sql([DEMO], "SELECT * FROM range(5000)", max_bytes=1_000)
    assert caught.value.limit == "size"


def test_a_query_that_never_ends_is_cancelled_and_blocks_no_other_page(shared):
    """``count(*)`` over a trillion rows held the one query lock every page waits on for minutes."""
    outcome: list[BaseException] = []

    def endless() -> None:
        try:
            user_sql.run_user_sql([DEMO], "SELECT count(*) FROM range(1000000000000)", timeout_s=8)
        except BaseException as exc:  # kept for the assertion below
            outcome.append(exc)

    runner = threading.Thread(target=endless)
    runner.start()
    try:
        overview = data.read(shared, data.sessions_overview)  # another visitor's page, meanwhile
        assert not overview.empty
        assert runner.is_alive(), "the page's read waited for the user's query to end"
    finally:
        runner.join(timeout=60)
    (error,) = outcome
    assert isinstance(error, user_sql.SqlLimitError) and error.limit == "time", error


def test_browse_filters_order_and_checks_column_names(shared):
    columns = data.read(shared, sql_browser.table_columns, "context_events", data.TABLES)
    filters = [
        sql_browser.ColumnFilter.parse("kind:eq:compaction"),
        sql_browser.ColumnFilter("turn_index", "gt", "0"),
    ]
    sql, params = sql_browser.browse_sql("context_events", columns, filters, order_by="seq", descending=True)
    result = data.read(shared, sql_browser.run_sql, sql, params)
    assert (
        len(result.rows)
        and set(result.rows["kind"]) == {"compaction"}
        and (result.rows["turn_index"] > 0).all()
    )
    assert list(result.rows["seq"]) == sorted(result.rows["seq"], reverse=True)
    with pytest.raises(ValidationError, match="no column"):
        sql_browser.browse_sql("context_events", columns, [sql_browser.ColumnFilter("x; DROP", "eq", "1")])
    with pytest.raises(ValidationError, match="not a filter"):
        sql_browser.ColumnFilter.parse("kind:like:x")


def test_a_browse_listing_is_cancelled_past_its_time_limit(shared):
    slow = "SELECT count(*) AS n FROM range(1000000000000)"
    with pytest.raises(ValidationError, match="cancelled"):
        data.read(shared, lambda cursor: sql_browser.run_sql(cursor, slow, timeout_s=0.5))


def test_exports_are_csv_and_json_with_nulls_and_blobs():
    coding = DEMO.with_name("demo-coding-agent.db")  # the sample that offloaded outputs
    result = user_sql.run_user_sql([coding], "SELECT ref_id, content, tokens FROM tool_result_blobs LIMIT 3")
    rows = json.loads(sql_browser.to_json(result.rows))
    assert len(rows) == len(result.rows) > 0
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


def test_sql_from_a_link_is_shown_and_runs_only_on_a_click(db):
    """Any web page can send the browser to a link: what it carries must not run by itself."""
    at = _page({"mode": "sql", "sql": "SELECT id, model FROM sessions"})
    assert at.text_area[0].value == "SELECT id, model FROM sessions"
    assert not at.dataframe
    assert any("click Run" in str(i.value) for i in at.info)
    at.button[0].click().run()
    (frame,) = at.dataframe
    assert list(frame.value.columns) == ["id", "model"] and len(frame.value) > 0
    at.run()  # a later rerun (live follow) shows the result without running it again
    assert len(at.dataframe) == 1


def test_the_page_refuses_writes_and_other_files_when_run(db):
    at = _page({"mode": "sql", "sql": "DROP TABLE messages"})
    assert not at.error
    at.button[0].click().run()
    assert any("only SELECT" in str(e.value) for e in at.error)
    assert not at.dataframe
    at = _page({"mode": "sql", "sql": f"SELECT * FROM sqlite_scan('{db}', 'sessions')"})
    at.button[0].click().run()
    assert any("not allowed" in str(e.value) for e in at.error)
