"""An import running into a shown database, as the dashboard's sidebar shows it (#33.4), in a real browser.

A real ``ctxdesk import`` of every real-agent fixture is paused (SIGSTOP to its process group) once it has
written its first progress beside the database; the dashboard over that database then shows the import
as running, with its bar, files and megabytes; resumed (SIGCONT), the same sidebar says it is done
without a reload. Screenshots: tests/artifacts/screenshots/import-progress-{running,finished}.png.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.importers.progress import read_status, status_path
from tests.browser.test_dashboard_browser import (  # noqa: F401 (browser and page are fixtures)
    ROOT,
    UI_TIMEOUT_MS,
    _check_page,
    _open,
    _serve,
    _shot_whole_page,
    browser,
    page,
)

pytestmark = pytest.mark.browser

REAL_AGENTS = ROOT / "tests" / "fixtures" / "real_agents"
#: What the sidebar says of an import still going, and of one that ended.
RUNNING = re.compile(r"Importing into agents\.db: ([\d,]+)/([\d,]+) files · [\d.,]+/[\d.,]+ MB")
FINISHED = re.compile(
    r"Imported into agents\.db: ([\d,]+)/([\d,]+) files · [\d.,]+/[\d.,]+ MB · [\d.,]+ MB/s · done"
)


@pytest.fixture
def paused_import(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes]]]:
    """A real import, stopped after its first progress was written (files done, not finished)."""
    db = tmp_path / "agents.db"
    command = [sys.executable, "-m", "engine.cli", "import", str(REAL_AGENTS), "--db", str(db)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        status = None
        while time.monotonic() < deadline and proc.poll() is None:
            status = read_status(db) if status_path(db).is_file() else None
            if status and status["files_done"] >= 1:
                os.killpg(proc.pid, signal.SIGSTOP)
                status = read_status(db)
                break
            time.sleep(0.005)
        assert status is not None and not status["finished"], "the import ended before it could be paused"
        yield db, proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGCONT)
        try:
            proc.wait(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_the_sidebar_shows_a_running_import_then_says_it_is_done(
    paused_import: tuple[Path, subprocess.Popen[bytes]],
    tmp_path: Path,
    page: object,  # noqa: F811 (the fixture imported above)
) -> None:
    db, proc = paused_import
    with _serve([db], tmp_path) as server:
        _open(page, f"{server['url']}/")
        running = page.get_by_text(RUNNING)
        running.wait_for(timeout=UI_TIMEOUT_MS)
        done, total = (int(n.replace(",", "")) for n in RUNNING.search(running.inner_text()).groups())
        assert 1 <= done < total
        assert page.locator("[data-testid='stProgress']").count() == 1  # the bar beside the line
        _check_page(page, "import running")
        _shot_whole_page(page, "import-progress-running")

        os.killpg(proc.pid, signal.SIGCONT)
        assert proc.wait(timeout=300) == 0
        finished = page.get_by_text(FINISHED)  # the sidebar refreshes on its own (every 2 s)
        finished.wait_for(timeout=UI_TIMEOUT_MS)
        assert FINISHED.search(finished.inner_text()).groups() == (f"{total:,}", f"{total:,}")
        assert page.locator("[data-testid='stProgress']").count() == 0
        _check_page(page, "import finished")
        _shot_whole_page(page, "import-progress-finished")
