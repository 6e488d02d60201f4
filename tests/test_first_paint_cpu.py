"""bench/first_paint's CPU clock: the processor time of a command's whole session, its exited and
waited-for workers included, whatever else the machine runs; and the bytecode it compiles first."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import first_paint as fp
from bench.first_paint import ROOT, compile_bytecode, session_cpu_seconds

#: Burns about ``BURN_S`` seconds of CPU, then waits to be stopped (still in /proc when read).
BURN = "import time\nend = time.process_time() + {burn}\nwhile time.process_time() < end: pass\n"
SPIN_S = 0.4


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize(
    "script",
    [
        BURN.format(burn=SPIN_S) + "print('burned', flush=True)\ntime.sleep(60)",
        # A worker that ran and exited: counted through its waiting parent (cutime), as the
        # dashboard's worker processes are.
        "import subprocess, sys, time\n"
        f"subprocess.run([sys.executable, '-c', {BURN.format(burn=SPIN_S)!r}], check=True)\n"
        "print('waited', flush=True)\ntime.sleep(60)",
    ],
    ids=["the session's own process", "a child it waited for"],
)
def test_the_cpu_a_session_burned_is_counted(script: str) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", script], start_new_session=True, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the burn is over (and the child, if any, waited for)
        used = session_cpu_seconds(proc.pid)
        assert SPIN_S <= used < SPIN_S + 5  # the burn, plus the interpreters' start
        assert session_cpu_seconds(os.getsid(0)) > 0 and proc.pid != os.getsid(0)
    finally:
        os.killpg(proc.pid, 9)
        proc.communicate()


def test_the_bench_compiles_the_projects_bytecode_even_where_the_environment_forbids_writing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    sources = [
        ROOT / "engine" / "cli" / "dashboard.py",
        ROOT / "dashboard" / "warm.py",
        ROOT / "bench" / "first_paint.py",
    ]
    for source in sources:  # as on a fresh clone
        Path(importlib.util.cache_from_source(str(source))).unlink(missing_ok=True)
    compile_bytecode()
    for source in sources:
        cached = Path(importlib.util.cache_from_source(str(source)))
        assert cached.is_file(), source
        assert cached.stat().st_mtime >= source.stat().st_mtime, source


@pytest.mark.skipif(not fp.is_available(), reason="needs Chromium and Playwright")
def test_the_page_clock_sees_the_metric_before_the_driver_reports_it(tmp_path: Path) -> None:
    """The in-page clock (the frame after a MutationObserver saw the metric, by Date.now() against the
    wall clock at the command's start) falls between the server's health check and the table."""
    from playwright.sync_api import sync_playwright

    app = tmp_path / "app.py"
    app.write_text(fp.BASELINE_APP, encoding="utf-8")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=fp.CHROMIUM, args=["--headless", "--no-sandbox"])
        try:
            context = browser.new_context()
            port = fp._free_port()
            healthy, metric, table, cpu, in_page = fp._paint(
                context, fp.baseline_command(port, app), port, tmp_path, tmp_path / "none.toml"
            )
        finally:
            browser.close()
    assert 0 < healthy < in_page < table + 1  # the same wall clock, read in two processes
    assert healthy < metric <= table and cpu > 0
