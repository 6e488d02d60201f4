"""``ctxdesk why`` on sessions the real proxy recorded (a scripted upstream behind it): a guard
policy's refusal ends ``policy_refused``, the provider's 400 ``prompt_too_long``, a 529
``provider_error``, a clearing policy is the proxy's compaction, and a normal answer ``finished``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.explain import SessionExplanation, explain_store
from engine.proxy import ProxyServer, Upstreams
from engine.store import SessionStore

MODEL = "claude-sonnet-4-6"
SMALL_WINDOW = f'[models."{MODEL}"]\ncontext_window = 3000\nmax_output_tokens = 100\nbuffer_tokens = 0\n'


def body(turns: int, words: int = 40) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"question {i}: " + "alpha beta " * words})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "gamma delta " * words})
    messages.append({"role": "user", "content": "And now?"})
    return {"model": MODEL, "max_tokens": 100, "system": "Agent.", "messages": messages}


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with A.install(ScriptedServer(default=A.text("ok"))) as server:
        yield server


def through_proxy(
    tmp_path: Path, upstream: ScriptedServer, settings: str, bodies: list[dict[str, Any]]
) -> SessionExplanation:
    """Send ``bodies`` in order through a proxy with ``settings``; the session's explanation."""
    path = tmp_path / "settings.toml"
    path.write_text(settings, encoding="utf-8")
    with ProxyServer(
        tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), settings_file=path
    ) as proxy:
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "why"}))  # fmt: skip
        for b in bodies:
            with contextlib.suppress(anthropic.APIStatusError):  # a refusal is what some cases test
                client.messages.create(**b)
        assert proxy.recorder.flush()
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            [why] = explain_store(store, ["why"]).sessions
    return why


def test_a_guard_policy_refusal(tmp_path: Path, upstream: ScriptedServer) -> None:
    why = through_proxy(
        tmp_path, upstream, SMALL_WINDOW + '[policies]\nguard = { action = "error" }\n', [body(1), body(40)]
    )
    assert len(upstream.requests) == 1  # the second never reached the provider
    assert why.agent == "proxy"
    assert (why.ended.cause, why.ended.call) == ("policy_refused", 2)
    assert "prompt 8,496 tokens > limit 2,900" in why.ended.detail


@pytest.mark.parametrize(
    ("name", "reply", "cause", "failure"),
    [
        (
            "the provider's prompt-too-long",
            A.prompt_too_long(212_301, 200_000),
            "prompt_too_long",
            "prompt_too_long",
        ),
        ("overloaded", A.overloaded(), "provider_error", "overloaded"),
    ],
)
def test_the_providers_refusal_ends_the_session(
    tmp_path: Path, upstream: ScriptedServer, name: str, reply: Any, cause: str, failure: str
) -> None:
    upstream.queue(A.text("first answer"), reply)
    why = through_proxy(tmp_path, upstream, "", [body(1), body(2)])
    assert (why.ended.cause, why.ended.call) == (cause, 2)
    [f] = why.failed_calls
    assert (f.call, f.cause) == (2, failure)
    assert f.next == "stopped: no call followed"
    if failure == "prompt_too_long":
        assert (f.prompt_tokens, f.maximum_tokens) == (212_301, 200_000)
        assert f.sentence.startswith("The provider refused call 2: prompt is too long (212,301 > 200,000)")


def test_a_clearing_policy_is_the_proxys_compaction(tmp_path: Path, upstream: ScriptedServer) -> None:
    def with_results(n: int) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": "read the files"}]
        for i in range(n):
            messages.append({"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read",
                                                               "input": {"file_path": f"/repo/f{i}.py"}}]})  # fmt: skip
            messages.append({"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                                          "content": f"def f{i}():\n" + "    x = 1\n" * 300}]})  # fmt: skip
        return {"model": MODEL, "max_tokens": 100, "system": "Agent.", "messages": messages}

    settings = "[policies]\nclear_tool_results = { trigger = 1000, keep = 1 }\n"
    why = through_proxy(tmp_path, upstream, settings, [with_results(4)])
    assert why.ended.cause == "finished"
    [c] = why.compactions
    assert (c.by, c.trigger, c.call) == ("proxy", "policy", 1)  # the call the policy edited
    assert c.sentence.startswith("The proxy's clear_tool_results policy compacted the request at call 1: ")
    assert c.tokens_before is not None and c.tokens_after is not None and c.tokens_after < c.tokens_before
