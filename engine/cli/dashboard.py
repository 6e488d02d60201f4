"""``ctxdesk dashboard``: the Streamlit app on 127.0.0.1 over session databases."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from engine.cli.common import EXIT_OK, REPO_ROOT, SAMPLE_DATA_DIR, UsageError, port_number
from engine.locations import DB_PATHS_ENV_VAR

DEFAULT_DASHBOARD_PORT = 8501


def dashboard_app_path() -> Path:
    """dashboard/app.py of this checkout or installation."""
    candidates = [REPO_ROOT / "dashboard" / "app.py"]
    try:
        import importlib.util

        spec = importlib.util.find_spec("dashboard")
        if spec is not None and spec.submodule_search_locations:
            candidates.extend(Path(p) / "app.py" for p in spec.submodule_search_locations)
    except (ImportError, ValueError):
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise UsageError(f"dashboard app not found (looked for {candidates[0]})")


def default_db_paths() -> list[Path]:
    """The bundled sample databases in data/ (made by ``ctxdesk demo``)."""
    return sorted(SAMPLE_DATA_DIR.glob("*.db"))


def dashboard_command(app: Path, paths: Sequence[Path], *, port: int, headless: bool) -> list[str]:
    """The streamlit command line serving ``app`` on 127.0.0.1 over ``paths``."""
    command = [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    if headless:
        command += ["--server.headless", "true"]
    return [*command, "--", *(str(p) for p in paths)]


def dashboard_env(paths: Sequence[Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the dashboard: ``base`` (default: ours) plus $CTXDESK_DB_PATHS."""
    return {
        **(os.environ if base is None else base),
        DB_PATHS_ENV_VAR: os.pathsep.join(str(p) for p in paths),
    }


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    paths = [Path(p) for p in args.paths] or default_db_paths()
    if not paths:
        raise UsageError(
            f"no database given and no sample data in {SAMPLE_DATA_DIR}; run `ctxdesk demo` first"
        )
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    paths = [p.resolve() for p in paths]
    command = dashboard_command(dashboard_app_path(), paths, port=args.port, headless=args.no_browser)
    env = dashboard_env(paths)
    print(f"ctxdesk dashboard on http://127.0.0.1:{args.port} over {len(paths)} path(s)", file=sys.stderr)
    try:
        return subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("dashboard", help="start the dashboard on localhost")
    p.add_argument(
        "paths", nargs="*", metavar="DB_OR_DIR", help="session databases or folders (default: sample data)"
    )
    p.add_argument(
        "--port", type=port_number, default=DEFAULT_DASHBOARD_PORT, help="port (default %(default)s)"
    )
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (streamlit headless)")
    p.set_defaults(run=cmd_dashboard)
