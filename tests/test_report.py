"""Headless reports and diffs: JSON schema, thread separation, CI gates, HTML, message-level diffs."""

from __future__ import annotations

import importlib.util
import io
import json
import re
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from engine.cli import main
from engine.events import ContextEvent
from engine.importers import import_file
from engine.importers.formats.claude_code.session import SUMMARY_RESERVE
from engine.messages import assistant, tool_result, tool_use, user
from engine.report import (
    EXIT_GATE_FAILED,
    DiffReport,
    Report,
    build_report,
    open_target,
    render,
    render_html,
    schema_text,
)
from engine.settings import limit_for_model
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "reports"
CLAUDE_FIXTURE = FIXTURES / "claude-code__fe5e1c67__agent2.jsonl"
OPENHANDS_FIXTURE = FIXTURES / "openhands__ponyc-4595__head12.jsonl"
SCHEMA_PATH = ROOT / "docs" / "report.schema.json"
SHARED_SESSIONS = ROOT.parent / "shared" / "sessions"
MAIN_ID = "fe5e1c67-53e7-4862-81ae-d0e013e3270b"
#: The limit the importer records for the fixture's model (no window in the file, no user settings).
KNOWN_LIMIT = limit_for_model(
    "claude-sonnet-4-20250514", file_output_reserve=SUMMARY_RESERVE
)  # Claude Code keeps 20,000 below the window for its summary


@pytest.fixture(scope="module")
def claude_report() -> Report:
    with open_target(str(CLAUDE_FIXTURE), db=None) as (store, ids, label):
        return build_report(store, ids, source=label)


@pytest.fixture
def claude_db(tmp_path: Path) -> Path:
    path = tmp_path / "claude.db"
    with SessionStore(path) as store:
        import_file(CLAUDE_FIXTURE, store)
    return path


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    code = main(argv, out=out)
    return code, out.getvalue()


# -- the JSON report and its schema ----------------------------------------------------------------


def test_the_published_json_schema_is_current() -> None:
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text(), (
        "run: python -m engine.report --schema > docs/report.schema.json"
    )


def test_a_produced_report_validates_against_the_report_model(claude_report: Report) -> None:
    text = render(claude_report, "json")
    data = json.loads(text)
    assert data["report_version"] == 2
    assert Report.model_validate_json(text) == claude_report
    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    assert set(schema["required"]) <= set(data)
    session_required = schema["$defs"]["SessionReport"]["required"]
    for session in data["sessions"]:
        assert set(session_required) <= set(session)
        assert {"id", "model", "tokenizer", "exact", "turns", "events", "findings", "peak_usage_pct"} <= set(
            session
        )


@pytest.mark.skipif(importlib.util.find_spec("jsonschema") is None, reason="jsonschema is not installed")
def test_a_produced_report_validates_against_the_published_schema(claude_report: Report) -> None:
    import jsonschema

    schema = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    jsonschema.validate(json.loads(render(claude_report, "json")), schema)


def test_a_claude_code_transcript_reports_each_sub_agent_as_its_own_thread(claude_report: Report) -> None:
    main_thread, sub = claude_report.sessions
    assert (main_thread.id, main_thread.parent_session_id) == (MAIN_ID, None)
    assert sub.parent_session_id == MAIN_ID
    assert (main_thread.message_count, sub.message_count) == (7, 68)  # never merged into one window
    assert (main_thread.request_count, sub.request_count) == (3, 34)
    for thread in claude_report.sessions:
        assert (thread.tokenizer, thread.exact) == ("anthropic", False)
        # the importer records the limit it can know (engine.settings.limit_for_model: here the model table's)
        assert (thread.limit.limit_tokens, thread.limit.source) == (KNOWN_LIMIT.tokens, "request events")
        assert thread.limit.context_window == KNOWN_LIMIT.window == 200_000
    [turn] = sub.turns  # a sub-agent thread is one turn of many requests
    assert turn.requests == 34 and turn.used_source == "provider"
    assert turn.provider_usage is not None and turn.components is not None
    assert (
        turn.components.total == turn.provider_usage.prompt_tokens and turn.components_basis == "reconciled"
    )
    assert turn.used_pct == round(100 * turn.provider_usage.prompt_tokens / KNOWN_LIMIT.tokens, 1)
    assert sub.peak_usage_pct == max(r.used_pct or 0 for r in sub.requests)
    assert {f.kind for f in sub.findings} == {"repeated_read", "unused_result"}
    assert claude_report.findings_count == len(sub.findings) == 3


def test_each_request_says_how_many_messages_it_sent_by_the_one_rule(claude_db: Path) -> None:
    from engine.findings import load_session_view

    with SessionStore(claude_db, read_only=True) as store:
        report = build_report(store, [s.id for s in store.list_sessions()], source="t")
        for session in report.sessions:
            view = load_session_view(store, session.id)
            seqs = [m.seq for m in view.messages]
            expected = {r.event_seq: sum(1 for q in seqs if r.sends(q)) for r in view.requests}
            assert {r.event_seq: r.messages_sent for r in session.requests} == expected
            assert all(0 < r.messages_sent <= session.message_count for r in session.requests)


def test_the_text_report_says_which_numbers_are_estimates(claude_report: Report) -> None:
    text = render(claude_report, "text")
    assert f"== sub-agent thread of {MAIN_ID}" in text
    assert (
        "components add up to the provider's own count where a call has one (34 reconciled to the provider)"
        in text
    )
    assert "'estimate' is ours before the call, by tokenizer anthropic (an estimate)" in text
    assert "basis: how its components were known; provider = exact" in text
    assert re.search(
        r"^turn +requests +system .* unattributed +total +basis +estimate +provider +used %$", text, re.M
    )
    assert "page.tsx read 2 times with identical output" in text


# -- the command line -------------------------------------------------------------------------------


def test_report_writes_json_to_a_file(tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.json"
    code, printed = run(["report", str(CLAUDE_FIXTURE), "--format", "json", "--out", str(out)])
    assert (code, printed) == (0, "")
    assert len(Report.model_validate_json(out.read_text(encoding="utf-8")).sessions) == 2


@pytest.mark.parametrize(
    ("gate", "code", "reason"),
    [
        (["--fail-on-findings", "3"], EXIT_GATE_FAILED, "3 finding(s) (repeated_read, unused_result) reach --fail-on-findings 3"),
        (["--fail-on-findings", "4"], 0, None),
        (["--fail-over", "15"], EXIT_GATE_FAILED, "peak context usage 22.9% of the limit"),
        (["--fail-over", "50"], 0, None),
    ],
)  # fmt: skip
def test_ci_gates_exit_3_with_one_line(
    capsys: pytest.CaptureFixture[str], gate: list[str], code: int, reason: str | None
) -> None:
    assert run(["report", str(CLAUDE_FIXTURE), "--format", "json", *gate])[0] == code
    err = capsys.readouterr().err
    if reason is None:
        assert err == ""
    else:
        assert err.count("\n") == 1 and err.startswith("ctxdesk: report: ") and reason in err


def test_report_on_a_database_with_one_session_needs_no_session_id(claude_db: Path) -> None:
    code, text = run(["report", str(claude_db), "--format", "json"])
    assert code == 0
    assert [s.parent_session_id for s in Report.model_validate_json(text).sessions] == [None, MAIN_ID]


@pytest.mark.parametrize("form", ["db_colon_session", "db_option"])
def test_report_on_one_session_of_a_database(claude_db: Path, form: str) -> None:
    sub = f"{MAIN_ID}:agent-1"
    argv = (
        ["report", f"{claude_db}:{sub}"]
        if form == "db_colon_session"
        else ["report", "--db", str(claude_db), sub]
    )
    code, text = run([*argv, "--format", "json"])
    assert code == 0
    [session] = Report.model_validate_json(text).sessions
    assert session.id == sub


def test_report_on_a_database_with_several_sessions_reports_the_whole_project(claude_db: Path) -> None:
    with SessionStore(claude_db) as store:
        import_file(OPENHANDS_FIXTURE, store)
        roots = [s.id for s in store.list_sessions() if s.parent_session_id is None]
    code, text = run(["report", str(claude_db), "--format", "json"])
    assert code == 0
    report = Report.model_validate_json(text)
    assert len(roots) == 2 and {s.id for s in report.sessions} >= set(roots)
    assert report.project is not None
    assert {g.key for g in report.project.by_root} == set(roots)
    assert report.project.sessions == len(report.sessions)


def test_report_on_a_missing_file_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["report", str(tmp_path / "nope.jsonl")])[0] == 1
    assert "no such file" in capsys.readouterr().err


# -- HTML ---------------------------------------------------------------------------------------------


def test_html_escapes_everything_from_the_session(tmp_path: Path) -> None:
    evil = '<img src=x onerror="alert(1)">'
    with SessionStore(tmp_path / "evil.db") as store:
        sid = store.create_session(session_id=evil, title=evil, model="gpt-4o", tokenizer="o200k_base")
        rows = store.append_messages(sid, [user(evil), assistant(evil)], tokenizer=get_tokenizer("gpt-4o"))
        store.record_event(sid, ContextEvent(kind="guard", outcome="note", reason=evil, turn_index=0))
        store.record_event(sid, ContextEvent(kind="request", turn_index=0, message_seq=rows[1].seq))
        page = render_html(build_report(store, [sid], source=evil))
    ours = page.replace(get_plotlyjs(), "")  # the page without plotly's own bundle
    assert len(ours) < 100_000
    leaked = evil in ours
    assert not leaked
    assert ours.count("&lt;img src=x onerror=&quot;alert(1)&quot;&gt;") >= 4  # title, id, source, reason
    external = "<script src" in ours or "http" in ours.replace("http://www.w3.org", "")
    assert not external


def test_html_report_is_one_file_with_the_plotly_bundle_inlined(claude_report: Report) -> None:
    page = render_html(claude_report)
    assert page.count(get_plotlyjs()) == 1
    ours = page.replace(get_plotlyjs(), "")
    assert ours.count('class="thread"') == 2
    external = "<script src" in ours
    assert not external
    same = render_html(claude_report) == page  # deterministic: fixed div ids, no timestamps
    assert same


@pytest.mark.browser
def test_html_report_renders_its_chart_offline_in_chromium(tmp_path: Path, claude_report: Report) -> None:
    from playwright.sync_api import Route, sync_playwright

    path = tmp_path / "report.html"
    path.write_text(render_html(claude_report), encoding="utf-8")
    attempted: list[str] = []

    def only_files(route: Route) -> None:
        if route.request.url.startswith("file://"):
            route.continue_()
        else:
            attempted.append(route.request.url)
            route.abort()

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path="/usr/bin/chromium",
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page()
            page.route("**/*", only_files)
            page.goto(path.as_uri())
            traces = page.locator("#timeline-1 svg.main-svg .scatterlayer .trace")
            traces.first.wait_for(state="attached", timeout=30_000)
            assert traces.count() >= 6 + 1 + 1 + 3  # components, provider line, limit, 80/95/98
            assert page.locator("#timeline-1 .legendtext", has_text="Tool results").count() == 1
            assert "page.tsx read 2 times" in page.locator("#thread-1 table.findings").inner_text()
        finally:
            browser.close()
    assert attempted == []


# -- diff ----------------------------------------------------------------------------------------------

SOURCE = "\n".join(f"def handler_{i}(request):\n    return respond_{i}(request)" for i in range(30))


@pytest.fixture
def compacted_db(tmp_path: Path) -> tuple[Path, str, int, int]:
    """A session with two snapshots: tool result cleared, then the first turn summarized."""
    tokenizer = get_tokenizer("gpt-4o")
    path = tmp_path / "compacted.db"
    with SessionStore(path) as store:
        sid = store.create_session(session_id="s1", model="gpt-4o", tokenizer=tokenizer.id, tokens_exact=True)
        messages = [
            user("Fix the handler."), assistant("", tool_use("t1", "Read", file_path="h.py")),
            tool_result("t1", SOURCE), assistant("Fixed."), user("Thanks, now the docs."), assistant("Done."),
        ]  # fmt: skip
        store.append_messages(sid, messages, tokenizer=tokenizer)
        cleared = [*messages[:2], tool_result("t1", "[cleared]"), *messages[3:]]
        first = store.write_snapshot(
            sid, cleared, through_seq=5, summary=None, tokens=80, strategy="clear_tool_results"
        )
        second = store.write_snapshot(sid, messages[4:], through_seq=5, summary="The handler was fixed in h.py.",
                                      tokens=30, strategy="summarize")  # fmt: skip
    return path, sid, first, second


def test_diff_of_two_snapshots_shows_cleared_and_summarized_messages(
    compacted_db: tuple[Path, str, int, int],
) -> None:
    path, sid, first, second = compacted_db
    code, text = run(["diff", f"{path}:{sid}@{first}", f"{path}:{sid}@{second}", "--format", "json"])
    assert code == 0
    diff = DiffReport.model_validate_json(text)
    assert diff.counts == {"kept": 2, "added": 0, "removed": 0, "summarized": 4, "changed": 0}
    assert diff.component_delta["summary"] == diff.b.components.summary > 0
    assert diff.component_delta["tool_results"] < 0
    assert [c.status for c in diff.changes] == ["summarized"] * 4 + ["kept"] * 2
    assert diff.comparable and diff.a.exact and diff.a.tokenizer == "o200k_base"


def test_diff_with_snapshots_compares_the_latest_with_the_one_before(
    compacted_db: tuple[Path, str, int, int],
) -> None:
    path, sid, first, second = compacted_db
    code, text = run(["diff", f"{path}:{sid}", "--snapshots", "--format", "json"])
    assert code == 0
    diff = DiffReport.model_validate_json(text)
    assert (diff.a.snapshot_id, diff.b.snapshot_id) == (first, second)


def test_diff_against_a_sessions_current_context(compacted_db: tuple[Path, str, int, int]) -> None:
    path, sid, first, _ = compacted_db
    code, text = run(["diff", "--db", str(path), f"{sid}@{first}", sid, "--format", "json"])
    assert code == 0
    diff = DiffReport.model_validate_json(text)
    assert diff.b.snapshot_id is None and diff.b.description.startswith("current context")
    assert diff.b.summary == "The handler was fixed in h.py."  # the newest snapshot is what resumes


def test_diff_of_a_cleared_tool_result_is_a_change_not_a_removal(
    compacted_db: tuple[Path, str, int, int],
) -> None:
    path, sid, _, _ = compacted_db
    with SessionStore(path) as store:
        store.delete_session(sid)
    # Rebuild with only the clearing snapshot, so --snapshots compares it with the transcript.
    tokenizer = get_tokenizer("gpt-4o")
    with SessionStore(path) as store:
        sid = store.create_session(session_id="s2", model="gpt-4o", tokenizer=tokenizer.id, tokens_exact=True)
        messages = [user("Fix it."), assistant("", tool_use("t1", "Read", file_path="h.py")), tool_result("t1", SOURCE),
                    assistant("Fixed.")]  # fmt: skip
        store.append_messages(sid, messages, tokenizer=tokenizer)
        store.write_snapshot(sid, [*messages[:2], tool_result("t1", "[cleared]"), messages[3]], through_seq=3,
                             summary=None, tokens=40, strategy="clear_tool_results")  # fmt: skip
    code, text = run(["diff", f"{path}:s2", "--snapshots"])
    assert code == 0
    assert "transcript through seq 3" in text
    assert "messages: kept 3" in text and "changed 1" in text
    assert "changed   2   2  user  tool_result" in text


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_full_claude_code_report_has_one_thread_per_sub_agent() -> None:
    path = SHARED_SESSIONS / "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl"
    with open_target(str(path), db=None) as (store, ids, label):
        report = build_report(store, ids, source=label)
    assert len(report.sessions) == 6
    assert [s.parent_session_id for s in report.sessions] == [None, *[MAIN_ID] * 5]
    assert sum(s.request_count for s in report.sessions) == 170
    assert all(s.peak_source == "provider" for s in report.sessions)
