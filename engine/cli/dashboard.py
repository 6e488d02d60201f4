"""``ctxdesk dashboard``: the Streamlit app on 127.0.0.1 over session databases."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from engine.cli.common import EXIT_OK, REPO_ROOT, SAMPLE_DATA_DIR, UsageError, port_number
from engine.cli.importing import FROM_CHOICES, FROM_METAVAR
from engine.locations import DB_PATHS_ENV_VAR, SETTINGS_ENV_VAR

DEFAULT_DASHBOARD_PORT = 8501
#: The settings the bundled demo sessions ran with (used with the sample data by default).
DEMO_SETTINGS_FILE = SAMPLE_DATA_DIR / "demo-settings.toml"
#: Host names the server accepts (DNS rebinding protection: any other Host header is refused).
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
#: Streamlit options the dashboard always runs with, wherever it is started (the same values as
#: .streamlit/config.toml, which Streamlit reads only from the working directory).
SERVER_OPTIONS = (
    ("server.address", "127.0.0.1"),
    ("browser.serverAddress", "127.0.0.1"),
    ("browser.gatherUsageStats", "false"),
    ("server.runOnSave", "false"),
    ("server.enableCORS", "true"),
    ("server.enableXsrfProtection", "true"),
    ("client.showErrorDetails", "type"),
    ("client.toolbarMode", "minimal"),
    ("theme.base", "light"),
    # No watch of the app's source files: the sources of an installed tool do not change under it,
    # and the watch walks every imported module of each new browser session.
    ("server.fileWatcherType", "none"),
    # No full garbage collection after every script run: live follow reruns a fragment every 0.25 s,
    # and each forced collection of the server's heap (pandas, DuckDB, the dashboard) took 0.13 s of
    # the run's 0.14 s: an open tab kept 40% of a core busy (4.0 CPU s per 10 s; 0.27 without).
    # Python's own generational collector still runs.
    ("runner.postScriptGC", "false"),
    # No "magic" (a bare expression written to the page): no page has one, and each page's first run
    # parsed and rewrote its source for it (app.py and the Sessions page: 0.02 s of the first paint).
    ("runner.magicEnabled", "false"),
)
#: Seconds the server gets to exit after SIGTERM before it is killed.
STOP_GRACE_S = 10.0


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


def server_launcher(app: Path) -> list[str]:
    """How the server process starts: the dashboard's own server script beside ``app`` (Streamlit's
    command line with a faster first paint: dashboard/server.py), else ``python -m streamlit``."""
    server = app.parent / "server.py"
    return [sys.executable, str(server)] if server.is_file() else [sys.executable, "-m", "streamlit"]


def can_open_browser(platform: str = sys.platform, env: dict[str, str] | None = None) -> bool:
    """Whether a browser can be opened here: on Linux and the BSDs only with a display (without one,
    xdg-open falls back to a text browser in the user's terminal)."""
    env = os.environ if env is None else env
    return platform in ("darwin", "win32") or bool(env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"))


def dashboard_command(app: Path, paths: Sequence[Path], *, port: int, headless: bool) -> list[str]:
    """The streamlit command line serving ``app`` on 127.0.0.1 over ``paths``; a database URL is left
    out (any user can read a process's argv in /proc): :func:`dashboard_env` passes it."""
    command = [*server_launcher(app), "run", str(app), "--server.port", str(port)]
    for name, value in SERVER_OPTIONS:
        command += [f"--{name}", value]
    for host in LOOPBACK_HOSTS:
        command += ["--server.allowedHosts", host]
    command += ["--server.headless", "true" if headless else "false"]  # over .streamlit/config.toml's
    from engine.store.factory import is_database_url

    return [*command, "--", *(str(p) for p in paths if not is_database_url(str(p)))]


def dashboard_env(
    paths: Sequence[Path], base: dict[str, str] | None = None, *, settings: Path | None = None
) -> dict[str, str]:
    """The environment for the dashboard: ``base`` (default: ours) plus $CTXDESK_DB_PATHS (files),
    $CTXDESK_DB_URLS (database URLs, one a line: the environment is readable by its owner only), and
    $CTXDESK_SETTINGS when a settings file is given."""
    from engine.store.factory import DB_URLS_ENV_VAR, is_database_url

    files = [str(p) for p in paths if not is_database_url(str(p))]
    urls = [str(p) for p in paths if is_database_url(str(p))]
    env = {**(os.environ if base is None else base), DB_PATHS_ENV_VAR: os.pathsep.join(files)}
    env.pop(DB_URLS_ENV_VAR, None)
    if urls:
        env[DB_URLS_ENV_VAR] = "\n".join(urls)
    if settings is not None:
        env[SETTINGS_ENV_VAR] = str(settings)
    return env


def dashboard_settings(
    given: str | None, *, sample_data: bool, env: dict[str, str] | None = None
) -> Path | None:
    """The settings file the dashboard uses: ``--settings`` (before or after ``dashboard``), else
    $CTXDESK_SETTINGS as it is, else the demo's own settings when showing the bundled sample data."""
    if given:
        return Path(given).expanduser().resolve()
    if (os.environ if env is None else env).get(SETTINGS_ENV_VAR):
        return None
    if sample_data and DEMO_SETTINGS_FILE.is_file():
        return DEMO_SETTINGS_FILE
    return None


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    from engine.store.factory import configured_database, is_database_url

    follower = None
    if getattr(args, "agent", None):  # import the agent's sessions, then follow what it appends
        from engine.cli.importing import start_following

        db, follower = start_following(
            args.agent, err=sys.stderr, settings_path=getattr(args, "settings", None), background=True
        )  # the dashboard opens at once on what is imported; the sidebar shows how far the import is
        args.paths = [str(db), *args.paths]
    # $CTXDESK_DB, else the settings' `database`, when no path is given
    given = list(args.paths) or (
        [team] if (team := configured_database(getattr(args, "settings", None))) else []
    )
    urls = [p for p in given if is_database_url(p)]  # postgresql:// (attached through DuckDB)
    paths = [Path(p) for p in given if not is_database_url(p)] or ([] if urls else default_db_paths())
    settings = dashboard_settings(getattr(args, "settings", None), sample_data=not given)
    if not paths and not urls:
        raise UsageError(
            f"no database given and no sample data in {SAMPLE_DATA_DIR}; run `ctxdesk demo` first"
        )
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    paths = import_transcript_folders(paths, settings=getattr(args, "settings", None))
    paths = [*(p.resolve() for p in paths), *urls]  # type: ignore[list-item]
    headless = args.no_browser or not can_open_browser()
    command = dashboard_command(dashboard_app_path(), paths, port=args.port, headless=headless)
    env = dashboard_env(paths, settings=settings)
    print(f"ctxdesk dashboard on http://127.0.0.1:{args.port} over {len(paths)} path(s)", file=sys.stderr)
    try:
        return run_server(command, env=env)
    finally:
        if follower is not None:
            follower.stop()


def transcript_folders(paths: Sequence[Path]) -> list[Path]:
    """The folders among ``paths`` that hold no session database but do hold agents' transcripts."""
    candidates = [p for p in paths if p.is_dir() and not any(p.glob("*.db"))]
    if not candidates:  # the importers (every format module) are loaded only for a folder to look into
        return []
    from engine.importers import folder_files

    return [p for p in candidates if folder_files(p)]


def import_transcript_folders(paths: Sequence[Path], *, settings: str | None = None) -> list[Path]:
    """``paths`` with each folder of transcripts (and no database) imported into the agents database
    (as ``--from`` does) and replaced by it: ``ctxdesk dashboard ~/.claude/projects/x`` just works."""
    folders = transcript_folders(paths)
    if not folders:
        return list(paths)
    from engine.cli.importing import default_db, run_import
    from engine.importers import folder_files
    from engine.settings import load_settings

    db = default_db()
    found = [f for folder in folders for f in folder_files(folder)]
    print(
        f"importing {len(found)} transcript file(s) from {', '.join(map(str, folders))} into {db}",
        file=sys.stderr,
    )
    results, skipped = run_import(db, [], found, model=None, err=sys.stderr, settings=load_settings(settings))
    sessions = sum(len(r.sessions) for r in results)
    print(
        f"{db}: {sessions} session(s) imported or up to date, {len(skipped)} file(s) skipped", file=sys.stderr
    )
    kept = [p for p in paths if p not in folders]
    return [*kept, db] if db not in kept else kept


def run_server(command: Sequence[str], *, env: dict[str, str]) -> int:
    """Run the server as our child and stop it with us: SIGTERM, SIGHUP and Ctrl-C reach it, then we wait."""
    server = subprocess.Popen(
        list(command), env=env, cwd=REPO_ROOT if (REPO_ROOT / ".streamlit").is_dir() else None
    )

    def stop(signum: int, _frame: object) -> None:
        if server.poll() is None:
            server.terminate()
        raise SystemExit(128 + signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        return server.wait()
    except KeyboardInterrupt:
        return EXIT_OK
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if server.poll() is None:
            server.terminate()
        try:
            server.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("dashboard", help="start the dashboard on localhost")
    p.add_argument(
        "paths", nargs="*", metavar="DB_OR_DIR", help="session databases or folders (default: sample data)"
    )
    p.add_argument(
        "--port", type=port_number, default=DEFAULT_DASHBOARD_PORT, help="port (default %(default)s)"
    )
    p.add_argument(
        "--no-browser", action="store_true", help="do not open a browser (one opens where there is a display)"
    )
    p.add_argument(
        "--settings", metavar="TOML", default=argparse.SUPPRESS,
        help="settings file shown and edited on Model settings (default: $CTXDESK_SETTINGS, else the demo's "
        "data/demo-settings.toml with the sample data, else ~/.config/ctxdesk/settings.toml)",
    )  # fmt: skip
    p.add_argument(
        "--from", dest="agent", choices=FROM_CHOICES, metavar=FROM_METAVAR,
        help="import that agent's sessions into the agents database and follow new lines live: %(choices)s",
    )  # fmt: skip
    p.set_defaults(run=cmd_dashboard)
