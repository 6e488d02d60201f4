"""The wire formats (engine.proxy.wire) read whatever an agent or a provider sends without raising:
odd request bodies and answers become what can be read of them, never an exception on the proxy's
request or recording path (hypothesis over arbitrary JSON), and a history rendered back is the same."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.proxy.wire import WIRES, wire_for

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(
        ["role", "content", "type", "text", "tool_use_id", "id", "name", "input", "call_id", "output", "arguments",
         "tool_calls", "function", "messages", "system", "tools", "usage", "choices", "delta", "message"]), inner, max_size=5),
    max_leaves=25,
)  # fmt: skip
BODIES = st.fixed_dictionaries({}, optional={"model": JSON, "system": JSON, "tools": JSON, "messages": JSON,
                                             "input": JSON, "instructions": JSON, "stream": JSON})  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(sorted(WIRES)), BODIES)
def test_any_request_body_is_read_without_raising(api: str, body: dict[str, Any]) -> None:
    wire = wire_for(api)
    view = wire.request_view(body, {})
    items = body.get(wire.history_key)
    if isinstance(items, list):
        wire.tool_results(items)
        wire.message_starts(items)
        assert len(wire.message_starts(items)) == len(wire.to_messages(items))
    assert isinstance(view.system, str)


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(sorted(WIRES)), st.sampled_from(["application/json", "text/event-stream"]), JSON)
def test_any_answer_is_read_without_raising(api: str, content_type: str, value: Any) -> None:
    wire = wire_for(api)
    data = json.dumps(value).encode()
    if content_type == "text/event-stream":
        data = b"event: x\ndata: " + data + b"\n\n"
    parsed = wire.parse_response(200, content_type, data)
    wire.answer_message(parsed)
    wire.provider_edits(parsed)
    wire.unbilled_iterations(parsed)
    wire.usage_fields(parsed.usage)


REAL_HISTORIES = {
    "anthropic_messages": [
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                          {"type": "tool_use", "id": "t1", "name": "Read", "input": {"p": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "x"}]}]},
    ],
    "openai_chat": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{\"cmd\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py"},
    ],
}  # fmt: skip


@pytest.mark.parametrize("api", sorted(REAL_HISTORIES))
def test_a_history_rendered_back_is_the_history_sent(api: str) -> None:
    """engine.convert is lossless: the compaction policy renders untouched messages as they were sent."""
    wire = wire_for(api)
    items = REAL_HISTORIES[api]
    rendered = wire.render(wire.to_messages(items), None, keep_meta=True)
    strip = wire_for(api).render  # the render drops cache markers (a compacted prefix sets none of its own)
    from engine.proxy.wire.shared import strip_markers

    assert rendered == strip_markers(items) and strip is not None


IDS = st.sampled_from(["t1", "t2", "c1", ""]) | JSON
BLOCK = st.fixed_dictionaries(
    {"type": st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image", "odd"])},
    optional={"text": st.text(max_size=300) | JSON, "id": IDS, "tool_use_id": IDS, "name": st.sampled_from(["Read", "Bash"]) | JSON,
              "input": JSON, "content": st.text(max_size=3000) | JSON, "is_error": JSON},
)  # fmt: skip
ITEM = st.fixed_dictionaries(
    {},
    optional={"role": st.sampled_from(["user", "assistant", "tool", "system", "developer"]) | JSON,
              "content": st.text(max_size=3000) | st.lists(BLOCK, max_size=4) | JSON,
              "type": st.sampled_from(["message", "function_call", "function_call_output", "reasoning"]) | JSON,
              "call_id": IDS, "output": st.text(max_size=3000) | JSON, "arguments": JSON, "name": JSON,
              "tool_calls": st.lists(st.fixed_dictionaries({"id": IDS, "function": JSON}), max_size=2) | JSON,
              "tool_call_id": IDS},
)  # fmt: skip


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(["anthropic_messages", "openai_chat", "openai_responses"]),
    st.lists(ITEM | JSON, max_size=8),
    JSON,
)
def test_the_policies_plan_any_request_body_without_raising(
    api: str, history: list[Any], system: Any
) -> None:
    body = {"model": "m", "system": system, wire_for(api).history_key: history}
    from engine.policy_settings import (
        ClearToolResultsPolicy,
        CompactionPolicy,
        GuardPolicy,
        OffloadPolicy,
        Policies,
    )
    from engine.proxy.policy.edits import SessionPolicyState
    from engine.proxy.policy.policies import plan_edits
    from engine.settings import Settings, resolve_model_settings
    from engine.tokens import get_tokenizer

    settings_ = Settings.from_dict(
        {"models": {"m": {"context_window": 4000, "max_output_tokens": 100, "buffer_tokens": 0}}}
    )
    policies = Policies(
        guard=GuardPolicy(action="compact"), clear_tool_results=ClearToolResultsPolicy(trigger=0, keep=1),
        offload=OffloadPolicy(threshold_bytes=50), compaction=CompactionPolicy(strategy="chain", trigger=0.1),
    )  # fmt: skip
    plan_edits(api, body, policies, tokenizer=get_tokenizer("o200k_base"),
               resolved=resolve_model_settings("m", "openai", settings_), state=SessionPolicyState())  # fmt: skip


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(["anthropic_messages", "openai_chat", "openai_responses"]),
    st.lists(ITEM | JSON, max_size=6),
    JSON,
)
def test_the_recorder_writes_any_exchange_without_raising(
    tmp_path_factory: pytest.TempPathFactory, api: str, history: list[Any], answer: Any
) -> None:
    """An odd request (and an odd answer) is recorded, not lost to a 'degraded' event."""
    from engine.proxy.recording.exchange import new_exchange
    from engine.proxy.recording.sessions import SessionResolver
    from engine.proxy.recording.writer import ExchangeWriter
    from engine.store import SessionStore

    body = json.dumps({"model": "m", wire_for(api).history_key: history}).encode()
    exchange = new_exchange(api, "POST", "/v1/x", {"x-ctxdesk-session": "odd"}, body)
    exchange.status, exchange.response_headers = 200, {"content-type": "application/json"}
    exchange.response_chunks = [json.dumps(answer).encode()]
    with SessionStore(tmp_path_factory.mktemp("odd") / "p.db") as store:
        ExchangeWriter(store, SessionResolver()).write(exchange)
