"""Database URLs: which targets name a PostgreSQL server, and how to print one without its password.

Pure string helpers shared by the store factory and the PostgreSQL store (re-exported by
``engine.store.factory``, the documented place to import them from).
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

#: URL schemes that name a PostgreSQL database.
URL_SCHEMES = ("postgresql", "postgres")


def is_database_url(target: object) -> bool:
    """True for ``postgresql://...`` / ``postgres://...``; anything else is a SQLite path."""
    if not isinstance(target, str) or "://" not in target:
        return False
    return target.split("://", 1)[0].lower() in URL_SCHEMES


def redact_url(url: str) -> str:
    """The URL without its password (for messages and ``store.path``)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = (parts.username or "") + ":***"
    return urlunsplit(parts._replace(netloc=f"{user}@{netloc[-1]}"))
