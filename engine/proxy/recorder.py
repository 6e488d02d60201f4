"""Recording proxied calls off the request path: a queue and one writer thread.

The relay hands each finished exchange (request bytes, response chunks, timing) to
:meth:`Recorder.submit`, which never blocks and never raises. The writer thread parses it,
finds its session, and writes in one transaction: new transcript messages, a ``request``
event with per-component tokens beside the provider's usage, and the exact request in
``model_requests``. A failed write is retried; when it still fails, a ``degraded`` event says
so (the agent's request has long been answered). No API key or Authorization header is kept.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
import zlib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.budget import measure_components
from engine.errors import ContextDeskError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.proxy import apis
from engine.proxy.sessions import Assignment, SessionResolver, identity_hash
from engine.settings import Settings, resolve_model_settings
from engine.store import RequestRecord, ToolRecord
from engine.store.factory import is_database_url, open_store
from engine.store.payloads import is_secret_header, safe_headers
from engine.tokens import get_tokenizer, tool_parts

logger = logging.getLogger(__name__)

#: Session that holds requests the proxy could not parse (not JSON, unknown paths).
UNPARSED_SESSION = "proxy-unparsed"
WRITE_ATTEMPTS = 4
RETRY_DELAYS_S = (0.05, 0.25, 1.0)
#: Exchanges waiting for the writer before new ones are dropped (and counted as degraded).
QUEUE_LIMIT = 10_000
#: Longest the writer defers an exchange while requests wait for their first upstream byte.
DEFER_LIMIT_S = 0.5


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
    assignment: Assignment | None = None
    sent_body: bytes | None = None  # the body forwarded, when a policy edited it
    policy: Any = None  # engine.proxy.policies.PolicyOutcome of the request, when policies ran
    agent_answer: dict[str, Any] | None = (
        None  # the answer the agent got, when it differs from the upstream's
    )
    parent: Exchange | None = None  # set on the proxy's own follow-up calls (read_result rounds)


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


class Recorder:
    """Writes exchanges to the session database from one background thread."""

    def __init__(self, db_path: str | Path, *, settings: Settings | None = None) -> None:
        """``db_path``: a SQLite file, or a ``postgresql://`` URL (any SessionStoreBackend)."""
        # a file, or a team's postgresql:// URL (engine.store.factory.open_store picks the backend)
        self.db_path: str | Path = str(db_path) if is_database_url(str(db_path)) else Path(db_path)
        self.settings = settings
        self.resolver = SessionResolver()
        self.recorded = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[Exchange | None] = queue.Queue()
        self._in_flight = 0
        self._in_flight_changed = threading.Condition()
        self._forwarding = 0  # requests not yet answered by the upstream: the writer waits for them
        self._forwarding_changed = threading.Condition()
        self._store = open_store(self.db_path)
        self._thread = threading.Thread(target=self._run, name="ctxdesk-proxy-recorder", daemon=True)
        self._thread.start()

    # -- the request side ------------------------------------------------------------------
    def begin(self) -> None:
        """A request arrived: :meth:`flush` waits for its exchange to be submitted too."""
        with self._in_flight_changed:
            self._in_flight += 1

    def hold(self) -> None:
        """A request is on its way to the upstream: the writer keeps off the GIL until :meth:`release`."""
        with self._forwarding_changed:
            self._forwarding += 1

    def release(self) -> None:
        """The upstream answered (or failed): the writer may parse and record again."""
        with self._forwarding_changed:
            self._forwarding = max(0, self._forwarding - 1)
            if not self._forwarding:
                self._forwarding_changed.notify_all()

    def submit(self, exchange: Exchange) -> None:
        """Queue an exchange for writing; never blocks, never raises."""
        with self._in_flight_changed:
            self._in_flight = max(0, self._in_flight - 1)
            self._in_flight_changed.notify_all()
        if self._queue.qsize() >= QUEUE_LIMIT:
            self.dropped += 1
            return
        self._queue.put_nowait(exchange)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every request begun so far is answered and written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._in_flight_changed:
            if not self._in_flight_changed.wait_for(lambda: self._in_flight == 0, timeout):
                return False
        done = threading.Event()
        self._queue.put_nowait(_Marker(done))  # type: ignore[arg-type]
        return done.wait(max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put_nowait(None)
        self._thread.join(timeout)
        self._store.close()

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, _Marker):
                item.done.set()
                continue
            # parsing a ~200k-token body holds the GIL for milliseconds: not while a request is
            # being forwarded (the relay's time to first byte), unless requests never stop coming
            with self._forwarding_changed:
                self._forwarding_changed.wait_for(lambda: self._forwarding == 0, DEFER_LIMIT_S)
            self._write_with_retries(item)

    def _write_with_retries(self, exchange: Exchange) -> None:
        error: Exception | None = None
        for attempt in range(WRITE_ATTEMPTS):
            try:
                self.write(exchange)
            except (ContextDeskError, OSError, ValueError, KeyError, TypeError) as exc:
                error = exc
                if attempt < len(RETRY_DELAYS_S):
                    time.sleep(RETRY_DELAYS_S[attempt])
                continue
            self.recorded += 1
            return
        self.failed += 1
        logger.warning("ctxdesk proxy: could not record %s %s: %s", exchange.method, exchange.path, error)
        self._degraded(exchange, error)

    def _degraded(self, exchange: Exchange, error: Exception | None) -> None:
        try:
            session_id = self._ensure_unparsed_session()
            self._store.record_event(
                session_id,
                ContextEvent(
                    kind="degraded",
                    trigger="proxy_record",
                    outcome="failed",
                    reason=f"could not record {exchange.method} {exchange.path}: {type(error).__name__}: {error}",
                    details={"path": exchange.path, "status": exchange.status, "attempts": WRITE_ATTEMPTS},
                ),
            )
        except (ContextDeskError, OSError) as exc:
            logger.warning("ctxdesk proxy: could not record the degraded event either: %s", exc)

    def _ensure_unparsed_session(self) -> str:
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
        agent_body = _json_object(exchange.request_body)
        sent_bytes = exchange.sent_body if exchange.sent_body is not None else exchange.request_body
        body = _json_object(sent_bytes) if exchange.sent_body is not None else agent_body
        api = exchange.api
        raw = b"".join(exchange.response_chunks)
        content_type = exchange.response_headers.get("content-type")
        try:
            data = apis.decode_body(raw, exchange.response_headers.get("content-encoding"))
        except (zlib.error, ValueError):  # recorded without a parsed answer, never fatal
            data = b""
        parsed = apis.parse_response(api, exchange.status, content_type, data)
        if exchange.proxy_error:
            parsed.error_type = parsed.error_type or exchange.proxy_error
            parsed.error_message = parsed.error_message or exchange.proxy_error_detail
        record = RequestRecord(
            api=api,
            method=exchange.method,
            path=exchange.path,
            body=body,
            raw_body=None if body is not None else sent_bytes,
            request_bytes=len(sent_bytes),
            request_sha256=hashlib.sha256(sent_bytes).hexdigest(),
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
            **parsed.usage_fields(api),
        )
        if body is None or api not in apis.PROVIDERS:
            with self._store.transaction():
                self._store.record_request(self._ensure_unparsed_session(), record)
            return
        if api == apis.ANTHROPIC_COUNT_TOKENS:
            agent_id = apis.agent_session_id(api, exchange.request_headers, body)
            session_id = self.resolver.main_session(agent_id) or self._ensure_unparsed_session()
            with self._store.transaction():
                self._store.record_request(
                    session_id, record.model_copy(update={"agent_session_id": agent_id})
                )
            return
        if exchange.parent is not None:
            self._write_follow_up(exchange, api, body, parsed, record)
            return
        self._write_model_call(exchange, api, agent_body or body, body, parsed, record)

    def _write_follow_up(
        self,
        exchange: Exchange,
        api: str,
        body: dict[str, Any],
        parsed: apis.ParsedResponse,
        record: RequestRecord,
    ) -> None:
        """A call the proxy made itself (answering read_result): a request row and event, no transcript."""
        parent = exchange.parent
        session_id = (
            parent.assignment.session_id if parent and parent.assignment else self._ensure_unparsed_session()
        )
        view = apis.request_view(api, body, exchange.request_headers)
        tokenizer = get_tokenizer("anthropic" if apis.PROVIDERS.get(api) == "anthropic" else "o200k_base")
        components = measure_components(
            tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
        )
        fields = parsed.usage_fields(api)
        usage = ProviderUsage(
            input_tokens=fields["input_tokens"] or 0, output_tokens=fields["output_tokens"] or 0,
            cache_read_input_tokens=fields["cache_read_input_tokens"] or 0,
            cache_creation_input_tokens=fields["cache_creation_input_tokens"] or 0,
        ) if parsed.usage else None  # fmt: skip
        with self._store.transaction():
            event_id = self._store.record_event(
                session_id,
                ContextEvent(
                    kind="request", trigger="proxy_read_result", outcome="ok" if exchange.status == 200 else "provider_error",
                    provider=apis.PROVIDERS.get(api), model=view.model, projected_tokens=components.total,
                    components=components, usage=usage,
                    details={"api": api, "status": exchange.status, "served_by_proxy": "read_result",
                             "stop_reason": parsed.stop_reason, "request_messages": len(view.raw_messages)},
                ),
            )  # fmt: skip
            self._store.record_request(
                session_id, record.model_copy(update={"source": "proxy:read_result", "event_id": event_id})
            )

    def _write_model_call(
        self,
        exchange: Exchange,
        api: str,
        agent_body: dict[str, Any],
        body: dict[str, Any],
        parsed: apis.ParsedResponse,
        record: RequestRecord,
    ) -> None:
        """``agent_body``: what the agent sent (sessions, transcript); ``body``: what the model got."""
        view = apis.request_view(api, agent_body, exchange.request_headers)
        sent_view = view if body is agent_body else apis.request_view(api, body, exchange.request_headers)
        provider = apis.PROVIDERS[api]
        model = view.model or parsed.model or "unknown"
        resolved = _resolve(model, provider, self.settings)
        tokenizer = get_tokenizer(
            resolved.tokenizer if resolved else ("anthropic" if provider == "anthropic" else "o200k_base")
        )
        system_value = body.get("system", body.get("instructions"))
        fingerprint = identity_hash([system_value, body.get("tools")])
        hashes = [identity_hash(m) for m in view.raw_messages]
        if exchange.assignment is None:  # resolved once: a retried write must not re-resolve
            exchange.assignment = self.resolver.resolve(
                agent_id=view.agent_session_id, fingerprint=fingerprint, hashes=hashes
            )
        assignment = exchange.assignment
        components = measure_components(
            tokenizer=tokenizer, system=sent_view.system, tools=sent_view.tools, messages=sent_view.messages
        )
        fields = parsed.usage_fields(api)
        usage = (
            ProviderUsage(
                input_tokens=fields["input_tokens"] or 0,
                output_tokens=fields["output_tokens"] or 0,
                cache_read_input_tokens=fields["cache_read_input_tokens"] or 0,
                cache_creation_input_tokens=fields["cache_creation_input_tokens"] or 0,
            )
            if parsed.usage
            else None
        )
        ok = exchange.status is not None and 200 <= exchange.status < 300 and not parsed.error_type
        outcome = "ok" if ok else "context_length_exceeded" if parsed.prompt_too_long else "provider_error"
        if exchange.proxy_error:
            outcome = exchange.proxy_error
        policy = exchange.policy
        refused = policy is not None and policy.refusal is not None
        new_messages = apis.convert_messages(api, view.raw_messages[assignment.new_from :])
        if (
            assignment.continued
            and new_messages
            and new_messages[0].role == "assistant"
            and assignment.new_from
        ):
            new_messages = new_messages[1:]  # our own record of the previous answer is already there
        answer = apis.response_message(api, parsed) if ok else None
        if ok and exchange.agent_answer is not None:  # read_result rounds served: what the agent got
            answer = apis.response_message(
                api, apis.ParsedResponse(content=list(exchange.agent_answer["content"]))
            )
        details: dict[str, Any] = {
            "api": api,
            "path": exchange.path,
            "status": exchange.status,
            "stream": view.stream,
            "agent_session_id": view.agent_session_id,
            "request_messages": len(view.raw_messages),
            "new_messages": len(new_messages),
            "history_rewritten": assignment.rewritten,
            "stop_reason": parsed.stop_reason,
            "ttfb_ms": exchange.ttfb_ms,
            "latency_ms": exchange.latency_ms,
            "call_utc": exchange.started_utc,
            "tokenizer": tokenizer.id,
            "tools_sent": [tool_parts(t)[0] for t in view.tools],
            "system_sha256": hashlib.sha256(json.dumps(system_value, ensure_ascii=False).encode()).hexdigest()
            if system_value is not None
            else None,
            "tools_sha256": hashlib.sha256(
                json.dumps(body.get("tools"), ensure_ascii=False).encode()
            ).hexdigest()
            if body.get("tools") is not None
            else None,
        }
        for key, column in (
            ("cache_write_5m_tokens", "cache_creation_5m_tokens"),
            ("cache_write_1h_tokens", "cache_creation_1h_tokens"),
            ("reasoning_tokens", "reasoning_tokens"),
        ):
            if fields[column] is not None:
                details[key] = fields[column]
        if parsed.error_type:
            details["error_type"] = parsed.error_type
        if usage is not None and usage.prompt_tokens and components.total:
            details["provider_over_estimate"] = round(usage.prompt_tokens / components.total, 4)
        store = self._store
        with store.transaction():
            if not _exists(store, assignment.session_id):
                store.create_session(
                    session_id=assignment.session_id,
                    title=_title(view.messages),
                    model=model,
                    provider=provider,
                    tokenizer=tokenizer.id,
                    tokens_exact=tokenizer.exact,
                    source="proxy",
                    parent_session_id=assignment.parent_session_id,
                    settings=_settings_dict(resolved),
                    metadata={
                        "agent_session_id": view.agent_session_id,
                        "api": api,
                        "user_agent": exchange.request_headers.get("user-agent"),
                        "sub_agent": assignment.parent_session_id is not None,
                    },
                )
                store.upsert_tools(assignment.session_id, [_tool_record(t, tokenizer) for t in view.tools])
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
                context_window=resolved.context_window if resolved else None,
                max_output_tokens=_max_tokens(body) or (resolved.max_output_tokens if resolved else None),
                buffer_tokens=resolved.buffer_tokens if resolved else None,
                limit_tokens=resolved.effective_window if resolved else None,
                projected_tokens=components.total,
                remaining_tokens=(resolved.effective_window - components.total) if resolved else None,
                components=components,
                usage=usage,
                message_seq=last_seq,
                details=details,
            )
            policy_events = self._policy_events(exchange, assignment.session_id, last_seq, provider, model)
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

    def _policy_events(
        self, exchange: Exchange, session_id: str, message_seq: int | None, provider: str, model: str
    ) -> list[int]:
        """Record each policy edit (and keep what it cleared as a blob); returns the event ids."""
        policy = exchange.policy
        if policy is None or not (policy.edits or policy.skipped):
            return []
        store = self._store
        for ref, content, tool_name in policy.blobs:
            try:
                store.get_blob(ref, with_content=False)
            except ContextDeskError:
                store.put_blob(session_id, content.encode("utf-8"), tool_name=tool_name, ref_id=ref)
        ids = []
        for edit in policy.edits:
            guard = edit.policy == "guard"
            trigger = "manual" if edit.policy == "live_compaction" else "proxy_policy"
            ids.append(
                store.record_event(
                    session_id,
                    ContextEvent(
                        kind="guard" if guard else "compaction",
                        trigger=trigger,
                        outcome="rejected" if guard else "compacted",
                        reason=edit.reason,
                        provider=provider,
                        model=model,
                        projected_tokens=edit.after_tokens,
                        message_seq=message_seq,
                        details={
                            "policy": edit.policy, "before_tokens": edit.before_tokens,
                            "after_tokens": edit.after_tokens, "changes": list(edit.changes),
                            "strategies_run": [edit.policy], "path": exchange.path,
                        },
                    ),
                )
            )  # fmt: skip
        if policy.skipped:
            ids.append(
                store.record_event(
                    session_id,
                    ContextEvent(
                        kind="note", trigger="proxy_policy", outcome="note", provider=provider, model=model,
                        reason=f"policies configured but not applied by this proxy yet: {', '.join(policy.skipped)}",
                    ),
                )
            )  # fmt: skip
        return ids


class _Marker:
    def __init__(self, done: threading.Event) -> None:
        self.done = done


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data) if data else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _exists(store: Any, session_id: str) -> bool:
    try:
        store.get_session(session_id)
    except ContextDeskError:
        return False
    return True


def _resolve(model: str, provider: str, settings: Settings | None) -> Any:
    try:
        return resolve_model_settings(model, provider, settings)
    except ContextDeskError:
        return None


def _settings_dict(resolved: Any) -> dict[str, Any] | None:
    if resolved is None:
        return None
    return resolved.model_dump(mode="json", exclude={"model_info"})


def _max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_tokens", "max_output_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            return int(body[key])
    return None


def _title(messages: list[Message]) -> str:
    """The first user words that are not an agent's injected reminder."""
    for message in messages:
        if message.role != "user":
            continue
        texts = (
            [message.content]
            if isinstance(message.content, str)
            else [getattr(b, "text", "") for b in message.content]
        )
        for text in texts:
            text = text.strip()
            if text and not text.startswith("<"):
                return text.splitlines()[0][:100]
    return "proxied session"


def _tool_record(tool: dict[str, Any], tokenizer: Any) -> ToolRecord:
    name = tool_parts(tool)[0] or str(tool.get("type", "tool"))
    category, server = "builtin", None
    if name.startswith("mcp__"):
        category, server = "mcp", name.split("__")[1] if name.count("__") >= 2 else None
    elif name == "Skill":
        category = "skill"
    return ToolRecord(
        name=name, category=category, server=server, tokens=tokenizer.count_tool(tool), definition=tool
    )
