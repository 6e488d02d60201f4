"""One request through the proxy and what came back, as the relay hands it to the recorder.

Built on the request path (``new_exchange``: secret headers dropped, key-like query parameters
masked), filled in as the answer streams, read by the writer thread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from engine.proxy.recording.sessions import Assignment
from engine.store.payloads import is_secret_header, safe_headers


@dataclass
class Exchange:
    """One request through the proxy and what came back; headers already without secrets."""

    api: str
    method: str
    path: str
    request_headers: dict[str, str]
    request_body: bytes
    started_utc: str
    status: int | None = None
    response_headers: dict[str, str] = field(default_factory=dict)
    response_chunks: list[bytes] = field(default_factory=list)
    ttfb_ms: float | None = None
    latency_ms: float | None = None
    proxy_error: str | None = None  # upstream_unreachable, upstream_timeout, client_disconnected
    proxy_error_detail: str | None = None
    #: the agent disconnected, but only after the whole answer had been relayed (not an error)
    closed_after_answer: bool = False
    assignment: Assignment | None = None
    sent_body: bytes | None = None  # the body forwarded, when a policy edited it
    policy: Any = None  # engine.proxy.policy.policies.PolicyOutcome of the request, when policies ran
    agent_answer: dict[str, Any] | None = (
        None  # the answer the agent got, when it differs from the upstream's
    )
    parent: Exchange | None = None  # set on the proxy's own follow-up calls (read_result rounds)
    #: the body as it was forwarded, when it was streamed upstream (joined by the writer)
    request_chunks: KeptBody | None = None
    submitted: bool = False  # handed to the recorder (it takes each exchange once)
    #: the body's size and hash when less of it was kept (refused unread, or past the record limit)
    request_size: int | None = None
    request_sha256: str | None = None
    via: str | None = None  # "websocket": a call made over the Responses API's WebSocket


#: Largest request body kept whole for the recorder (the providers' own request limit: Anthropic's
#: Messages API takes 32 MB); past it only its first ``RECORDED_PREFIX`` bytes, its size and hash are,
#: so recording a call costs a bounded few hundred MB at most whatever --max-body-mb allows.
RECORD_REQUEST_LIMIT = 32 * 1024 * 1024
RECORDED_PREFIX = 64 * 1024


class KeptBody:
    """A request body kept for the recorder as it is forwarded: whole up to ``limit`` bytes; past it,
    its first ``RECORDED_PREFIX`` bytes, its size and its SHA-256 (hashed only then, off the common path)."""

    def __init__(self, limit: int | None = None) -> None:
        self.chunks: list[bytes] = []
        self.size = 0
        self.limit = RECORD_REQUEST_LIMIT if limit is None else limit
        self._hash: Any = None

    def append(self, data: bytes) -> None:
        self.size += len(data)
        if self._hash is not None:
            self._hash.update(data)
            return
        self.chunks.append(data)
        if self.size > self.limit:
            self._hash = hashlib.sha256()
            for chunk in self.chunks:
                self._hash.update(chunk)
            self.chunks = [
                b"".join(self.chunks[: _chunks_for(self.chunks, RECORDED_PREFIX)])[:RECORDED_PREFIX]
            ]

    @property
    def whole(self) -> bool:
        return self._hash is None

    def data(self) -> bytes:
        """The body kept: all of it, or its prefix."""
        return b"".join(self.chunks)

    def digest(self) -> str | None:
        """The whole body's SHA-256 when only its prefix is kept."""
        return self._hash.hexdigest() if self._hash is not None else None


def _chunks_for(chunks: list[bytes], size: int) -> int:
    """How many leading chunks hold at least ``size`` bytes."""
    total = 0
    for n, chunk in enumerate(chunks, 1):
        total += len(chunk)
        if total >= size:
            return n
    return len(chunks)


def utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def new_exchange(api: str, method: str, path: str, headers: Any, body: bytes) -> Exchange:
    """An exchange as recorded: secret headers dropped, secret query parameters (``?key=``) masked."""
    kept = safe_headers({k.lower(): v for k, v in headers.items()}) or {}
    return Exchange(api, method, redact_query(path), kept, body, utc_now())


def redact_query(path: str) -> str:
    """``path?query`` with the values of key/token/secret-like parameters replaced by ``***``."""
    if "?" not in path:
        return path
    base, query = path.split("?", 1)
    pairs = [p.split("=", 1) for p in query.split("&")]
    masked = [f"{p[0]}=***" if len(p) == 2 and is_secret_header(p[0]) else "=".join(p) for p in pairs]
    return base + "?" + "&".join(masked)
