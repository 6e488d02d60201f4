"""PostgreSQL passwords never reach a message, a label or a child's argv: one redaction for every
form of URL and DSN (``user:pw@``, ``?password=``, key=value), and a DSN names a server, not a file."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import psycopg
import pytest

from dashboard.data import postgres
from dashboard.data.files import loaded_paths, script_args
from engine.cli import main
from engine.cli.dashboard import dashboard_command, dashboard_env
from engine.errors import StoreError
from engine.store.credentials import PASSFILE_ENV_VAR
from engine.store.factory import database_name, hide_password, is_database_url, open_store, redact_url
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, PostgresServer, fresh_url, shared_server

needs_server = pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        pytest.param(
            "postgresql://bob:s3cret@db:5432/ctx", "postgresql://bob:***@db:5432/ctx", id="user:pw@"
        ),
        pytest.param("postgres://bob:p@ss:w0rd@db/ctx", "postgres://bob:***@db/ctx", id="@ in the password"),
        pytest.param(
            "postgresql://bob@db/ctx?sslmode=require&password=s3cret&x=1",
            "postgresql://bob@db/ctx?sslmode=require&password=***&x=1",
            id="?password=",
        ),
        pytest.param(
            "host=db port=5432 dbname=ctx user=bob password=s3cret sslmode=require",
            "host=db port=5432 dbname=ctx user=bob password=*** sslmode=require",
            id="key=value DSN",
        ),
        pytest.param(
            "host=db password = 'it\\'s s3cret' dbname=ctx",
            "host=db password = *** dbname=ctx",
            id="quoted value",
        ),
        pytest.param("host=db sslpassword=s3cret", "host=db sslpassword=***", id="sslpassword"),
        pytest.param(
            'cannot connect (invalid dsn: "host=db password=s3cret") to postgresql://a:s3cret@h/x',
            'cannot connect (invalid dsn: "host=db password=***") to postgresql://a:***@h/x',
            id="a message quoting both",
        ),
        pytest.param("postgresql://bob@db:5432/ctx", "postgresql://bob@db:5432/ctx", id="no password"),
        pytest.param("/home/bob/sessions.db", "/home/bob/sessions.db", id="a file"),
    ],
)
def test_every_form_of_password_is_hidden(text: str, shown: str) -> None:
    assert redact_url(text) == shown
    assert "s3cret" not in redact_url(text) and "w0rd" not in redact_url(text)


@pytest.mark.parametrize(
    ("target", "is_server"),
    [
        pytest.param("postgresql://h/db", True, id="url"),
        pytest.param("POSTGRES://h/db", True, id="url, any case"),
        pytest.param("host=db dbname=ctx user=bob password=x", True, id="dsn"),
        pytest.param("  dbname=ctx  ", True, id="one keyword"),
        pytest.param("host=db options='-c search_path=team'", True, id="quoted option"),
        pytest.param("sessions.db", False, id="file"),
        pytest.param("a=b.db", False, id="a file with '=' in its name"),
        pytest.param("./host=db", False, id="a path"),
        pytest.param("host=db nonsense", False, id="not all pairs"),
        pytest.param("mysql://h/db", False, id="another scheme"),
        pytest.param(Path("host=db"), False, id="a Path is a file"),
    ],
)
def test_a_dsn_names_a_server(target: object, is_server: bool) -> None:
    assert is_database_url(target) is is_server


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("postgresql://bob:pw@db/ctx?x=1", "ctx"),
        ("host=db dbname='team store' password=pw", "team store"),
        ("host=db password=pw", "postgres"),
    ],
)
def test_labels_name_the_database_never_the_password(target: str, name: str) -> None:
    assert database_name(target) == name
    assert postgres.label(target) == name


def test_the_dashboard_child_gets_urls_by_environment_never_argv(tmp_path: Path) -> None:
    url = "postgresql://bob:s3cret@127.0.0.1:5/ctx"
    dsn = "host=127.0.0.1 dbname=ctx password=s3cret"
    db = tmp_path / "a.db"
    app = ROOT / "dashboard" / "app.py"
    command = dashboard_command(app, [db, url, dsn], port=8600, headless=True)  # type: ignore[list-item]
    env = dashboard_env([db, url, dsn], base={"CTXDESK_DB_URLS": "stale"})  # type: ignore[list-item]
    assert not any("s3cret" in part for part in command)
    # what the dashboard process reads back from that argv and environment
    db.touch()
    assert loaded_paths(["--", *script_args(command[4:], app)], env) == [db.resolve(), url, dsn]
    assert "stale" not in str(dashboard_env([db], base={"CTXDESK_DB_URLS": "stale"}))


@needs_server
@pytest.mark.slow
def test_ctxdesk_dashboard_with_ctxdesk_db_keeps_the_password_out_of_proc(tmp_path: Path) -> None:
    """The issue's repro: CTXDESK_DB=postgresql://u:pw@... ctxdesk dashboard; the Streamlit child's
    /proc/<pid>/cmdline (world-readable) must not hold the password."""
    url = fresh_url().replace("postgres@", "postgres:s3cretpw@")  # trust auth: the password is ignored
    env = {**os.environ, "CTXDESK_DB": url, "PYTHONPATH": str(ROOT)}  # this checkout's engine
    port = str(8700 + os.getpid() % 200)
    parent = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "dashboard", "--no-browser", "--port", port],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        child = None
        for _ in range(400):
            if child := _child_of(parent.pid):
                break
            time.sleep(0.05)
        assert child is not None, "the dashboard started no child"
        cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        for _ in range(400):  # a child just forked still shows its parent's argv until it execs
            if b"dashboard/server.py" in cmdline:
                break
            time.sleep(0.05)
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        # the dashboard's server (dashboard/server.py runs Streamlit), its argv without the password
        assert b"dashboard/server.py" in cmdline and b"s3cretpw" not in cmdline
        assert f"CTXDESK_DB_URLS={url}".encode() in Path(f"/proc/{child}/environ").read_bytes()
        assert oct(Path(f"/proc/{child}/environ").stat().st_mode & 0o777) == "0o400"
    finally:
        parent.terminate()
        parent.wait(timeout=30)


def _child_of(pid: int) -> str | None:
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            return stat.parent.name
    return None


@needs_server
def test_a_dsn_opens_the_store_and_migrate_prints_it_without_its_password(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = shared_server()
    schema_url = fresh_url(server)
    schema = schema_url.rsplit("search_path%3D", 1)[1]
    dsn = f"host=127.0.0.1 port={server.port} user=postgres dbname=postgres password=s3cret options='-csearch_path={schema}'"
    source = ROOT / "data" / "demo-guard-limits.db"
    assert main(["migrate", str(source), dsn]) == 0
    out = capsys.readouterr()
    assert "s3cret" not in out.out + out.err and "password=***" in out.out
    with open_store(dsn, read_only=True) as store:
        assert store.list_sessions() and store.path.name == "postgres"
        assert "s3cret" not in str(store.path)
    assert main(["inspect", dsn]) == 0
    assert "s3cret" not in capsys.readouterr().out


def test_a_connection_error_quoting_the_dsn_hides_its_password() -> None:
    with pytest.raises(StoreError) as caught:
        open_store("host=127.0.0.1 port=1 dbname=x password=s3cret connect_timeout=1", read_only=True)
    assert "s3cret" not in str(caught.value)
    with pytest.raises(StoreError) as caught:
        open_store("postgresql://u:s3cret@127.0.0.1:1/x?connect_timeout=1&password=s3cret", read_only=True)
    assert "s3cret" not in str(caught.value)


def test_a_refused_connection_says_so_instead_of_waiting_out_the_pool() -> None:
    """The pool retries a refused server until its timeout; the store says the server's reason."""
    with pytest.raises(StoreError, match="Connection refused") as caught:
        open_store("postgresql://u:s3cret@127.0.0.1:1/x", read_only=True)
    assert "within" not in str(caught.value) and "s3cret" not in str(caught.value)


# -- the dashboard's catalogs (#32.2): a password in a passfile, not in a connection string --------


#: Holds the passfile's separator and escape character.
TEAM_PASSWORD = "Team:s3cret\\pw"


@pytest.fixture(scope="module")
def password_server() -> Iterator[tuple[PostgresServer, str]]:
    """A server that asks for a password over TCP (scram), and a URL to it holding one."""
    server = PostgresServer()
    with psycopg.connect(server.url, autocommit=True) as conn:
        conn.execute(f"CREATE ROLE team LOGIN PASSWORD '{TEAM_PASSWORD}'")
        conn.execute("CREATE DATABASE teamdb OWNER team")
    (server.data / "pg_hba.conf").write_text(
        "local all all trust\nhost all postgres 127.0.0.1/32 trust\nhost all team 127.0.0.1/32 scram-sha-256\n"
    )
    server.restart()
    password = quote(TEAM_PASSWORD, safe="")
    yield server, f"postgresql://team:{password}@127.0.0.1:{server.port}/teamdb"
    server.destroy()


@needs_server
@pytest.mark.slow
def test_the_server_really_asks_for_the_password(password_server: tuple[PostgresServer, str]) -> None:
    server, _ = password_server
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(f"postgresql://team@127.0.0.1:{server.port}/teamdb", passfile="/dev/null").close()
    with pytest.raises(StoreError, match="password authentication failed") as caught:
        open_store(f"postgresql://team:wrong-pw@127.0.0.1:{server.port}/teamdb", read_only=True)
    assert "wrong-pw" not in str(caught.value)


@needs_server
@pytest.mark.slow
def test_the_dashboard_attaches_without_a_password_in_any_catalog(
    password_server: tuple[PostgresServer, str],
) -> None:
    from dashboard import data

    _, url = password_server
    with open_store(url) as store:  # a team store with one session
        store.create_session(session_id="team-1", title="shared")
    con = data.connect([url])
    try:
        catalogs = [
            con.execute("SELECT * FROM duckdb_databases()").fetchall(),
            con.execute("SELECT * FROM databases").fetchall(),
            con.execute("SELECT * FROM duckdb_settings()").fetchall(),
        ]
        assert "s3cret" not in repr(catalogs)
        assert [r[0] for r in con.execute("SELECT id FROM sessions").fetchall()] == ["team-1"]
    finally:
        con.close()
    passfile = Path(os.environ[PASSFILE_ENV_VAR])
    assert (
        oct(passfile.stat().st_mode & 0o777) == "0o600"
        and oct(passfile.parent.stat().st_mode & 0o777) == "0o700"
    )
    bare = hide_password(url)
    assert "s3cret" not in bare
    with psycopg.connect(bare) as conn:  # libpq finds the password in the passfile
        assert conn.execute("SELECT current_user").fetchone() == ("team",)
