"""In-flight policies: clearing old tool results (sticky, byte-stable), the guard's refusal in the
provider's own shape, hot reload of the settings file, every edit recorded with the original."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.compaction.clearing import CLEARED_PREFIX, is_cleared
from engine.errors import ConfigError
from engine.messages import ToolResultBlock
from engine.policy_settings import ClearToolResultsPolicy, CompactionPolicy, GuardPolicy, Policies
from engine.proxy import ProxyServer, Upstreams
from engine.proxy.policy.edits import SessionPolicyState
from engine.proxy.policy.policies import plan_edits
from engine.proxy.policy.policy_file import load_policy_file
from engine.settings import Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

MODEL = "claude-sonnet-4-6"
TOKENIZER = get_tokenizer("anthropic")
POLICY_TOML = """
[policies]
clear_tool_results = { trigger = 0, keep = 1, exclude_tools = ["Skill"] }
"""


def tool_round(i: int, name: str = "Read", size: int = 400) -> list[dict[str, Any]]:
    return [
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": f"t{i}", "name": name, "input": {"n": i}}],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": f"out{i} " * size}],
        },
    ]


def body_with(rounds: int, names: tuple[str, ...] = ()) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Go."}]
    for i in range(rounds):
        messages += tool_round(i, names[i] if i < len(names) else "Read")
    return {"model": MODEL, "max_tokens": 100, "system": "Agent.", "messages": messages}


def results_of(body: dict[str, Any]) -> dict[str, str]:
    return {
        b["tool_use_id"]: b["content"]
        for m in body["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b["type"] == "tool_result"
    }


def plan(
    body: dict[str, Any], policies: Policies, state: SessionPolicyState, settings: Settings | None = None
):  # type: ignore[no-untyped-def]
    resolved = resolve_model_settings(MODEL, "anthropic", settings)
    return plan_edits(
        "anthropic_messages", body, policies, tokenizer=TOKENIZER, resolved=resolved, state=state
    )


def test_old_tool_results_are_cleared_keeping_the_last_and_excluded_tools() -> None:
    policies = Policies(
        clear_tool_results=ClearToolResultsPolicy(trigger=0, keep=1, exclude_tools=("Skill",))
    )
    sent = body_with(4, names=("Read", "Skill", "Read", "Read"))
    outcome = plan(sent, policies, SessionPolicyState())
    results = results_of(outcome.body)
    # the engine's own placeholder (engine.compaction.clearing), which is_cleared recognises
    assert results["t0"].startswith(f'{CLEARED_PREFIX} — 2,000 bytes from "Read"')
    assert is_cleared(ToolResultBlock(tool_use_id="t0", content=results["t0"]))
    assert results["t1"] == results_of(sent)["t1"]  # Skill is excluded
    assert results["t2"].startswith(CLEARED_PREFIX) and results["t3"] == results_of(sent)["t3"]
    (edit,) = outcome.edits
    assert edit.policy == "clear_tool_results" and edit.after_tokens < edit.before_tokens
    assert {c["tool_use_id"] for c in edit.changes} == {"t0", "t2"}
    assert [ref for ref, _, _ in outcome.blobs] == [c["ref"] for c in edit.changes]
    assert sent == body_with(4, names=("Read", "Skill", "Read", "Read"))  # the input is left alone


def test_cleared_results_stay_cleared_so_the_sent_prefix_is_byte_stable() -> None:
    policies = Policies(clear_tool_results=ClearToolResultsPolicy(trigger=0, keep=1))
    state = SessionPolicyState()
    sent = []
    for rounds in range(1, 6):
        outcome = plan(body_with(rounds), policies, state)
        sent.append((outcome.body or body_with(rounds))["messages"])
    for earlier, later in itertools.pairwise(sent):
        # everything but the newest tool result of the earlier request is sent again unchanged
        assert json.dumps(later[: len(earlier) - 1]) == json.dumps(earlier[:-1])


def test_a_trigger_above_the_prompt_changes_nothing() -> None:
    outcome = plan(
        body_with(3), Policies(clear_tool_results=ClearToolResultsPolicy(trigger=10**6)), SessionPolicyState()
    )
    assert not outcome.changed and not outcome.edits


def test_the_guard_refuses_in_anthropics_own_words_over_the_effective_window() -> None:
    settings = Settings.from_dict(
        {"models": {MODEL: {"context_window": 2000, "max_output_tokens": 100, "buffer_tokens": 0}}}
    )
    outcome = plan(body_with(6), Policies(guard=GuardPolicy(action="error")), SessionPolicyState(), settings)
    status, error = outcome.refusal
    assert status == 400 and error["error"]["type"] == "invalid_request_error"
    assert (
        error["error"]["message"].startswith("prompt is too long: ")
        and "> 1900 maximum" in error["error"]["message"]
    )


def test_the_guard_compacts_first_when_told_to() -> None:
    settings = Settings.from_dict(
        {"models": {MODEL: {"context_window": 2000, "max_output_tokens": 100, "buffer_tokens": 0}}}
    )
    outcome = plan(
        body_with(6, names=()), Policies(guard=GuardPolicy(action="compact")), SessionPolicyState(), settings
    )
    assert outcome.refusal is None and outcome.changed
    assert outcome.edits[0].after_tokens <= 1900


def test_policy_settings_are_read_per_model_and_validated(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(
        POLICY_TOML
        + f'[models."{MODEL}"]\ncontext_window = 50000\n[models."{MODEL}".policies]\nguard = {{ action = "error" }}\n',
        encoding="utf-8",
    )
    settings, config = load_policy_file(path)
    assert settings.models[MODEL].context_window == 50000
    mine = config.for_model(MODEL, "anthropic")
    assert mine.guard == GuardPolicy(action="error") and mine.clear_tool_results.keep == 1
    assert config.for_model("gpt-4o", "openai").guard is None
    path.write_text("[policies]\nclear_tool_results = { keep = -1 }\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"policies\.clear_tool_results\.keep"):
        load_policy_file(path)


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with A.install(ScriptedServer(default=A.text("ok"))) as server:
        yield server


def test_through_the_proxy_the_model_gets_the_cleared_history_and_every_edit_is_recorded(
    upstream: ScriptedServer, tmp_path: Path
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(POLICY_TOML, encoding="utf-8")
    db = tmp_path / "p.db"
    with ProxyServer(db, upstreams=Upstreams(anthropic=upstream.base_url), settings_file=settings) as proxy:
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                     default_headers={"X-Ctxdesk-Session": "pol"}))  # fmt: skip
        for rounds in (1, 2, 3):
            sent = body_with(rounds)
            reply = client.messages.create(**{k: v for k, v in sent.items()})
            assert reply.content[0].text == "ok"
        assert proxy.recorder.flush()
    received = [r.body for r in upstream.requests]
    assert results_of(received[0]) == results_of(body_with(1))  # one result: kept
    assert results_of(received[2])["t0"].startswith(CLEARED_PREFIX) and results_of(received[2])[
        "t2"
    ].startswith("out2")
    with SessionStore(db, read_only=True) as store:
        requests = store.list_requests("pol", with_body=True)
        forwarded = [r.body for r in requests if r.source == "proxy"]
        originals = [r.body for r in requests if r.source == "proxy:original"]
        assert forwarded == received and originals == [body_with(2), body_with(3)]
        edits = store.list_events("pol", kind="compaction")
        assert [e.trigger for e in edits] == ["proxy_policy", "proxy_policy"]
        assert all(e.details["after_tokens"] < e.details["before_tokens"] for e in edits)
        ref = edits[-1].details["changes"][0]["ref"]
        assert store.get_blob(ref).content.decode() == body_with(1)["messages"][2]["content"][0]["content"]
        # the transcript is the agent's: original tool results, each once
        texts = [m.text for m in store.load_transcript("pol")]
        assert not any(CLEARED_PREFIX in t for t in texts)


def test_the_settings_file_is_reloaded_and_a_guard_refusal_never_reaches_the_upstream(
    upstream: ScriptedServer, tmp_path: Path
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("", encoding="utf-8")
    with ProxyServer(
        tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), settings_file=settings
    ) as proxy:
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0))
        client.messages.create(**body_with(6))
        assert len(upstream.requests) == 1
        settings.write_text(
            f'[models."{MODEL}"]\ncontext_window = 2000\nmax_output_tokens = 100\nbuffer_tokens = 0\n'
            '[policies]\nguard = { action = "error" }\n',
            encoding="utf-8",
        )
        time.sleep(0.7)
        with pytest.raises(anthropic.BadRequestError, match="prompt is too long"):
            client.messages.create(**body_with(6))
        assert len(upstream.requests) == 1
        settings.write_text("[policies]\nguard = { action = 'nonsense' }\n", encoding="utf-8")
        time.sleep(0.7)
        with pytest.raises(anthropic.BadRequestError):  # the last valid policies stay in force
            client.messages.create(**body_with(6))
        assert proxy.policy_file.error is not None
        assert proxy.recorder.flush()
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            guards = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="guard")]
    assert [g.outcome for g in guards] == ["rejected", "rejected"]


def _offload_upstream() -> ScriptedServer:
    """A model that, offered read_result with an offloaded note in the history, reads the rest once."""
    import re

    server = A.install(ScriptedServer(default=A.text("ok")))
    handler = next(h for m, p, h in server.routes if p == "/v1/messages")

    def model(srv: ScriptedServer, request: Any) -> Any:
        body = request.body
        text = json.dumps(body["messages"])
        names = [t.get("name") for t in body.get("tools") or []]
        asked = any(b.get("type") == "tool_use" and b.get("name") == "read_result"
                    for m in body["messages"] if isinstance(m["content"], list) for b in m["content"])  # fmt: skip
        if "read_result" in names and not asked:
            ref = re.search(r'ref_id=\\"(res_[0-9a-f]+)', text).group(1)
            srv.queue(A.tool_calls(("read_result", {"ref_id": ref, "pattern": "NEEDLE"})))
        elif asked:
            found = re.findall(r"NEEDLE-\d+", text)
            srv.queue(A.text(f"The output holds {found[-1]}."))
        return handler(srv, request)

    server.routes.insert(0, ("POST", "/v1/messages", model))
    return server


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_an_offloaded_result_is_read_back_by_the_proxy_and_the_agent_never_sees_the_extra_round(
    tmp_path: Path, stream: bool
) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("[policies]\noffload = { threshold_bytes = 2000 }\n", encoding="utf-8")
    big = "routine log line\n" * 400 + "NEEDLE-4242 found at the end\n"
    messages = [
        {"role": "user", "content": "Run the tests."},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {"cmd": "pytest"}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": big}]},
    ]
    server = _offload_upstream()
    db = tmp_path / "p.db"
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url), settings_file=settings) as proxy,
    ):
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                     default_headers={"X-Ctxdesk-Session": "off"}))  # fmt: skip
        bash = {"name": "Bash", "description": "Run", "input_schema": {"type": "object"}}
        if stream:
            with client.messages.stream(model=MODEL, max_tokens=100, messages=messages, tools=[bash]) as s:
                reply = s.get_final_message()
        else:
            reply = client.messages.create(model=MODEL, max_tokens=100, messages=messages, tools=[bash])
        assert proxy.recorder.flush()
    assert [b.type for b in reply.content] == ["text"] and reply.content[
        0
    ].text == "The output holds NEEDLE-4242."
    first, second = (r.body for r in server.requests)
    assert "NEEDLE" not in json.dumps(first["messages"]) and first["tools"][-1]["name"] == "read_result"
    assert second["messages"][-1]["content"][0]["content"].count("NEEDLE-4242") == 1
    with SessionStore(db, read_only=True) as store:
        requests = store.list_requests("off", with_body=True)
        assert sorted(r.source for r in requests) == ["proxy", "proxy:original", "proxy:read_result"]
        assert [m.text for m in store.load_transcript("off")][-1] == "The output holds NEEDLE-4242."
        assert not any("read_result" in json.dumps(m.model_dump()) for m in store.load_transcript("off"))
        offloads = [
            e for e in store.list_events("off", kind="compaction") if e.details["policy"] == "offload"
        ]
        ref = offloads[0].details["changes"][0]["ref"]
        assert store.get_blob(ref).content.decode() == big


def chat_body(turns: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        messages += [
            {"role": "user", "content": f"Step {i}: the parser must keep rule {i}. " * 15},
            {"role": "assistant", "content": f"Done with step {i}; rule {i} holds. " * 15},
        ]
    messages.append({"role": "user", "content": "What next?"})
    return {"model": MODEL, "max_tokens": 100, "system": "Agent.", "messages": messages}


def test_the_compaction_policy_compacts_over_its_trigger_and_resends_the_same_bytes() -> None:
    settings = Settings.from_dict(
        {"models": {MODEL: {"context_window": 8000, "max_output_tokens": 500, "buffer_tokens": 0}}}
    )
    policies = Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.5))
    state = SessionPolicyState()
    first = plan(chat_body(12), policies, state, settings)
    (edit,) = first.edits
    assert edit.policy == "compaction" and edit.after_tokens < edit.before_tokens <= 10**6
    assert edit.after_tokens <= 0.5 * 7500
    sent = first.body["messages"]
    assert sent[-1] == chat_body(12)["messages"][-1] and [m["role"] for m in sent][:1] == ["user"]
    grown = chat_body(12)
    grown["messages"] += [
        {"role": "assistant", "content": "Rule 12 next."},
        {"role": "user", "content": "Go."},
    ]
    second = plan(grown, policies, state, settings)
    assert second.body["messages"][: len(sent)] == sent  # the compacted prefix, byte for byte
    assert second.edits[0].changes[0]["reused"] is True


def test_responses_api_function_outputs_are_cleared_too() -> None:
    items: list[dict[str, Any]] = [{"role": "user", "content": "Look around."}]
    for i in range(3):
        items += [
            {"type": "function_call", "call_id": f"c{i}", "name": "exec_command", "arguments": "{}"},
            {"type": "function_call_output", "call_id": f"c{i}", "output": f"listing {i} " * 200},
        ]
    body = {"model": "gpt-5", "input": items, "instructions": "Be brief."}
    outcome = plan_edits(
        "openai_responses", body, Policies(clear_tool_results=ClearToolResultsPolicy(trigger=0, keep=1)),
        tokenizer=get_tokenizer("o200k_base"), resolved=None, state=SessionPolicyState(),
    )  # fmt: skip
    outputs = [i["output"] for i in outcome.body["input"] if i.get("type") == "function_call_output"]
    assert outputs[0].startswith(f'{CLEARED_PREFIX} — 2,000 bytes from "exec_command"')
    assert outputs[1].startswith(CLEARED_PREFIX) and outputs[2].startswith("listing 2")


def _real_claude_code_bodies() -> list[dict[str, Any]]:
    root = Path(__file__).parent / "fixtures" / "real_agents" / "claude-code"
    bodies = []
    for log in sorted(root.glob("*/requests.jsonl")):
        for line in log.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            if entry["path"].startswith("/v1/messages") and isinstance(entry.get("body"), dict):
                bodies.append(entry["body"])
    return bodies


_CHAT_BODY = {
    "model": "gpt-4o",
    "tools": [{"type": "function", "function": {"name": "run", "parameters": {"type": "object"}}}],
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": [{"type": "text", "text": "Prefer rg."}]},
        {"role": "user", "content": "List files."},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "run", "arguments": "{\"cmd\": \"ls\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.py\nb.py\n" * 50},
        {"role": "assistant", "content": "Two files: 1.0 and 1"},
        None,
        "not a message",
    ],
}  # fmt: skip


def test_prompt_tokens_counted_per_message_equal_the_whole_request_measured_at_once():
    """prompt_tokens caches each distinct message's count; it must equal converting and measuring
    the whole request (real Claude Code requests, Chat Completions with system/developer/tool roles,
    odd entries), on first sight and from the cache."""
    from engine.budget import measure_components
    from engine.proxy.policy.edits import prompt_tokens
    from engine.proxy.wire import wire_for
    from engine.tokens import get_tokenizer

    def view_tokens(api: str, body: dict[str, Any], tokenizer: Any) -> int:
        view = wire_for(api).request_view(body)
        return measure_components(
            tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
        ).total

    cases = [("anthropic_messages", b) for b in _real_claude_code_bodies()] + [("openai_chat", _CHAT_BODY)]
    assert len(cases) > 20
    for name in ("anthropic", "o200k_base"):
        tokenizer = get_tokenizer(name)
        for api, body in cases:
            expected = view_tokens(api, body, tokenizer)
            assert prompt_tokens(wire_for(api), body, tokenizer) == expected
            assert prompt_tokens(wire_for(api), json.loads(json.dumps(body)), tokenizer) == expected  # cached
    edited = json.loads(json.dumps(_CHAT_BODY))
    edited["messages"][4]["content"] = "a.py\n"
    tokenizer = get_tokenizer("o200k_base")
    chat = wire_for("openai_chat")
    assert prompt_tokens(chat, edited, tokenizer) == view_tokens("openai_chat", edited, tokenizer)
    assert prompt_tokens(chat, edited, tokenizer) < prompt_tokens(chat, _CHAT_BODY, tokenizer)
