"""The read_result rounds every API shares (:mod:`engine.proxy.anthropic_reads`,
:mod:`engine.proxy.openai_reads`): ``serve_read_rounds`` forwards the request, answers the
model's read_result calls from the stored results and calls the upstream again, recording each
round, until the model answers without them; the API module says how its answers read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from engine.proxy.read_result import read_stored

if TYPE_CHECKING:  # the proxy's request path imports this module lazily
    import httpx
    from starlette.responses import Response

    from engine.proxy.recorder import Exchange, Recorder

#: read_result rounds the proxy answers itself before giving the agent the model's answer.
MAX_READ_ROUNDS = 8

#: (call id, the call's arguments) of each read_result call in one answer.
ReadCalls = list[tuple[Any, dict[str, Any]]]


class StoredTexts(Protocol):
    """Where read_result finds an offloaded result (the proxy's Controller)."""

    def stored_text(self, ref: str) -> str | None: ...


def compact_json(value: object) -> bytes:
    """``value`` as the compact UTF-8 JSON the proxy sends and answers with."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def stored_answer(controller: StoredTexts, arguments: dict[str, Any]) -> str:
    """What one read_result call gets: the stored text it asks for, or the error saying none is."""
    text = controller.stored_text(str(arguments.get("ref_id")))
    if text is None:
        return f"Error: no stored result {arguments.get('ref_id')!r}"
    return read_stored(text, arguments)


def _round_exchange(recorder: Recorder, exchange: Exchange, round_no: int, payload: bytes) -> Exchange:
    """The exchange that records round ``round_no``: the agent's own first, then its children."""
    from engine.proxy.recorder import new_exchange

    ex = exchange if round_no == 0 else new_exchange(exchange.api, "POST", exchange.path, {}, payload)
    ex.sent_body = payload if round_no == 0 else None
    ex.request_headers = exchange.request_headers
    if round_no:
        ex.parent = exchange
        recorder.begin()
    return ex


def _relay(recorder: Recorder, rounds: list[Exchange], reply: httpx.Response) -> Response:
    """Every round recorded; the agent gets the upstream's answer as it is (an error, or one the
    rounds cannot read)."""
    from starlette.responses import Response

    from engine.proxy.answers import RESPONSE_HOP_BY_HOP

    for ex in rounds:
        recorder.submit(ex)
    skip = RESPONSE_HOP_BY_HOP | {"content-length", "content-encoding"}
    passthrough = {k: v for k, v in reply.headers.items() if k.lower() not in skip}
    return Response(reply.content, status_code=reply.status_code, headers=passthrough)


async def serve_read_rounds(
    client: httpx.AsyncClient, recorder: Recorder, controller: StoredTexts, exchange: Exchange, started: float,
    kind: str, url: str, headers: list[tuple[bytes, bytes]], body: dict[str, Any], *,
    parse: Callable[[httpx.Response], Any | None],
    read_calls: Callable[[Any], tuple[ReadCalls, bool]],
    follow: Callable[[dict[str, Any], Any, list[tuple[Any, str]]], dict[str, Any]],
    finish: Callable[[list[Any]], tuple[object, bytes, str]],
) -> Response:  # fmt: skip
    """Send ``body`` upstream and answer the model's read_result calls until it answers without
    them (or calls another tool, or ``MAX_READ_ROUNDS`` are spent); every round is recorded.

    The API's part: ``parse`` reads a reply (None: relay it to the agent as it is),
    ``read_calls`` gives an answer's read_result calls and whether it called another tool,
    ``follow`` is the next request (the answer and the (call id, text) answers appended),
    ``finish`` is what the agent gets from all the answers (recorded answer, bytes, media type).
    """
    import httpx
    from starlette.responses import Response

    from engine.proxy.answers import fail

    rounds: list[Exchange] = []
    answers: list[Any] = []
    current = body
    for round_no in range(MAX_READ_ROUNDS + 1):
        payload = compact_json(current)
        ex = _round_exchange(recorder, exchange, round_no, payload)
        rounds.append(ex)
        try:
            reply = await client.send(client.build_request("POST", url, headers=headers, content=payload))
        except httpx.HTTPError as exc:
            for other in rounds[:-1]:
                recorder.submit(other)
            timed_out = isinstance(exc, httpx.TimeoutException)
            status, error = (504, "upstream_timeout") if timed_out else (502, "upstream_unreachable")
            return fail(recorder, ex, started, kind, status, error, exc)
        ex.status = reply.status_code
        ex.ttfb_ms = ex.latency_ms = (time.perf_counter() - started) * 1000
        ex.response_headers = {k.lower(): v for k, v in reply.headers.items()}
        ex.response_chunks = [reply.content]
        answer = parse(reply)
        if answer is None:
            return _relay(recorder, rounds, reply)
        answers.append(answer)
        reads, others = read_calls(answer)
        if not reads or others or round_no == MAX_READ_ROUNDS:
            break
        current = follow(
            current, answer, [(call_id, stored_answer(controller, args)) for call_id, args in reads]
        )
    agent_answer, data, media_type = finish(answers)
    exchange.agent_answer = agent_answer
    for ex in rounds:
        recorder.submit(ex)
    return Response(data, media_type=media_type)
