"""A request through the in-flight policies (one place for the relay and the app): refused in the
provider's own shape, answered through read_result rounds, or the body to send on (edited or not)."""

from __future__ import annotations

from collections.abc import Mapping

import httpx
from starlette.responses import Response

from engine.proxy.policy.controller import Controller
from engine.proxy.recording.exchange import Exchange
from engine.proxy.recording.recorder import Recorder
from engine.proxy.transport.answers import refuse
from engine.proxy.transport.http1 import HOP_BY_HOP
from engine.proxy.transport.read_rounds import serve_read_rounds
from engine.proxy.wire import wire_for
from engine.proxy.wire.shared import compact_json

#: Request headers not sent on the proxy's own read_result rounds (httpx frames and encodes them).
ROUND_SKIPPED = frozenset(h.decode() for h in HOP_BY_HOP) | {"content-length", "accept-encoding"}


def upstream_headers(
    raw_headers: list[tuple[bytes, bytes]], betas: tuple[str, ...]
) -> list[tuple[bytes, bytes]]:
    """The request's headers with the beta flags an edit needs added to its ``anthropic-beta``."""
    if not betas:
        return raw_headers
    current = [v.decode("latin-1") for k, v in raw_headers if k.lower() == b"anthropic-beta"]
    flags = [f.strip() for value in current for f in value.split(",") if f.strip()]
    merged = ",".join([*flags, *(b for b in betas if b not in flags)]).encode("latin-1")
    return [(k, v) for k, v in raw_headers if k.lower() != b"anthropic-beta"] + [(b"anthropic-beta", merged)]


async def apply_policies(
    client: httpx.AsyncClient, recorder: Recorder, controller: Controller, exchange: Exchange, started: float,
    kind: str, url: str, headers: Mapping[str, str], raw_headers: list[tuple[bytes, bytes]], body: bytes,
) -> Response | bytes:  # fmt: skip
    """The proxy's own answer (a refusal, or the read_result rounds' answer), else the body to forward."""
    outcome = controller.apply(exchange.api, body, headers)
    exchange.policy = outcome
    if outcome.refusal is not None:
        return refuse(recorder, exchange, started, *outcome.refusal)
    wire = wire_for(exchange.api)
    if outcome.serve_read_result and outcome.body is not None and wire is not None:
        kept = [(k, v) for k, v in upstream_headers(raw_headers, outcome.betas)
                if k.decode("latin-1").lower() not in ROUND_SKIPPED]  # fmt: skip
        return await serve_read_rounds(
            client, recorder, controller, exchange, started, kind, url, kept, outcome.body, wire
        )
    if outcome.body is not None:
        body = exchange.sent_body = compact_json(outcome.body)
    return body
