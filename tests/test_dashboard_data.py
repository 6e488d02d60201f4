"""dashboard.data on real SQLite files through real DuckDB (sqlite scanner loaded offline)."""

from __future__ import annotations

import hashlib
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import duckdb
import pandas as pd
import pytest

from dashboard import data
from engine.errors import NotADatabaseError, NotFoundError, ValidationError
from engine.messages import assistant, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer
from tests.dashboard_fixture import copy_dashboard_db, write_dashboard_db


@pytest.fixture
def db(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_dashboard_db(tmp_path_factory.getbasetemp(), tmp_path / "fixture.db")


@pytest.fixture
def con(db: Path) -> duckdb.DuckDBPyConnection:
    c = data.connect([db])
    yield c
    c.close()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# -- which files ------------------------------------------------------------------------------


def test_loaded_paths_prefers_argv_after_double_dash_then_env_then_default(tmp_path: Path, db: Path) -> None:
    other = tmp_path / "sub"
    other.mkdir()
    (other / "b.db").write_bytes(db.read_bytes())
    (other / "notes.txt").write_text("x")
    default = tmp_path / "default"
    default.mkdir()
    (default / "s.db").write_bytes(db.read_bytes())

    assert data.loaded_paths(["app.py", "--", str(db), str(other)], {}, default) == [db, other / "b.db"]
    env = {data.DB_PATHS_ENV_VAR: os.pathsep.join([str(other), str(db)])}
    assert data.loaded_paths(["app.py"], env, default) == [other / "b.db", db]
    assert data.loaded_paths(["app.py"], {}, default) == [default / "s.db"]
    assert data.loaded_paths(None, {}, tmp_path / "missing") == []


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/x/app.py", "a.db", "b"], ["a.db", "b"]),
        (["/x/app.py", "--", "a.db"], ["a.db"]),
        (["pytest", "-q", "tests"], []),
        ([], []),
    ],
)
def test_script_args_reads_paths_after_the_script_or_double_dash(
    argv: list[str], expected: list[str]
) -> None:
    assert data.script_args(argv, Path("/x/app.py")) == expected


def test_loaded_paths_drops_duplicates_and_names_a_missing_path(tmp_path: Path, db: Path) -> None:
    assert data.loaded_paths(["--", str(db), str(db), str(db.parent)], {}) == [db]
    with pytest.raises(NotFoundError, match=r"nope\.db"):
        data.loaded_paths(["--", str(tmp_path / "nope.db")], {})


def test_db_labels_are_unique_even_for_same_stems(tmp_path: Path) -> None:
    paths = [tmp_path / "a" / "s.db", tmp_path / "b" / "s.db", tmp_path / "t.db"]
    assert data.db_labels(paths) == ["a/s", "b/s", "t"]


# -- connection -------------------------------------------------------------------------------


def test_connect_attaches_read_only_and_never_writes_the_file(db: Path) -> None:
    before = _sha(db)
    con = data.connect([db])
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] == 3
    with pytest.raises(duckdb.Error, match=r"(?i)read.only"):
        con.execute("INSERT INTO db_0.sessions (id, created_utc, updated_utc) VALUES ('x', 'a', 'b')")
    con.close()
    assert _sha(db) == before


def test_connect_unions_databases_with_a_db_label(tmp_path: Path, db: Path) -> None:
    second = tmp_path / "second.db"
    write_dashboard_db(second, id_prefix="b-")
    con = data.connect([db, second])
    rows = con.execute("SELECT db, count(*) FROM sessions GROUP BY db ORDER BY db").fetchall()
    assert rows == [("fixture", 3), ("second", 3)]
    assert data.database_paths(con) == {"fixture": db.resolve(), "second": second.resolve()}
    overview = data.sessions_overview(con)
    assert len(overview) == 6
    assert set(overview["db"]) == {"fixture", "second"}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"not a database at all, just text" * 10, "cannot attach"),
        (None, "missing ctxdesk tables"),
    ],
    ids=["text-file", "foreign-sqlite"],
)
def test_connect_rejects_files_that_are_not_session_databases(
    tmp_path: Path, content: bytes | None, match: str
) -> None:
    path = tmp_path / "other.db"
    if content is None:
        conn = sqlite3.connect(path)
        conn.execute("CREATE TABLE things (x)")
        conn.commit()
        conn.close()
    else:
        path.write_bytes(content)
    with pytest.raises(NotADatabaseError, match=match):
        data.connect([path])


def test_reads_run_one_at_a_time_on_one_duckdb_thread(db: Path) -> None:
    """The sqlite scanner is not thread-safe within a process (a segfault seen under a live writer):
    every read holds QUERY_LOCK on a cursor of its own, and a SQLite connection runs one DuckDB thread."""
    con = data.connect([db])
    assert con.execute("SELECT current_setting('threads')").fetchone()[0] == 1

    def inside(cursor: duckdb.DuckDBPyConnection, session_id: str) -> tuple[bool, object]:
        held = data.QUERY_LOCK._is_owned()  # type: ignore[attr-defined]
        return held, cursor.execute(
            "SELECT count(*) FROM messages WHERE session_id = ?", [session_id]
        ).fetchone()

    held, count = data.read(con, inside, "sess-refactor")
    assert held and count is not None and count[0] > 0
    assert not data.QUERY_LOCK._is_owned()  # type: ignore[attr-defined]


def test_no_page_reads_the_shared_connection_past_the_lock() -> None:
    """Pages and the glue read through dashboard.data.read (state.read / state.query), never on a
    connection or cursor of their own."""
    root = Path(__file__).resolve().parents[1] / "dashboard"
    offenders = [
        f"{path.relative_to(root)}:{n}"
        for path in [root / "state.py", *sorted((root / "views").glob("*.py"))]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if ".cursor(" in line or ".execute(" in line or "state.connection()." in line
    ]
    assert not offenders, offenders


def test_a_new_connection_sees_rows_a_writer_committed_meanwhile(db: Path) -> None:
    con = data.connect([db])
    signature = data.files_signature([db])
    before = int(data.sessions_overview(con).set_index("session_id").loc["sess-small", "messages"])
    with SessionStore(db) as store:
        store.append_messages(
            "sess-small", [user("more"), assistant("yes")], tokenizer=get_tokenizer("gpt-4o")
        )
    assert data.files_signature([db]) != signature
    fresh = data.connect([db])
    after = int(data.sessions_overview(fresh).set_index("session_id").loc["sess-small", "messages"])
    assert after == before + 2


def test_a_reader_opening_and_closing_the_database_changes_no_signature(db: Path) -> None:
    # A reader of a WAL database makes an empty -wal file and removes it on close; counting it reran
    # every open page (closing an open dropdown) though nothing was committed.
    signature = data.files_signature([db])
    with closing(sqlite3.connect(db)) as reader:
        reader.execute("SELECT count(*) FROM sessions").fetchone()
        assert Path(f"{db}-wal").exists()
        assert data.files_signature([db]) == signature
    assert data.files_signature([db]) == signature


# -- queries ----------------------------------------------------------------------------------


def test_sessions_overview_aggregates_turns_peaks_compactions_and_offloads(
    con: duckdb.DuckDBPyConnection,
) -> None:
    df = data.sessions_overview(con).set_index("session_id")
    refactor = df.loc["sess-refactor"]
    assert refactor["turns"] == 6
    assert refactor["compactions"] == 1
    assert refactor["forced_final"] == 1
    assert refactor["offloaded_bytes"] > 40_000
    assert refactor["status"] == "final"
    assert 90 < refactor["peak_usage_pct"] < 100
    report = df.loc["sess-report"]
    assert report["skipped_provider"] == 1
    assert report["forced_final"] == 0
    assert df.loc["sess-small", "compactions"] == 0
    assert tuple(data.sessions_overview(con).columns) == data.SESSION_COLUMNS


def test_a_session_that_recorded_only_the_model_window_has_its_peak_against_that_window(
    tmp_path: Path,
) -> None:
    """Codex and Claude Code files record the model's window, not a limit: the Sessions page
    measures their peak against the window less the recorded output reserve, as the timeline draws it."""
    from engine.events import ContextEvent

    path = tmp_path / "window.db"
    with SessionStore(path) as store:
        windowed, bare = store.create_session(model="gpt-5.5"), store.create_session(model="gpt-4o")
        for sid in (windowed, bare):
            store.append_messages(sid, [user("q"), assistant("a")], tokenizer=get_tokenizer("gpt-4o"))
        for projected in (30_000, 60_000):
            store.record_event(windowed, ContextEvent(
                kind="request", outcome="ok", context_window=258_400, max_output_tokens=58_400,
                projected_tokens=projected,
            ))  # fmt: skip
        store.record_event(bare, ContextEvent(kind="request", outcome="ok", projected_tokens=9_000))
    con = data.connect([path])
    try:
        df = data.sessions_overview(con).set_index("session_id")
    finally:
        con.close()
    assert df.loc[windowed, "peak_usage_pct"] == 30.0  # 60,000 of 258,400 - 58,400
    assert df.loc[windowed, "limit_tokens"] == 200_000
    assert df.loc[windowed, "peak_tokens"] == 60_000
    assert df.loc[bare, "peak_tokens"] == 9_000
    assert df[["peak_usage_pct", "limit_tokens"]].loc[bare].isna().all()  # no window recorded: no guess


def test_sessions_overview_of_nothing_is_an_empty_frame_with_the_columns() -> None:
    con = data.connect([])
    assert tuple(data.sessions_overview(con).columns) == data.SESSION_COLUMNS


@pytest.mark.parametrize(
    ("flt", "expected"),
    [
        (data.SessionFilter(), {"sess-refactor", "sess-report", "sess-small"}),
        (data.SessionFilter(text="AUTH"), {"sess-refactor"}),
        (data.SessionFilter(models=("gpt-4o",)), {"sess-report"}),
        (data.SessionFilter(statuses=("final", "ended")), {"sess-refactor", "sess-report"}),
        (data.SessionFilter(only_stopped=True), {"sess-refactor", "sess-report"}),
        (data.SessionFilter(dbs=("elsewhere",)), set()),
    ],
    ids=["all", "text", "model", "status", "stopped", "db"],
)
def test_filter_sessions(con: duckdb.DuckDBPyConnection, flt: data.SessionFilter, expected: set[str]) -> None:
    assert set(data.filter_sessions(data.sessions_overview(con), flt)["session_id"]) == expected


def test_filter_sessions_sorts_and_rejects_unknown_columns(con: duckdb.DuckDBPyConnection) -> None:
    df = data.sessions_overview(con)
    ordered = data.filter_sessions(df, data.SessionFilter(), sort_by="turns", descending=False)
    assert list(ordered["turns"]) == sorted(df["turns"])
    with pytest.raises(ValidationError, match="content_json"):
        data.filter_sessions(df, data.SessionFilter(), sort_by="content_json")


def test_timeline_has_one_row_per_turn_whose_components_add_up(con: duckdb.DuckDBPyConnection) -> None:
    turns = data.timeline(con, "fixture", "sess-refactor")
    assert list(turns["turn"]) == [0, 1, 2, 3, 4, 5]
    components = turns[list(data.COMPONENT_COLUMNS)].sum(axis=1)
    assert list(components) == list(turns["projected_tokens"])
    assert (turns["requests"] >= 1).all()
    assert turns["provider_cache_read_tokens"].notna().all()
    # the compaction at turn 3 shows as a summary component from turn 4 on
    assert list(turns["summary"] > 0) == [False, False, False, False, True, True]


def test_markers_list_compactions_and_guard_stops(con: duckdb.DuckDBPyConnection) -> None:
    marks = data.markers(con, "fixture", "sess-refactor")
    assert list(zip(marks["turn"], marks["kind"], marks["outcome"], strict=True)) == [
        (3, "compaction", "compacted"),
        (5, "guard", "forced_final"),
    ]


def test_sent_messages_are_largest_first_and_leave_out_what_compaction_removed(
    con: duckdb.DuckDBPyConnection,
) -> None:
    turn4 = data.timeline(con, "fixture", "sess-refactor").set_index("turn").loc[4]
    sent = data.sent_messages(con, "fixture", "sess-refactor", 4)
    assert list(sent["tokens"]) == sorted(sent["tokens"], reverse=True)
    assert not set(sent["seq"]) & set(range(7))  # seqs 0-6 were summarized at turn 3
    assert int(sent["tokens"].sum()) == int(turn4["conversation"] + turn4["tool_results"])
    assert "content_json" not in sent.columns
    early = data.sent_messages(con, "fixture", "sess-refactor", 1)
    assert 0 in set(early["seq"])


def test_message_returns_readable_text_of_blocks(con: duckdb.DuckDBPyConnection) -> None:
    msg = data.message(con, "fixture", "sess-refactor", 1)
    assert msg is not None
    assert msg["kind"] == "tool_use"
    assert "[tool_use read_file]" in msg["text"]
    assert data.message(con, "fixture", "sess-refactor", 9999) is None


@pytest.mark.parametrize(
    ("content_json", "text"),
    [
        ('"plain"', "plain"),
        ('[{"type": "text", "text": "a"}, {"type": "image", "source": {}}]', "a\n[image]"),
        (
            '[{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "out"}]}]',
            "[tool_result t1] out",
        ),
        ("not json", "not json"),
    ],
)
def test_content_text(content_json: str, text: str) -> None:
    assert data.content_text(content_json) == text


def test_compactions_and_snapshots(con: duckdb.DuckDBPyConnection) -> None:
    comp = data.compactions(con, "fixture", "sess-refactor")
    assert len(comp) == 1
    details = comp.iloc[0]["details"]
    assert details["before_tokens"] > details["after_tokens"]
    snaps = data.snapshots(con, "fixture", "sess-refactor")
    assert list(snaps["strategy"]) == ["chain"]
    assert "messages_json" not in snaps.columns


def test_blobs_filter_by_session_tool_and_size_and_content_round_trips(
    con: duckdb.DuckDBPyConnection,
) -> None:
    everything = data.blobs(con)
    assert len(everything) == 2
    assert list(everything["size_bytes"]) == sorted(everything["size_bytes"], reverse=True)
    assert len(data.blobs(con, tool="bash")) == 1
    assert len(data.blobs(con, session_id="sess-refactor")) == 1
    assert data.blobs(con, min_bytes=10**9).empty
    text_blob = everything[everything["tool_name"] == "read_file"].iloc[0]
    content = data.blob_content(con, "fixture", text_blob["ref_id"])
    assert len(content) == text_blob["size_bytes"]
    assert content.startswith(b"auth/part2.py")
    with pytest.raises(NotFoundError):
        data.blob_content(con, "fixture", "res_missing")


def test_tool_costs_count_calls_and_group_by_server(con: duckdb.DuckDBPyConnection) -> None:
    tools = data.tool_costs(con, "fixture", "sess-refactor").set_index("name")
    assert tools.loc["read_file", "calls"] == 6
    assert tools.loc["jira_search", "calls"] == 0
    servers = data.server_costs(tools.reset_index()).set_index("server")
    assert servers.loc["github", "tokens"] == 640 + 520
    assert servers.loc["(builtin)", "tools"] == 3


def test_deferral_matrix_carries_states_forward_until_the_next_event(con: duckdb.DuckDBPyConnection) -> None:
    m = data.deferral_matrix(con, "fixture", "sess-refactor")
    state = {(t, tool): s for t, tool, s in m.itertuples(index=False)}
    assert state[(1, "github_create_issue")] == "deferred"
    assert state[(2, "github_create_issue")] == "loaded"
    assert state[(5, "github_create_issue")] == "loaded"
    assert state[(5, "jira_search")] == "deferred"
    assert data.deferral_matrix(con, "fixture", "sess-small").empty


def test_tool_searches_split_hits_and_misses(con: duckdb.DuckDBPyConnection) -> None:
    searches = data.tool_searches(con, "fixture", "sess-refactor")
    assert list(searches["hit"]) == [True, False]
    assert searches.iloc[0]["hits"] == "github_create_issue"


# -- links, recorded settings, findings -------------------------------------------------------


@pytest.mark.parametrize(
    ("link", "expected"),
    [
        ("fixture::sess-report", ("fixture", "sess-report")),
        ("sess-report", ("fixture", "sess-report")),
        ("sess-small", None),  # in both databases
        ("second::sess-small", ("second", "sess-small")),
        ("nope", None),
        ("fixture::nope", None),
    ],
    ids=[
        "db-and-id",
        "unique-plain-id",
        "ambiguous-plain-id",
        "db-and-shared-id",
        "unknown",
        "unknown-in-db",
    ],
)
def test_resolve_session_link(tmp_path: Path, db: Path, link: str, expected: tuple[str, str] | None) -> None:
    second = tmp_path / "second.db"
    with SessionStore(second) as store:
        store.create_session(session_id="sess-small", title="same id elsewhere", model="gpt-4o")
    con = data.connect([db, second])
    assert data.resolve_session_link(link, data.sessions_overview(con)) == expected


def test_session_settings_are_the_recorded_resolved_settings(con: duckdb.DuckDBPyConnection) -> None:
    recorded = data.session_settings(con, "fixture", "sess-refactor")
    assert recorded["tokenizer"] == get_tokenizer("claude-sonnet-4-20250514").id
    assert recorded["tool_response_max_bytes"] is None
    assert recorded["sources"]["context_window"].startswith("model:")
    assert data.session_settings(con, "fixture", "nope") == {}


def test_session_findings_read_the_database_read_only(db: Path) -> None:
    before = _sha(db)
    found = data.session_findings(db, "sess-report")
    assert _sha(db) == before
    repeated = next(f for f in found if f.kind == "repeated_read")
    assert repeated.turn_index == 3
    assert "grep -n section1 report.txt" in repeated.title
    assert repeated.tokens > 0 and repeated.money is not None
    assert [f.tokens for f in found] == sorted((f.tokens for f in found), reverse=True)
    assert data.session_findings(db, "sess-small") == []


def test_session_findings_phrase_fixes_against_the_users_settings(tmp_path: Path, db: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text('[models."claude-sonnet-4-20250514"]\nresult_offload_threshold = 1000000\n')
    default = {f.fix for f in data.session_findings(db, "sess-refactor")}
    edited = {f.fix for f in data.session_findings(db, "sess-refactor", settings)}
    assert default != edited
    assert data.session_findings(db, "sess-refactor", tmp_path / "missing.toml") == data.session_findings(
        db, "sess-refactor"
    )


def test_every_step_carries_the_one_limit_engine_limit_gives_it(tmp_path: Path) -> None:
    """A call that recorded its window but no limit is measured against that window less what it
    reserves (engine.limit.recorded_limit), in SQL, the same number the Sessions list shows."""
    from engine import recorded_limit
    from engine.events import ComponentTokens, ContextEvent
    from engine.store import SessionStore

    path = tmp_path / "limits.db"
    recorded = [
        dict(limit_tokens=12_220, context_window=13_500, max_output_tokens=1_024, buffer_tokens=256),
        dict(limit_tokens=None, context_window=258_400, max_output_tokens=None, buffer_tokens=None),
        dict(limit_tokens=None, context_window=200_000, max_output_tokens=8_000, buffer_tokens=2_000),
        dict(limit_tokens=None, context_window=None, max_output_tokens=None, buffer_tokens=None),
    ]
    with SessionStore(path) as store:
        store.create_session(session_id="s", model="gpt-4o")
        for turn, columns in enumerate(recorded):
            store.record_event("s", ContextEvent(
                kind="request", trigger="user_input", outcome="ok", turn_index=turn,
                components=ComponentTokens(conversation=100 * (turn + 1)), **columns,
            ))  # fmt: skip
    con = data.connect([path])
    (label,) = data.database_paths(con)
    steps = data.timeline(con, label, "s")
    expected = [recorded_limit(c) for c in recorded]
    assert (
        [None if v != v else int(v) for v in steps["limit_tokens"]]
        == expected
        == [12_220, 258_400, 190_000, None]
    )
    assert steps["limit_from_window"].tolist() == [False, True, True, False]
    calls = data.requests(con, label, "s")
    assert [None if v != v else int(v) for v in calls["limit_tokens"]] == expected
    (overview,) = data.sessions_overview(con).itertuples()
    assert overview.limit_tokens == expected[-2]  # the last call that had a limit


def test_the_dashboard_reads_its_databases_when_home_does_not_exist(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DuckDB keeps extensions under the home directory: a service with HOME=/nonexistent got a raw
    IOException on every page."""
    import shutil

    db = tmp_path / "sample.db"
    shutil.copy(Path(__file__).resolve().parents[1] / "data" / "demo-coding-agent.db", db)
    monkeypatch.setenv("HOME", str(tmp_path / "no-such-home"))
    con = data.connect([db])
    assert con.execute("SELECT count(*) FROM sessions").fetchone()[0] > 0


REAL = Path(__file__).parent / "fixtures" / "real_agents"


def test_an_imported_compaction_is_shown_when_the_agent_made_it_not_when_it_was_imported(
    tmp_path: Path,
) -> None:
    """The rows an import writes are stamped with the import's time: the Compaction page's "When" of an
    agent's own compaction is the time its transcript gives (real Claude Code and Kilo runs)."""
    import json

    from engine.importers import import_file

    claude = (
        REAL / "claude-code" / "compact_auto" / "transcripts" / "005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl"
    )
    store = SessionStore(tmp_path / "real.db")
    (cc,) = import_file(claude, store).sessions
    (kilo,) = import_file(REAL / "kilo" / "compact" / "data" / "kilo" / "kilo.db", store).sessions
    store.close()
    con = data.connect([tmp_path / "real.db"])
    lines = [json.loads(line) for line in claude.read_text(encoding="utf-8").splitlines()]
    compacted = {
        pd.Timestamp(o["timestamp"])
        for o in lines
        if o.get("isCompactSummary") or o.get("subtype") == "compact_boundary"
    }
    for table in (data.compactions(con, "real", cc.session_id), data.snapshots(con, "real", cc.session_id)):
        assert len(table) == 1 and pd.Timestamp(table["when_utc"].iloc[0]) in compacted
        last_line = max(pd.Timestamp(o["timestamp"]) for o in lines if "timestamp" in o)
        assert pd.Timestamp(table["created_utc"].iloc[0]) > last_line  # the import's time
    # Kilo's compaction message keeps no time: the start of the call it preceded, inside the session's calls
    calls = sorted(
        pd.Timestamp(d["call_utc"])
        for d in data.events(con, "real", kilo.session_id, ["request"])["details"]
        if d.get("call_utc")
    )
    for table in (
        data.compactions(con, "real", kilo.session_id),
        data.snapshots(con, "real", kilo.session_id),
    ):
        when = pd.Timestamp(table["when_utc"].iloc[0])
        assert calls[0] < when <= calls[-1] and when in calls
    # ctxdesk's own compaction was made when its rows were written
    fixture = data.connect([copy_dashboard_db(tmp_path, tmp_path / "fixture.db")])
    comp = data.compactions(fixture, "fixture", "sess-refactor")
    assert list(comp["when_utc"]) == list(comp["created_utc"])
