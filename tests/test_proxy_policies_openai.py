"""Offload (read_result served by the proxy) and compaction for OpenAI Chat Completions and
Responses requests: through the proxy with the real ``openai`` client against the scripted
model server, every edit recorded."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest
from model_server import ScriptedServer
from model_server import openai_chat as C
from model_server import openai_responses as R
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.policy_settings import CompactionPolicy, Policies
from engine.proxy import ProxyServer, Upstreams
from engine.proxy.policy.edits import SessionPolicyState
from engine.proxy.policy.policies import plan_edits
from engine.proxy.wire import wire_for
from engine.proxy.wire.shared import identity_hash
from engine.settings import Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

MODEL = "gpt-4o"
BIG = "routine log line\n" * 400 + "NEEDLE-4242 found at the end\n"
OFFLOAD_TOML = "[policies]\noffload = { threshold_bytes = 2000 }\n"


def _reads_once(server: ScriptedServer, path: str, key: str, asked_of: Any, read: Any, answer: Any) -> None:
    """Route ``path`` through a model that, offered read_result, reads the offloaded result once."""
    handler = next(h for m, p, h in server.routes if p == path)

    def model(srv: ScriptedServer, request: Any) -> Any:
        body = request.body
        text = json.dumps(body[key])
        offered = any("read_result" in json.dumps(t) for t in body.get("tools") or [])
        if offered and not asked_of(body):
            ref = re.search(r'ref_id=\\"(res_[0-9a-f]+)', text).group(1)
            srv.queue(read({"ref_id": ref, "pattern": "NEEDLE"}))
        elif asked_of(body):
            srv.queue(answer(re.findall(r"NEEDLE-\d+", text)[-1]))
        return handler(srv, request)

    server.routes.insert(0, ("POST", path, model))


def _chat_upstream() -> ScriptedServer:
    server = C.install(ScriptedServer(default=C.chat_text("ok")))
    _reads_once(
        server, C.PATH, "messages",
        lambda body: any(m.get("role") == "tool" and "NEEDLE" in str(m.get("content")) for m in body["messages"]),
        lambda args: C.chat_tool_calls(("read_result", args)),
        lambda found: C.chat_text(f"The output holds {found}."),
    )  # fmt: skip
    return server


def _responses_upstream() -> ScriptedServer:
    server = R.install(ScriptedServer(default="ok"))
    _reads_once(
        server, R.PATH, "input",
        lambda body: any(i.get("type") == "function_call" and i.get("name") == "read_result" for i in body["input"]),
        lambda args: [{"type": "function_call", "name": "read_result", "arguments": args}],
        lambda found: f"The output holds {found}.",
    )  # fmt: skip
    return server


def _recorded(db: Path, session: str) -> tuple[list[str], list[Any]]:
    with SessionStore(db, read_only=True) as store:
        sources = sorted(r.source for r in store.list_requests(session, with_body=True))
        offloads = [
            e for e in store.list_events(session, kind="compaction") if e.details["policy"] == "offload"
        ]
        ref = offloads[0].details["changes"][0]["ref"]
        assert store.get_blob(ref).content.decode() == BIG
        transcript = [m.text for m in store.load_transcript(session)]
    return sources, transcript


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_chat_offloaded_result_is_read_back_by_the_proxy_and_the_agent_gets_one_answer(
    tmp_path: Path, stream: bool
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(OFFLOAD_TOML, encoding="utf-8")
    messages = [
        {"role": "system", "content": "You run tests."},
        {"role": "user", "content": "Run the tests."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{\"cmd\": \"pytest\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": BIG},
    ]  # fmt: skip
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}]
    server, db = _chat_upstream(), tmp_path / "p.db"
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(openai=server.base_url + "/v1"), settings_file=settings) as proxy,
    ):
        client = opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="sk-x", max_retries=0,
                                      default_headers={"X-Ctxdesk-Session": "chat"}))  # fmt: skip
        if stream:
            chunks = list(client.chat.completions.create(model=MODEL, messages=messages, tools=tools, stream=True,
                                                         stream_options={"include_usage": True}))  # fmt: skip
            text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
            assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        else:
            reply = client.chat.completions.create(model=MODEL, messages=messages, tools=tools)
            text = reply.choices[0].message.content
            assert reply.choices[0].message.tool_calls is None and reply.choices[0].finish_reason == "stop"
        assert proxy.recorder.flush()
    assert text == "The output holds NEEDLE-4242."
    first, second = (r.body for r in server.requests)
    assert "NEEDLE" not in json.dumps(first["messages"]) and first["messages"][0] == messages[0]
    assert first["tools"][-1]["function"]["name"] == "read_result" and first["stream"] is False
    assert (
        second["messages"][-1]["role"] == "tool"
        and second["messages"][-1]["content"].count("NEEDLE-4242") == 1
    )
    sources, transcript = _recorded(db, "chat")
    assert sources == ["proxy", "proxy:original", "proxy:read_result"]
    assert transcript[-1] == "The output holds NEEDLE-4242."


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_responses_offloaded_output_is_read_back_by_the_proxy(tmp_path: Path, stream: bool) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(OFFLOAD_TOML, encoding="utf-8")
    items = [
        {"role": "user", "content": "Run the tests."},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": BIG},
    ]
    tools = [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}]
    server, db = _responses_upstream(), tmp_path / "p.db"
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(openai=server.base_url + "/v1"), settings_file=settings) as proxy,
    ):
        client = opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="sk-x", max_retries=0,
                                      default_headers={"X-Ctxdesk-Session": "resp"}))  # fmt: skip
        if stream:
            events = list(client.responses.create(model=MODEL, input=items, tools=tools, stream=True))
            assert events[0].type == "response.created" and events[-1].type == "response.completed"
            text = events[-1].response.output_text
        else:
            text = client.responses.create(model=MODEL, input=items, tools=tools).output_text
        assert proxy.recorder.flush()
    assert text == "The output holds NEEDLE-4242."
    first, second = (r.body for r in server.requests)
    assert "NEEDLE" not in json.dumps(first["input"]) and first["tools"][-1]["name"] == "read_result"
    outputs = [i for i in second["input"] if i.get("type") == "function_call_output"]
    assert outputs[-1]["output"].count("NEEDLE-4242") == 1
    sources, transcript = _recorded(db, "resp")
    assert sources == ["proxy", "proxy:original", "proxy:read_result"]
    assert transcript[-1] == "The output holds NEEDLE-4242."


def test_read_result_is_offered_once_in_each_apis_shape() -> None:
    chat = wire_for("openai_chat").with_read_result(None)
    assert chat[0]["function"]["name"] == "read_result" and "ref_id" in json.dumps(
        chat[0]["function"]["parameters"]
    )
    assert wire_for("openai_chat").with_read_result(chat) == chat
    responses = wire_for("openai_responses").with_read_result([{"type": "function", "name": "x"}])
    assert [t["name"] for t in responses] == ["x", "read_result"] and responses[1]["type"] == "function"


SMALL = Settings.from_dict(
    {"models": {MODEL: {"context_window": 8000, "max_output_tokens": 500, "buffer_tokens": 0}}}
)


def _chat_history(turns: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Agent."}]
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Step {i}: the parser must keep rule {i}. " * 15},
            {"role": "assistant", "content": f"Done with step {i}; rule {i} holds. " * 15},
        ]
    return [*messages, {"role": "user", "content": "What next?"}]


def _responses_history(turns: int) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = [{"type": "message", "role": "developer", "content": "Agent."}]
    for i in range(turns):
        items += [
            {"type": "message", "role": "user", "content": f"Step {i}: the parser must keep rule {i}. " * 15},
            {"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"rule {i} holds. " * 30},
        ]
    return [*items, {"type": "message", "role": "user", "content": "What next?"}]


@pytest.mark.parametrize(("api", "key", "history"), [
    ("openai_chat", "messages", _chat_history), ("openai_responses", "input", _responses_history),
])  # fmt: skip
def test_openai_compaction_keeps_the_system_head_and_resends_the_same_bytes(api, key, history) -> None:
    policies = Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.5))
    resolved = resolve_model_settings(MODEL, "openai", SMALL)
    tokenizer = get_tokenizer(resolved.tokenizer)
    state = SessionPolicyState()
    original = {"model": MODEL, key: history(12)}
    first = plan_edits(api, original, policies, tokenizer=tokenizer, resolved=resolved, state=state)
    (edit,) = first.edits
    assert edit.policy == "compaction" and edit.after_tokens < edit.before_tokens
    assert edit.after_tokens <= 0.5 * resolved.budget_tokens
    sent = first.body[key]
    assert sent[0] == original[key][0] and sent[-1] == original[key][-1]
    assert state.compacted_keys == [identity_hash(m) for m in original[key][1:]]
    if api == "openai_responses":  # tool calls and outputs stay paired in what is sent
        calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
        assert calls == {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
    grown = {"model": MODEL, key: [*original[key], {"role": "assistant", "content": "Rule 12 next."},
                                   {"role": "user", "content": "Go."}]}  # fmt: skip
    second = plan_edits(api, grown, policies, tokenizer=tokenizer, resolved=resolved, state=state)
    assert second.body[key][: len(sent)] == sent  # the compacted prefix, byte for byte
    assert second.edits[0].changes[0]["reused"] is True and second.body[key][-1] == {
        "role": "user",
        "content": "Go.",
    }


def test_chat_compaction_through_the_proxy_is_recorded_and_the_upstream_gets_the_compacted_history(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(
        f'[models."{MODEL}"]\ncontext_window = 8000\nmax_output_tokens = 500\nbuffer_tokens = 0\n'
        '[policies]\ncompaction = { strategy = "chain", trigger = 0.5 }\n',
        encoding="utf-8",
    )
    server, db = C.install(ScriptedServer(default=C.chat_text("ok"))), tmp_path / "p.db"
    messages = _chat_history(12)
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(openai=server.base_url + "/v1"), settings_file=settings) as proxy,
    ):
        client = opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="sk-x", max_retries=0,
                                      default_headers={"X-Ctxdesk-Session": "cc"}))  # fmt: skip
        assert (
            client.chat.completions.create(model=MODEL, messages=messages).choices[0].message.content == "ok"
        )
        assert proxy.recorder.flush()
    (sent,) = (r.body["messages"] for r in server.requests)
    assert len(json.dumps(sent)) < len(json.dumps(messages)) / 2 and sent[0] == messages[0]
    with SessionStore(db, read_only=True) as store:
        (event,) = [
            e for e in store.list_events("cc", kind="compaction") if e.details["policy"] == "compaction"
        ]
        assert event.details["after_tokens"] < event.details["before_tokens"]
        assert sorted(r.source for r in store.list_requests("cc")) == ["proxy", "proxy:original"]


def test_responses_compaction_through_the_proxy_keeps_the_developer_head_and_records_the_edit(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(
        f'[models."{MODEL}"]\ncontext_window = 8000\nmax_output_tokens = 500\nbuffer_tokens = 0\n'
        '[policies]\ncompaction = { strategy = "chain", trigger = 0.5 }\n',
        encoding="utf-8",
    )
    server, db = R.install(ScriptedServer(default="ok")), tmp_path / "p.db"
    items = _responses_history(12)
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(openai=server.base_url + "/v1"), settings_file=settings) as proxy,
    ):
        client = opened(openai.OpenAI(base_url=proxy.base_url + "/v1", api_key="sk-x", max_retries=0,
                                      default_headers={"X-Ctxdesk-Session": "rc"}))  # fmt: skip
        events = list(client.responses.create(model=MODEL, input=items, stream=True))
        assert events[-1].response.output_text == "ok"
        assert proxy.recorder.flush()
    (sent,) = (r.body["input"] for r in server.requests)
    assert (
        sent[0] == items[0] and sent[-1] == items[-1] and len(json.dumps(sent)) < len(json.dumps(items)) / 2
    )
    calls = {i["call_id"] for i in sent if i.get("type") == "function_call"}
    assert calls == {i["call_id"] for i in sent if i.get("type") == "function_call_output"}
    with SessionStore(db, read_only=True) as store:
        (event,) = [
            e for e in store.list_events("rc", kind="compaction") if e.details["policy"] == "compaction"
        ]
        assert event.details["after_tokens"] < event.details["before_tokens"]
