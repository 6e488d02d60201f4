"""First paint of the dashboard in a real browser (#36.12), beside a one-table Streamlit app started
the same way in the same run (Streamlit's own floor on this machine).

From the moment the user's command starts (``ctxdesk dashboard --no-browser``, and for the baseline
``python -m streamlit run app.py``, as a user starts each): when the server answers its health check,
when the page shows its first metric, and when the Sessions table is drawn. The browser is started
before the clock; each app runs on a free loopback port over a copy of the bundled sample data.
Used by bench_dashboard.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from bench.report import Table

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("CTXDESK_CHROMIUM", "/usr/bin/chromium")
START_TIMEOUT_S = 120.0
BASELINE_APP = """import pandas as pd
import streamlit as st

st.metric("Sessions", 7)
st.dataframe(pd.DataFrame({"session": ["a", "b"], "turns": [1, 2]}))
"""
STEPS = ("server healthy", "first metric on the page", "Sessions table drawn")
#: Processor time rather than wall time, which other work on a shared machine moves.
CPU_STEP = "CPU seconds its processes used until the first metric"
#: The first metric when the browser opened the same address before: Streamlit's scripts are
#: content-hashed and served immutable, so a returning user's browser has them (each run above
#: is a first visit: a new browser context, a cold cache).
RETURNING_STEP = "first metric, the browser's second visit (scripts cached)"
#: The first metric by the page's own clock: when the element entered the page, rather than when
#: Playwright's driver reported it (on a busy machine that report came 0.1-0.5 s later).
IN_PAGE_STEP = "first metric painted, by the page's own clock"
#: Records (in the page, from its first script on) when the frame that first holds a metric has been
#: painted: the element entered the document, the next animation frame ran, then the first task after it.
FIRST_METRIC_CLOCK = (
    "new MutationObserver((_, seen) => { if (document.querySelector(\"[data-testid='stMetric']\")) {"
    " seen.disconnect(); requestAnimationFrame(() => setTimeout(() => { window.__firstMetricMs = Date.now(); }));"
    " } }).observe(document, {subtree: true, childList: true});"
)


def is_available() -> bool:
    """Chromium and Playwright are installed (else the table is left out, saying why)."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return Path(CHROMIUM).exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ctxdesk_command(port: int, data_dir: Path) -> list[str]:
    """``ctxdesk dashboard`` as a user types it (the console script runs ``engine.cli.main``)."""
    launch = "import sys; from engine.cli import main; sys.exit(main(sys.argv[1:]))"
    return [sys.executable, "-c", launch, "dashboard", "--no-browser", "--port", str(port), str(data_dir)]


def baseline_command(port: int, app: Path) -> list[str]:
    """A plain Streamlit app as its docs start it, headless on loopback without usage statistics."""
    return [
        sys.executable, "-m", "streamlit", "run", str(app), "--server.port", str(port),
        "--server.headless", "true", "--server.address", "127.0.0.1", "--browser.gatherUsageStats", "false",
    ]  # fmt: skip


def session_cpu_seconds(session: int) -> float:
    """User + system CPU seconds of every process in ``session`` (Linux /proc), with the children
    they have waited for (a worker process that ran and exited): what the command itself cost the
    machine's processors, however busy the machine is."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # the process ended meanwhile
            continue
        # After the name: state ppid pgrp session ...; utime, stime, cutime, cstime are 11-14.
        if int(fields[3]) == session:
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


def _paint(
    context: object, command: list[str], port: int, cwd: Path, settings: Path
) -> tuple[float, float, float, float, float]:
    """(healthy, first metric, table) seconds after ``command`` started, the CPU seconds its
    processes used until the first metric, and the first metric by the page's own clock (the wall
    clock both read); in a page of the browser ``context`` (its cache)."""
    env = {**os.environ, "CTXDESK_SETTINGS": str(settings), "CTXDESK_DB_PATHS": ""}
    page = context.new_page()
    page.add_init_script(FIRST_METRIC_CLOCK)
    start, started_at = time.monotonic(), time.time()
    # In its own session: stopping it reaches the streamlit server ``ctxdesk dashboard`` starts.
    proc = subprocess.Popen(
        command,
        cwd=cwd,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        healthy = wait_healthy(proc, command, port, start)
        page.goto(f"http://127.0.0.1:{port}/")
        page.wait_for_selector("[data-testid='stMetric']", timeout=START_TIMEOUT_S * 1000)
        metric = time.monotonic() - start
        cpu = session_cpu_seconds(proc.pid)
        page.wait_for_function("() => window.__firstMetricMs !== undefined", timeout=START_TIMEOUT_S * 1000)
        in_page = page.evaluate("window.__firstMetricMs") / 1000 - started_at
        page.wait_for_selector("[data-testid='stDataFrame']", timeout=START_TIMEOUT_S * 1000)
        return healthy, metric, time.monotonic() - start, cpu, in_page
    finally:
        page.close()
        _stop_group(proc)


def wait_healthy(proc: subprocess.Popen[bytes], command: list[str], port: int, start: float) -> float:
    """Seconds from ``start`` until the server ``command`` started answers its health check."""
    while True:
        if proc.poll() is not None or time.monotonic() - start > START_TIMEOUT_S:
            raise RuntimeError(f"the dashboard did not start: {' '.join(command)}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1):
                return time.monotonic() - start
        except OSError:
            time.sleep(0.02)


def _stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop the command and every process it started (its session), waiting until they are gone."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        deadline = time.monotonic() + 15
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        proc.wait(timeout=30) if proc.poll() is None else None
        while time.monotonic() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)


def compile_bytecode() -> None:
    """Compile the project's modules to bytecode (``__pycache__``, as ``pip install`` does): under
    PYTHONDONTWRITEBYTECODE (this machine's environment sets it) a checkout never gets any, and every
    start compiled the engine and the dashboard from source again (the server's warm-up 1.0-1.2 s of
    processor time instead of 0.74 s), which no installed copy does. Python still checks each file
    against its source: an edited module is compiled again, as before."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    command = [sys.executable, "-m", "compileall", "-q", "engine", "dashboard", "bench"]
    subprocess.run(command, cwd=ROOT, env=env, check=True, stdout=subprocess.DEVNULL)


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


def first_paint_table(runs: int) -> Table:
    from playwright.sync_api import sync_playwright

    compile_bytecode()
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-paint-") as tmp:
        base = Path(tmp)
        data_dir = base / "data"
        shutil.copytree(ROOT / "data", data_dir, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
        baseline_app = base / "baseline" / "app.py"
        baseline_app.parent.mkdir()
        baseline_app.write_text(BASELINE_APP, encoding="utf-8")
        settings = data_dir / "demo-settings.toml"
        apps = {
            "ours": (lambda port: ctxdesk_command(port, data_dir), ROOT),
            "theirs": (lambda port: baseline_command(port, baseline_app), base),
        }
        first: dict[str, list[tuple[float, ...]]] = {name: [] for name in apps}
        again: dict[str, list[tuple[float, ...]]] = {name: [] for name in apps}
        with sync_playwright() as p:
            browser = p.chromium.launch(
                executable_path=CHROMIUM, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            try:
                for _ in range(runs):  # alternated, so a load change hits both alike
                    for name, (command, cwd) in apps.items():
                        context = browser.new_context()  # an empty cache: a first visit
                        port = _free_port()
                        try:
                            first[name].append(_paint(context, command(port), port, cwd, settings))
                            again[name].append(_paint(context, command(port), port, cwd, settings))
                        finally:
                            context.close()
            finally:
                browser.close()
        ours, theirs = first["ours"], first["theirs"]
    table = Table(
        title=f"Dashboard first paint on the bundled sample data (median of {runs}, seconds from the command's start)",
        columns=[
            "step",
            "ctxdesk dashboard (s)",
            "one-table Streamlit app (s, baseline)",
            "ctxdesk − baseline (s)",
            "ctxdesk / baseline",
        ],
        baseline="a Streamlit app drawing one metric and a two-row table, started by `python -m streamlit run`",
        notes=[
            "The browser (Debian chromium, headless) is up before the clock starts and opens the page as soon as the"
            " server answers its health check; the clock starts with `ctxdesk dashboard --no-browser` (the whole"
            " command: its own start, then the server's) and with `python -m streamlit run` for the baseline."
            " Each run is a first visit (a new browser context: nothing cached), then a second visit to the"
            f" same address in the same context, restarted: {RETURNING_STEP}.",
            f"load average at the start: {load_before}; at the end: {_load()}.",
            "The project's modules are compiled to bytecode first (`python -m compileall`, as `pip install`"
            " does), whatever PYTHONDONTWRITEBYTECODE says: the baseline's Streamlit and pandas have theirs.",
            f"{CPU_STEP}: read from /proc for the command's session (its own process, the server, the"
            " workers they ran); the browser's is not counted. On a busy machine the wall times follow it.",
            f"{IN_PAGE_STEP}: the first task after the animation frame that followed the element's entry"
            " into the page (a MutationObserver in it, Date.now()), against the wall clock read when the"
            " command started; the rows above are when Playwright's driver reported the element to this"
            " process, which waits for the page's busy main thread.",
            f"{sys.platform}, {os.cpu_count()} CPUs; other work on the machine moves both columns alike.",
        ],
    )
    rows = [(step, ours, theirs, i) for i, step in enumerate((*STEPS, CPU_STEP))]
    rows.append((IN_PAGE_STEP, ours, theirs, 4))
    rows.append((RETURNING_STEP, again["ours"], again["theirs"], 1))
    for step, mine_runs, floor_runs, i in rows:
        mine = statistics.median(r[i] for r in mine_runs)
        floor = statistics.median(r[i] for r in floor_runs)
        table.add(step, round(mine, 2), round(floor, 2), round(mine - floor, 2), round(mine / floor, 2))
    return table
