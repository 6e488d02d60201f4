"""Keep-alive connections from the relay to an origin (the provider, or the proxy's own app).

TLS for ``https`` origins uses httpx's own context (certifi, or ``SSL_CERT_FILE``/``SSL_CERT_DIR``).
"""

from __future__ import annotations

import asyncio
import ssl
import time
import urllib.request
from dataclasses import dataclass
from functools import cache
from urllib.parse import urlsplit

from engine.proxy.transport.http1 import HEAD_LIMIT, READ_SIZE

#: Idle connections kept per origin.
POOL_SIZE = 100
#: An idle connection is not reused after this long (httpx's keep-alive expiry, which the proxy had).
KEEPALIVE_EXPIRY_S = 5.0


@dataclass(frozen=True)
class Origin:
    scheme: str
    host: str
    port: int

    @property
    def netloc(self) -> str:
        """The ``host`` header's value: the port only when not the scheme's own, IPv6 in brackets."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = 443 if self.scheme == "https" else 80
        return host if self.port == default else f"{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """``(origin, target)`` of an absolute URL; the target is its path and query."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    port = parts.port or (443 if scheme == "https" else 80)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return Origin(scheme, parts.hostname or "", port), target


def upstream_url(base: str, path: str, query: str) -> str:
    """``base`` + the request path (``/v1`` not doubled when the base already ends with it)."""
    base = base.rstrip("/")
    if base.endswith("/v1") and (path == "/v1" or path.startswith("/v1/")):
        path = path[3:]
    return f"{base}{path}" + (f"?{query}" if query else "")


@cache
def uses_env_proxy(origin: Origin) -> bool:
    """Whether ``HTTPS_PROXY``/``HTTP_PROXY``/``ALL_PROXY`` applies to ``origin`` (httpx honours them)."""
    proxies = urllib.request.getproxies_environment()  # the environment only, as httpx reads it
    if not (proxies.get(origin.scheme) or proxies.get("all")):
        return False
    return not urllib.request.proxy_bypass_environment(origin.host)


@cache
def _tls() -> ssl.SSLContext:
    import httpx

    context = httpx.create_ssl_context()  # what the app's httpx verifies with (certifi, SSL_CERT_FILE/DIR)
    context.set_alpn_protocols(["http/1.1"])
    return context


@dataclass
class Connection:
    origin: Origin
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    reused: bool = False
    idle_since: float = 0.0

    def close(self) -> None:
        self.writer.close()

    def usable(self, now: float) -> bool:
        """Open, not closed by the origin meanwhile, and idle for less than the expiry."""
        fresh = now - self.idle_since < KEEPALIVE_EXPIRY_S
        return fresh and not self.writer.is_closing() and not self.reader.at_eof()


class ConnectionPool:
    """Idle keep-alive connections by origin."""

    def __init__(self, connect_timeout_s: float) -> None:
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[Origin, list[Connection]] = {}
        self._closed = False

    async def acquire(self, origin: Origin, *, fresh: bool = False) -> Connection:
        """An idle connection to ``origin`` (unless ``fresh``), else a new one; ``TimeoutError`` or
        ``OSError`` when it cannot be opened."""
        idle = self._idle.get(origin, [])
        now = time.monotonic()
        while idle and not fresh:
            conn = idle.pop()
            if conn.usable(now):
                conn.reused = True
                return conn
            conn.close()
        secure = origin.scheme == "https"
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(
                origin.host, origin.port, limit=max(HEAD_LIMIT, READ_SIZE),
                ssl=_tls() if secure else None, server_hostname=origin.host if secure else None,
            ),
            self.connect_timeout_s,
        )  # fmt: skip
        return Connection(origin, reader, writer)

    def release(self, conn: Connection) -> None:
        """Back to the pool, for the next request to the same origin."""
        now = time.monotonic()
        idle = self._idle.setdefault(conn.origin, [])
        for stale in [c for c in idle if not c.usable(now)]:  # closed or expired meanwhile
            idle.remove(stale)
            stale.close()
        if len(idle) < POOL_SIZE and not self._closed and not conn.writer.is_closing():
            conn.idle_since = now
            idle.append(conn)
        else:
            conn.close()

    def close(self) -> None:
        self._closed = True
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
