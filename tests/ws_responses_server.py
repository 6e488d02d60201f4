"""A scripted Responses API over WebSocket (what Codex speaks with ``supports_websockets = true``),
in a background thread: each ``response.create`` message is answered with the events of one
response (``response.created``, each output item added and done, ``response.completed`` with usage),
built from OpenAI's documented event shapes. ``replies`` are lists of output items, used in turn
(the last one repeats); ``received`` keeps every message the client sent.
"""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

from websockets.asyncio.server import ServerConnection, serve


def message_item(text: str) -> dict[str, Any]:
    return {"type": "message", "id": "msg_ws", "role": "assistant", "status": "completed",
            "content": [{"type": "output_text", "text": text, "annotations": []}]}  # fmt: skip


def call_item(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{call_id}", "call_id": call_id, "name": name,
            "arguments": json.dumps(arguments), "status": "completed"}  # fmt: skip


class WebSocketResponses:
    def __init__(
        self, *replies: list[dict[str, Any]], hold_after: int | None = None, input_tokens: int = 900
    ) -> None:
        self.input_tokens = input_tokens  # the prompt tokens the first response reports (one more each time)
        self.replies = list(replies) or [[message_item("Done.")]]
        self.received: list[dict[str, Any]] = []
        self.creates = 0
        self.generated = 0
        self.hold_after = hold_after  # stop answering after this many events (a client that gives up)
        self.held_until_closed = 0  # answers held that the client closed (it gave up) before the server ended
        self._started = threading.Event()
        self._stop: asyncio.Event | None = None
        self._stopping = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self.port = 0
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> WebSocketResponses:
        self._thread.start()
        assert self._started.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._stopping = True
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)

    def _run(self) -> None:
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        async with serve(self._handle, "127.0.0.1", 0) as server:
            self.port = next(iter(server.sockets)).getsockname()[1]
            self._started.set()
            await self._stop.wait()

    async def _handle(self, ws: ServerConnection) -> None:
        async for raw in ws:
            message = json.loads(raw)
            self.received.append(message)
            if message.get("type") != "response.create":
                continue
            self.creates += 1
            items: list[dict[str, Any]] = []
            if message.get("generate", True):  # generate false: Codex's warm-up, answered with no output
                self.generated += 1
                items = self.replies[min(self.generated - 1, len(self.replies) - 1)]
            for n, event in enumerate(self._events(self.creates, message, items, self.input_tokens)):
                if self.hold_after is not None and n >= self.hold_after:
                    # hold the answer until the client gives up, then end quietly: a handler left
                    # sleeping outlived its test and logged a traceback into a later one
                    await ws.wait_closed()
                    self.held_until_closed += not self._stopping
                    return
                await ws.send(json.dumps({**event, "sequence_number": n}))

    @staticmethod
    def _events(
        number: int, request: dict[str, Any], items: list[dict[str, Any]], base: int
    ) -> list[dict[str, Any]]:
        response = {"id": f"resp_ws_{number}", "object": "response", "created_at": 1, "model": request.get("model"),
                    "status": "in_progress", "output": []}  # fmt: skip
        usage = {"input_tokens": base + number, "output_tokens": 7, "total_tokens": base + 7 + number,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
        events: list[dict[str, Any]] = [{"type": "response.created", "response": response}]
        for index, item in enumerate(items):
            events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
        done = {**response, "status": "completed", "output": items, "usage": usage}
        return [*events, {"type": "response.completed", "response": done}]
