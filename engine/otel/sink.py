"""Writes mapped OpenTelemetry items through the store (the only I/O of the receiver's mapping)."""

from __future__ import annotations

import threading
from typing import Any

from engine.errors import NotFoundError
from engine.otel.mapping import OtelItem
from engine.store.payloads import RequestRecord

__all__ = ["OtelSink"]

_API_OF_AGENT = {"claude-code": "anthropic_messages", "codex": "openai_responses", "gemini": "gemini"}


def _main_model(item: OtelItem) -> str | None:
    """The session's model as this item tells it: a main call's (a side call such as Gemini CLI's model
    router uses a small model of its own), or a raw body's."""
    event = item.event
    if event is None:
        return item.model
    if event.kind != "request" or event.details.get("agent_role", "main") != "main":
        return None
    return event.model


class OtelSink:
    """Records items into ``store``: a session per agent session id (created on first sight), then its rows."""

    def __init__(self, store: Any) -> None:
        self.store = store
        self._known: set[str] = set()
        self._modelless: set[str] = set()  # created before a main call said the session's model
        self._lock = threading.Lock()  # the receiver's handlers may run concurrently

    def _ensure_session(self, item: OtelItem) -> None:
        model = _main_model(item)
        if item.session_id in self._known:
            if model and item.session_id in self._modelless:  # its first main call, after side calls
                self.store.update_session(item.session_id, model=model)
                self._modelless.discard(item.session_id)
            return
        try:
            self.store.get_session(item.session_id)
        except NotFoundError:
            event = item.event
            self.store.create_session(
                session_id=item.session_id, title=f"{item.agent} {item.session_id[:8]} (OpenTelemetry)",
                model=model, provider=event.provider if event else None, source=f"otel:{item.agent}",
                metadata={"agent": item.agent, "captured_by": "otel"},
            )  # fmt: skip
            if not model:
                self._modelless.add(item.session_id)
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
