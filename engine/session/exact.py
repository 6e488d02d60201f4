"""The exact request of a session's model call, as the store keeps it (``model_requests``).

The session manager records what its client put on the wire (:mod:`engine.wire_requests`) beside
the call's ``request`` event, as ``ctxdesk proxy`` does for an agent's calls: the body, the
answer, the provider's usage and the timing, or the error. Pure: the caller stores the record.
"""

from __future__ import annotations

from typing import Any

from engine.convert import to_anthropic, to_openai
from engine.errors import ProviderError
from engine.events import ProviderUsage
from engine.messages import Message
from engine.store.payloads import RequestRecord
from engine.wire_requests import ANTHROPIC_MESSAGES, WireRequest

#: ``model_requests.source`` of a call the session manager made.
SOURCE = "engine"


def answered(
    wire: WireRequest,
    message: Message,
    usage: ProviderUsage | None,
    *,
    stop_reason: str | None,
    model: str | None,
    started_utc: str,
    latency_ms: float,
) -> RequestRecord:
    """A call the provider answered: the body sent, the reply in the API's own shape, its usage."""
    content = (
        to_anthropic([message])[0]["content"] if wire.api == ANTHROPIC_MESSAGES else to_openai([message])
    )
    response: dict[str, Any] = {"content": content}
    if message.id:
        response["id"] = message.id
    if model:
        response["model"] = model
    counts = usage.model_dump() if usage is not None else {}
    return _record(
        wire, started_utc, latency_ms, status_code=200, response=response, stop_reason=stop_reason,
        usage=counts or None, **{k: counts.get(k) for k in _USAGE_COLUMNS},
    )  # fmt: skip


def failed(wire: WireRequest, error: ProviderError, *, started_utc: str, latency_ms: float) -> RequestRecord:
    """A call the provider refused or never answered (no status: it was not reached)."""
    return _record(
        wire, started_utc, latency_ms, status_code=error.status, error_type=type(error).__name__,
        error_message=str(error),
    )  # fmt: skip


_USAGE_COLUMNS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


def _record(wire: WireRequest, started_utc: str, latency_ms: float, **fields: Any) -> RequestRecord:
    return RequestRecord(
        api=wire.api, source=SOURCE, method="POST", path=wire.path, body=dict(wire.body),
        started_utc=started_utc, latency_ms=round(latency_ms, 3), **fields,
    )  # fmt: skip
