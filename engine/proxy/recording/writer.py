"""Writing one proxied exchange into the session database (the recorder's writer thread).

:class:`ExchangeWriter` parses an exchange and writes it in one transaction: new transcript
messages, a ``request`` event with per-component tokens beside the provider's usage, each
policy edit as its own event, and the exact request in ``model_requests`` (the agent's own
request beside it when a policy edited it). It raises on a store failure; the recorder retries.
"""

from __future__ import annotations

import hashlib
import math
import threading
import zlib
from collections.abc import Callable
from typing import Any

from engine.components import measure_request, reconcile_call
from engine.errors import ContextDeskError
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.proxy.policy.edits import call_limit
from engine.proxy.recording.exchange import Exchange
from engine.proxy.recording.record_parts import (
    call_details,
    call_outcome,
    exists,
    json_object,
    provider_usage,
    record_policy_events,
    record_provider_edits,
    resolve,
    settings_dict,
    title,
    tool_record,
)
from engine.proxy.recording.sessions import SessionResolver
from engine.proxy.wire import WireApi, wire_for
from engine.proxy.wire.shared import ParsedResponse, RequestView, decode_body, identity_hash
from engine.settings import Settings
from engine.store import RequestRecord
from engine.tokens import Tokenizer, get_tokenizer

#: Session that holds requests the proxy could not parse (not JSON, unknown paths).
UNPARSED_SESSION = "proxy-unparsed"
#: Longest the writer defers an exchange while requests wait for their first upstream byte.
DEFER_LIMIT_S = 0.5


class QuietTime:
    """When the writer may parse: parsing a ~200k-token body holds the GIL for milliseconds, so not
    while a request is being forwarded (the relay's time to first byte), unless requests never stop
    coming (:data:`DEFER_LIMIT_S`). The request side holds and releases it; the writer thread waits
    on it before each write and between its steps (an :class:`ExchangeWriter`'s ``pause``)."""

    def __init__(self, limit_s: float = DEFER_LIMIT_S) -> None:
        self.limit_s = limit_s
        self._forwarding = 0  # requests not yet answered by the upstream
        self._changed = threading.Condition()

    def hold(self) -> None:
        """A request is on its way to the upstream."""
        with self._changed:
            self._forwarding += 1

    def release(self) -> None:
        """The upstream answered (or failed)."""
        with self._changed:
            self._forwarding = max(0, self._forwarding - 1)
            if not self._forwarding:
                self._changed.notify_all()

    def wait(self) -> None:
        """Until no request is being forwarded, at most :attr:`limit_s`."""
        with self._changed:
            self._changed.wait_for(lambda: self._forwarding == 0, self.limit_s)


def closed_after_whole_answer(exchange: Exchange, parsed: ParsedResponse) -> bool:
    """True when the agent went away only after the provider's answer was complete (its final
    event relayed), which loses nothing, unlike a disconnect mid-answer."""
    return exchange.proxy_error == "client_disconnected" and parsed.complete and not parsed.error_type


def measured_call(
    view: RequestView, tokenizer: Tokenizer, usage: ProviderUsage | None, *, whole: bool = True
) -> tuple[ComponentTokens, ComponentTokens, str]:
    """A call's components as we measure what it sent, then reconciled to the provider's count.
    ``whole``: the proxy saw every byte the model got, so a gap is our count's error, spread over the
    components; a call continuing a stored response (``previous_response_id``) was not seen whole,
    so what the provider counted beyond our measure stays "Harness, unattributed"."""
    measured = measure_request(tokenizer, system=view.system, tools=view.tools, messages=view.messages)
    components, basis = reconcile_call(
        measured, usage.prompt_tokens if usage else None, exact_tokenizer=tokenizer.exact,
        max_scale_up=math.inf if whole else 1.0,
    )  # fmt: skip
    return measured, components, basis


class ExchangeWriter:
    """Writes exchanges into one store; ``resolver`` keeps which session each agent's calls go to."""

    def __init__(
        self,
        store: Any,
        resolver: SessionResolver,
        settings: Settings | Callable[[], Settings | None] | None = None,
        *,
        pause: Callable[[], None] = lambda: None,
    ) -> None:
        """``pause`` is called between the steps of a write (parse, count, store): the recorder's
        :meth:`QuietTime.wait`, so a write never holds up a request being forwarded for long."""
        self._store = store
        self.resolver = resolver
        self.settings = settings
        self._pause = pause

    def record_degraded(self, exchange: Exchange, error: Exception | None, attempts: int) -> None:
        """A ``degraded`` event: the exchange could not be recorded after ``attempts`` tries."""
        session_id = self.ensure_unparsed_session()
        self._store.record_event(
            session_id,
            ContextEvent(
                kind="degraded",
                trigger="proxy_record",
                outcome="failed",
                reason=f"could not record {exchange.method} {exchange.path}: {type(error).__name__}: {error}",
                details={"path": exchange.path, "status": exchange.status, "attempts": attempts},
            ),
        )

    def ensure_unparsed_session(self) -> str:
        try:
            self._store.get_session(UNPARSED_SESSION)
        except ContextDeskError:
            self._store.create_session(
                session_id=UNPARSED_SESSION,
                title="Requests the proxy passed through without parsing",
                source="proxy",
            )
        return UNPARSED_SESSION

    def write(self, exchange: Exchange) -> None:
        """Parse and store one exchange (raises on a store failure; the caller retries)."""
        kept = exchange.request_chunks
        if kept is not None:
            exchange.request_body, exchange.request_chunks = kept.data(), None
            if not kept.whole:  # past the record limit: its prefix, size and hash
                exchange.request_size, exchange.request_sha256 = kept.size, kept.digest()
        # a body kept only in part is not read: recorded as bytes, with its whole size and hash
        agent_body = json_object(exchange.request_body) if exchange.request_sha256 is None else None
        sent_bytes = exchange.sent_body if exchange.sent_body is not None else exchange.request_body
        body = json_object(sent_bytes) if exchange.sent_body is not None else agent_body
        api = exchange.api
        wire = wire_for(api)
        raw = b"".join(exchange.response_chunks)
        content_type = exchange.response_headers.get("content-type")
        try:
            data = decode_body(raw, exchange.response_headers.get("content-encoding"))
        except (zlib.error, ValueError):  # recorded without a parsed answer, never fatal
            data = b""
        self._pause()
        parsed = wire.parse_response(exchange.status, content_type, data) if wire else ParsedResponse()
        if closed_after_whole_answer(exchange, parsed):
            # the agent hung up once it had the whole answer (Codex closes on response.completed,
            # sometimes before the upstream's last bytes): nothing was lost, the answer is recorded
            exchange.proxy_error = exchange.proxy_error_detail = None
            exchange.closed_after_answer = True
        if exchange.proxy_error:
            parsed.error_type = parsed.error_type or exchange.proxy_error
            parsed.error_message = parsed.error_message or exchange.proxy_error_detail
        record = RequestRecord(
            api=api,
            method=exchange.method,
            path=exchange.path,
            body=body,
            raw_body=None if body is not None else sent_bytes,
            request_bytes=exchange.request_size if exchange.request_size is not None else len(sent_bytes),
            # a body refused unread has a size but no hash; one kept in part, the whole body's hash
            request_sha256=exchange.request_sha256
            or (hashlib.sha256(sent_bytes).hexdigest() if exchange.request_size is None else None),
            headers=exchange.request_headers,
            status_code=exchange.status,
            error_type=parsed.error_type,
            error_message=parsed.error_message,
            response=parsed.as_record() if (parsed.content or parsed.response_id) else None,
            stop_reason=parsed.stop_reason,
            usage=parsed.usage,
            latency_ms=exchange.latency_ms,
            ttfb_ms=exchange.ttfb_ms,
            started_utc=exchange.started_utc,
            **(wire.usage_fields(parsed.usage) if wire else {}),
        )
        if body is None or wire is None:
            with self._store.transaction():
                self._store.record_request(self.ensure_unparsed_session(), record)
            return
        if not wire.model_call:  # count_tokens: kept beside the agent's session
            agent_id = wire.session_id(exchange.request_headers, body)
            session_id = self.resolver.main_session(agent_id) or self.ensure_unparsed_session()
            with self._store.transaction():
                self._store.record_request(
                    session_id, record.model_copy(update={"agent_session_id": agent_id})
                )
            return
        if exchange.parent is not None:
            self._write_follow_up(exchange, wire, body, parsed, record)
            return
        self._write_model_call(exchange, wire, agent_body or body, body, parsed, record)

    def _write_follow_up(
        self,
        exchange: Exchange,
        wire: WireApi,
        body: dict[str, Any],
        parsed: ParsedResponse,
        record: RequestRecord,
    ) -> None:
        """A call the proxy made itself (answering read_result): a request row and event, no transcript."""
        parent = exchange.parent
        session_id = (
            parent.assignment.session_id if parent and parent.assignment else self.ensure_unparsed_session()
        )
        view = wire.request_view(body, exchange.request_headers)
        tokenizer = get_tokenizer(wire.tokenizer)
        usage = provider_usage(parsed, wire.usage_fields(parsed.usage))
        measured, components, basis = measured_call(view, tokenizer, usage)
        outcome, failure = call_outcome(exchange, parsed)
        with self._store.transaction():
            event_id = self._store.record_event(
                session_id,
                ContextEvent(
                    kind="request", trigger="proxy_read_result", outcome=outcome,
                    provider=wire.provider, model=view.model, projected_tokens=measured.total,
                    components=components, components_basis=basis, usage=usage,
                    details={"api": wire.name, "status": exchange.status, "served_by_proxy": "read_result",
                             "stop_reason": parsed.stop_reason, "request_messages": len(view.raw_messages),
                             **({"failure": failure} if failure is not None else {})},
                ),
            )  # fmt: skip
            self._store.record_request(
                session_id, record.model_copy(update={"source": "proxy:read_result", "event_id": event_id})
            )

    def _write_model_call(
        self,
        exchange: Exchange,
        wire: WireApi,
        agent_body: dict[str, Any],
        body: dict[str, Any],
        parsed: ParsedResponse,
        record: RequestRecord,
    ) -> None:
        """``agent_body``: what the agent sent (sessions, transcript); ``body``: what the model got."""
        view = wire.request_view(agent_body, exchange.request_headers)
        sent_view = view if body is agent_body else wire.request_view(body, exchange.request_headers)
        self._pause()
        api, provider = wire.name, wire.provider
        model = view.model or parsed.model or "unknown"
        settings = self.settings() if callable(self.settings) else self.settings
        resolved = resolve(model, provider, settings)
        tokenizer = get_tokenizer(resolved.tokenizer if resolved else wire.tokenizer)
        system_value = body.get("system", body.get("instructions"))
        fingerprint = identity_hash([system_value, body.get("tools")])
        hashes = [identity_hash(m) for m in view.raw_messages]
        if exchange.assignment is None:  # resolved once: a retried write must not re-resolve
            exchange.assignment = self.resolver.resolve(
                agent_id=view.agent_session_id, fingerprint=fingerprint, hashes=hashes
            )
        assignment = exchange.assignment
        self._pause()
        fields = wire.usage_fields(parsed.usage)
        usage = provider_usage(parsed, fields)
        measured, components, basis = measured_call(
            sent_view, tokenizer, usage, whole=not body.get("previous_response_id")
        )
        outcome, failure = call_outcome(exchange, parsed)
        ok = outcome == "ok"
        limit = call_limit(resolved)
        policy = exchange.policy
        refused = policy is not None and policy.refusal is not None
        new_messages = wire.to_messages(view.raw_messages[assignment.new_from :])
        if (
            assignment.continued
            and new_messages
            and new_messages[0].role == "assistant"
            and assignment.new_from
        ):
            new_messages = new_messages[1:]  # our own record of the previous answer is already there
        answer = wire.answer_message(parsed) if ok else None
        if ok and exchange.agent_answer is not None:  # read_result rounds served: what the agent got
            answer = wire.answer_message(ParsedResponse(content=list(exchange.agent_answer["content"])))
        details = call_details(
            exchange, api, view, body, parsed, fields, new_messages=len(new_messages), tokenizer_id=tokenizer.id,
            components_total=measured.total, usage=usage, rewritten=assignment.rewritten,
        )  # fmt: skip
        if failure is not None:
            details["failure"] = failure
        store = self._store
        self._pause()
        with store.transaction():
            if not exists(store, assignment.session_id):
                store.create_session(
                    session_id=assignment.session_id,
                    title=title(view.messages),
                    model=model,
                    provider=provider,
                    tokenizer=tokenizer.id,
                    tokens_exact=tokenizer.exact,
                    source="proxy",
                    parent_session_id=assignment.parent_session_id,
                    settings=settings_dict(resolved),
                    metadata={
                        "agent_session_id": view.agent_session_id,
                        "api": api,
                        "user_agent": exchange.request_headers.get("user-agent"),
                        "sub_agent": assignment.parent_session_id is not None,
                    },
                )
                store.upsert_tools(assignment.session_id, [tool_record(t, tokenizer) for t in view.tools])
            stored = store.append_messages(assignment.session_id, new_messages, tokenizer=tokenizer)
            if answer is not None:
                stored += store.append_messages(
                    assignment.session_id, [answer], tokenizer=tokenizer, usages=[usage]
                )
            last_seq = stored[-1].seq if stored else None
            event = ContextEvent(
                kind="request",
                trigger="proxy",
                outcome=outcome,
                reason=parsed.error_message if not ok else None,
                provider=provider,
                model=model,
                turn_index=stored[-1].turn_index if stored else None,
                **(limit.columns() if limit is not None else {}),
                projected_tokens=measured.total,
                remaining_tokens=limit.tokens - measured.total if limit is not None else None,
                components=components,
                components_basis=basis,
                usage=usage,
                message_seq=last_seq,
                details=details,
            )
            policy_events = record_policy_events(
                store, exchange, assignment.session_id, last_seq, provider, model, event.turn_index
            )
            agent_id = view.agent_session_id
            if refused:  # the model never saw it: a guard event and the agent's request, no request event
                store.record_request(
                    assignment.session_id,
                    record.model_copy(
                        update={
                            "source": "proxy:refused",
                            "event_id": policy_events[-1],
                            "agent_session_id": agent_id,
                        }
                    ),
                )
                return
            event_id = store.record_event(assignment.session_id, event)
            record_provider_edits(
                store, assignment.session_id, wire, parsed, usage, path=exchange.path, measured_tokens=measured.total,
                provider=provider, model=model, turn_index=event.turn_index, message_seq=last_seq,
            )  # fmt: skip
            store.record_request(
                assignment.session_id,
                record.model_copy(update={"event_id": event_id, "agent_session_id": agent_id}),
            )
            if exchange.sent_body is not None:  # the agent's own request, as it sent it, beside what was sent
                store.record_request(
                    assignment.session_id,
                    record.model_copy(
                        update={
                            "source": "proxy:original", "body": agent_body, "event_id": policy_events[0],
                            "agent_session_id": agent_id, "request_bytes": len(exchange.request_body),
                            "request_sha256": hashlib.sha256(exchange.request_body).hexdigest(),
                        }
                    ),
                )  # fmt: skip
