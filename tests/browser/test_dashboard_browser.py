"""The dashboard in a real browser: Debian chromium through Playwright against `streamlit run`.

Starts the app on a free port on 127.0.0.1 over a copy of the sample data in tmp_path, then checks
that charts render, a manual compaction writes a snapshot, an edited model window re-projects the
timeline, and hostile message text stays inert. Screenshots go to tests/artifacts/screenshots/.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
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


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """`streamlit run dashboard/app.py -- <copy of the sample data>` on a free loopback port."""
    base = tmp_path_factory.mktemp("browser")
    data_dir = base / "data"
    data_dir.mkdir()
    for sample in sorted(SAMPLE_DATA.glob("*.db")):
        shutil.copy(sample, data_dir / sample.name)
    db = copy_dashboard_db(tmp_path_factory.getbasetemp(), data_dir / "sample.db")
    settings = base / "config" / "settings.toml"
    port = _free_port()
    log = base / "streamlit.log"
    env = {**os.environ, SETTINGS_ENV_VAR: str(settings), DB_PATHS_ENV_VAR: ""}
    env.pop("ANTHROPIC_API_KEY", None)
    command = [
        sys.executable, "-m", "streamlit", "run", str(ROOT / "dashboard" / "app.py"),
        "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
        "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none", "--", str(db),
    ]  # fmt: skip
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc, log)
        yield {"url": url, "db": db, "settings": settings, "log": log}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def _shot(page: object, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


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
    page.get_by_role("button", name=re.compile("Preview")).click()
    _settle(page)
    page.get_by_text("Summary text").or_(page.get_by_text("Removed or summarized")).first.wait_for()
    page.get_by_role("button", name=re.compile(r"\bApply$")).click()
    _settle(page)
    page.get_by_text(re.compile(r"Applied: snapshot #\d+")).wait_for()
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
