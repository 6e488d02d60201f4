"""Where ctxdesk finds session databases, named once for the CLI and the dashboard (no I/O)."""

from pathlib import Path

__all__ = ["DB_PATHS_ENV_VAR", "SAMPLE_DATA_DIR"]

#: Environment variable with database files or folders, separated by os.pathsep
#: (``ctxdesk dashboard`` sets it for the dashboard process).
DB_PATHS_ENV_VAR = "CTXDESK_DB_PATHS"
#: The bundled sample databases, written by ``ctxdesk demo``.
SAMPLE_DATA_DIR = Path(__file__).resolve().parent.parent / "data"
