"""Open a session database by path or URL: a file path is SQLite, ``postgresql://...`` a server.

Every command and the session manager take either; :func:`default_database` names the team's
database when none is given (``$CTXDESK_DB``, else the ``database`` settings key).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine import locations
from engine.store.credentials import hide_password
from engine.store.urls import URL_SCHEMES, database_name, is_database_url, is_dsn, redact_url

if TYPE_CHECKING:
    from engine.store.backend import SessionStoreBackend

#: Environment variable naming the default database (a file path or a postgresql:// URL).
DB_ENV_VAR = "CTXDESK_DB"
#: Database URLs ``ctxdesk dashboard`` hands its Streamlit child, one a line (never in its argv).
DB_URLS_ENV_VAR = "CTXDESK_DB_URLS"


def open_store(target: str | os.PathLike[str], *, read_only: bool = False) -> Any:
    """A SessionStore on a SQLite file, or a PostgresSessionStore on a ``postgresql://`` URL.

    Both implement :class:`SessionStoreBackend`; psycopg is imported only for a URL.
    """
    if is_database_url(target):
        from engine.store.postgres import PostgresSessionStore

        return PostgresSessionStore(str(target), read_only=read_only)
    from engine.store.sqlite import SessionStore

    return SessionStore(Path(target), read_only=read_only)


def default_database(env: Mapping[str, str] | None = None, settings: Any = None) -> str | None:
    """The database to use when none is named: ``$CTXDESK_DB``, else the settings' ``database``
    (a :class:`engine.settings.Settings` or a mapping); None when neither names one."""
    env = os.environ if env is None else env
    if env.get(DB_ENV_VAR, "").strip():
        return env[DB_ENV_VAR].strip()
    value = settings.get("database") if isinstance(settings, Mapping) else getattr(settings, "database", None)
    return str(value) if value else None


def configured_database(settings_path: str | os.PathLike[str] | None = None) -> str | None:
    """:func:`default_database` with the settings file read (``settings_path``, else
    $CTXDESK_SETTINGS, else ~/.config/ctxdesk/settings.toml): what commands use. With no such file
    the settings are not loaded (a command's start does not import them)."""
    found = default_database()
    if found is None and locations.settings_path(settings_path) is not None:
        from engine.settings import load_settings

        found = default_database(settings=load_settings(settings_path))
    return found


def __getattr__(name: str) -> Any:
    """``SessionStoreBackend`` (the protocol both stores implement), loaded on first use: asking
    whether a path is a database URL imports no store."""
    if name == "SessionStoreBackend":
        from engine.store.backend import SessionStoreBackend

        return SessionStoreBackend
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DB_ENV_VAR",
    "DB_URLS_ENV_VAR",
    "URL_SCHEMES",
    "SessionStoreBackend",
    "configured_database",
    "database_name",
    "default_database",
    "hide_password",
    "is_database_url",
    "is_dsn",
    "open_store",
    "redact_url",
]
