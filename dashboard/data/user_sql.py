"""SQL a user types on the Data page, run where it can read the session tables and nothing else.

Three walls, each enough on its own for what it guards:

1. **What the SQL may name** (:func:`check_user_sql`, from DuckDB's own parse tree,
   ``json_serialize_sql``): one SELECT; tables only the session tables (``TABLES``) and the query's
   own CTEs, never a catalog, schema or file name; table functions only ``ALLOWED_TABLE_FUNCTIONS``
   (no ``sqlite_scan``/``sqlite_attach``, ``postgres_*``, ``read_*``, ``query``, ``duckdb_*``:
   ``enable_external_access = false`` does not stop the scanners' own functions); scalar functions
   only DuckDB's built-in ones less ``DENIED_FUNCTIONS`` (settings and variables).
2. **Where it runs**: a child process of its own (``python -m dashboard.data.user_sql``) with a
   fresh DuckDB over the files (read-only), its configuration locked (no external access, no
   extension loading, a memory limit), given only the environment a database login needs. Nothing it
   does reaches the dashboard's shared connection, which every visitor's pages read: a query cannot
   replace a view they see, and a long one holds no lock of theirs (the sqlite scanner is not safe
   from two threads of one process, so the dashboard reads one query at a time: user SQL stays out of
   that queue).
3. **How long and how much**: ``con.interrupt()`` after ``timeout_s`` (the child is killed if even
   that does not end it), at most ``limit`` rows, and a result of at most ``MAX_RESULT_BYTES``.
"""

from __future__ import annotations

import functools
import json
import os
import pickle
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import duckdb

from dashboard.data.sql_browser import MAX_ROWS, QueryResult, check_read_only
from engine.errors import ContextDeskError, ValidationError
from engine.store import TABLE_NAMES

#: Longest a user query runs before it is cancelled.
SQL_TIMEOUT_S = 20.0
#: Extra time the child gets to answer after cancelling, before it is killed.
KILL_GRACE_S = 5.0
#: Largest result (pickled) brought back to the page.
MAX_RESULT_BYTES = 64 * 1024 * 1024
#: DuckDB memory the child's query may use.
MEMORY_LIMIT = "1GB"
#: The table functions user SQL may call: they make rows, read nothing.
ALLOWED_TABLE_FUNCTIONS = frozenset({"range", "generate_series", "unnest", "json_each", "json_tree"})
#: Built-in scalar functions that tell about the process rather than the data.
DENIED_FUNCTIONS = frozenset({"current_setting", "getvariable", "getenv", "which_secret"})
#: The tables user SQL may read: the session tables of docs/schema.md (each with its ``db``).
USER_TABLES = frozenset(TABLE_NAMES)
#: Environment variables the child keeps: what Python and a PostgreSQL login need, no API keys.
CHILD_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "SYSTEMROOT")
PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class SqlLimitError(ValidationError):
    """A user query passed a limit (time or result size) and was stopped; ``limit`` says which."""

    def __init__(self, message: str, *, limit: str) -> None:
        self.limit = limit
        super().__init__(message, field="sql")


@functools.cache
def builtin_functions() -> frozenset[str]:
    """Scalar, aggregate and macro functions of a DuckDB with no extension loaded (lower case)."""
    con = duckdb.connect(":memory:")
    try:
        rows = con.execute(
            "SELECT DISTINCT lower(function_name) FROM duckdb_functions() "
            "WHERE function_type IN ('scalar', 'aggregate', 'macro')"
        ).fetchall()
    finally:
        con.close()
    return frozenset(r[0] for r in rows) - DENIED_FUNCTIONS


def _nodes(tree: Any) -> Iterator[dict[str, Any]]:
    if isinstance(tree, dict):
        yield tree
        for value in tree.values():
            yield from _nodes(value)
    elif isinstance(tree, list):
        for value in tree:
            yield from _nodes(value)


def _refusal(node: dict[str, Any], tables: frozenset[str]) -> str | None:
    """Why this parse-tree node may not run, or None."""
    kind = node.get("type")
    if kind == "BASE_TABLE" or (kind == "SHOW_REF" and node.get("table_name")):
        name = str(node.get("table_name", ""))
        if node.get("catalog_name") or node.get("schema_name"):
            return f"{node.get('catalog_name') or node.get('schema_name')}.{name}: only the session tables, unqualified"
        if name.lower() not in tables:
            return f"{name!r} is not a session table ({', '.join(sorted(USER_TABLES))})"
    if kind == "TABLE_FUNCTION":
        function = node.get("function") or {}
        name = str(function.get("function_name", "")).lower()
        if name not in ALLOWED_TABLE_FUNCTIONS or function.get("catalog") or function.get("schema"):
            return f"the table function {name}() is not available here ({', '.join(sorted(ALLOWED_TABLE_FUNCTIONS))} are)"
    if node.get("class") == "FUNCTION" and kind != "TABLE_FUNCTION" and "function_name" in node:
        name = str(node["function_name"]).lower()
        if node.get("catalog") or node.get("schema") or name not in builtin_functions():
            return f"the function {name}() is not available here"
    return None


def check_user_sql(sql: str) -> str:
    """``sql`` stripped when it is one SELECT naming only session tables, its own CTEs and allowed
    functions; ValidationError naming the first thing refused otherwise."""
    text = check_read_only(sql)
    con = duckdb.connect(":memory:")
    try:
        serialized = con.execute("SELECT json_serialize_sql(?)", [text]).fetchone()[0]
    finally:
        con.close()
    tree = json.loads(serialized)
    if tree.get("error"):
        raise ValidationError(
            f"cannot read the query: {tree.get('error_message', 'unsupported')}", field="sql"
        )
    nodes = list(_nodes(tree["statements"]))
    ctes = frozenset(
        str(entry["key"]).lower()
        for node in nodes
        for entry in (node.get("cte_map") or {}).get("map", [])
        if isinstance(entry, dict) and "key" in entry
    )
    for node in nodes:
        reason = _refusal(node, USER_TABLES | ctes)
        if reason is not None:
            raise ValidationError(f"not allowed: {reason}", field="sql", value=text)
    return text


def run_user_sql(
    paths: Sequence[str | os.PathLike[str]],
    sql: str,
    *,
    limit: int = MAX_ROWS,
    timeout_s: float = SQL_TIMEOUT_S,
    max_bytes: int = MAX_RESULT_BYTES,
) -> QueryResult:
    """Check ``sql`` and run it over ``paths`` in a child process (module docstring); at most
    ``limit`` rows. SqlLimitError when it runs past ``timeout_s`` or its result passes ``max_bytes``."""
    text = check_user_sql(sql)
    request = pickle.dumps(([str(p) for p in paths], text, int(limit), float(timeout_s), int(max_bytes)))
    child = subprocess.Popen(
        [sys.executable, "-m", "dashboard.data.user_sql"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_child_env(),
    )
    try:
        out, err = child.communicate(request, timeout=timeout_s + KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.communicate()
        raise SqlLimitError(f"the query ran past {timeout_s:g} s and was stopped", limit="time") from None
    if child.returncode != 0 or not out:
        tail = err.decode("utf-8", "replace").strip().splitlines()[-1:] or [f"exit status {child.returncode}"]
        raise ValidationError(f"the query process failed: {tail[0]}", field="sql")
    # The reply comes from our own child process, never from the database or the network.
    status, payload = pickle.loads(out)
    if status == "limit":
        raise SqlLimitError(payload[1], limit=payload[0])
    if status == "error":
        raise ValidationError(payload, field="sql")
    return payload


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k in CHILD_ENV or k.startswith("PG")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(PACKAGE_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return env


# -- what runs in the child ------------------------------------------------------------------------


def _sandbox(paths: list[str]) -> duckdb.DuckDBPyConnection:
    from dashboard.data.connection import connect

    con = connect(paths, skip_invalid=True)
    con.execute(f"SET memory_limit = '{MEMORY_LIMIT}'")
    con.execute("SET autoinstall_known_extensions = false")
    con.execute("SET autoload_known_extensions = false")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con


def _answer(paths: list[str], sql: str, limit: int, timeout_s: float) -> tuple[str, Any]:
    try:
        text = check_user_sql(sql)  # again: the child trusts nothing it is sent
        con = _sandbox(paths)
    except ContextDeskError as exc:
        return "error", str(exc)
    timer = threading.Timer(timeout_s, con.interrupt)
    timer.start()
    try:
        frame = con.execute(f"SELECT * FROM ({text}) AS q LIMIT {int(limit) + 1}").df()
    except duckdb.InterruptException:
        return "limit", ("time", f"the query ran past {timeout_s:g} s and was cancelled")
    except duckdb.Error as exc:
        return "error", f"the query failed: {exc}"
    finally:
        timer.cancel()
    return "ok", QueryResult(rows=frame.head(limit), truncated=len(frame) > limit, sql=text)


def _child_main() -> None:
    paths, sql, limit, timeout_s, max_bytes = pickle.loads(sys.stdin.buffer.read())  # from run_user_sql
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # nothing printed may corrupt the reply
    reply = pickle.dumps(_answer(paths, sql, limit, timeout_s))
    if len(reply) > max_bytes:
        reply = pickle.dumps(
            (
                "limit",
                ("size", f"the result is over {max_bytes:,} bytes: select fewer rows or columns"),
            )
        )
    out.write(reply)
    out.flush()


if __name__ == "__main__":
    _child_main()
