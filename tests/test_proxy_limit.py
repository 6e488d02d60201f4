"""The proxy's one limit (#29): the compaction trigger, the guard's refusal and the recorded
``limit_tokens`` are the same ``engine.limit.Limit`` (window − max output − buffer, capped by
``context_budget``); a failed call is recorded with ``details["failure"]`` (engine.call_failures)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.call_failures import failure_of
from engine.limit import Limit, recorded_limit
from engine.policy_settings import CompactionPolicy, GuardPolicy, Policies
from engine.proxy import ProxyServer, Upstreams
from engine.proxy.policy.edits import SessionPolicyState
from engine.proxy.policy.policies import plan_edits
from engine.settings import Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

MODEL = "claude-sonnet-4-6"
TOKENIZER = get_tokenizer("anthropic")
WINDOW, MAX_OUTPUT, BUFFER, BUDGET = 200_000, 32_000, 1_000, 50_000
SETTINGS_TOML = (
    f'[models."{MODEL}"]\ncontext_window = {WINDOW}\nmax_output_tokens = {MAX_OUTPUT}\n'
    f"buffer_tokens = {BUFFER}\ncontext_budget = {BUDGET}\n"
)
SETTINGS = Settings.from_dict(
    {
        "models": {
            MODEL: {
                "context_window": WINDOW,
                "max_output_tokens": MAX_OUTPUT,
                "buffer_tokens": BUFFER,
                "context_budget": BUDGET,
            }
        }
    }
)
LIMIT = Limit.of_settings(resolve_model_settings(MODEL, "anthropic", SETTINGS))


def body_of(tokens: int) -> dict[str, Any]:
    """A request of about ``tokens`` tokens of history over a few turns (something to compact)."""
    messages: list[dict[str, Any]] = []
    for i in range(8):
        messages.append({"role": "user", "content": f"question {i}: " + "alpha beta " * (tokens // 40)})
        messages.append({"role": "assistant", "content": f"answer {i}: " + "gamma delta " * (tokens // 40)})
    messages.append({"role": "user", "content": "And now?"})
    return {"model": MODEL, "max_tokens": 1000, "system": "Agent.", "messages": messages}


def plan(body: dict[str, Any], policies: Policies) -> Any:
    resolved = resolve_model_settings(MODEL, "anthropic", SETTINGS)
    return plan_edits(
        "anthropic_messages",
        body,
        policies,
        tokenizer=TOKENIZER,
        resolved=resolved,
        state=SessionPolicyState(),
    )


def tokens_of(body: dict[str, Any]) -> int:
    from engine.proxy.policy.edits import prompt_tokens
    from engine.proxy.wire import wire_for

    return prompt_tokens(wire_for("anthropic_messages"), body, TOKENIZER)


def test_the_limit_is_the_capped_one() -> None:
    assert LIMIT.tokens == BUDGET and LIMIT.uncapped == WINDOW - MAX_OUTPUT - BUFFER


@pytest.mark.parametrize(
    ("name", "tokens", "compacts"),
    [
        ("below half the capped limit: left alone", 20_000, False),
        ("over half the capped limit, far below half the uncapped one: compacted", 40_000, True),
    ],
)
def test_the_compaction_trigger_is_a_share_of_the_capped_limit(
    name: str, tokens: int, compacts: bool
) -> None:
    body = body_of(tokens)
    assert (tokens_of(body) > LIMIT.threshold(0.5)) is compacts, name
    assert tokens_of(body) < LIMIT.uncapped * 0.5
    outcome = plan(body, Policies(compaction=CompactionPolicy(strategy="sandwich", trigger=0.5)))
    assert outcome.changed is compacts, name
    if compacts:
        assert f"({LIMIT.threshold(0.5):,})" in outcome.edits[0].reason


@pytest.mark.parametrize(
    ("name", "tokens", "refused"),
    [
        ("inside the capped limit", 40_000, False),
        ("over the capped limit, inside the uncapped one", 70_000, True),
    ],
)
def test_the_guard_refuses_past_the_capped_limit(name: str, tokens: int, refused: bool) -> None:
    body = body_of(tokens)
    assert (tokens_of(body) > LIMIT.tokens) is refused and tokens_of(body) < LIMIT.uncapped, name
    outcome = plan(body, Policies(guard=GuardPolicy(action="error")))
    assert (outcome.refusal is not None) is refused, name
    if refused:
        message = outcome.refusal[1]["error"]["message"]
        assert message == f"prompt is too long: {tokens_of(body)} tokens > {LIMIT.tokens} maximum"


@pytest.fixture
def upstream() -> Iterator[ScriptedServer]:
    with A.install(ScriptedServer(default=A.text("ok"))) as server:
        yield server


def test_the_recorded_limit_is_the_one_the_policies_use(upstream: ScriptedServer, tmp_path: Path) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(SETTINGS_TOML, encoding="utf-8")
    with ProxyServer(
        tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url), settings_file=settings
    ) as proxy:
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "lim"}))  # fmt: skip
        client.messages.create(**body_of(2_000))
        assert proxy.recorder.flush()
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            (event,) = store.list_events("lim", kind="request")
    assert event.limit_tokens == recorded_limit(event) == LIMIT.tokens == BUDGET
    assert (event.context_window, event.max_output_tokens, event.buffer_tokens) == (
        WINDOW,
        MAX_OUTPUT,
        BUFFER,
    )
    assert event.remaining_tokens == BUDGET - event.projected_tokens
    assert event.details["max_tokens"] == 1000  # what the request itself asked for
    # the components add up to the provider's own count (the proxy saw every byte: nothing unattributed)
    assert event.components_basis == "reconciled" and event.components.unattributed == 0
    assert event.components.total == event.usage.prompt_tokens != event.projected_tokens


def failed_call(tmp_path: Path, upstream_url: str) -> Any:
    """The request event of one call through the proxy to ``upstream_url`` that the agent gets an error for."""
    with ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream_url)) as proxy:
        client = opened(anthropic.Anthropic(base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                                            default_headers={"X-Ctxdesk-Session": "f"}))  # fmt: skip
        with pytest.raises(anthropic.APIStatusError):
            client.messages.create(**body_of(100))
        assert proxy.recorder.flush()
        with SessionStore(proxy.recorder.db_path, read_only=True) as store:
            (event,) = store.list_events("f", kind="request")
    return event


@pytest.mark.parametrize(
    ("name", "reply", "outcome", "cause", "status"),
    [
        ("the provider's prompt-too-long", A.prompt_too_long(212_301, 200_000), "context_length_exceeded",
         "prompt_too_long", 400),
        ("overloaded", A.overloaded(), "provider_error", "overloaded", 529),
        ("rate limited", A.error(429, "rate_limit_error", "Number of request tokens has exceeded your rate limit"),
         "provider_error", "rate_limited", 429),
    ],
)  # fmt: skip
def test_a_failed_call_is_recorded_with_its_failure(
    upstream: ScriptedServer, tmp_path: Path, name: str, reply: Any, outcome: str, cause: str, status: int
) -> None:
    upstream.queue(reply)
    event = failed_call(tmp_path, upstream.base_url)
    failure = failure_of(event.details)
    assert event.outcome == outcome and failure is not None, name
    assert (failure["cause"], failure["status"]) == (cause, status), name
    assert event.usage is None
    if cause == "prompt_too_long":
        assert (failure["prompt_tokens"], failure["maximum_tokens"]) == (212_301, 200_000)


def test_an_unreachable_upstream_is_a_failed_call(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    event = failed_call(tmp_path, dead)
    failure = failure_of(event.details)
    assert event.outcome == "upstream_unreachable"
    assert (
        failure is not None and failure["cause"] == "provider_error" and "unreachable" in failure["message"]
    )
