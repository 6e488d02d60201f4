"""Where ctxdesk finds its files: session databases and the settings file, named once for the CLI,
the engine and the dashboard (light: no import beyond the standard library)."""

import os
from pathlib import Path

__all__ = [
    "DB_PATHS_ENV_VAR",
    "DEFAULT_SETTINGS_PATH",
    "SAMPLE_DATA_DIR",
    "SETTINGS_ENV_VAR",
    "settings_path",
]

#: Environment variable with database files or folders, separated by os.pathsep
#: (``ctxdesk dashboard`` sets it for the dashboard process).
DB_PATHS_ENV_VAR = "CTXDESK_DB_PATHS"
#: Environment variable naming the settings file.
SETTINGS_ENV_VAR = "CTXDESK_SETTINGS"
#: The settings file read when neither a path nor $CTXDESK_SETTINGS names one (if it exists).
DEFAULT_SETTINGS_PATH = Path("~/.config/ctxdesk/settings.toml")
#: The bundled sample databases, written by ``ctxdesk demo``.
SAMPLE_DATA_DIR = Path(__file__).resolve().parent.parent / "data"


def settings_path(path: "str | os.PathLike[str] | None" = None) -> Path | None:
    """The settings file to use: ``path``, else $CTXDESK_SETTINGS, else the default file if it exists."""
    if path is not None:
        return Path(path).expanduser()
    from_env = os.environ.get(SETTINGS_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    default = DEFAULT_SETTINGS_PATH.expanduser()
    return default if default.is_file() else None
