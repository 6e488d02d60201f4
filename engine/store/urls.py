"""Database URLs and DSNs: which targets name a PostgreSQL server, and how to print one (or any
message quoting one) without its password.

Pure string helpers shared by the store factory, the PostgreSQL store and every command that
prints a database (re-exported by ``engine.store.factory``, the documented place to import them from).
A server is named by a URL (``postgresql://user:pw@host/db?sslmode=require``) or by a libpq
key=value DSN (``host=db.internal dbname=ctxdesk user=app password=...``); anything else is a
SQLite file.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

#: URL schemes that name a PostgreSQL database.
URL_SCHEMES = ("postgresql", "postgres")
#: What a password is printed as.
HIDDEN = "***"

#: libpq connection keywords (https://www.postgresql.org/docs/current/libpq-connect.html#LIBPQ-PARAMKEYWORDS).
DSN_KEYWORDS = frozenset(
    [
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "require_auth",
        "channel_binding",
        "connect_timeout",
        "client_encoding",
        "options",
        "application_name",
        "fallback_application_name",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "replication",
        "gssencmode",
        "sslmode",
        "requiressl",
        "sslcompression",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcertmode",
        "sslrootcert",
        "sslcrl",
        "sslcrldir",
        "sslsni",
        "requirepeer",
        "ssl_min_protocol_version",
        "ssl_max_protocol_version",
        "krbsrvname",
        "gsslib",
        "gssdelegation",
        "service",
        "target_session_attrs",
        "load_balance_hosts",
    ]
)
#: One ``keyword = value`` of a DSN; a value is a word or a single-quoted string (``\'`` inside).
_DSN_PAIR = re.compile(r"\s*([A-Za-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']+)\s*")
#: Keywords whose value is a secret, in a DSN or a URL's query.
SECRET_KEYWORDS = ("password", "sslpassword")

#: A URL's ``user:password@`` (the password may hold ``@``: the last one before the path ends it).
_URL_PASSWORD = re.compile(r"(?i)\b((?:postgres(?:ql)?)://[^\s:/@?#]*):([^\s/?#]*)@")
#: ``password=...`` in a DSN or a query string (quoted or not), anywhere in a text.
_KEYWORD_PASSWORD = re.compile(
    r"(?i)(?<![A-Za-z_])(" + "|".join(SECRET_KEYWORDS) + r")(\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s&'\"]*)"
)


def is_dsn(target: object) -> bool:
    """True for a libpq key=value DSN: only ``keyword=value`` pairs, every keyword libpq's own."""
    if not isinstance(target, str) or "=" not in target:
        return False
    pos, keywords = 0, []
    while pos < len(target):
        match = _DSN_PAIR.match(target, pos)
        if match is None or match.end() == pos:
            return False
        keywords.append(match.group(1).lower())
        pos = match.end()
    return bool(keywords) and all(k in DSN_KEYWORDS for k in keywords)


def is_database_url(target: object) -> bool:
    """True for ``postgresql://...`` / ``postgres://...`` and for a key=value DSN; anything else
    (a path, a ``Path``) is a SQLite file."""
    if not isinstance(target, str):
        return False
    if "://" in target:
        return target.split("://", 1)[0].lower() in URL_SCHEMES
    return is_dsn(target.strip())


def redact_url(text: str) -> str:
    """``text`` (a URL, a DSN, or a message quoting either) with every database password shown as
    ``***``: ``user:pw@``, ``?password=``, ``password='...'``. The one redaction every message,
    ``store.path`` and the dashboard's labels use."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{HIDDEN}@", text)
    return _KEYWORD_PASSWORD.sub(lambda m: f"{m.group(1)}{m.group(2)}{HIDDEN}", text)


def database_name(target: str) -> str:
    """The database a URL or DSN names (``postgres`` when it names none), for labels."""
    if "://" in target:
        return urlsplit(target).path.lstrip("/") or "postgres"
    for match in _DSN_PAIR.finditer(target):
        if match.group(1).lower() == "dbname":
            return match.group(2).strip("'")
    return "postgres"


def without_password(target: str) -> str:
    """``target`` (a URL or DSN) with its password left out (``user@``, no ``password=``), for a
    connection that reads it from a passfile instead (:mod:`engine.store.credentials`)."""
    text = _URL_PASSWORD.sub(lambda m: f"{m.group(1)}@", target)
    if "://" in text:  # a query parameter: drop it with its separator
        text = re.sub(r"(?i)([?&])(?:" + "|".join(SECRET_KEYWORDS) + r")=[^&#]*(&?)", _keep_separator, text)
        return text
    return _KEYWORD_PASSWORD.sub("", text).strip().replace("  ", " ")


def _keep_separator(match: re.Match[str]) -> str:
    """``?password=x&next`` keeps its ``?``; a last or only parameter goes with its separator."""
    return match.group(1) if match.group(2) else ""
