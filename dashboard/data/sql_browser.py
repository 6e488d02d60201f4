"""Raw tables of the session databases (the Data page's Browse tab), as Datasette offers them, and
the checks and exports its SQL tab shares (what a user types runs in dashboard.data.user_sql).

Pure functions over a DuckDB connection, no streamlit. Browse SQL is built here from checked table
and column names; it runs on the dashboard's connection under a time limit (``interrupt``).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import duckdb
import pandas as pd

from engine.errors import ValidationError

#: Rows a query or a browse page returns at most (exports included).
MAX_ROWS = 10_000
#: Longest a Browse listing runs on the shared connection (which every page reads, one query at a time).
BROWSE_TIMEOUT_S = 10.0
#: Filter operators offered on the Browse tab, as they read in the URL (``column:op:value``).
FILTER_OPERATORS = {"eq": "=", "ne": "!=", "gt": ">", "lt": "<", "contains": "contains", "null": "is null"}


@dataclass(frozen=True)
class ColumnFilter:
    """One Browse filter: ``column op value`` (``contains`` is a case-insensitive substring)."""

    column: str
    op: str
    value: str = ""

    def as_param(self) -> str:
        return f"{self.column}:{self.op}:{self.value}"

    @classmethod
    def parse(cls, text: str) -> ColumnFilter:
        column, _, rest = text.partition(":")
        op, _, value = rest.partition(":")
        if not column or op not in FILTER_OPERATORS:
            raise ValidationError(
                f"not a filter: {text!r} (column:op:value, op one of {', '.join(FILTER_OPERATORS)})"
            )
        return cls(column, op, value)


@dataclass(frozen=True)
class QueryResult:
    rows: pd.DataFrame
    truncated: bool
    sql: str


def check_read_only(sql: str) -> str:
    """``sql`` stripped, when it is exactly one SELECT statement; ValidationError naming what it is otherwise."""
    text = sql.strip().rstrip(";").strip()
    if not text:
        raise ValidationError("the query is empty", field="sql")
    try:
        statements = duckdb.extract_statements(text)
    except duckdb.Error as exc:
        raise ValidationError(f"cannot parse the query: {exc}", field="sql") from exc
    if len(statements) != 1:
        raise ValidationError(f"one statement at a time, got {len(statements)}", field="sql")
    kind = statements[0].type
    if kind != duckdb.StatementType.SELECT:
        raise ValidationError(f"only SELECT queries are allowed here, not {kind.name}", field="sql")
    return text


def run_sql(
    con: duckdb.DuckDBPyConnection,
    sql: str,
    params: Sequence[Any] = (),
    *,
    limit: int = MAX_ROWS,
    timeout_s: float = BROWSE_TIMEOUT_S,
) -> QueryResult:
    """Run a SELECT built by :func:`browse_sql` on a cursor of ``con``, at most ``limit`` rows,
    cancelled (ValidationError) past ``timeout_s``."""
    text = check_read_only(sql)
    cursor = con.cursor()
    timer = threading.Timer(timeout_s, cursor.interrupt)
    timer.start()
    try:
        frame = cursor.execute(f"SELECT * FROM ({text}) AS q LIMIT {int(limit) + 1}", list(params)).df()
    except duckdb.InterruptException:
        raise ValidationError(
            f"listing took over {timeout_s:g} s and was cancelled: narrow it with a filter", field="sql"
        ) from None
    except duckdb.Error as exc:
        raise ValidationError(f"the query failed: {exc}", field="sql") from exc
    finally:
        timer.cancel()
        cursor.close()
    return QueryResult(rows=frame.head(limit), truncated=len(frame) > limit, sql=text)


def table_columns(con: duckdb.DuckDBPyConnection, table: str, tables: Sequence[str]) -> list[str]:
    """Columns of one of ``tables`` (the union views, each with a leading ``db`` column)."""
    if table not in tables:
        raise ValidationError(f"no table {table!r} (tables: {', '.join(tables)})", field="table")
    return [row[0] for row in con.execute(f'DESCRIBE "{table}"').fetchall()]


def browse_sql(
    table: str,
    columns: Sequence[str],
    filters: Sequence[ColumnFilter] = (),
    *,
    order_by: str | None = None,
    descending: bool = False,
) -> tuple[str, list[Any]]:
    """(SQL, parameters) listing ``table`` with ``filters``; every column name is checked against ``columns``."""
    where: list[str] = []
    params: list[Any] = []
    for f in filters:
        if f.column not in columns:
            raise ValidationError(f"no column {f.column!r} in {table}", field="filter")
        column = f'"{f.column}"'
        if f.op == "null":
            where.append(f"{column} IS NULL")
        elif f.op == "contains":
            where.append(f"CAST({column} AS VARCHAR) ILIKE ?")
            params.append(f"%{f.value}%")
        elif f.op in ("eq", "ne"):
            where.append(f"CAST({column} AS VARCHAR) {FILTER_OPERATORS[f.op]} ?")
            params.append(f.value)
        else:
            try:
                number = float(f.value)
            except ValueError:
                raise ValidationError(f"{f.op} needs a number, got {f.value!r}", field="filter") from None
            where.append(f"TRY_CAST({column} AS DOUBLE) {FILTER_OPERATORS[f.op]} ?")
            params.append(number)
    sql = f'SELECT * FROM "{table}"'
    if where:
        sql += " WHERE " + " AND ".join(where)
    if order_by:
        if order_by not in columns:
            raise ValidationError(f"no column {order_by!r} in {table}", field="order_by")
        sql += f' ORDER BY "{order_by}"' + (" DESC" if descending else "")
    return sql, params


def to_csv(frame: pd.DataFrame) -> bytes:
    buffer = io.StringIO()
    frame.to_csv(buffer, index=False)
    return buffer.getvalue().encode("utf-8")


def to_json(frame: pd.DataFrame) -> bytes:
    """Rows as a JSON list of objects (NULL as null, bytes as their length)."""
    records = json.loads(frame.to_json(orient="records", date_format="iso", default_handler=_plain))
    return json.dumps(records, ensure_ascii=False, indent=1).encode("utf-8")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<{len(value):,} bytes>"
    return str(value)
