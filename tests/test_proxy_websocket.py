"""The Responses API over WebSocket through the proxy (#35.5): frames relayed unchanged both ways,
each ``response.create`` and its events recorded like an HTTP call; the real Codex CLI with
``supports_websockets = true``."""

from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ws_responses_server import WebSocketResponses, call_item, message_item

from engine.proxy import ProxyServer, Upstreams
from engine.proxy.transport.websocket import FrameReader
from engine.store import SessionStore


def frame(opcode: int, payload: bytes, *, fin: bool = True, mask: bytes | None = None) -> bytes:
    """One RFC 6455 frame (masked as a client sends, when ``mask`` is given)."""
    head = bytes([(0x80 if fin else 0) | opcode])
    n = len(payload)
    bit = 0x80 if mask else 0
    if n < 126:
        head += bytes([bit | n])
    elif n < 1 << 16:
        head += bytes([bit | 126]) + n.to_bytes(2, "big")
    else:
        head += bytes([bit | 127]) + n.to_bytes(8, "big")
    if mask:
        payload = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        head += mask
    return head + payload


STREAM = (
    frame(1, b'{"type": "response.create"}', mask=b"abcd")
    + frame(9, b"ping")  # a ping between messages
    + frame(1, b'{"a": ', fin=False, mask=b"wxyz")
    + frame(10, b"pong", mask=b"1234")  # a control frame inside a fragmented message
    + frame(0, b"1" * 70_000 + b"}", mask=b"qrst")
    + frame(1, b"x" * 300)  # over the small limit below: relayed, not kept
    + frame(1, b'{"last": true}')
)
EXPECTED = [
    (1, b'{"type": "response.create"}'),
    (1, b'{"a": ' + b"1" * 70_000 + b"}"),
    (1, b"x" * 300),
    (1, b'{"last": true}'),
]


def test_frames_are_read_into_messages() -> None:
    assert FrameReader(limit=100_000).feed(STREAM) == EXPECTED
    small = FrameReader(limit=200)
    assert small.feed(STREAM) == [EXPECTED[0], EXPECTED[3]]  # the 70 kB message and the 300 B one skipped


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=12))
def test_frames_split_anywhere_read_the_same(cuts: list[int]) -> None:
    reader, got, start = FrameReader(limit=100_000), [], 0
    for cut in [*sorted(set(cuts)), len(STREAM)]:
        got += reader.feed(STREAM[start:cut])
        start = cut
    assert got == EXPECTED


async def _converse(
    url: str, creates: list[dict[str, Any]], *, leave_after: int | None = None
) -> list[list[dict[str, Any]]]:
    """Each create sent in turn over one WebSocket; the events each got (the agent leaves early if told)."""
    from websockets.asyncio.client import connect

    answers: list[list[dict[str, Any]]] = []
    async with connect(
        url, additional_headers={"session-id": "ws-session", "authorization": "Bearer k"}
    ) as ws:
        for create in creates:
            await ws.send(json.dumps({"type": "response.create", **create}))
            events: list[dict[str, Any]] = []
            while True:
                events.append(json.loads(await ws.recv()))
                if leave_after is not None and len(events) >= leave_after:
                    return [*answers, events]
                if events[-1]["type"] == "response.completed":
                    break
            answers.append(events)
    return answers


def test_calls_over_a_websocket_are_relayed_unchanged_and_recorded(tmp_path: Path) -> None:
    first = {"model": "gpt-5", "input": [{"type": "message", "role": "user", "content": "List files."}]}
    second = {"model": "gpt-5", "input": [*first["input"], call_item("exec_command", {"cmd": "ls"}, "c1"),
              {"type": "function_call_output", "call_id": "c1", "output": "a.py b.py"}]}  # fmt: skip
    replies = [[call_item("exec_command", {"cmd": "ls"}, "c1")], [message_item("Two files.")]]
    with (
        WebSocketResponses(*replies) as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url)) as proxy,
    ):
        answers = asyncio.run(_converse(f"ws://127.0.0.1:{proxy.port}/v1/responses", [first, second]))
        assert proxy.recorder.flush(10)
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            events = store.list_events("ws-session", kind="request")
            transcript = [m.text for m in store.load_transcript("ws-session")]
            requests = store.list_requests("ws-session", with_body=True)
    assert [json.loads(json.dumps(m)) for m in upstream.received] == [{"type": "response.create", **first},
                                                                      {"type": "response.create", **second}]  # fmt: skip
    assert [e[-1]["response"]["output"] for e in answers] == replies  # the agent got every event
    assert [e.outcome for e in events] == ["ok", "ok"] and all(
        e.details["transport"] == "websocket" for e in events
    )
    assert [e.usage.prompt_tokens for e in events] == [901, 902]
    assert [r.body for r in requests] == [first, second] and all(
        r.api == "openai_responses" for r in requests
    )
    assert transcript[0] == "List files." and transcript[-1] == "Two files."


def test_an_agent_leaving_mid_answer_is_an_interrupted_call(tmp_path: Path) -> None:
    with (
        WebSocketResponses(hold_after=2) as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url)) as proxy,
    ):
        asyncio.run(
            _converse(
                f"ws://127.0.0.1:{proxy.port}/v1/responses",
                [{"model": "gpt-5", "input": "Hi."}],
                leave_after=2,
            )
        )
        assert proxy.recorder.flush(10)
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            (event,) = store.list_events("ws-session", kind="request")
        assert upstream.held_until_closed == 1  # the proxy closed the upstream answer the agent left
    assert event.outcome == "client_disconnected" and event.details["failure"]["cause"] == "interrupted"


def test_a_browser_page_cannot_open_a_websocket_through_the_proxy(tmp_path: Path) -> None:
    from websockets.asyncio.client import connect
    from websockets.exceptions import InvalidStatus

    async def from_page(port: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/v1/responses", origin="https://evil.example"):
            pass

    with (
        WebSocketResponses() as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url)) as proxy,
        pytest.raises(InvalidStatus, match="403"),
    ):
        asyncio.run(from_page(proxy.port))
    assert upstream.received == []


@pytest.mark.peer("codex")
def test_the_real_codex_cli_over_a_websocket_is_recorded(tmp_path: Path) -> None:
    from real_agents import agent_bin

    codex = agent_bin("codex")
    home, codex_home, repo = tmp_path / "home", tmp_path / "codex", tmp_path / "repo"
    for folder in (home, codex_home, repo):
        folder.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    replies = [[call_item("exec_command", {"cmd": "seq 1 3"}, f"c{random.randrange(1 << 30)}")],
               [message_item("Counted to three.")]]  # fmt: skip
    with (
        WebSocketResponses(
            *replies, input_tokens=60_000
        ) as upstream,  # the provider counts the stored turns too
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url)) as proxy,
    ):
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "local"\napproval_policy = "never"\nsandbox_mode = "danger-full-access"\n\n'
            f'[model_providers.local]\nname = "local"\nbase_url = "{proxy.base_url}/v1"\nwire_api = "responses"\n'
            'env_key = "LOCAL_API_KEY"\nsupports_websockets = true\n',
            encoding="utf-8",
        )
        env = {
            "PATH": os.environ["PATH"],
            "HOME": str(home),
            "CODEX_HOME": str(codex_home),
            "LOCAL_API_KEY": "k",
            "NO_COLOR": "1",
        }
        done = subprocess.run([str(codex), "exec", "--json", "Count to three."], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip
        assert proxy.recorder.flush(10)
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            events = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
            transcript = [m.text for s in store.list_sessions() for m in store.load_transcript(s.id)]
    assert "Counted to three." in done.stdout, done.stderr[-2000:]
    creates = [m for m in upstream.received if m.get("type") == "response.create"]
    assert len(creates) >= 2 and all(e.details.get("transport") == "websocket" for e in events)
    assert len(events) == len(creates) and all(e.outcome == "ok" for e in events)
    assert any("Counted to three." in t for t in transcript)
    continued = [e for e in events if e.details.get("previous_response_id")]
    assert continued and all(
        e.components.unattributed > 0 for e in continued
    )  # the earlier turns it did not see
    outputs = [i for i in creates[-1]["input"] if i.get("type") == "function_call_output"]
    assert outputs and "1\n2\n3" in json.dumps(outputs[0]["output"]).replace("\\n", "\n")
