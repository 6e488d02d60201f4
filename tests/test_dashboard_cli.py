"""``ctxdesk dashboard``'s settings file: ``--settings`` before or after the command, the
environment, and the bundled demo's own settings with the sample data."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.cli import build_parser
from engine.cli.dashboard import DEMO_SETTINGS_FILE, dashboard_env, dashboard_settings
from engine.settings import SETTINGS_ENV_VAR


@pytest.mark.parametrize(
    "argv",
    [
        ["dashboard", "--settings", "X.toml", "a.db"],
        ["--settings", "X.toml", "dashboard", "a.db"],
    ],
    ids=["after the command", "before the command"],
)
def test_settings_option_reaches_the_dashboard_either_way(argv: list[str], tmp_path: Path) -> None:
    args = build_parser().parse_args(argv)
    chosen = dashboard_settings(args.settings, sample_data=False, env={})
    assert chosen == Path("X.toml").resolve()
    env = dashboard_env([tmp_path / "a.db"], base={}, settings=chosen)
    assert env[SETTINGS_ENV_VAR] == str(Path("X.toml").resolve())


def test_no_settings_option_leaves_the_environment_alone() -> None:
    args = build_parser().parse_args(["dashboard", "a.db"])
    assert args.settings is None
    assert dashboard_settings(None, sample_data=False, env={SETTINGS_ENV_VAR: "/e.toml"}) is None
    assert SETTINGS_ENV_VAR not in dashboard_env([Path("a.db")], base={})
    assert dashboard_env([Path("a.db")], base={SETTINGS_ENV_VAR: "/e.toml"})[SETTINGS_ENV_VAR] == "/e.toml"


@pytest.mark.skipif(not DEMO_SETTINGS_FILE.is_file(), reason="no bundled demo settings in data/")
def test_the_bundled_demo_opens_with_its_own_settings() -> None:
    assert dashboard_settings(None, sample_data=True, env={}) == DEMO_SETTINGS_FILE
    # An explicit choice (option or environment) wins over the demo's file.
    assert dashboard_settings("Y.toml", sample_data=True, env={}) == Path("Y.toml").resolve()
    assert dashboard_settings(None, sample_data=True, env={SETTINGS_ENV_VAR: "/e.toml"}) is None


#: Runs ``ctxdesk`` with the server's start replaced by printing the heavy modules loaded by then.
LAUNCH_PROBE = """
import json, subprocess, sys
def started(command, **_):
    heavy = ("engine.importers", "streamlit", "duckdb", "pandas", "plotly")
    print(json.dumps(sorted(m for m in sys.modules if m.startswith(heavy))))
    raise SystemExit(0)
subprocess.Popen = started
from engine.cli import main
main(sys.argv[1:])
"""


@pytest.mark.parametrize(
    "argv",
    [["dashboard", "--no-browser"], ["dashboard", "--port", "8600", "{db}"], ["dashboard", "{folder}"]],
    ids=["the bundled sample", "a database file", "a folder holding a database"],
)
def test_the_launcher_starts_the_server_without_the_importers_or_the_apps_libraries(
    argv: list[str], tmp_path: Path
) -> None:
    """Every format module (~0.6 s) and the app's libraries are the server's business, not the
    launcher's: they would delay the server's start (#36.12)."""
    import json
    import shutil
    import subprocess
    import sys

    from engine.cli.dashboard import default_db_paths

    sample = default_db_paths()[0]
    (tmp_path / "folder").mkdir()
    shutil.copy(sample, tmp_path / "folder" / sample.name)
    args = [a.format(db=sample, folder=tmp_path / "folder") for a in argv]
    done = subprocess.run(
        [sys.executable, "-c", LAUNCH_PROBE, *args], capture_output=True, text=True, timeout=120, check=True
    )
    assert json.loads(done.stdout) == []


def test_an_unknown_agent_is_refused_naming_the_known_ones(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["dashboard", "--from", "nope"])
    assert "invalid choice: 'nope' (choose from 'qwen', 'claude-code'" in capsys.readouterr().err
