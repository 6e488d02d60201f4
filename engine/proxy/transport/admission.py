"""Which requests the proxy serves at all, decided from the head before anything is read or recorded.

The proxy holds the user's API keys' reach (agents send them through it) and writes what it sees
into the session database, so a web page must not be able to use it: a browser's request from a
foreign page carries an ``Origin`` (or ``Sec-Fetch-Site: cross-site``) and is refused; a DNS
rebinding attack reaches it under a foreign ``Host`` and is refused too (only loopback names are
served unless the proxy was started with ``--allow-remote``). Agents' own requests (Claude Code,
Codex, Gemini CLI and the SDKs) send no Origin and a loopback Host, and pass. ``OPTIONS *`` is
answered here, and ``CONNECT`` (the proxy is a base URL, not a forward proxy) refused with a hint.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

#: Methods the proxy relays (``OPTIONS *`` lists them).
ALLOWED_METHODS = "GET, POST, PUT, PATCH, DELETE, HEAD, OPTIONS"
#: Largest request body the proxy takes (``--max-body-mb``): over the providers' own request limits
#: (Anthropic's Messages API takes 32 MB), and the most a request may cost the proxy to read and record.
MAX_BODY_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class Refusal:
    """The proxy's own answer to a request it does not serve."""

    status: int
    message: str
    error_type: str = "permission_error"


def admit(
    method: str, target: str, headers: Mapping[str, str], *, allow_remote: bool = False
) -> Refusal | None:
    """None when the request may be served, else the answer it gets (``headers``: names lowercased)."""
    if method == "CONNECT":
        return Refusal(
            405,
            f"ctxdesk proxy is not a forward proxy (CONNECT {target}): point the agent's base URL at it, "
            "e.g. ANTHROPIC_BASE_URL=http://127.0.0.1:8788 or OPENAI_BASE_URL=http://127.0.0.1:8788/v1",
            "invalid_request_error",
        )
    origin = headers.get("origin")
    if origin is not None and not is_loopback_origin(origin):
        return Refusal(
            403, f"ctxdesk proxy: a request from the web page {origin!r} is refused (loopback only)"
        )
    if headers.get("sec-fetch-site", "").lower() == "cross-site":
        return Refusal(403, "ctxdesk proxy: a cross-site browser request is refused (loopback only)")
    host = headers.get("host")
    if host is not None and not allow_remote and not is_loopback_name(host_name(host)):
        return Refusal(403, f"ctxdesk proxy: Host {host!r} is not this machine's loopback (DNS rebinding?)")
    if method == "OPTIONS" and target == "*":
        return Refusal(204, "", "")
    return None


def body_refusal(length: int, limit: int) -> Refusal | None:
    """A request body of ``length`` bytes (so far) over ``limit``: a 413, the body not read further."""
    if length <= limit:
        return None
    return Refusal(
        413,
        f"ctxdesk proxy: the request body ({length:,} bytes) is over its limit of {limit:,} bytes "
        "(ctxdesk proxy --max-body-mb)",
        "request_too_large",
    )


def host_name(host: str) -> str:
    """The name of a ``Host`` header's value, without its port (IPv6 without its brackets)."""
    host = host.strip()
    if host.startswith("["):
        return host[1:].split("]", 1)[0]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def is_loopback_name(name: str) -> bool:
    """``localhost`` (and names under it) or a loopback address."""
    name = name.lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def is_loopback_origin(origin: str) -> bool:
    """An ``Origin`` of a page served from this machine's loopback (``null`` and foreign sites are not)."""
    parts = urlsplit(origin.strip())
    return parts.scheme in ("http", "https") and is_loopback_name(parts.hostname or "")
