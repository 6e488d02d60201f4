"""Costs in the database and the report: request_costs rows, project roll-ups, text/JSON/HTML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.importers import import_file
from engine.report import build_report, render
from engine.report.lookup import threads_of
from engine.rollup import SessionCosts, rollup_project, root_of
from engine.store import SessionStore
from engine.store.costs import project_costs, refresh_request_costs, session_costs, stored_request_costs
from tests.conftest import FIXTURES, SHARED_SESSIONS
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG
from tests.test_cost import list_price, raw_claude_code_usage

CC_FULL = "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl"
CC = [
    FIXTURES / "sessions" / "claude-code__5c0375b4__head23.jsonl",
    FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl",
]


@pytest.fixture
def project_db(tmp_path: Path) -> Path:
    path = tmp_path / "project.db"
    with SessionStore(path) as store:
        for f in CC:
            import_file(f, store)
    return path


def test_refresh_stores_one_row_per_call_that_sums_to_list_prices(project_db: Path) -> None:
    expected = sum(list_price(u) for f in CC for u in raw_claude_code_usage(f))
    with SessionStore(project_db) as store:
        written = refresh_request_costs(store)
        rows = [r for s in store.list_sessions() for r in stored_request_costs(store, s.id)]
        assert refresh_request_costs(store) == written  # idempotent: rows replaced, not added
    assert written == len(rows) > 0
    assert sum(r["total_usd"] for r in rows) == pytest.approx(expected)
    first = rows[0]
    assert (
        first["call_index"] == 0
        and first["cache_cause"] == "cold_start"
        and first["day"] == first["call_utc"][:10]
    )
    assert first["priced_as"] == "claude-sonnet-4-20250514" and first["ttl_split_known"] in (0, 1)


def test_costs_compute_on_a_read_only_database_without_the_table_filled(project_db: Path) -> None:
    with SessionStore(project_db) as store, store.transaction() as conn:
        conn.execute("DELETE FROM request_costs")  # as in a database made before migration m003
    with SessionStore(project_db, read_only=True) as store:
        sessions = project_costs(store)
        assert all(stored_request_costs(store, s.session_id) == [] for s in sessions)
    assert sum(len(s.rows) for s in sessions) > 0


def test_project_rollup_puts_sub_agents_under_their_parent(project_db: Path) -> None:
    with SessionStore(project_db, read_only=True) as store:
        sessions = project_costs(store)
        roots = {s.id for s in store.list_sessions() if s.parent_session_id is None}
    project = rollup_project(sessions)
    assert {g.key for g in project.by_root} == roots
    assert sum(g.sessions for g in project.by_root) == len(sessions) > len(roots)
    assert project.totals["total_usd"] == pytest.approx(sum(g.totals["total_usd"] for g in project.by_root))
    assert project.totals["total_usd"] == pytest.approx(sum(g.totals["total_usd"] for g in project.by_day))
    assert project.totals["calls"] == sum(g.totals["calls"] for g in project.by_model)
    assert [g.key for g in project.by_day] == ["2025-09-03", "2025-09-07"]


def test_root_of_follows_parents_and_survives_a_cycle() -> None:
    parents = {"a": None, "b": "a", "c": "b", "x": "y", "y": "x"}
    assert root_of("c", parents) == "a" and root_of("a", parents) == "a"
    assert root_of("x", parents) in {"x", "y"}


def test_rollup_of_nothing_is_zero() -> None:
    project = rollup_project([SessionCosts("s", None, None, "engine", None, ())])
    assert (
        project.totals["total_usd"] == 0 and project.totals["calls"] == 0 and project.first_call_utc is None
    )


def test_report_of_a_multi_session_database_has_the_project_in_every_format(project_db: Path) -> None:
    with SessionStore(project_db, read_only=True) as store:
        ids = threads_of(store, None)
        report = build_report(store, ids, source=str(project_db))
        per_session = {sid: session_costs(store, sid) for sid in ids}
    assert report.report_version == 2 and report.project is not None
    assert report.project.totals.total_usd == pytest.approx(
        sum(sum(r["total_usd"] for r in s.rows) for s in per_session.values())
    )
    main = report.sessions[0]
    assert main.costs is not None and main.costs.calls[0].cache_cause == "cold_start"
    data = json.loads(render(report, "json"))
    assert data["project"]["by_model"][0]["key"] == "claude-sonnet-4-20250514"
    text = render(report, "text")
    assert "== project: " in text and "per day (UTC)" in text and "per call (provider usage" in text
    assert "Project: " in render(report, "html")


def test_costs_command_reports_the_project_and_refresh_fills_the_table(project_db: Path) -> None:
    import io

    from engine.cli import main

    out = io.StringIO()
    assert main(["costs", str(project_db)], out=out) == 0
    assert "per model" in out.getvalue() and "claude-sonnet-4-20250514" in out.getvalue()
    out = io.StringIO()
    assert main(["costs", str(project_db), "--refresh", "--format", "json"], out=out) == 0
    text = out.getvalue()
    assert text.startswith("request_costs: ")
    data = json.loads(text.split("\n", 1)[1])
    with SessionStore(project_db, read_only=True) as store:
        stored = [r for s in store.list_sessions() for r in stored_request_costs(store, s.id)]
    assert len(stored) == data["totals"]["calls"]


def test_inspect_shows_each_call_cost_and_the_session_total(project_db: Path) -> None:
    import io

    from engine.cli import main

    with SessionStore(project_db, read_only=True) as store:
        sid = next(s.id for s in store.list_sessions() if s.parent_session_id is None)
    out = io.StringIO()
    assert main(["inspect", str(project_db), sid], out=out) == 0
    assert "cold_start" in out.getvalue() and "\ncost: $" in out.getvalue()


@pytest.mark.shared
@pytest.mark.skipif(not (SHARED_SESSIONS / CC_FULL).is_file(), reason="needs ../shared/sessions")
def test_full_session_rebuild_share_matches_claude_cache_audit_under_its_grouping(tmp_path: Path) -> None:
    from bench.bench_cost import TranscriptSet, run_ctxdesk

    path = SHARED_SESSIONS / CC_FULL
    ours = run_ctxdesk(TranscriptSet("fe5e1c67", [(path, path.name)]), tmp_path)
    assert ours.share_per_thread == 0  # each thread on its own: cold starts and growth only
    # claude-cache-audit 0.1.0 (`--all --json`, headline pct_of_total_cost) on this file: 6.48%
    assert ours.share_per_file + ours.shrink_share_per_file == pytest.approx(6.48, abs=1.0)


def test_recording_a_request_event_stores_its_cost_row_like_a_full_refresh(
    project_db: Path, tmp_path: Path
) -> None:
    with SessionStore(project_db, read_only=True) as store:
        incremental = {s.id: stored_request_costs(store, s.id) for s in store.list_sessions()}
    assert sum(len(rows) for rows in incremental.values()) > 0  # the importer's record_event wrote them
    with SessionStore(project_db) as store:
        refresh_request_costs(store)
        refreshed = {s.id: stored_request_costs(store, s.id) for s in store.list_sessions()}
    skip = {"computed_utc"}
    for sid, rows in refreshed.items():
        assert [{k: v for k, v in r.items() if k not in skip} for r in incremental[sid]] == [
            {k: v for k, v in r.items() if k not in skip} for r in rows
        ], sid


def test_engine_sessions_store_costs_as_they_run(tmp_path: Path) -> None:
    from engine import ScriptedClient, SessionManager
    from engine.messages import assistant, tool_use

    shell = {
        "name": "shell",
        "description": "Run a command.",
        "input_schema": {"type": "object", "properties": {}},
    }
    client = ScriptedClient([assistant("", tool_use("t1", "shell")), "done"], model="claude-sonnet-4-5")
    with (
        SessionStore(tmp_path / "agent.db") as store,
        SessionManager(
            client,
            store,
            system_prompt="You are careful.",
            tools=[shell],
            tool_handlers={"shell": lambda _: "ok\n" * 400},
        ) as agent,
    ):
        agent.run_turn("Check the repo.")
        rows = stored_request_costs(store, agent.session_id)
    assert [r["call_index"] for r in rows] == [0, 1]
    assert all(r["priced_as"] == "claude-sonnet-4-5" and r["total_usd"] > 0 for r in rows)


def test_an_imported_call_without_a_time_of_its_own_has_no_day_not_the_imports(tmp_path: Path) -> None:
    # Continue CLI keeps no times: its calls were dated by when they were imported (today's costs grew by an
    # old session's); a session ctxdesk ran (test above) keeps its events' times
    from engine.importers import import_files
    from engine.importers.locations import folder_files

    with SessionStore(tmp_path / "continue.db") as store:
        import_files(
            folder_files(FIXTURES / "real_agents" / "continue"), store, on_error=lambda path, exc: None
        )
        [session] = store.list_sessions()
        stored = stored_request_costs(store, session.id)
        computed = session_costs(store, session.id).rows
        project = rollup_project(project_costs(store))
    assert stored and [r["call_utc"] for r in stored] == [None] * len(stored)
    assert [r["call_utc"] for r in computed] == [None] * len(stored)
    assert [g.key for g in project.by_day] == ["unknown"]
    assert (project.first_call_utc, project.last_call_utc) == (None, None)


def test_the_dashboards_per_day_table_puts_calls_of_unknown_time_on_an_unknown_day_last() -> None:
    import pandas as pd

    from dashboard.data.costs import rollup

    calls = pd.DataFrame(
        {
            "day": ["2026-11-28", None, "2026-11-27"], "priced_as": ["m", "m", "m"], "input_usd": [1.0, 2.0, 4.0],
            "output_usd": 0.0, "cache_read_usd": 0.0, "cache_write_5m_usd": 0.0, "cache_write_1h_usd": 0.0,
            "total_usd": [1.0, 2.0, 4.0], "uncached_usd": 0.0, "lost_usd": 0.0, "cache_read_tokens": 0,
            "cache_write_5m_tokens": 0, "cache_write_1h_tokens": 0, "output_tokens": 0,
        }
    )  # fmt: skip
    per_day = rollup(calls, "day")
    assert per_day[["day", "total_usd"]].values.tolist() == [
        ["2026-11-27", 4.0],
        ["2026-11-28", 1.0],
        ["unknown", 2.0],
    ]


def test_a_database_missing_earlier_rows_gets_none_until_a_refresh(project_db: Path) -> None:
    from engine.events import ContextEvent, ProviderUsage

    with SessionStore(project_db) as store:
        sid = next(s.id for s in store.list_sessions() if s.parent_session_id is None)
        with store.transaction() as conn:
            conn.execute("DELETE FROM request_costs WHERE session_id = ?", (sid,))
        usage = ProviderUsage(input_tokens=3, output_tokens=9, cache_read_input_tokens=30_000)
        store.record_event(sid, ContextEvent(kind="request", model="claude-sonnet-4-20250514", usage=usage))
        assert stored_request_costs(store, sid) == []  # no half-analysed session
        refresh_request_costs(store, [sid])
        rows = stored_request_costs(store, sid)
    assert rows[-1]["cache_read_tokens"] == 30_000 and [r["call_index"] for r in rows] == list(
        range(len(rows))
    )


@pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
def test_costs_refresh_on_a_postgresql_store() -> None:
    from engine.store.factory import open_store
    from tests.pg_server import fresh_url

    store = open_store(fresh_url())
    try:
        import_file(CC[0], store)
        computed = sum(len(s.rows) for s in project_costs(store))
        assert refresh_request_costs(store) == computed > 0
        assert sum(len(stored_request_costs(store, s.id)) for s in store.list_sessions()) == computed
    finally:
        store.close()


def test_the_html_roll_ups_have_a_title_column_only_where_there_is_a_title(project_db: Path) -> None:
    """#36.9: the "Per day" and "Per model" tables had an empty "title" column."""
    import re

    with SessionStore(project_db, read_only=True) as store:
        page = render(build_report(store, threads_of(store, None), source=str(project_db)), "html")
    tables = dict(re.findall(r"<h3>([^<]+)</h3><table class='costs'>(.*?)</table>", page))
    headers = {name: re.findall(r"<th>([^<]*)</th>", body) for name, body in tables.items()}
    assert headers["Per day (UTC)"][:2] == ["day", "sessions"]
    assert headers["Per model"][:2] == ["model", "sessions"]
    assert headers["Per session (sub-agents rolled into their parent)"][:2] == ["session", "title"]
    titles = re.findall(
        r"<tr><td>[^<]*</td><td>([^<]*)</td>", tables["Per session (sub-agents rolled into their parent)"]
    )
    assert titles and all(t not in ("", "-") for t in titles)


GEMINI_CLI_FILE = (
    FIXTURES / "real_agents" / "gemini" / "tools-resume" / "tmp" / "repo" / "chats"
    / "session-2026-11-24T06-26-5286f213.jsonl"
)  # fmt: skip


def test_a_gemini_cli_session_is_priced_from_the_bundled_table(tmp_path: Path) -> None:
    """#36.3: the real Gemini CLI's calls are priced (they showed $0.0000)."""
    from engine.cost import prices_for

    with SessionStore(tmp_path / "gemini.db") as store:
        import_file(GEMINI_CLI_FILE, store)
        (session,) = project_costs(store)
    assert session.rows and all(r["priced_as"] == "gemini-3.1-pro-preview" for r in session.rows)
    prices = prices_for("gemini-3.1-pro-preview")
    first = session.rows[0]
    assert first["total_usd"] > 0
    assert first["input_usd"] == pytest.approx(first["input_tokens"] * prices.input)


@pytest.mark.parametrize(
    "model",  # Gemini CLI's own model constants (DEFAULT_GEMINI_MODEL, PREVIEW_GEMINI_*), as its sessions record them
    ["gemini-2.5-pro", "gemini-2.5-flash", "gemini-2.5-flash-lite", "gemini-3-pro-preview", "gemini-3-flash-preview",
     "gemini-3.1-pro-preview", "gemini-3.1-pro-preview-customtools", "models/gemini-2.5-pro", "google/gemini-2.5-flash"],
)  # fmt: skip
def test_gemini_cli_models_are_priced(model: str) -> None:
    from engine.cost import prices_for

    prices = prices_for(model)
    assert prices is not None and prices.input > 0 and prices.output > 0
