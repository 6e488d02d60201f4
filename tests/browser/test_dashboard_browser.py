"""The dashboard in a real browser: Debian chromium through Playwright against `streamlit run`.

Starts the app on a free port on 127.0.0.1 over copies of the fixture database, the bundled sample
data, and real agents' transcripts imported with ``ctxdesk import`` (tests/fixtures), then drives
the three jobs end to end: why a session stopped, a manual compaction (preview, apply, restore),
and live model settings, each while a writer process appends a turn every second to a loaded
database (every click is made once: a dropped click fails the test). Every page of every sample
session, and of the real sessions that stand for all the others (tests/dashboard_real_sessions.py:
each import format, compactions, sub-agents, parents, failed calls), is opened and checked for an
exception, an error and raw None/nan; AppTest opens every page of every real session
(tests/test_dashboard_app.py). The browser may reach 127.0.0.1 only: any other request fails the
test. Screenshots of what a person checks by eye go to tests/artifacts/screenshots/.
"""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import Error as PlaywrightError
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect

from dashboard.data import DB_PATHS_ENV_VAR
from engine.settings import SETTINGS_ENV_VAR, load_settings
from tests.dashboard_fixture import copy_dashboard_db
from tests.dashboard_real_sessions import (
    FEATURES,
    all_sessions,
    copy_real_sessions_db,
    representative_sessions,
    walk_parts,
)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DATA = ROOT / "data"
FIXTURES = ROOT / "tests" / "fixtures"
SCREENSHOTS = ROOT / "tests" / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CTXDESK_CHROMIUM", "/usr/bin/chromium")
#: Every host but 127.0.0.1 resolves to nothing, in Chromium itself: the pages reach no outside host, and no
#: request takes a round trip through the test process (Playwright's request interception did, and under load
#: a routed static chunk could fail to load: "Failed to fetch dynamically imported module").
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
]  # fmt: skip
START_TIMEOUT_S = 60
UI_TIMEOUT_MS = 60_000
#: How long an opened dropdown may take to show (and keep) the option to click before it is reopened.
OPTION_WAIT_MS = 10_000
MAX_SHOT_HEIGHT = 8_000
PAGES = (
    "",
    "timeline",
    "why_stop",
    "compaction",
    "offloaded",
    "tools",
    "requests",
    "data_browser",
    "compare",
    "model_settings",
)
#: Each page's title in the sidebar's navigation (dashboard/app.py), by its path in the URL.
NAV_TITLES = {
    "": "Sessions",
    "timeline": "Context timeline",
    "why_stop": "Why did it stop?",
    "compaction": "Compaction",
    "offloaded": "Offloaded results",
    "tools": "Tools",
    "requests": "Requests",
    "data_browser": "Data",
    "compare": "Compare",
    "model_settings": "Model settings",
}
FINDINGS_FILL = "242, 183, 1"  # figures.FINDINGS_STYLE colour as the browser reports it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}:\n{log.read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"streamlit did not become healthy in {START_TIMEOUT_S}s:\n{log.read_text()}")


@contextmanager
def _serve(db_paths: list[Path], base: Path, settings: Path | None = None) -> Iterator[dict[str, object]]:
    """`streamlit run dashboard/app.py -- <db_paths>` on a free loopback port, stopped on exit."""
    settings = settings or base / "config" / "settings.toml"
    port = _free_port()
    log = base / "streamlit.log"
    env = {**os.environ, SETTINGS_ENV_VAR: str(settings), DB_PATHS_ENV_VAR: ""}
    env.pop("ANTHROPIC_API_KEY", None)
    command = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"),
        "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", "--", *map(str, db_paths),
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield {"url": url, "settings": settings, "log": log}
        # A dashboard that died meanwhile (a signal: returncode < 0) fails the tests that used it by name.
        assert proc.poll() is None, (
            f"the dashboard process died ({proc.returncode}):\n{log.read_text()[-3000:]}"
        )
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over a copy of the dashboard fixture database."""
    base = tmp_path_factory.mktemp("browser")
    data_dir = base / "data"
    data_dir.mkdir()
    db = copy_dashboard_db(tmp_path_factory.getbasetemp(), data_dir / "sample.db")
    with _serve([db], base) as server:
        yield {**server, "db": db}


def _copy_sample_data(data_dir: Path) -> Path:
    """A copy of the bundled sample databases in ``data_dir``."""
    data_dir.mkdir()
    for sample in sorted(SAMPLE_DATA.glob("*.db")):
        # Through SQLite's backup, so commits still in the sample's WAL come along.
        source = f"{sample.resolve().as_uri()}?mode=ro"
        with (
            closing(sqlite3.connect(source, uri=True)) as src,
            closing(sqlite3.connect(data_dir / sample.name)) as dst,
        ):
            src.backup(dst)
    return data_dir


@pytest.fixture(scope="module")
def served_sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over a copy of the bundled sample data in data/ (what `ctxdesk dashboard` opens)."""
    base = tmp_path_factory.mktemp("browser_sample")
    data_dir = _copy_sample_data(base / "data")
    with _serve([data_dir], base) as server:
        yield {**server, "data": data_dir}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


LOOPBACK = re.compile(r"^(https?|wss?)://127\.0\.0\.1(:\d+)?/|^(data|blob|about):")


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    outside: list[str] = []
    failed: list[str] = []

    def note_request(request: object) -> None:
        # Nothing beyond 127.0.0.1: a CDN font, an image URL in a session id, a tracker (Chromium cannot
        # resolve them, see CHROMIUM_ARGS; the attempt is what fails the test).
        if not LOOPBACK.match(request.url):
            outside.append(request.url)

    def note_failure(request: object) -> None:
        if LOOPBACK.match(request.url):  # shown beside a page error (a navigation cancels loads: ERR_ABORTED)
            failed.append(f"{request.url}: {request.failure}")

    context.on("request", note_request)
    context.on("requestfailed", note_failure)
    pg = context.new_page()
    pg.failed_loads = failed
    pg.set_default_timeout(UI_TIMEOUT_MS)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    context.close()
    assert not outside, f"the page requested hosts beyond 127.0.0.1: {sorted(set(outside))}"


def _open(page: object, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']")
    _settle(page)


def _settle(page: object) -> None:
    """Wait until the script run finishes: no status widget (shown while a run is going) and no
    spinner (a fragment or a cached query still working), twice in a row a moment apart."""
    idle = (
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')"
        " && !document.querySelector('[data-testid=\"stSpinner\"]')"
        " && !document.querySelector('[data-testid=\"stSkeleton\"]')"
    )
    for _ in range(2):
        page.wait_for_timeout(300)
        page.wait_for_function(idle, timeout=UI_TIMEOUT_MS)


#: How long a clicked action may take to show its outcome (a click that was dropped never does).
ACTION_WAIT_MS = 120_000
#: Seconds between the writer's turns.
WRITE_EVERY_S = 1.0
#: How long a disk edit of the settings file may take to show on the open page (a wait, not a target).
SETTINGS_FOLLOW_WAIT_S = 30
RAW_MISSING = re.compile(r"\b(None|nan|NaN|<NA>|NaT)\b")


@contextmanager
def _writer(db: Path, session_id: str = "live-writer") -> Iterator[subprocess.Popen[bytes]]:
    """tests/browser/writer.py appending a turn every WRITE_EVERY_S to ``db`` while the block runs;
    checks it really wrote during the block."""
    written = "SELECT count(*) FROM messages WHERE session_id = ?"
    before = _count(db, written, session_id)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.browser.writer", str(db), session_id, str(WRITE_EVERY_S)],
        cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while (start := _count(db, written, session_id)) == before:  # until its first turn is committed
            assert proc.poll() is None, proc.communicate()[1].decode()
            assert time.monotonic() < deadline, f"the writer wrote nothing in {START_TIMEOUT_S} s"
            time.sleep(0.1)
        yield proc
        end = _count(db, written, session_id)
        assert end > start, "the writer wrote nothing while the clicks were made"
        assert proc.poll() is None, proc.communicate()[1].decode()
    finally:
        proc.terminate()
        proc.communicate(timeout=10)  # reaps it and closes its pipe


def _click_once(page: object, locator: object) -> None:
    """One click on ``locator`` once the page shows exactly one of it (a rerun in flight can show
    the previous run's copy beside the new one for a moment). Never clicked twice."""
    deadline = time.monotonic() + 15
    while locator.count() != 1 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    locator.click()


def _count(db: Path, sql: str, *params: object) -> int:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


def _raw_missing(page: object, allowed: Sequence[str] = ()) -> list[str]:
    """Words None/nan/NaN shown as text on the page (messages' own text in code blocks and in the
    Requests page's message labels, and the ``allowed`` recorded strings such as titles, are left out)."""
    texts = page.evaluate(
        """() => Array.from(document.querySelectorAll(
            '[data-testid="stMain"] [data-testid="stText"], [data-testid="stMain"] [data-testid="stMarkdown"],'
            + '[data-testid="stMain"] [data-testid="stCaptionContainer"], [data-testid="stMain"] [data-testid="stMetric"],'
            + '[data-testid="stMain"] [data-testid="stAlert"], [data-testid="stMain"] [data-testid="stHeading"],'
            + '[data-testid="stMain"] [data-testid="stExpander"] summary, [data-testid="stSidebar"] [data-testid="stSelectbox"]'
        )).filter(e => !e.closest('[data-testid="stCode"], .st-key-recorded_messages')).map(e => e.innerText)"""
    )
    found = []
    for text in texts:
        for recorded in allowed:
            text = text.replace(recorded, "")
        found += [f"{m.group(0)} in {text[:80]!r}" for m in RAW_MISSING.finditer(text)]
    return found


def _check_page(
    page: object, where: object, allowed: Sequence[str] = (), provider_errors: Sequence[str] = ()
) -> None:
    """No exception, no error (but a failed call's recorded ``provider_errors``), no raw None/nan."""
    exceptions = page.locator("[data-testid='stException']")
    assert exceptions.count() == 0, (where, [t[:3000] for t in exceptions.all_inner_texts()])
    errors = [
        e
        for e in page.locator("[data-testid='stAlertContentError']").all_inner_texts()
        if not any(m in e for m in provider_errors)
    ]
    assert not errors, (where, errors, getattr(page, "failed_loads", []))
    assert not _raw_missing(page, allowed), (where, _raw_missing(page, allowed))


def _shot(page: object, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _shot_whole_page(page: object, name: str) -> None:
    """A screenshot of the whole page: the viewport grows to the main area's height first
    (Streamlit scrolls inside its main container, which a full-page shot does not see)."""
    width = page.viewport_size["width"]
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": min(max(int(height) + 40, 800), MAX_SHOT_HEIGHT)})
    _settle(page)  # charts and tables newly in view draw themselves (skeletons until then)
    page.wait_for_timeout(500)
    _shot(page, name)
    page.set_viewport_size({"width": width, "height": 1000})


def _choose(page: object, label: str, option: re.Pattern[str]) -> None:
    """Pick a selectbox option (re-opening the dropdown if a rerun closed it)."""
    select = page.locator("[data-testid='stSelectbox']").filter(
        has=page.locator("[data-testid='stWidgetLabel']").get_by_text(label, exact=True)
    )
    _settle(page)
    for _ in range(5):
        # The dropdown may close when a rerun redraws the widget, before its option shows or between
        # showing it and the click (a click then waits for an option no open list holds): it is opened
        # again then. The choice itself is made once and must hold.
        select.first.click()
        try:
            page.get_by_role("option", name=option).click(timeout=OPTION_WAIT_MS)
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
            continue
        _settle(page)
        shown = select.first.locator("input[role='combobox']").input_value()
        assert option.search(shown), (label, shown)
        return
    raise AssertionError(f"option {option.pattern!r} never appeared in {label!r}")


#: How long a navigation click may take to change the URL (a loaded CI machine draws a heavy page slowly).
NAV_WAIT_MS = 30_000
#: Clicks a page walk makes on a link before it calls the switch failed (see _nav).
WALK_NAV_TRIES = 3
#: Why a sidebar click can be dropped: a known bug, not understood yet.
DROPPED_CLICK = (
    "a sidebar link clicked while a writer commits beside the page is sometimes not followed (the page stays"
    " where it was): seen once in ~200 clicks of the real-session walk at load 15, never in 600 targeted clicks"
    " (writer every 0.2-0.5 s, a 0.4 s window before the live rerun, a page sleeping 1.5 s mid-run); cause not found"
)


def _nav(page: object, title: str, *, tries: int = 1) -> None:
    """Open the page titled ``title`` from the sidebar's navigation, as a person does: the same Streamlit
    session goes on (its selected session, its state), with no page load; the URL names the page.

    Clicked once unless ``tries`` says otherwise: the page walks, whose subject is every page drawn, click
    again when the page stays (:data:`DROPPED_CLICK`, a bug a person meets, kept in view by
    test_sidebar_links_land_the_first_time_while_a_session_is_written)."""
    (path,) = [p for p, t in NAV_TITLES.items() if t == title]
    url = re.compile(rf"^https?://[^/]+/{re.escape(path)}(\?.*)?$")
    for _ in range(tries):
        page.locator("[data-testid='stSidebarNav']").get_by_text(title, exact=True).click()
        try:
            page.wait_for_url(url, timeout=NAV_WAIT_MS)
        except PlaywrightTimeoutError:
            continue
        _settle(page)
        return
    _shot_whole_page(page, f"FAILED-nav-{path or 'sessions'}")
    raise AssertionError(f"{title!r} clicked {tries} time(s); the page stayed at {page.url}")


def _sidebar_session(page: object) -> str:
    """The session the sidebar's picker shows selected."""
    return page.locator(
        "[data-testid='stSidebar'] [data-testid='stSelectbox'] input[role='combobox']"
    ).input_value()


def _each_page(page: object, url: str, ref: str | None = None) -> Iterator[str]:
    """Every page of PAGES drawn in turn (its name yielded once its title shows): the first opened by its
    link (``?session=ref``: a new Streamlit session that the link selects), each other one from the
    sidebar's navigation in that session, and the session stays selected on every page. A link opened
    afresh per page cost a page load and a new Streamlit session each: 3 sessions' 30 page views took
    57 s and ~80 CPU-seconds that way, 34 s and ~47 CPU-seconds so (load 5, 2 CPUs)."""
    _open(page, f"{url}/" + (f"?session={ref}" if ref is not None else ""))
    picked = _sidebar_session(page)
    for name in PAGES:
        if name:
            _nav(page, NAV_TITLES[name], tries=WALK_NAV_TRIES)
        page.get_by_role("heading", level=1).first.wait_for()
        assert _sidebar_session(page) == picked, (ref, name, picked, _sidebar_session(page))
        yield name


def test_sessions_and_timeline_render_charts(served: dict[str, object], page: object) -> None:
    _open(page, f"{served['url']}/?session=sample::sess-refactor")
    page.get_by_role("heading", name="Sessions").wait_for()
    page.wait_for_selector("[data-testid='stDataFrame']")
    _shot(page, "sessions")
    _nav(page, "Context timeline")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").count() >= 1
    legend = page.locator(".js-plotly-plot .legendtext").evaluate_all("els => els.map(e => e.textContent)")
    assert "Tool results" in legend and "Effective limit" in legend
    page.get_by_text("What was sent at turn 5").wait_for()
    _shot(page, "timeline")
    _nav(page, "Why did it stop?")
    page.get_by_text("What would have avoided it").first.wait_for()
    # The page streams its elements one by one: the heading can show before the lines under it.
    page.get_by_text(re.compile("context_window ≥")).first.wait_for()
    _shot(page, "why_stop")
    for title, name in (("Tools", "tools"), ("Offloaded results", "offloaded")):
        _nav(page, title)
        page.get_by_role("heading", name=title, exact=True).wait_for()
        _shot(page, name)
    assert not page.dialogs


def test_hostile_message_is_inert_text(served: dict[str, object], page: object) -> None:
    _open(page, f"{served['url']}/timeline?session=sample::sess-refactor")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    turn = page.get_by_label("Turn", exact=True)
    turn.fill("1")
    turn.press("Enter")
    _settle(page)
    page.get_by_text("What was sent at turn 1").wait_for()
    _choose(page, "Read message", re.compile(r"^#4 · user · user_input"))  # the turn 1 prompt
    code = page.locator("[data-testid='stCode']").filter(has_text="<script>alert(1)</script>")
    code.first.wait_for()
    assert "<img src=x onerror=alert(2)>" in code.first.inner_text()
    assert "**not bold**" in code.first.inner_text()
    assert page.locator("img[src='x']").count() == 0
    assert page.locator("a[href^='javascript']").count() == 0
    page.wait_for_timeout(500)
    _shot(page, "hostile_text")
    assert not page.dialogs


def _compact_preview_apply_restore(page: object, url: str, db: Path, ref: str, session_id: str) -> None:
    """Job 2 with one click each: preview two strategies, apply, restore the full transcript."""
    snapshots = "SELECT count(*) FROM session_snapshots WHERE session_id = ?"
    before = _count(db, snapshots, session_id)
    _open(page, f"{url}/compaction?session={ref}")
    page.get_by_role("heading", name="Compaction", exact=True).wait_for()
    for strategy in ("sliding_window", "chain"):
        _choose(page, "Strategy", re.compile(f"^{strategy}$"))
        _click_once(page, page.get_by_role("button", name=re.compile("Preview")))
        page.get_by_text("Preview (nothing written)").or_(page.get_by_text("Cannot preview")).first.wait_for(
            timeout=ACTION_WAIT_MS
        )
        assert page.get_by_text("Cannot preview").count() == 0, page.get_by_text(
            "Cannot preview"
        ).all_inner_texts()
        assert _count(db, snapshots, session_id) == before  # a dry run writes nothing
    _click_once(page, page.get_by_role("button", name=re.compile(r"\bApply$")))
    applied = page.get_by_text(re.compile(r"Applied: (snapshot #\d+ written|nothing to compact)"))
    applied.wait_for(timeout=ACTION_WAIT_MS)
    _settle(page)
    _shot(page, f"compaction-applied-{session_id[:40].replace(':', '_')}")
    if "snapshot #" in applied.inner_text():
        assert _count(db, snapshots, session_id) == before + 1
        _choose(page, "Restore", re.compile("full transcript"))
        _click_once(page, page.get_by_role("button", name="Restore", exact=True))
        try:
            page.get_by_text(re.compile(r"Restored the full transcript as new snapshot #\d+")).wait_for(
                timeout=ACTION_WAIT_MS
            )
        except PlaywrightTimeoutError:
            _shot_whole_page(page, "FAILED-restore")
            raise
        assert _count(db, snapshots, session_id) == before + 2
    assert not page.dialogs


def test_compaction_clicks_land_once_while_a_writer_appends(served: dict[str, object], page: object) -> None:
    db = Path(served["db"])
    with _writer(db):
        _compact_preview_apply_restore(page, served["url"], db, "sample::sess-report", "sess-report")


def test_editing_a_model_window_reprojects_the_timeline(served: dict[str, object], page: object) -> None:
    _open(page, f"{served['url']}/timeline?session=sample::sess-refactor")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.locator(".js-plotly-plot").get_by_text(re.compile("would compact")).count() == 0
    _nav(page, "Model settings")
    page.get_by_role("heading", name="Model settings", exact=True).wait_for()
    for label, value in (
        ("context_window", "16000"),
        ("max_output_tokens", "2000"),
        ("compact_threshold", "0.85"),
    ):
        box = page.get_by_label(label, exact=True)
        box.fill(value)
        box.press("Enter")
        _settle(page)
    page.get_by_text("Under edited settings: limit 13,744, would compact at turn 5").first.wait_for()
    page.get_by_role("button", name=re.compile("Save settings")).click()
    _settle(page)
    page.get_by_text(re.compile("Saved to")).wait_for()
    _shot(page, "model_settings")
    saved = load_settings(served["settings"])
    assert saved.models["claude-sonnet-4-20250514"].context_window == 16_000
    _nav(page, "Context timeline")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.locator(".js-plotly-plot").get_by_text(re.compile(r"would compact \(turn 5\)")).first.wait_for()
    _shot(page, "timeline_reprojected")


#: Sidebar clicks made while a writer commits beside the page, at varied moments of its live reruns.
NAV_UNDER_WRITER_CLICKS = 24


@pytest.mark.xfail(reason=DROPPED_CLICK, strict=False)
def test_sidebar_links_land_the_first_time_while_a_session_is_written(
    served: dict[str, object], page: object
) -> None:
    """A person's click on a page link must switch the page even when it lands as a live rerun starts
    (the walks used to click a second time when the page stayed)."""
    with _writer(Path(served["db"])):
        _open(page, f"{served['url']}/timeline?session=sample::sess-refactor")
        page.get_by_role("heading", name="Context timeline").wait_for()
        picked = _sidebar_session(page)
        for i in range(NAV_UNDER_WRITER_CLICKS):
            page.wait_for_timeout((i * 97) % 900)  # a different moment of the writer's 1 s beat each time
            title = "Sessions" if i % 2 == 0 else "Context timeline"
            _nav(page, title)
            page.get_by_role("heading", name=title, exact=True).wait_for()
            assert _sidebar_session(page) == picked, (i, title)


def test_two_sessions_and_two_calls_compare_side_by_side(served: dict[str, object], page: object) -> None:
    # A shared link opens the same pair; a writer reruns the page while it is read.
    with _writer(Path(served["db"])):
        _open(page, f"{served['url']}/compare?a=sample::sess-refactor&b=sample::sess-small")
        page.get_by_role("heading", name="Compare", exact=True).wait_for()
        page.get_by_text("What differs").wait_for()
        main = page.locator("[data-testid='stMain']")
        main.get_by_text(re.compile(r"Model: claude-sonnet-4-20250514 in A, gpt-4\.1-mini in B")).wait_for()
        page.locator(".js-plotly-plot .main-svg").first.wait_for()  # tokens per component, A beside B
        _check_page(page, "compare sessions")
        _shot_whole_page(page, "compare_sessions")
        page.get_by_text("Two calls", exact=True).click()
        _settle(page)
        page.get_by_role("heading", name="Tokens per component sent").wait_for()
        picked = main.locator("[data-testid='stSelectbox'] input[role='combobox']")
        calls = [picked.nth(i).input_value() for i in range(picked.count())]
        assert sum(bool(re.match(r"Event #\d+ · turn \d+", c)) for c in calls) == 2, calls  # one per side
        _check_page(page, "compare calls")
        _shot_whole_page(page, "compare_calls")


@pytest.fixture(scope="module")
def served_twins(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over a database whose sessions share one title and model (as untitled sessions of
    one agent do): told apart on the page by nothing but their ids."""
    from engine.events import ComponentTokens, ContextEvent
    from engine.messages import assistant, user
    from engine.store import SessionStore
    from engine.tokens import get_tokenizer

    base = tmp_path_factory.mktemp("browser_twins")
    db = base / "data" / "live.db"
    db.parent.mkdir()
    with SessionStore(db) as store:
        for turns, session_id in enumerate(("twin-a", "twin-b"), start=1):
            store.create_session(session_id=session_id, model="gpt-4o", title="A session being written")
            for turn in range(turns):
                store.append_messages(
                    session_id,
                    [user(f"{session_id} {turn}"), assistant("ok")],
                    tokenizer=get_tokenizer("gpt-4o"),
                )
                store.record_event(
                    session_id,
                    ContextEvent(
                        kind="request", trigger="user_input", outcome="ok", model="gpt-4o", turn_index=turn,
                        components=ComponentTokens(conversation=30 * (turn + 1)),
                    ),
                )  # fmt: skip
    with _serve([db], base) as server:
        yield {**server, "db": db}


#: How often the Compare link is opened afresh while another session is written (#36.1).
SHARED_LINK_TRIES = 20


def test_a_shared_compare_link_keeps_its_pair_while_another_session_is_written(
    served_twins: dict[str, object], page: object
) -> None:
    """Streamlit keeps a picker's choice by its label: with one label for three sessions, each live
    rerun turned ``a=twin-a&b=twin-b`` into the session being written, in the URL and the sidebar."""
    link = f"{served_twins['url']}/compare?a=live::twin-a&b=live::twin-b"
    main = page.locator("[data-testid='stMain']")
    sidebar = page.locator("[data-testid='stSidebar'] [data-testid='stSelectbox'] input[role='combobox']")
    with _writer(Path(served_twins["db"]), "twin-c") as writer:
        for attempt in range(SHARED_LINK_TRIES):
            _open(page, link)
            main.get_by_text("What differs").wait_for()
            picked_first = sidebar.input_value()
            writes = _count(Path(served_twins["db"]), "SELECT count(*) FROM context_events")
            while _count(Path(served_twins["db"]), "SELECT count(*) FROM context_events") < writes + 2:
                page.wait_for_timeout(250)  # two commits: two live reruns of the page
            _settle(page)
            pickers = main.locator("[data-testid='stSelectbox'] input[role='combobox']")
            shown = [pickers.nth(i).input_value() for i in range(2)]
            assert re.search(r"a=live(%3A%3A|::)twin-a&b=live(%3A%3A|::)twin-b$", page.url), (
                attempt,
                page.url,
            )
            assert shown[0].endswith("twin-a") and shown[1].endswith("twin-b"), (attempt, shown)
            assert sidebar.input_value() == picked_first, (attempt, picked_first, sidebar.input_value())
            assert main.get_by_text("A and B are the same session").count() == 0, attempt
        assert writer.poll() is None
    _check_page(page, "compare twins")


@pytest.fixture(scope="module")
def served_numbers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The bundled sample data (a context budget under a 1,000,000 window) beside real Codex and
    Claude Code runs imported with ``ctxdesk import`` (tool definitions kept only as a total, the
    agents' own compactions)."""
    from engine.cli import main as ctxdesk

    base = tmp_path_factory.mktemp("browser_numbers")
    data_dir = _copy_sample_data(base / "data")
    real = FIXTURES / "real_agents"
    inputs = [
        real / "codex" / "tools-resume" / "sessions",
        real / "claude-code" / "compact_manual" / "transcripts",
    ]
    for path in inputs:
        assert ctxdesk(["import", str(path), "--db", str(data_dir / "real.db")]) == 0, path
    with _serve([data_dir], base) as server:
        yield {**server, "data": data_dir}


def _sessions_of(db: Path) -> list[str]:
    with closing(sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]


def _metric(page: object, label: str) -> str:
    main = page.locator("[data-testid='stMain']")
    return (
        main.locator("[data-testid='stMetric']")
        .filter(has_text=label)
        .locator("[data-testid='stMetricValue']")
        .first.inner_text()
    )


def test_every_page_says_the_same_limit_and_tool_count_for_a_call(
    served_numbers: dict[str, object], page: object
) -> None:
    """#29: the Limit metric and the bar under it were two rules ("Limit 20,000" over "3,755 of
    1,000,000 tokens"; "no window recorded" under "Limit 155,979"); a Codex session's tools were
    34,469 tokens on the timeline and "Definition tokens 0" on the Tools page."""
    data_dir = Path(served_numbers["data"])
    url = served_numbers["url"]
    checked = 0
    for db in sorted(data_dir.glob("*.db")):
        for sid in _sessions_of(db):
            _open(page, f"{url}/timeline?session={db.stem}::{sid}")
            main = page.locator("[data-testid='stMain']")
            if main.get_by_text("no request events").count():
                continue
            main.locator("[data-testid='stMetric']").filter(has_text="Limit").first.wait_for()
            limit = _metric(page, "Limit")
            assert main.get_by_text("no window recorded").count() == 0, (db.stem, sid)
            if limit != "not recorded":
                # the bar under the metrics speaks of the same limit, whatever the window is
                main.get_by_text(re.compile(rf"of the {re.escape(limit)}-token limit")).first.wait_for()
                checked += 1
            _check_page(page, f"timeline {db.stem}::{sid}")
    assert checked >= 5, checked
    _open(page, f"{url}/timeline?session=demo-coding-agent::demo-cents-refactor-e7b7df98")
    assert _metric(page, "Limit") == "20,000"  # context_budget under the 1,000,000-token window
    page.get_by_text(
        re.compile(r"of the 20,000-token limit \(\d+\.\d%\) · window 1,000,000")
    ).first.wait_for()
    _shot(page, "timeline_budget_limit")
    (codex,) = [s for s in _sessions_of(data_dir / "real.db") if s.startswith("01")]
    with closing(sqlite3.connect(data_dir / "real.db")) as conn:
        (tools,) = conn.execute(
            "SELECT tools_tokens FROM context_events WHERE session_id = ? AND kind = 'request' ORDER BY seq DESC",
            (codex,),
        ).fetchone()
    assert tools > 0
    _open(page, f"{url}/tools?session=real::{codex}")
    assert _metric(page, "Tool descriptions, latest call") == f"{tools:,}"
    page.get_by_text("did not record its tool definitions one by one").wait_for()
    assert page.get_by_text("Definition tokens (all)").count() == 0
    _check_page(page, "tools codex")
    _shot(page, "tools_codex_total")


def test_a_compaction_says_what_its_count_leaves_out(served_numbers: dict[str, object], page: object) -> None:
    """#29: the timeline's total, a compaction's "before" and its component diff were three numbers
    with nothing saying what each counts; a snapshot named by its event showed "—"."""
    url = served_numbers["url"]
    _open(page, f"{url}/compaction?session=demo-coding-agent::demo-refund-idempotency-f534ea39")
    main = page.locator("[data-testid='stMain']")
    main.get_by_text("Past compactions").wait_for()
    main.get_by_text(
        re.compile(
            r"A compaction counts the messages only: [\d,]+ tokens before it\. The call before it sent [\d,]+ in all"
        )
    ).wait_for()
    # event 265 cleared 16 tool results, and its later summary took 8 of those messages
    _choose(page, "Compare before / after of event", re.compile(r"^265$"))
    _settle(page)
    main.get_by_text(
        "The reason counts 16 tool results cleared; 8 of them are still in the context"
    ).wait_for()
    snapshots = main.locator("[data-testid='stDataFrame']")
    assert snapshots.count() >= 2
    _check_page(page, "compaction numbers")
    _shot_whole_page(page, "compaction_numbers")


def test_a_session_being_written_follows_on_screen(served: dict[str, object], page: object) -> None:
    from engine.messages import assistant, user
    from engine.store import SessionStore
    from engine.tokens import get_tokenizer

    _open(page, f"{served['url']}/?session=sample::sess-small")
    metric = (
        page.locator("[data-testid='stMetric']")
        .filter(has_text="Messages")
        .locator("[data-testid='stMetricValue']")
    )
    for arrived in ("opened", "from the sidebar"):  # its link opened, then clicked to from another page
        if arrived != "opened":
            _nav(page, "Context timeline")
            _nav(page, "Sessions")
        before = int(metric.inner_text().replace(",", ""))
        with SessionStore(served["db"]) as store:  # a writer beside the dashboard, as an agent would be
            store.append_messages(
                "sess-small", [user("live?"), assistant("yes")], tokenizer=get_tokenizer("gpt-4o")
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if int(metric.inner_text().replace(",", "")) == before + 2:
                break
            page.wait_for_timeout(500)
        assert int(metric.inner_text().replace(",", "")) == before + 2, arrived


def test_findings_are_marked_on_the_timeline_with_their_titles_on_hover(
    served: dict[str, object], page: object
) -> None:
    _open(page, f"{served['url']}/timeline?session=sess-report")  # a plain id, unique in the loaded files
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.get_by_text("Summarise the quarterly report").first.wait_for()
    points = page.locator(".js-plotly-plot .scatterlayer .trace .points path")
    diamonds = [
        points.nth(i)
        for i in range(points.count())
        if FINDINGS_FILL in (points.nth(i).get_attribute("style") or "")
    ]
    assert len(diamonds) == 2  # turn 0 (unused tools) and turn 3 (the repeated grep)
    box = diamonds[-1].bounding_box()
    page.mouse.move(box["x"] - 60, box["y"] + 80)
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2, steps=10)
    hover = (
        page.locator(".js-plotly-plot")
        .first.locator(".hoverlayer")
        .get_by_text(re.compile("read 2 times with identical output"))
    )
    hover.first.wait_for()
    assert "&quot;" not in page.locator(".js-plotly-plot").first.locator(".hoverlayer").text_content()
    _shot(page, "timeline_findings_hover")
    turn = page.get_by_label("Turn", exact=True)
    turn.fill("3")
    turn.press("Enter")
    _settle(page)
    page.get_by_text("Findings at turn 3").wait_for()
    expect(page.get_by_text(re.compile("^Fix: clear_tool_results keep=3"))).to_have_count(
        1, timeout=UI_TIMEOUT_MS
    )
    _shot_whole_page(page, "timeline_findings_panel")
    assert not page.dialogs


@pytest.mark.skipif(
    not any(SAMPLE_DATA.glob("*.db")), reason="no bundled sample data in data/ (ctxdesk demo)"
)
# 70 page views (7 sessions x 10 pages; one page load per session): 109 s at load 7 (472 s at load 13 with a
# page load per view), far past the browser lane's 60 s; started early
@pytest.mark.cost(240)
def test_every_page_renders_over_the_bundled_sample_data(
    served_sample: dict[str, object], page: object
) -> None:
    sessions = []
    for path in sorted(Path(served_sample["data"]).glob("*.db")):
        with closing(sqlite3.connect(path)) as conn:
            sessions += [(path.stem, sid) for (sid,) in conn.execute("SELECT id FROM sessions ORDER BY id")]
    assert sessions
    for db, sid in sessions:
        for name in _each_page(page, served_sample["url"], f"{db}::{sid}"):
            _check_page(page, (db, sid, name))
    assert not page.dialogs


# -- real agents' transcripts, imported as a user would ---------------------------------------


@pytest.fixture(scope="module")
def served_real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over a database made by ``ctxdesk import`` from every real-agent fixture
    (tests/dashboard_real_sessions.py)."""
    base = tmp_path_factory.mktemp("browser_real")
    db = base / "data" / "real.db"
    db.parent.mkdir()
    copy_real_sessions_db(tmp_path_factory.getbasetemp(), db)
    sessions = all_sessions(db)
    # sub-agents, their parents, the agent's own compactions and failed calls are in the data set
    assert set(FEATURES) <= {f for s in sessions for f in s.shows}
    with _serve([db.parent], base) as server:
        yield {**server, "db": db, "sessions": sessions}


#: The representative sessions' pages are walked in this many parts, each on its own xdist worker when there
#: are two (a part is its own group, over its own server): the whole walk, ~210 page views, was the longest
#: test of the suite. Part ``i`` walks sessions ``i``, ``i + WALK_PARTS``, ...: together every page of each.
WALK_PARTS = 2


@pytest.mark.timeout(1800)  # ~105 page views: minutes on a loaded 2-CPU machine
@pytest.mark.cost(420)
@pytest.mark.parametrize("part", walk_parts(WALK_PARTS, "browser:walk"))
def test_every_page_of_the_representative_real_sessions_renders_while_a_writer_appends(
    served_real: dict[str, object], page: object, part: int
) -> None:
    """Every page of one session of each import format and of those showing what the others do not
    (compactions, sub-agents, parents, failed calls), drawn by a real browser while another session is
    written. Every page of every session is opened by AppTest (tests/test_dashboard_app.py)."""
    db = Path(served_real["db"])
    sessions = served_real["sessions"]
    chosen = representative_sessions(sessions)
    assert {s.source for s in chosen} == {s.source for s in sessions}
    mine = chosen[part::WALK_PARTS]
    assert mine, (part, len(chosen))
    with _writer(db):
        for session in mine:
            for name in _each_page(page, served_real["url"], f"real::{session.session_id}"):
                _check_page(page, (session.session_id, name), session.recorded, session.provider_errors)
    assert not page.dialogs


def test_an_imported_claude_code_compaction_and_its_sub_agents_show(
    served_real: dict[str, object], page: object
) -> None:
    db = Path(served_real["db"])
    with closing(sqlite3.connect(db)) as conn:
        sid = conn.execute(
            "SELECT session_id FROM context_events WHERE kind = 'compaction' AND outcome = 'compacted'"
            " AND turn_index IS NOT NULL ORDER BY session_id LIMIT 1"
        ).fetchone()[0]
    _open(page, f"{served_real['url']}/timeline?session=real::{sid}")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.locator(".js-plotly-plot").get_by_text("Compaction").first.wait_for()
    _shot_whole_page(page, "real-timeline-compaction")
    _open(page, f"{served_real['url']}/")
    page.get_by_role("heading", name="Sessions").wait_for()
    _shot_whole_page(page, "real-sessions-tree")


def test_compaction_on_a_real_session_while_a_writer_appends(
    served_real: dict[str, object], page: object
) -> None:
    db = Path(served_real["db"])
    with closing(sqlite3.connect(db)) as conn:
        sid = conn.execute(
            "SELECT id FROM sessions WHERE source LIKE 'swe%' OR id LIKE 'swe-agent%' ORDER BY id LIMIT 1"
        ).fetchone()[0]
    with _writer(db):
        _compact_preview_apply_restore(page, served_real["url"], db, f"real::{sid}", sid)


# -- job 3: model settings, live from the file ------------------------------------------------

SETTINGS_FILE = """
[defaults]
buffer_tokens = 300

[models."claude-sonnet-4-20250514"]
context_window = 200000

[models."gpt-4o"]
context_window = 128000

[models.other]
context_window = 30000
"""


def _field_value(page: object, label: str) -> str:
    """The text field's value once the page shows one such field (a rerun in flight can show the
    previous run's copy beside the new one for a moment)."""
    fields = page.get_by_label(label, exact=True)
    deadline = time.monotonic() + 15
    while fields.count() != 1 and time.monotonic() < deadline:
        page.wait_for_timeout(100)
    return fields.input_value()


def _wait_value(page: object, label: str, value: str, seconds: float) -> float:
    """Seconds until the field shows ``value``; fails after ``seconds``."""
    start = time.monotonic()
    while time.monotonic() - start < seconds:
        fields = page.get_by_label(label, exact=True)
        try:
            if fields.count() == 1 and fields.input_value(timeout=1_000) == value:
                return time.monotonic() - start
        except PlaywrightError:
            pass  # a rerun put the next run's copy beside this one between the two looks
        page.wait_for_timeout(50)
    raise AssertionError(
        f"{label} did not show {value!r} within {seconds} s (shows {_field_value(page, label)!r})"
    )


def test_settings_follow_the_file_keep_the_last_valid_and_save_only_what_changed(
    served: dict[str, object], page: object
) -> None:
    settings = Path(served["settings"])
    settings.parent.mkdir(parents=True, exist_ok=True)
    settings.write_text(SETTINGS_FILE)
    with _writer(Path(served["db"])):
        _open(page, f"{served['url']}/model_settings?session=sample::sess-refactor")
        page.get_by_role("heading", name="Model settings", exact=True).wait_for()
        # The picker follows the selected session's model, with the file's values.
        page.get_by_text("Resolved for claude-sonnet-4-20250514").wait_for()
        _wait_value(page, "context_window", "200000", 30)
        # A disk edit shows on the open page with no click or reload (how fast is a bench's question:
        # a timed bound here failed a fresh-clone CI with a CPU hog beside it, 5.8 s against 4.8 s).
        settings.write_text(SETTINGS_FILE.replace("200000", "180000"))
        took = _wait_value(page, "context_window", "180000", SETTINGS_FOLLOW_WAIT_S)
        print(f"disk edit shown after {took:.2f} s")
        # An invalid edit: the error is shown, the last valid settings stay.
        settings.write_text(SETTINGS_FILE.replace("200000", "180000") + "\n[models.broken\n")
        page.get_by_text(re.compile("settings file on disk is invalid")).wait_for(timeout=5_000)
        assert _field_value(page, "context_window") == "180000"
        _shot_whole_page(page, "model_settings_invalid_file")
        settings.write_text(SETTINGS_FILE.replace("200000", "180000"))
        page.get_by_text(re.compile("settings file on disk is invalid")).wait_for(
            state="detached", timeout=5_000
        )
        # Save writes the one edit and keeps every other entry.
        box = page.get_by_label("max_output_tokens", exact=True)
        box.fill("8000")
        box.press("Enter")
        _settle(page)
        _click_once(page, page.get_by_role("button", name=re.compile("Save settings")))
        page.get_by_text(re.compile("Saved to")).wait_for(timeout=ACTION_WAIT_MS)
    saved = load_settings(settings)
    assert saved.models["claude-sonnet-4-20250514"].context_window == 180_000
    assert saved.models["claude-sonnet-4-20250514"].max_output_tokens == 8_000
    assert saved.models["gpt-4o"].context_window == 128_000
    assert saved.models["other"].context_window == 30_000
    assert saved.defaults.buffer_tokens == 300
    _shot_whole_page(page, "model_settings_saved")


# -- job 1 on the bundled demo, with the demo's own settings -----------------------------------


@pytest.mark.skipif(not (SAMPLE_DATA / "demo-settings.toml").is_file(), reason="no bundled demo settings")
def test_why_did_it_stop_and_the_what_if_agree_with_what_the_demo_did(
    tmp_path_factory: pytest.TempPathFactory, page: object
) -> None:
    base = tmp_path_factory.mktemp("browser_demo_settings")
    data_dir = _copy_sample_data(base / "data")
    settings = base / "demo-settings.toml"
    settings.write_text((SAMPLE_DATA / "demo-settings.toml").read_text())
    with closing(sqlite3.connect(data_dir / "demo-guard-limits.db")) as conn:
        sid = conn.execute("SELECT id FROM sessions WHERE id LIKE 'demo-small-window-final%'").fetchone()[0]
    with _serve([data_dir], base, settings=settings) as server:
        _open(page, f"{server['url']}/why_stop?session=demo-guard-limits::{sid}")
        page.get_by_text("What would have avoided it").first.wait_for()
        page.get_by_text(re.compile("context_window ≥")).first.wait_for()  # drawn after its heading
        _shot_whole_page(page, "demo-why_stop")
        _nav(page, "Model settings")
        # The 16k window the session ran with, from the demo's settings file; the what-if under
        # them finds the final turn the session recorded.
        page.get_by_text("Resolved for claude-haiku-4-5").wait_for()
        assert _field_value(page, "context_window") == "16000"
        page.get_by_text(
            re.compile(r"Under these settings: limit 11,648, .*final turn at turn 1")
        ).first.wait_for()
        page.get_by_text(re.compile(r"Recorded: .*final turn forced at turn 1")).first.wait_for()
        _shot_whole_page(page, "demo-model_settings")


# -- recorded text never fetches anything ------------------------------------------------------

HOSTILE_ID = "![i](http://evil.example/id.png) $x^2$ :red[red]"


def test_markup_in_session_ids_and_models_is_shown_as_text_and_fetches_nothing(
    tmp_path_factory: pytest.TempPathFactory, page: object
) -> None:
    from engine.store import SessionStore

    base = tmp_path_factory.mktemp("browser_hostile")
    db = base / "data" / "hostile.db"
    db.parent.mkdir()
    with SessionStore(db) as store:
        store.create_session(
            session_id=HOSTILE_ID, title="![t](http://evil.example/title.png)",
            model="![m](http://evil.example/model.png)", provider="anthropic",
        )  # fmt: skip
    with _serve([db.parent], base) as server:
        for name in _each_page(page, str(server["url"])):
            assert page.locator("img[src*='evil.example']").count() == 0, name
            assert page.locator("[data-testid='stException']").count() == 0, name
        _nav(page, "Model settings")
        page.get_by_text(
            re.compile(r"Resolved for !\[m\]\(http:\u200b?//evil\.example/model\.png\)")
        ).wait_for()
        assert page.locator("a[href*='evil.example']").count() == 0  # shown as text, not even a link
        _shot_whole_page(page, "hostile_ids")
    # The page fixture fails the test if anything beyond 127.0.0.1 was requested.
