"""Exact model requests, content-addressed (tables of migration m002_request_payloads).

A request body is split into its system prompt, tool list and messages, each stored once in
``payload_parts`` by the sha256 of its compact JSON; ``model_requests`` keeps the hashes, the
other parameters, the response, the provider's usage and timing. :func:`rebuild_body` puts the
body back together (equal, as JSON, to what was sent, apart from secrets: every part is redacted
before it is hashed). The SQL lives here, called by the store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import StoreError
from engine.redact import redact_bytes, redact_row, redact_secrets

#: Body keys that hold the system prompt, the message list and the tools, by API.
SYSTEM_KEYS = ("system", "instructions", "systemInstruction")
MESSAGES_KEYS = ("messages", "input", "contents")
TOOLS_KEY = "tools"
MAX_TOKENS_KEYS = ("max_tokens", "max_output_tokens", "max_completion_tokens")
THINKING_KEYS = ("thinking", "reasoning")

#: Header names (lowercase) never stored; plus any name containing one of SECRET_HEADER_WORDS.
SECRET_HEADER_WORDS = ("key", "auth", "token", "secret", "cookie", "session-token", "signature")


class RequestRecord(BaseModel):
    """One model call to store: the parsed body (or raw bytes), the answer, usage and timing."""

    model_config = ConfigDict(frozen=True)

    api: str = Field(description="anthropic_messages, openai_chat, openai_responses, passthrough, ...")
    source: str = Field("proxy", description="proxy, or import:<format>.")
    method: str | None = "POST"
    path: str | None = None
    body: dict[str, Any] | None = Field(None, description="The JSON body as sent (None when not parsed).")
    raw_body: bytes | None = Field(None, description="The body bytes when it was not JSON of a known API.")
    request_bytes: int | None = None
    request_sha256: str | None = None
    agent_session_id: str | None = None
    headers: dict[str, str] | None = Field(None, description="Request headers; secrets are dropped on write.")
    status_code: int | None = None
    error_type: str | None = None
    error_message: str | None = None
    response: dict[str, Any] | None = Field(None, description="Answer: content / output items, id, model.")
    stop_reason: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation_5m_tokens: int | None = None
    cache_creation_1h_tokens: int | None = None
    reasoning_tokens: int | None = None
    usage: dict[str, Any] | None = Field(None, description="The provider's usage object as received.")
    latency_ms: float | None = None
    ttfb_ms: float | None = None
    started_utc: str | None = None
    event_id: int | None = None


class StoredRequest(RequestRecord):
    """A row of ``model_requests``; ``body`` is rebuilt from its parts when loaded with bodies."""

    id: int
    session_id: str
    seq: int
    parsed: bool
    model: str | None = None
    stream: bool | None = None
    message_count: int | None = None
    max_tokens: int | None = None
    thinking: Any = None
    context_management: Any = None
    cache_control: list[dict[str, Any]] = []
    system_hash: str | None = None
    tools_hash: str | None = None
    message_hashes: list[str] = []


def compact_json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def part_hash(content_json: str) -> str:
    return hashlib.sha256(content_json.encode("utf-8")).hexdigest()


def is_secret_header(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_HEADER_WORDS)


def safe_headers(headers: Mapping[str, str] | None) -> dict[str, str] | None:
    if headers is None:
        return None
    return {k: v for k, v in headers.items() if not is_secret_header(k)}


def cache_control_positions(
    body: Mapping[str, Any], *, known: dict[Any, tuple[Any, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every cache_control marker in a body, as {"path", "ttl", "type"} in document order.
    ``known``: the markers found in a value before, by its identity (kept with it): an import's
    requests send their history and tool definitions again, the same objects, walked once."""
    found: list[dict[str, Any]] = []

    def walk(value: Any, steps: tuple[Any, ...], out: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        if isinstance(value, dict):
            marker = value.get("cache_control")
            if isinstance(marker, dict):
                out.append((steps, {"type": marker.get("type"), "ttl": marker.get("ttl", "5m")}))
            for key, item in value.items():
                if key != "cache_control" and isinstance(item, dict | list):
                    walk(item, (*steps, key), out)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*steps, [i]), out)

    def add(path: str, inside: list[tuple[tuple[Any, ...], dict[str, Any]]]) -> None:
        for steps, marker in inside:
            where = path
            for step in steps:  # a key after a dot (none first), an index in brackets
                where = (
                    f"{where}[{step[0]}]" if isinstance(step, list) else f"{where}.{step}" if where else step
                )
            found.append({"path": where or "$", **marker})

    def shared(value: Any, path: str) -> None:
        if known is None:
            inside: list[tuple[tuple[Any, ...], dict[str, Any]]] = []
            walk(value, (), inside)
        else:
            hit = known.get(("markers", id(value)))
            if hit is None or hit[0] is not value:
                hit = known[("markers", id(value))] = (value, [])
                walk(value, (), hit[1])
            inside = hit[1]
        add(path, inside)

    marker = body.get("cache_control")
    if isinstance(marker, dict):
        found.append({"path": "$", "type": marker.get("type"), "ttl": marker.get("ttl", "5m")})
    for key, item in body.items():
        if key == "cache_control" or not isinstance(item, dict | list):
            continue
        if isinstance(item, list):
            for i, element in enumerate(item):
                if isinstance(element, dict | list):
                    shared(element, f"{key}[{i}]")
        else:
            shared(item, key)
    return found


def split_body(body: Mapping[str, Any]) -> dict[str, Any]:
    """Split a request body into system, tools, messages and the other params (pure)."""
    system_key = next((k for k in SYSTEM_KEYS if k in body), None)
    messages_key = next((k for k in MESSAGES_KEYS if isinstance(body.get(k), list)), None)
    tools = body.get(TOOLS_KEY) if isinstance(body.get(TOOLS_KEY), list) else None
    taken = {system_key, messages_key, TOOLS_KEY if tools is not None else None}
    return {
        "system_key": system_key,
        "system": body[system_key] if system_key else None,
        "tools": tools,
        "messages_key": messages_key,
        "messages": list(body[messages_key]) if messages_key else [],
        "params": {k: v for k, v in body.items() if k not in taken},
        "keys": list(body),
    }


def rebuild_body(
    keys: Sequence[str],
    params: Mapping[str, Any],
    *,
    system_key: str | None,
    system: Any,
    tools: list[Any] | None,
    messages_key: str | None,
    messages: list[Any],
) -> dict[str, Any]:
    """The body from its parts, keys in the order sent (the inverse of :func:`split_body`)."""
    body: dict[str, Any] = {}
    for key in keys:
        if key == system_key:
            body[key] = system
        elif key == messages_key:
            body[key] = messages
        elif key == TOOLS_KEY and tools is not None:
            body[key] = tools
        elif key in params:
            body[key] = params[key]
    return body


def _first(body: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((body[k] for k in keys if k in body), None)


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False, default=str)


#: Digests of part texts known to hold no secret: every call re-sends its history's parts, so a
#: part is redacted once (not once per call, quadratic in a session). Bounded; cleared when full.
_CLEAN_PARTS: set[str] = set()
_CLEAN_PARTS_MAX = 200_000


def _put_part(conn: Any, p: str, kind: str, value: Any, now: str) -> str:
    """Store one part, secrets redacted before it is hashed (the hash names what is stored)."""
    text = compact_json(value)
    digest = part_hash(text)
    if digest not in _CLEAN_PARTS:
        redacted = redact_secrets(text)
        if redacted is text:
            if len(_CLEAN_PARTS) >= _CLEAN_PARTS_MAX:
                _CLEAN_PARTS.clear()
            _CLEAN_PARTS.add(digest)
        else:
            text, digest = redacted, part_hash(redacted)
    conn.execute(
        "INSERT INTO payload_parts (hash, kind, size_bytes, content_json, created_utc)"
        f" VALUES ({p}, {p}, {p}, {p}, {p}) ON CONFLICT DO NOTHING",
        (digest, kind, len(text.encode("utf-8")), text, now),
    )
    return digest


def _stored_part(
    conn: Any, p: str, kind: str, value: Any, now: str, stored: dict[Any, tuple[Any, Any]] | None
) -> str:
    """:func:`_put_part`, once per value this transaction stores (``stored``; None: every time)."""
    if stored is None:
        return _put_part(conn, p, kind, value, now)
    known = stored.get(("part", id(value)))
    if known is None or known[0] is not value:
        known = stored[("part", id(value))] = (value, _put_part(conn, p, kind, value, now))
    return str(known[1])


def insert_request(
    conn: Any,
    p: str,
    session_id: str,
    record: RequestRecord,
    now: str,
    *,
    stored: dict[Any, tuple[Any, Any]] | None = None,
) -> int:
    """Write one request and its new parts (inside the caller's transaction, whose driver marks
    parameters with ``p``); returns its id. A missing session raises the driver's integrity error.
    ``stored``: the parts this transaction stored already, by the identity of their value (an
    import's requests send the same history objects again; without it each request wrote out and
    hashed its whole history again, and a session's import grew with the square of its calls)."""
    body = record.body
    split = split_body(body) if body is not None else None
    system_hash = tools_hash = None
    message_hashes: list[str] | None = None
    if split is not None:
        if split["system_key"]:
            system_hash = _stored_part(conn, p, "system", split["system"], now, stored)
        if split["tools"] is not None:
            tools_hash = _stored_part(conn, p, "tools", split["tools"], now, stored)
        message_hashes = [_stored_part(conn, p, "message", m, now, stored) for m in split["messages"]]
    seq = conn.execute(
        f"SELECT coalesce(max(seq), -1) + 1 FROM model_requests WHERE session_id = {p}", (session_id,)
    ).fetchone()[0]
    b = body or {}
    stream = b.get("stream")
    cur = conn.execute(
        "INSERT INTO model_requests (session_id, seq, event_id, source, api, method, path, parsed,"
        " agent_session_id, model, stream, system_key, system_hash, tools_hash, messages_key,"
        " message_hashes_json, message_count, body_keys_json, params_json, max_tokens, thinking_json,"
        " context_management_json, cache_control_json, request_bytes, request_sha256, raw_body, status_code,"
        " error_type, error_message, response_json, stop_reason, input_tokens, output_tokens,"
        " cache_read_input_tokens, cache_creation_input_tokens, cache_creation_5m_tokens,"
        " cache_creation_1h_tokens, reasoning_tokens, usage_json, latency_ms, ttfb_ms, headers_json, started_utc)"
        f" VALUES ({', '.join([p] * 43)}) RETURNING id",
        redact_row((
            session_id, seq, record.event_id, record.source, record.api, record.method, record.path,
            int(split is not None), record.agent_session_id,
            b.get("model") if isinstance(b.get("model"), str) else None,
            None if stream is None else int(bool(stream)),
            split["system_key"] if split else None, system_hash, tools_hash,
            split["messages_key"] if split else None,
            _dumps(message_hashes), len(message_hashes) if message_hashes is not None else None,
            _dumps(split["keys"]) if split else None, _dumps(split["params"]) if split else None,
            _first(b, MAX_TOKENS_KEYS) if isinstance(_first(b, MAX_TOKENS_KEYS), int) else None,
            _dumps(_first(b, THINKING_KEYS)), _dumps(b.get("context_management")),
            _dumps(cache_control_positions(b, known=stored)) if split else None,
            record.request_bytes, record.request_sha256,
            redact_bytes(record.raw_body) if record.raw_body is not None and split is None else None,
            record.status_code, record.error_type, record.error_message, _dumps(record.response),
            record.stop_reason, record.input_tokens, record.output_tokens, record.cache_read_input_tokens,
            record.cache_creation_input_tokens, record.cache_creation_5m_tokens, record.cache_creation_1h_tokens,
            record.reasoning_tokens, _dumps(record.usage), record.latency_ms, record.ttfb_ms,
            _dumps(safe_headers(record.headers)), record.started_utc or now,
        ), keys=(0,)),
    )  # fmt: skip
    return int(cur.fetchone()[0])


def _loads(text: str | None, where: str) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise StoreError(f"malformed JSON in {where}: {exc}") from exc


def load_parts(read: Any, p: str, hashes: Sequence[str]) -> dict[str, Any]:
    """Parts by hash (``read`` is the store's query function, ``p`` its parameter marker)."""
    out: dict[str, Any] = {}
    unique = list(dict.fromkeys(h for h in hashes if h))
    for start in range(0, len(unique), 500):
        chunk = unique[start : start + 500]
        rows = read(
            f"SELECT hash, content_json FROM payload_parts WHERE hash IN ({', '.join([p] * len(chunk))})",
            chunk,
        )
        out.update({r["hash"]: _loads(r["content_json"], f"payload_parts {r['hash']}") for r in rows})
    missing = [h for h in unique if h not in out]
    if missing:
        raise StoreError(f"payload_parts missing {len(missing)} part(s), e.g. {missing[0]}")
    return out


def stored_request(row: Mapping[str, Any], parts: Mapping[str, Any] | None) -> StoredRequest:
    """A model_requests row as a StoredRequest; with ``parts``, the body is rebuilt."""
    d = dict(row)
    where = f"model_requests row {d['id']}"
    hashes = _loads(d["message_hashes_json"], where) or []
    body = None
    if parts is not None and d["parsed"]:
        body = rebuild_body(
            _loads(d["body_keys_json"], where) or [],
            _loads(d["params_json"], where) or {},
            system_key=d["system_key"],
            system=parts.get(d["system_hash"]) if d["system_hash"] else None,
            tools=parts.get(d["tools_hash"]) if d["tools_hash"] else None,
            messages_key=d["messages_key"],
            messages=[parts[h] for h in hashes],
        )
    return StoredRequest(
        id=d["id"], session_id=d["session_id"], seq=d["seq"], event_id=d["event_id"], source=d["source"],
        api=d["api"], method=d["method"], path=d["path"], parsed=bool(d["parsed"]),
        agent_session_id=d["agent_session_id"], model=d["model"],
        stream=None if d["stream"] is None else bool(d["stream"]), body=body,
        raw_body=bytes(d["raw_body"]) if d["raw_body"] is not None else None,
        message_count=d["message_count"], max_tokens=d["max_tokens"],
        thinking=_loads(d["thinking_json"], where), context_management=_loads(d["context_management_json"], where),
        cache_control=_loads(d["cache_control_json"], where) or [], system_hash=d["system_hash"],
        tools_hash=d["tools_hash"], message_hashes=hashes, request_bytes=d["request_bytes"],
        request_sha256=d["request_sha256"], status_code=d["status_code"], error_type=d["error_type"],
        error_message=d["error_message"], response=_loads(d["response_json"], where), stop_reason=d["stop_reason"],
        input_tokens=d["input_tokens"], output_tokens=d["output_tokens"],
        cache_read_input_tokens=d["cache_read_input_tokens"],
        cache_creation_input_tokens=d["cache_creation_input_tokens"],
        cache_creation_5m_tokens=d["cache_creation_5m_tokens"], cache_creation_1h_tokens=d["cache_creation_1h_tokens"],
        reasoning_tokens=d["reasoning_tokens"], usage=_loads(d["usage_json"], where), latency_ms=d["latency_ms"],
        ttfb_ms=d["ttfb_ms"], headers=_loads(d["headers_json"], where), started_utc=d["started_utc"],
    )  # fmt: skip


def request_hashes(row: Mapping[str, Any]) -> list[str]:
    d = dict(row)
    hashes = _loads(d["message_hashes_json"], f"model_requests row {d['id']}") or []
    return [h for h in (d["system_hash"], d["tools_hash"], *hashes) if h]
