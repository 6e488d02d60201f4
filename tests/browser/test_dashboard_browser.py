"""The dashboard in a real browser: Debian chromium through Playwright against `streamlit run`.

Starts the app on a free port on 127.0.0.1 over a copy of the sample data in tmp_path, then checks
that charts render, a manual compaction writes a snapshot, an edited model window re-projects the
timeline, and hostile message text stays inert. Screenshots go to tests/artifacts/screenshots/.
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
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from dashboard.data import DB_PATHS_ENV_VAR
from engine.settings import SETTINGS_ENV_VAR, load_settings
from tests.dashboard_fixture import copy_dashboard_db

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
SAMPLE_DATA = ROOT / "data"
SCREENSHOTS = ROOT / "tests" / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CTXDESK_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
START_TIMEOUT_S = 60
UI_TIMEOUT_MS = 60_000
MAX_SHOT_HEIGHT = 8_000
PAGES = ("", "timeline", "why_stop", "compaction", "offloaded", "tools", "model_settings")
FINDINGS_FILL = "242, 183, 1"  # charts.FINDINGS_STYLE colour as the browser reports it


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
def _serve(db_paths: list[Path], base: Path) -> Iterator[dict[str, object]]:
    """`streamlit run dashboard/app.py -- <db_paths>` on a free loopback port, stopped on exit."""
    settings = base / "config" / "settings.toml"
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


@pytest.fixture(scope="module")
def served_sample(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over a copy of the bundled sample data in data/ (what `ctxdesk dashboard` opens)."""
    base = tmp_path_factory.mktemp("browser_sample")
    data_dir = base / "data"
    data_dir.mkdir()
    for sample in sorted(SAMPLE_DATA.glob("*.db")):
        # Through SQLite's backup, so commits still in the sample's WAL come along.
        source = f"{sample.resolve().as_uri()}?mode=ro"
        with (
            closing(sqlite3.connect(source, uri=True)) as src,
            closing(sqlite3.connect(data_dir / sample.name)) as dst,
        ):
            src.backup(dst)
    with _serve([data_dir], base) as server:
        yield {**server, "data": data_dir}


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: object) -> Iterator[object]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(UI_TIMEOUT_MS)
    dialogs: list[str] = []
    pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pg.dialogs = dialogs
    yield pg
    context.close()


def _open(page: object, url: str) -> None:
    page.goto(url)
    page.wait_for_selector("[data-testid='stApp']")
    _settle(page)


def _settle(page: object) -> None:
    """Wait until the script run finishes (Streamlit shows a status widget while running)."""
    page.wait_for_timeout(300)
    page.wait_for_function(
        "() => !document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=UI_TIMEOUT_MS
    )


CLICK_TRIES = 3
CLICK_WAIT_MS = 20_000


def _shows(locator: object) -> bool:
    """True once ``locator`` is visible within CLICK_WAIT_MS."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

    try:
        locator.wait_for(timeout=CLICK_WAIT_MS)
    except PlaywrightTimeoutError:
        return False
    return True


def _shot(page: object, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _shot_whole_page(page: object, name: str) -> None:
    """A screenshot of the whole page: the viewport grows to the main area's height first
    (Streamlit scrolls inside its main container, which a full-page shot does not see)."""
    width = page.viewport_size["width"]
    height = page.evaluate("() => document.querySelector('[data-testid=\"stMain\"]').scrollHeight")
    page.set_viewport_size({"width": width, "height": min(max(int(height) + 40, 800), MAX_SHOT_HEIGHT)})
    page.wait_for_timeout(500)
    _shot(page, name)
    page.set_viewport_size({"width": width, "height": 1000})


def _choose(page: object, label: str, option: re.Pattern[str]) -> None:
    """Pick a selectbox option (re-opening the dropdown if a rerun closed it)."""
    select = page.locator("[data-testid='stSelectbox']").filter(has_text=label)
    for _ in range(5):
        select.click()
        choice = page.get_by_role("option", name=option)
        try:
            choice.wait_for(timeout=3_000)
        except PlaywrightTimeoutError:
            page.keyboard.press("Escape")
            continue
        choice.click()
        _settle(page)
        return
    raise AssertionError(f"option {option.pattern!r} never appeared in {label!r}")


def _nav(page: object, title: str) -> None:
    page.locator("[data-testid='stSidebarNav']").get_by_text(title, exact=True).click()
    _settle(page)


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
    assert page.get_by_text(re.compile("context_window ≥")).count() >= 1
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


def test_manual_compaction_writes_a_snapshot_row(served: dict[str, object], page: object) -> None:
    db = served["db"]
    count = "SELECT count(*) FROM session_snapshots WHERE session_id = 'sess-report'"
    assert sqlite3.connect(db).execute(count).fetchone()[0] == 0
    _open(page, f"{served['url']}/compaction?session=sample::sess-report")
    page.get_by_role("heading", name="Compaction", exact=True).wait_for()
    # A click that lands while the live-follow fragment reruns can be dropped by Streamlit; a
    # person clicks again. Preview is a dry run, so re-clicking it is harmless; Apply is clicked
    # again only while the database shows it has not written anything.
    preview_shown = page.get_by_text("Summary text").or_(page.get_by_text("Removed or summarized")).first
    for _ in range(CLICK_TRIES):
        page.get_by_role("button", name=re.compile("Preview")).click()
        _settle(page)
        if _shows(preview_shown):
            break
    preview_shown.wait_for()
    applied = page.get_by_text(re.compile(r"Applied: snapshot #\d+"))
    for _ in range(CLICK_TRIES):
        page.get_by_role("button", name=re.compile(r"\bApply$")).click()
        _settle(page)
        if _shows(applied) or sqlite3.connect(db).execute(count).fetchone()[0]:
            break
    applied.wait_for()
    _shot(page, "compaction")
    assert sqlite3.connect(db).execute(count).fetchone()[0] == 1


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
    page.get_by_text("Under edited settings: limit 13,744, would compact at turn 3").first.wait_for()
    page.get_by_role("button", name=re.compile("Save settings")).click()
    _settle(page)
    page.get_by_text(re.compile("Saved to")).wait_for()
    _shot(page, "model_settings")
    saved = load_settings(served["settings"])
    assert saved.models["claude-sonnet-4-20250514"].context_window == 16_000
    _nav(page, "Context timeline")
    page.wait_for_selector(".js-plotly-plot .main-svg")
    page.locator(".js-plotly-plot").get_by_text(re.compile(r"would compact \(turn 3\)")).first.wait_for()
    _shot(page, "timeline_reprojected")


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
    assert int(metric.inner_text().replace(",", "")) == before + 2


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
    hover = page.locator(".hoverlayer").get_by_text(re.compile("read 2 times with identical output"))
    hover.first.wait_for()
    assert "&quot;" not in page.locator(".hoverlayer").text_content()
    _shot(page, "timeline_findings_hover")
    turn = page.get_by_label("Turn", exact=True)
    turn.fill("3")
    turn.press("Enter")
    _settle(page)
    page.get_by_text("Findings at turn 3").wait_for()
    assert page.get_by_text(re.compile("^Fix: clear_tool_results keep=3")).count() == 1
    _shot_whole_page(page, "timeline_findings_panel")
    assert not page.dialogs


@pytest.mark.skipif(
    not any(SAMPLE_DATA.glob("*.db")), reason="no bundled sample data in data/ (ctxdesk demo)"
)
def test_every_page_renders_over_the_bundled_sample_data(
    served_sample: dict[str, object], page: object
) -> None:
    sessions = []
    for path in sorted(Path(served_sample["data"]).glob("*.db")):
        with closing(sqlite3.connect(path)) as conn:
            sessions += [(path.stem, sid) for (sid,) in conn.execute("SELECT id FROM sessions ORDER BY id")]
    assert sessions
    for db, sid in sessions:
        for name in PAGES:
            _open(page, f"{served_sample['url']}/{name}?session={db}::{sid}")
            page.get_by_role("heading", level=1).first.wait_for()
            page.wait_for_timeout(300)
            _settle(page)
            assert page.locator("[data-testid='stException']").count() == 0, (db, sid, name)
            assert page.locator("[data-testid='stAlertContentError']").count() == 0, (db, sid, name)
            _shot_whole_page(page, f"sample-{sid}-{name or 'sessions'}")
    assert not page.dialogs
