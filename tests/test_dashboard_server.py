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
import tomllib
from pathlib import Path

import pytest
import streamlit

from dashboard import server, warm
from engine.cli.dashboard import SERVER_OPTIONS, dashboard_app_path, dashboard_command

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
    assert _python(code) == "not scanned"


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
    assert pairs["--runner.postScriptGC"] == "false"


def test_the_checkouts_streamlit_config_says_what_the_command_line_says() -> None:
    """``streamlit run dashboard/app.py`` from the checkout reads .streamlit/config.toml; ``ctxdesk
    dashboard`` passes SERVER_OPTIONS: where both name an option, they agree."""
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    in_file = {
        f"{section}.{name}": value for section, options in config.items() for name, value in options.items()
    }
    shared = {name: value for name, value in SERVER_OPTIONS if name in in_file}
    assert "runner.postScriptGC" in shared and len(shared) >= 8, sorted(shared)
    assert {name: str(in_file[name]).lower() for name in shared} == {n: v.lower() for n, v in shared.items()}


def test_no_page_has_an_expression_magic_would_write() -> None:
    """The server runs without Streamlit's magic (runner.magicEnabled = false): no page relies on it."""
    from streamlit.runtime.scriptrunner.magic import add_magic

    assert ("runner.magicEnabled", "false") in SERVER_OPTIONS
    pages = [ROOT / "dashboard" / "app.py", *sorted((ROOT / "dashboard" / "views").glob("*.py"))]
    assert len(pages) > 5
    for page in pages:
        tree = add_magic(page.read_text(encoding="utf-8"), str(page))
        written = [
            node.lineno
            for node in ast.walk(tree)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "__streamlitmagic__"
        ]
        assert written == [], (page, written)


def _python(code: str, data: Path | None = None) -> str:
    """What ``code`` prints in a fresh Python (as the server is), over the sample copy ``data``."""
    env = dict(os.environ)
    if data is not None:
        env |= {"CTXDESK_DB_PATHS": str(data), "CTXDESK_SETTINGS": str(data / "demo-settings.toml")}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_warm_up_reads_the_overview_and_starts_no_worker(tmp_path: Path) -> None:
    """In a fresh process, as in the server: the modules import and the overview is read; how each
    session ended (a worker process) is left to the page, after its metrics and table."""
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    code = (
        "import subprocess\n"
        "from dashboard import warm\n"
        "from dashboard.data import why as why_data\n"
        "from dashboard import state\n"
        "def no_worker(*a, **k):\n"
        "    raise SystemExit('a worker process was started')\n"
        "subprocess.run = no_worker\n"
        "failed = warm.warm_up()\n"
        "print(failed, len(why_data._READ), len(state.overview()))\n"
    )
    failed, cached, sessions = _python(code, data).rsplit(" ", 2)
    assert failed == "[]"
    assert int(cached) == 0
    assert int(sessions) > 0


def test_a_page_run_waits_for_the_warm_up_and_only_for_one_that_was_announced(tmp_path: Path) -> None:
    """The race it prevents: app.py's ``from dashboard import state`` while the warm-up thread is half
    way through importing it once failed the first page run with "cannot import name 'state'"."""
    data = tmp_path / "data"
    shutil.copytree(SAMPLE, data, ignore=shutil.ignore_patterns("*-wal", "*-shm"))
    code = (
        "import sys, threading, time\n"
        "from dashboard import warm\n"
        "start = time.monotonic()\n"
        "assert warm.wait_for_warm_up(timeout=5)\n"
        "print('unannounced', round(time.monotonic() - start, 1), 'dashboard.state' in sys.modules)\n"
        "warm.expect_warm_up()\n"
        "assert not warm.wait_for_warm_up(timeout=0.2)\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), warm.warm_up())).start()\n"
        "assert warm.wait_for_warm_up(timeout=120)\n"
        "from dashboard import state\n"
        "print('announced', 'dashboard.state' in sys.modules, 'dashboard.table_columns' in sys.modules)\n"
    )
    unannounced, announced = _python(code, data).splitlines()
    assert unannounced == "unannounced 0.0 False"
    assert announced == "announced True True"


def test_collections_resume_after_the_warm_up_with_the_start_frozen_out_of_them() -> None:
    code = (
        "import gc\n"
        "from dashboard import server\n"
        "gc.disable()  # as server.main does first\n"
        "server.WARM_WAIT_S = 0.05  # no server listens here: the warm-up gives up\n"
        "server._warm_when_listening()\n"
        "print(gc.isenabled(), gc.get_freeze_count() > 1000)\n"
    )
    assert _python(code) == "True True"


def test_the_server_pauses_collections_before_it_imports_streamlit() -> None:
    body = inspect.getsource(server.main)
    assert body.index("gc.disable()") < body.index("skip_component_scan()")


def test_the_server_ends_the_wait_when_it_never_listens(monkeypatch: pytest.MonkeyPatch) -> None:
    ended = []
    monkeypatch.setattr(server, "WARM_WAIT_S", 0.05)
    monkeypatch.setattr(warm, "end_warm_up", lambda: ended.append(True))
    monkeypatch.setattr(server, "resume_collections", lambda: ended.append("collecting"))
    monkeypatch.setattr(warm, "warm_up", lambda: pytest.fail("warmed up without a listening server"))
    server._warm_when_listening()
    assert ended == ["collecting", True]


@pytest.mark.skipif(
    not server.skips_component_scan(streamlit.__version__),
    reason="the check is not skipped on this Streamlit",
)
def test_the_skipped_repl_check_is_the_one_the_first_element_runs() -> None:
    from streamlit import delta_generator

    source = inspect.getsource(delta_generator._maybe_print_use_warning)
    assert "if not _use_warning_has_been_displayed:" in source and "is_repl()" in source
    code = (
        "from dashboard import server\n"
        "from streamlit import env_util\n"
        "def looked(*a, **k):\n"
        "    raise SystemExit('looked at the stack')\n"
        "env_util.is_repl = looked\n"
        "assert server.skip_repl_check()\n"
        "from streamlit import delta_generator\n"
        "delta_generator._maybe_print_use_warning()\n"
        "print('not looked')\n"
    )
    assert _python(code) == "not looked"
