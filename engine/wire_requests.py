"""A model call as it goes over the wire: the API, the path and the exact JSON body.

A client that can say what it sends (:class:`SendsWireRequests`: the Anthropic, OpenAI and
scripted clients) lets the session manager record each call exactly, as ``ctxdesk proxy``
records an agent's calls (``model_requests``, the dashboard's Requests page). Any other
:class:`~engine.clients.ModelClient` still works; its calls are recorded as events only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

#: The APIs the clients speak, as ``model_requests.api`` names them (the same names as the proxy's,
#: engine.proxy.wire.api_names: tests/test_wire_requests.py holds them equal).
ANTHROPIC_MESSAGES = "anthropic_messages"
OPENAI_CHAT = "openai_chat"
OPENAI_RESPONSES = "openai_responses"


@dataclass(frozen=True)
class WireRequest:
    """One call as sent: ``api`` as ``model_requests.api`` names it (``anthropic_messages``,
    ``openai_chat``, ``openai_responses``), the URL ``path`` and the JSON ``body``."""

    api: str
    path: str
    body: Mapping[str, Any]


@runtime_checkable
class SendsWireRequests(Protocol):
    """A client that says what it sends for a :class:`~engine.clients.ModelRequest` (None: nothing
    it can name, e.g. a scripted client imitating a provider whose body it does not build)."""

    def wire_request(self, request: Any) -> WireRequest | None: ...
