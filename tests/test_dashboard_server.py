"""The dashboard's server process (dashboard/server.py, dashboard/warm.py): Streamlit's start-up scan
for v2 components is skipped only where it was checked, and the warm-up does what the first page run
of the Sessions page would do (#36.12)."""

from __future__ import annotations

import ast
import inspect
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import streamlit

from dashboard import server, warm
from engine.cli.dashboard import dashboard_app_path, dashboard_command

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data"


@pytest.mark.parametrize(
    ("version", "skipped"),
    [
        pytest.param("1.67.0", True, id="checked-release"),
        pytest.param("1.67.3", True, id="checked-patch-release"),
        pytest.param("1.68.0", False, id="next-minor"),
        pytest.param("1.6.7", False, id="older-with-similar-digits"),
        pytest.param("2.0.0", False, id="next-major"),
    ],
)
def test_the_component_scan_is_skipped_only_on_checked_versions(version: str, skipped: bool) -> None:
    assert server.skips_component_scan(version) is skipped


@pytest.mark.skipif(
    not server.skips_component_scan(streamlit.__version__), reason="the scan is not skipped on this Streamlit"
)
def test_the_skipped_scan_is_the_one_the_runtime_runs_and_nothing_scans_after_it() -> None:
    from streamlit.runtime.runtime import Runtime

    # The method made a no-op is the one Runtime.__init__ calls at start (this fails if Streamlit moves it).
    assert "self._bidi_component_registry.discover_and_register_components()" in inspect.getsource(
        Runtime.__init__
    )
    code = (
        "from dashboard import server\n"
        "assert server.skip_component_scan()\n"
        "from streamlit.components.v2 import manifest_scanner\n"
        "def scan(*a, **k):\n"
        "    raise SystemExit('scanned')\n"
        "manifest_scanner.scan_component_manifests = scan\n"
        "from streamlit.components.v2.component_manager import BidiComponentManager\n"
        "BidiComponentManager().discover_and_register_components()\n"
        "print('not scanned')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "not scanned"


def test_the_dashboard_uses_no_v2_component_the_skipped_scan_would_find() -> None:
    pages = [p for p in (ROOT / "dashboard").rglob("*.py") if p.name != "server.py"]
    assert len(pages) > 10
    assert [p for p in pages if "components.v2" in p.read_text(encoding="utf-8")] == []


def _imports(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            # `from dashboard import state` imports the module dashboard.state
            names.update(f"{node.module}.{a.name}" for a in node.names if node.module == "dashboard")
    return names


def test_the_warm_up_imports_what_the_first_page_run_imports() -> None:
    heavy = {"pandas", "duckdb", "engine"}
    needed = {
        n
        for script in (ROOT / "dashboard" / "app.py", ROOT / "dashboard" / "views" / "sessions.py")
        for n in _imports(script)
        if n.startswith("dashboard.") or n in heavy
    } - {"dashboard.warm"}
    assert needed, "no import found: the parse is wrong"
    assert needed <= set(warm.WARM_MODULES), sorted(needed - set(warm.WARM_MODULES))


def test_ctxdesk_dashboard_starts_the_server_script_and_another_app_plain_streamlit(tmp_path: Path) -> None:
    app = dashboard_app_path()
    command = dashboard_command(app, [tmp_path / "a.db"], port=8600, headless=True)
    assert command[:4] == [sys.executable, str(app.parent / "server.py"), "run", str(app)]
    other = tmp_path / "app.py"
    other.touch()
    assert dashboard_command(other, [], port=8600, headless=True)[1:4] == ["-m", "streamlit", "run"]
    pairs = dict(itertools.pairwise(command))
    assert pairs["--server.fileWatcherType"] == "none"


def test_the_warm_up_reads_the_sample_data_as_the_sessions_page_does(tmp_path: Path) -> None:
    """In a fresh process, as in the server: the modules import, the overview is read, and the endings
    are cached (the page run then finds them without starting a worker)."""
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    code = (
        "import sys\n"
        "from dashboard import warm\n"
        "from dashboard.data import why as why_data\n"
        "from dashboard import state\n"
        "failed = warm.warm_up()\n"
        "print(failed, why_data._endings.cache_info().currsize, len(state.overview()))\n"
        "frame = warm.session_endings(state.database_paths())\n"
        "print(why_data._endings.cache_info().hits, len(frame))\n"
    )
    env = {**os.environ, "CTXDESK_DB_PATHS": str(data), "CTXDESK_SETTINGS": str(data / "demo-settings.toml")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.strip().splitlines()
    failed, cached, sessions = first.rsplit(" ", 2)
    assert failed == "[]"
    assert int(cached) == 1
    assert int(sessions) > 0
    hits, rows = second.split()
    assert int(hits) == 1  # the page's read found the warm-up's
    assert int(rows) == int(sessions)
