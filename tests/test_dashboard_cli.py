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
