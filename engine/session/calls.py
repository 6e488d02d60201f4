"""Model calls of a session: one step's request sent to the first usable target.

A retryable provider error moves on to the next target (the fallbacks); a context-length error
takes the emergency path (compaction, then one retry). Every call records a ``request`` event,
a failed one too; a reply is appended to the history with its event in one transaction and
reserved through the guard.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from engine.budget import ContextBudget
from engine.clients import ModelRequest, ModelResponse
from engine.deferral import ToolRegistry
from engine.errors import ContextLengthExceededError, ContextOverflowError, ProviderError, ValidationError
from engine.events import ContextEvent
from engine.prompt import build_anthropic_request
from engine.session import exact
from engine.session.assembly import RequestView
from engine.session.event_building import request_event
from engine.session.guarding import SessionGuard
from engine.session.history import SessionHistory
from engine.session.targets import Target
from engine.store.payloads import RequestRecord
from engine.store.records import utc_now
from engine.wire_requests import SendsWireRequests

logger = logging.getLogger("engine.session")


def model_request(view: RequestView, target: Target, history: SessionHistory) -> ModelRequest:
    """The request for ``target``: the view's prompt and tools, the history, the payload with its
    cache breakpoints (each history message rendered once, in ``history.rendered``)."""
    s = target.settings
    payload, breakpoints = build_anthropic_request(
        view.prompt,
        history.messages,
        list(view.tools),
        model=target.client.model,
        max_tokens=s.max_output_tokens,
        history=history.rendered,
    )
    return ModelRequest(
        model=target.client.model,
        system=view.prompt.text,
        messages=tuple(history.messages),
        tools=view.tools,
        max_output_tokens=s.max_output_tokens,
        payload=payload,
        estimated_prompt_tokens=view.components.total,
        turn_index=history.turn_index,
        cache_breakpoints=breakpoints,
    )


def failed_outcome(error: ProviderError) -> str:
    return "context_length_exceeded" if isinstance(error, ContextLengthExceededError) else "provider_error"


class ModelCaller:
    """Sends a session's requests; ``compact_for_retry`` runs the emergency compaction and returns
    the request view assembled after it."""

    def __init__(
        self,
        history: SessionHistory,
        guard: SessionGuard,
        registry: ToolRegistry,
        *,
        compact_for_retry: Callable[[RequestView], RequestView],
    ) -> None:
        self.history, self.guard, self.registry = history, guard, registry
        self.compact_for_retry = compact_for_retry
        self.last_budget: ContextBudget | None = None

    def call(self, view: RequestView, targets: Sequence[Target], step: int) -> ModelResponse:
        """The reply to ``view`` from the first target that answers (fallbacks on retryable errors)."""
        trigger = "user_input" if step == 0 else "tool_results"
        last_error: ProviderError | None = None
        for index, target in enumerate(targets):
            try:
                return self._call_target(view, target, step, trigger)
            except ContextLengthExceededError:
                raise
            except ProviderError as exc:
                last_error = exc
                if not exc.retryable or index == len(targets) - 1:
                    raise
                logger.warning(
                    "%s failed (%s); trying %s", target.client.model, exc, targets[index + 1].client.model
                )
        raise last_error or ValidationError("no target to send the request to", field="targets")

    def _event(self, view: RequestView, target: Target, request: ModelRequest, **fields: Any) -> ContextEvent:
        return request_event(
            view,
            target.settings,
            request,
            provider=target.provider,
            messages_sent=self.history.next_seq,
            deferred_tools=len(self.registry.deferred),
            summary_injected=bool(self.history.summary),
            tokenizer_id=self.history.tokenizer.id,
            **fields,
        )

    def _complete(
        self, view: RequestView, target: Target, request: ModelRequest, *, trigger: str, step: int
    ) -> ModelResponse:
        """Send ``request`` to ``target``; the answer (or the failure) is recorded with its event and,
        when the client names what it sends, the exact request."""
        client = target.client
        wire = client.wire_request(request) if isinstance(client, SendsWireRequests) else None
        started_utc, clock = utc_now(), time.perf_counter()
        try:
            response = client.complete(request)
        except ProviderError as exc:
            ms = (time.perf_counter() - clock) * 1000
            sent = exact.failed(wire, exc, started_utc=started_utc, latency_ms=ms) if wire else None
            event = self._event(view, target, request, outcome=failed_outcome(exc), reason=str(exc),
                                trigger=trigger, step=step)  # fmt: skip
            # Before any answer the turn's user message is not written: the event follows what is.
            self.history.record([event], exact=sent, message_seq=self.history.written_seq)
            raise
        ms = (time.perf_counter() - clock) * 1000
        sent = None
        if wire is not None:
            sent = exact.answered(wire, response.message, response.usage, stop_reason=response.stop_reason,
                                  model=response.model, started_utc=started_utc, latency_ms=ms)  # fmt: skip
        self._commit_reply(view, target, request, response, sent, trigger=trigger, step=step)
        return response

    def _call_target(self, view: RequestView, target: Target, step: int, trigger: str) -> ModelResponse:
        request = model_request(view, target, self.history)
        try:
            return self._complete(view, target, request, trigger=trigger, step=step)
        except ContextLengthExceededError as exc:
            return self._emergency_retry(view, target, step, exc)

    def _emergency_retry(
        self, view: RequestView, target: Target, step: int, error: ContextLengthExceededError
    ) -> ModelResponse:
        """The provider found the prompt too long: emergency compaction, then one retry."""
        logger.warning(
            "provider rejected the prompt as too long; emergency compaction and one retry: %s", error
        )
        retry_view = self.compact_for_retry(view)
        self.history.record(list(retry_view.events))
        request = model_request(retry_view, target, self.history)
        try:
            return self._complete(retry_view, target, request, trigger="retry", step=step)
        except ContextLengthExceededError as again:
            raise ContextOverflowError(
                f"{target.client.model} still rejects the prompt after emergency compaction: {again}",
                limit=retry_view.budget.limit.tokens,
                projected=retry_view.components.total,
            ) from again

    def _commit_reply(
        self,
        view: RequestView,
        target: Target,
        request: ModelRequest,
        response: ModelResponse,
        sent: RequestRecord | None,
        *,
        trigger: str,
        step: int,
    ) -> None:
        if response.message.role != "assistant":
            raise ValidationError(f"{target.client.model} returned a {response.message.role} message")
        event = self._event(
            view, target, request, trigger=trigger, outcome="ok", step=step, response=response
        )
        self.history.append([response.message], usage=response.usage, events=[event], exact=sent)
        count = self.history.tokenizer.count_message(response.message)
        self.guard.add_reply(count, message_seq=self.history.next_seq - 1)
        self.last_budget = ContextBudget.from_settings(target.settings, view.components)
