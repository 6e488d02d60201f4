"""Writes mapped OpenTelemetry items through the store (the only I/O of the receiver's mapping)."""

from __future__ import annotations

import threading
from typing import Any

from engine.errors import NotFoundError
from engine.otel.mapping import OtelItem
from engine.store.payloads import RequestRecord

__all__ = ["OtelSink"]

_API_OF_AGENT = {"claude-code": "anthropic_messages", "codex": "openai_responses", "gemini": "gemini"}


class OtelSink:
    """Records items into ``store``: a session per agent session id (created on first sight), then its rows."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._known: set[str] = set()
        self._lock = threading.Lock()  # the receiver's handlers may run concurrently

    def _ensure_session(self, item: OtelItem) -> None:
        if item.session_id in self._known:
            return
        try:
            self.store.get_session(item.session_id)
        except NotFoundError:
            event = item.event
            self.store.create_session(
                session_id=item.session_id, title=f"{item.agent} {item.session_id[:8]} (OpenTelemetry)",
                model=(event.model if event else None) or item.model,
                provider=event.provider if event else None, source=f"otel:{item.agent}",
                metadata={"agent": item.agent, "captured_by": "otel"},
            )  # fmt: skip
        self._known.add(item.session_id)

    def write(self, items: list[OtelItem]) -> int:
        """Record ``items``; how many rows were written."""
        written = 0
        with self._lock, self.store.transaction():
            for item in items:
                self._ensure_session(item)
                if item.event is not None:
                    self.store.record_event(item.session_id, item.event)
                elif item.request_body is not None:
                    record = RequestRecord(
                        api=_API_OF_AGENT.get(item.agent, "passthrough"), source=f"otel:{item.agent}",
                        body=item.request_body, agent_session_id=item.session_id,
                    )  # fmt: skip
                    self.store.record_request(item.session_id, record)
                written += 1
        return written
