"""Data: the raw tables of every loaded session database, with filters, and read-only SQL; export as
CSV or JSON. The view (table, filters, order, query) lives in the URL, so it can be shared; SQL from
a link is shown and runs only when the reader clicks Run (dashboard.data.user_sql runs it apart)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import data, display, state
from dashboard.data import sql_browser, user_sql
from engine.errors import ContextDeskError


def _shown(frame: pd.DataFrame) -> pd.DataFrame:
    """Bytes (blob contents) as their size, every other value as it is (st.dataframe shows text as text)."""
    out = frame.copy()
    for column in out.columns:
        if out[column].dtype == object and any(isinstance(v, bytes | bytearray) for v in out[column]):
            out[column] = [
                f"<{len(v):,} bytes>" if isinstance(v, bytes | bytearray) else v for v in out[column]
            ]
    return display.for_table(out)


def _show(result: sql_browser.QueryResult, name: str) -> None:
    rows = result.rows
    note = f"{len(rows):,} row(s)" + (
        f"; only the first {sql_browser.MAX_ROWS:,} are shown" if result.truncated else ""
    )
    st.caption(note)
    st.dataframe(_shown(rows), hide_index=True, placeholder=display.MISSING, width="stretch")
    c1, c2, _ = st.columns([1, 1, 4])
    c1.download_button("Export CSV", sql_browser.to_csv(rows), f"{name}.csv", "text/csv", key=f"csv_{name}")
    c2.download_button(
        "Export JSON", sql_browser.to_json(rows), f"{name}.json", "application/json", key=f"json_{name}"
    )


st.title("Data")
st.caption(
    "The session tables of every loaded database (each row with its `db`), read-only. "
    "The address bar keeps what you see: copy it to share this view."
)
#: The last query this reader ran, and its outcome (a result or an error): kept across reruns, so live
#: follow or another widget never runs it again.
SQL_RESULT_KEY = "_data_sql_result"

params = st.query_params
mode = st.radio(
    "Mode", ["Browse tables", "SQL"], horizontal=True, index=1 if params.get("mode") == "sql" else 0
)

if mode == "Browse tables":
    tables = list(data.TABLES)
    wanted = params.get("table", "sessions")
    table = st.selectbox("Table", tables, index=tables.index(wanted) if wanted in tables else 0)
    columns = state.read(sql_browser.table_columns, table, tables)
    c1, c2, c3 = st.columns([3, 2, 1])
    filter_text = c1.text_area(
        "Filters, one per line: column:op:value (op: eq, ne, gt, lt, contains, null)",
        value="\n".join(params.get_all("filter")),
        height=80,
    )
    wanted_order = params.get("order")
    order = c2.selectbox(
        "Order by",
        ["(none)", *columns],
        index=columns.index(wanted_order) + 1 if wanted_order in columns else 0,
    )
    descending = c3.checkbox("Descending", value=params.get("desc") == "1")
    try:
        filters = [
            sql_browser.ColumnFilter.parse(line.strip()) for line in filter_text.splitlines() if line.strip()
        ]
        sql, sql_params = sql_browser.browse_sql(
            table, columns, filters, order_by=None if order == "(none)" else order, descending=descending
        )
        result = state.read(sql_browser.run_sql, sql, sql_params)
    except ContextDeskError as exc:
        st.error(display.md(exc))
        st.stop()
    st.query_params.from_dict(
        {"mode": "browse", "table": table, "filter": [f.as_param() for f in filters]}
        | ({"order": order, "desc": "1" if descending else "0"} if order != "(none)" else {})
    )
    with st.expander("SQL of this view"):
        st.code(sql, language="sql")
    _show(result, table)
else:
    linked = params.get("sql")
    with st.form("sql_form"):
        sql = st.text_area(
            "Read-only SQL (DuckDB; one SELECT; tables: " + ", ".join(sorted(user_sql.USER_TABLES)) + ")",
            value=linked
            or "SELECT db, id, title, model, created_utc FROM sessions ORDER BY created_utc DESC",
            height=140,
        )
        submitted = st.form_submit_button("Run", type="primary")
    st.caption(
        f"Runs apart from the pages, on the session tables only, for at most {user_sql.SQL_TIMEOUT_S:g} s "
        f"and {sql_browser.MAX_ROWS:,} rows."
    )
    if submitted:
        try:
            with st.spinner("Running the query…"):
                outcome: object = user_sql.run_user_sql(state.paths(), sql)
        except ContextDeskError as exc:
            outcome = exc
        st.session_state[SQL_RESULT_KEY] = (sql, outcome)
        st.query_params.from_dict({"mode": "sql", "sql": sql.strip()})
    ran_sql, outcome = st.session_state.get(SQL_RESULT_KEY, (None, None))
    if ran_sql is None or ran_sql.strip() != sql.strip():
        if linked and sql.strip() == linked.strip():
            st.info("This query came with the link. Read it, then click Run to run it.")
        st.stop()
    if isinstance(outcome, ContextDeskError):
        st.error(display.md(outcome))
        st.stop()
    _show(outcome, "query")
