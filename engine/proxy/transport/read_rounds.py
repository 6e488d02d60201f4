"""The read_result rounds the proxy answers itself: :func:`serve_read_rounds` forwards a request
that offers read_result, answers the model's read_result calls from the stored results and calls
the upstream again, recording each round, until the model answers without them; the agent gets one
answer (JSON, or the SSE stream it asked for) and never sees the extra rounds. The request's
:class:`~engine.proxy.wire.WireApi` says how its answers read and how the next round is written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Protocol

from engine.proxy.policy.read_result import read_stored
from engine.proxy.wire.shared import DECODED_LIMIT, compact_json

if TYPE_CHECKING:  # the proxy's request path imports this module lazily
    import httpx
    from starlette.responses import Response

    from engine.proxy.recording.exchange import Exchange
    from engine.proxy.recording.recorder import Recorder
    from engine.proxy.wire import WireApi

#: read_result rounds the proxy answers itself before giving the agent the model's answer.
MAX_READ_ROUNDS = 8


class StoredTexts(Protocol):
    """Where read_result finds an offloaded result (the proxy's Controller)."""

    def stored_text(self, ref: str) -> str | None: ...


def stored_answer(controller: StoredTexts, arguments: dict[str, Any]) -> str:
    """What one read_result call gets: the stored text it asks for, or the error saying none is."""
    text = controller.stored_text(str(arguments.get("ref_id")))
    if text is None:
        return f"Error: no stored result {arguments.get('ref_id')!r}"
    return read_stored(text, arguments)


def _round_exchange(recorder: Recorder, exchange: Exchange, round_no: int, payload: bytes) -> Exchange:
    """The exchange that records round ``round_no``: the agent's own first, then its children."""
    from engine.proxy.recording.exchange import new_exchange

    ex = exchange if round_no == 0 else new_exchange(exchange.api, "POST", exchange.path, {}, payload)
    ex.sent_body = payload if round_no == 0 else None
    ex.request_headers = exchange.request_headers
    if round_no:
        ex.parent = exchange
        recorder.begin()
    return ex


class AnswerTooLarge(ValueError):
    """An upstream answer that inflates past the proxy's limit."""


async def read_decoded(reply: httpx.Response, limit: int) -> bytes:
    """A streamed answer's body, decoded, read to its end; :class:`AnswerTooLarge` past ``limit``."""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in reply.aiter_bytes():
            size += len(chunk)
            if size > limit:
                raise AnswerTooLarge(f"the upstream's answer inflates past {limit:,} bytes")
            chunks.append(chunk)
    finally:
        await reply.aclose()
    return b"".join(chunks)


def _relay(recorder: Recorder, rounds: list[Exchange], reply: httpx.Response, content: bytes) -> Response:
    """Every round recorded; the agent gets the upstream's answer as it is (an error, or one the
    rounds cannot read)."""
    from starlette.responses import Response

    from engine.proxy.transport.answers import RESPONSE_HOP_BY_HOP

    for ex in rounds:
        recorder.submit(ex)
    skip = RESPONSE_HOP_BY_HOP | {"content-length", "content-encoding"}
    passthrough = {k: v for k, v in reply.headers.items() if k.lower() not in skip}
    return Response(content, status_code=reply.status_code, headers=passthrough)


async def serve_read_rounds(
    client: httpx.AsyncClient, recorder: Recorder, controller: StoredTexts, exchange: Exchange, started: float,
    kind: str, url: str, headers: list[tuple[bytes, bytes]], body: dict[str, Any], wire: WireApi,
) -> Response:  # fmt: skip
    """Send ``body`` upstream asking for whole answers and answer the model's read_result calls
    until it answers without them (or calls another tool, or ``MAX_READ_ROUNDS`` are spent); every
    round is recorded. The agent gets the answer as it asked (SSE when it asked to stream)."""
    import httpx
    from starlette.responses import Response

    from engine.proxy.transport.answers import fail

    rounds: list[Exchange] = []
    answers: list[Any] = []
    current = wire.whole_answer_request(body)
    for round_no in range(MAX_READ_ROUNDS + 1):
        payload = compact_json(current)
        ex = _round_exchange(recorder, exchange, round_no, payload)
        rounds.append(ex)
        try:
            reply = await client.send(
                client.build_request("POST", url, headers=headers, content=payload), stream=True
            )
            content = await read_decoded(reply, DECODED_LIMIT)
        except AnswerTooLarge as exc:  # a decompression bomb, or an answer no model gives
            for other in rounds[:-1]:
                recorder.submit(other)
            return fail(recorder, ex, started, kind, 502, "upstream_answer_too_large", exc)
        except httpx.HTTPError as exc:
            for other in rounds[:-1]:
                recorder.submit(other)
            timed_out = isinstance(exc, httpx.TimeoutException)
            status, error = (504, "upstream_timeout") if timed_out else (502, "upstream_unreachable")
            return fail(recorder, ex, started, kind, status, error, exc)
        ex.status = reply.status_code
        ex.ttfb_ms = ex.latency_ms = (time.perf_counter() - started) * 1000
        ex.response_headers = {k.lower(): v for k, v in reply.headers.items()}
        ex.response_chunks = [content]
        ex.response_headers.pop("content-encoding", None)  # kept decoded
        answer = wire.round_answer(reply.status_code, reply.headers.get("content-type"), content)
        if answer is None:
            return _relay(recorder, rounds, reply, content)
        answers.append(answer)
        reads, others = wire.read_calls(answer)
        if not reads or others or round_no == MAX_READ_ROUNDS:
            break
        current = wire.continue_with_reads(
            current, answer, [(call_id, stored_answer(controller, args)) for call_id, args in reads]
        )
    agent_answer, data, media_type = wire.final_answer(answers, body)
    exchange.agent_answer = agent_answer
    for ex in rounds:
        recorder.submit(ex)
    return Response(data, media_type=media_type)
