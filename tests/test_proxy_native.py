"""The providers' own context management through the proxy (#35.3): Anthropic's ``applied_edits``,
server-side ``compaction`` blocks (``stop_reason: "compaction"``, ``usage.iterations``) and OpenAI's
compaction items are recorded as compaction events by the provider, with what was removed; the
compaction's own billed iteration is a request event of its own, so costs count it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from model_server import HttpReply, ScriptedServer
from native_context_server import COMPACTED_TOKENS, SUMMARY, install
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.proxy import ProxyServer, Upstreams
from engine.store import SessionStore

MODEL = "claude-sonnet-4-6"
BETAS = ["context-management-2025-06-27", "compact-2026-01-12"]


def history(rounds: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Read the files."}]
    for i in range(rounds):
        messages += [
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"n": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"file {i} " * 300}]},
        ]  # fmt: skip
    return messages


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[tuple[ProxyServer, ScriptedServer, Any]]:
    with (
        install(ScriptedServer()) as upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url)) as proxy,
    ):
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "native"}))  # fmt: skip
        yield proxy, upstream, client


def send(client: Any, stream: bool, kwargs: dict[str, Any]) -> None:
    """One beta Messages call, streamed or not."""
    if stream:
        with client.beta.messages.stream(**kwargs) as answer:
            answer.until_done()
    else:
        client.beta.messages.create(**kwargs)


def events_of(proxy: ProxyServer) -> tuple[list[Any], list[Any]]:
    assert proxy.recorder.flush(10)
    with SessionStore(proxy.recorder.db_path, read_only=True) as store:
        return store.list_events("native", kind="compaction"), store.list_events("native", kind="request")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_providers_cleared_tool_uses_are_a_compaction_event_with_what_was_cleared(
    proxied: tuple[ProxyServer, ScriptedServer, Any], stream: bool
) -> None:
    proxy, upstream, client = proxied
    edit = {"type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1000},
            "keep": {"type": "tool_uses", "value": 1}}  # fmt: skip
    kwargs = {"model": MODEL, "max_tokens": 50, "messages": history(4), "betas": BETAS,
              "context_management": {"edits": [edit]}}  # fmt: skip
    send(client, stream, kwargs)
    (served,) = upstream.state["native"]
    ((applied,),) = [served["applied"]]
    compactions, requests = events_of(proxy)
    (event,) = compactions
    assert (event.trigger, event.outcome, event.details["by"]) == ("provider", "compacted", "provider")
    assert (
        event.details["edit"] == "clear_tool_uses_20250919"
        and event.details["cleared"] == 3 == applied["cleared_tool_uses"]
    )
    assert event.details["cleared_input_tokens"] == applied["cleared_input_tokens"] > 0
    (request,) = requests
    assert event.details["after_tokens"] == request.usage.prompt_tokens
    assert event.details["before_tokens"] - event.details["after_tokens"] == applied["cleared_input_tokens"]
    assert "cleared 3 tool use(s)" in event.reason


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_a_server_side_compaction_is_recorded_with_its_summary_and_its_billed_iteration(
    proxied: tuple[ProxyServer, ScriptedServer, Any], stream: bool
) -> None:
    proxy, upstream, client = proxied
    edit = {
        "type": "compact_20260112",
        "trigger": {"type": "input_tokens", "value": 1000},
        "pause_after_compaction": True,
    }
    kwargs = {"model": MODEL, "max_tokens": 50, "messages": history(6), "betas": BETAS,
              "context_management": {"edits": [edit]}}  # fmt: skip
    send(client, stream, kwargs)
    compactions, requests = events_of(proxy)
    (event,) = compactions
    assert event.details["edit"] == "compaction" and event.details["summary"] == SUMMARY
    assert (
        event.details["after_tokens"] == COMPACTED_TOKENS
        and event.details["before_tokens"] > COMPACTED_TOKENS
    )
    assert "stop_reason compaction" in event.reason
    call, iteration = requests
    assert call.details["stop_reason"] == "compaction"
    assert iteration.trigger == "provider_compaction" and iteration.usage.output_tokens == 180
    assert iteration.usage.input_tokens == upstream.state["native"][0]["prompt"]
    from engine.store.costs import session_costs

    with SessionStore(proxy.recorder.db_path, read_only=True) as store:
        rows = session_costs(store, "native").rows
    assert len(rows) == 2 and all(r["total_usd"] > 0 for r in rows)  # the billed compaction is priced too


def test_an_openai_compaction_item_is_a_compaction_event(tmp_path: Path) -> None:
    import openai

    def respond(server: ScriptedServer, request: Any) -> HttpReply:
        output = [{"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA..."},
                  {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
                   "content": [{"type": "output_text", "text": "Done.", "annotations": []}]}]  # fmt: skip
        usage = {"input_tokens": 300, "output_tokens": 5, "total_tokens": 305,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
        return HttpReply(200, {"id": "resp_1", "object": "response", "created_at": 1, "model": "gpt-5",
                               "status": "completed", "output": output, "usage": usage})  # fmt: skip

    upstream = ScriptedServer()
    upstream.add_route("POST", "/v1/responses", respond)
    with (
        upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url + "/v1")) as proxy,
    ):
        client = opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="sk-x", max_retries=0,
                                      default_headers={"X-Ctxdesk-Session": "native"}))  # fmt: skip
        client.responses.create(model="gpt-5", input="Go on.", extra_body={
            "context_management": [{"type": "compaction", "compact_threshold": 200}]})  # fmt: skip
        compactions, _ = events_of(proxy)
    (event,) = compactions
    assert event.details["by"] == "provider" and event.details["edit"] == "compaction"


def test_native_clearing_asks_the_provider_to_clear_and_records_what_it_cleared(tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(
        "[policies]\nclear_tool_results = { trigger = 1000, keep = 1, clear_at_least = 500, native = true }\n",
        encoding="utf-8",
    )
    sent = {"model": MODEL, "max_tokens": 50, "messages": history(4)}
    with (
        install(ScriptedServer()) as upstream,
        ProxyServer(
            tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), settings_file=settings
        ) as proxy,
    ):
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "native"}))  # fmt: skip
        client.messages.create(**sent)
        compactions, _ = events_of(proxy)
    (request,) = upstream.requests
    assert request.body["messages"] == sent["messages"]  # the history is not edited by the proxy
    assert request.body["context_management"] == {"edits": [{
        "type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 1000},
        "keep": {"type": "tool_uses", "value": 1}, "clear_at_least": {"type": "input_tokens", "value": 500}}]}  # fmt: skip
    assert "context-management-2025-06-27" in request.headers["anthropic-beta"]
    asked, cleared = compactions
    assert (
        asked.trigger == "proxy_policy" and asked.details["changes"][0]["native"] and asked.outcome == "kept"
    )
    assert cleared.details["by"] == "provider" and cleared.details["cleared"] == 3


def test_native_clearing_keeps_the_agents_own_betas_and_edits() -> None:
    from engine.policy_settings import ClearToolResultsPolicy
    from engine.proxy.transport.policy_step import upstream_headers
    from engine.proxy.wire import wire_for

    thinking = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    body = {"messages": [], "context_management": {"edits": [thinking]}}
    asked, betas = wire_for("anthropic_messages").with_native_clearing(
        body, ClearToolResultsPolicy(trigger=9, keep=2)
    )
    assert [e["type"] for e in asked["context_management"]["edits"]] == [
        "clear_thinking_20251015",
        "clear_tool_uses_20250919",
    ]
    headers = upstream_headers([(b"anthropic-beta", b"interleaved-thinking-2025-05-14")], betas)
    assert headers == [(b"anthropic-beta", b"interleaved-thinking-2025-05-14,context-management-2025-06-27")]
    assert wire_for("openai_chat").with_native_clearing(body, ClearToolResultsPolicy()) is None


def test_an_openai_compact_call_is_a_priced_call_and_a_compaction_event(tmp_path: Path) -> None:
    import httpx

    history = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Fix the bug."}]},
               {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed it. " * 200}]}]  # fmt: skip

    def compact(server: ScriptedServer, request: Any) -> HttpReply:  # the documented CompactedResponse
        output = [history[0], {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA..."}]
        usage = {"input_tokens": 700, "output_tokens": 90, "total_tokens": 790,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}  # fmt: skip
        return HttpReply(200, {"id": "cmp_resp_1", "object": "response.compaction", "created_at": 1,
                               "output": output, "usage": usage})  # fmt: skip

    upstream = ScriptedServer()
    upstream.add_route("POST", "/v1/responses/compact", compact)
    with (
        upstream,
        ProxyServer(tmp_path / "p.db", upstreams=Upstreams(openai=upstream.base_url + "/v1")) as proxy,
    ):
        reply = httpx.post(f"{proxy.base_url}/v1/responses/compact", json={"model": "gpt-5", "input": history},
                           headers={"authorization": "Bearer k", "x-ctxdesk-session": "native"})  # fmt: skip
        assert reply.status_code == 200 and reply.json()["object"] == "response.compaction"
        compactions, requests = events_of(proxy)
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            transcript = [m.text for m in store.load_transcript("native")]
    (event,) = compactions
    assert event.details["by"] == "provider" and event.details["edit"] == "compaction"
    (call,) = requests
    assert call.details["api"] == "openai_responses_compact" and call.usage.output_tokens == 90
    assert not any("compaction" in t for t in transcript)  # the compacted list is no message of the chat
