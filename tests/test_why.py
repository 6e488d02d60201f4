"""Why a session ended and why it compacted (engine.explain): named cases on tiny stored sessions
(real SQLite, real tiktoken), then the demo databases and the real agents' fixtures."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from engine.call_failures import failure_details
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.explain import (
    END_CAUSES,
    FailedCall,
    SessionExplanation,
    agent_threshold,
    checked_json,
    explain_store,
    failure_summaries,
)
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data"


# -- builders ------------------------------------------------------------------------------------


def reply(text: str = "done", *uses: Any, stop: str | None = None) -> Message:
    message = assistant(text, *uses)
    return message.model_copy(update={"meta": {"stop_reason": stop}}) if stop else message


def request(**details: Any) -> dict[str, Any]:
    """A request event after the next assistant message (its details)."""
    return details


def session(
    store: SessionStore,
    messages: Sequence[Message],
    *,
    source: str = "engine",
    events: Sequence[tuple[str, ContextEvent]] = (),
    requests: dict[int, dict[str, Any]] | None = None,
    metadata: dict[str, Any] | None = None,
    window: int | None = 200_000,
) -> str:
    """A stored session: one request event per assistant message (details from ``requests`` by the
    reply's index), then ``events`` placed ``("after", n)``: after the n-th request (0: first)."""
    tokenizer = get_tokenizer("claude-sonnet-4-5")
    sid = store.create_session(
        model="claude-sonnet-4-5", provider="anthropic", tokenizer=tokenizer.id, source=source
    )
    if metadata:
        store.update_session(sid, metadata=metadata)
    rows = store.append_messages(sid, messages, tokenizer=tokenizer)
    replies = [r for r in rows if r.message.role == "assistant"]
    placed: dict[int, list[ContextEvent]] = {}
    for where, event in events:
        placed.setdefault(int(where), []).append(event)
    for event in placed.get(0, []):
        store.record_event(sid, event)
    for i, row in enumerate(replies, 1):
        details = dict((requests or {}).get(i, {}))
        usage = details.pop("usage", ProviderUsage(input_tokens=100, output_tokens=10))
        outcome = "provider_error" if "failure" in details else "ok"
        store.record_event(
            sid,
            ContextEvent(
                kind="request", outcome=outcome, turn_index=row.turn_index, message_seq=row.seq,
                context_window=window, limit_tokens=window,
                usage=None if "failure" in details else usage,
                components=ComponentTokens(conversation=100), details={"messages_sent": row.seq, **details},
            ),
        )  # fmt: skip
        for event in placed.get(i, []):
            store.record_event(sid, event)
    return sid


def explain(store: SessionStore, sid: str) -> SessionExplanation:
    [out] = explain_store(store, [sid]).sessions
    return out


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "why.db")


def failed(cause: str, status: int, message: str) -> dict[str, Any]:
    return {"failure": failure_details(cause, status=status, message=message)}  # type: ignore[arg-type]


# -- how a session ended ---------------------------------------------------------------------------

ENDINGS: list[tuple[str, dict[str, Any], str, int | None]] = [
    ("the model ended its turn", {"messages": [user("hi"), reply("hello", stop="end_turn")]}, "finished", 1),
    (
        "a text answer with no stop reason recorded",
        {"messages": [user("hi"), reply("hello")]},
        "finished",
        1,
    ),
    (
        "the reply was cut at max_tokens",
        {
            "messages": [user("write it all"), reply("def a():")],
            "requests": {1: request(stop_reason="max_tokens")},
        },
        "max_tokens",
        1,
    ),
    ("OpenAI's length", {"messages": [user("go"), reply("partial", stop="length")]}, "max_tokens", 1),
    ("a refusal", {"messages": [user("do harm"), reply("", stop="refusal")]}, "refusal", 1),
    (
        "a tool call left without a result",
        {"messages": [user("list"), reply("", tool_use("t1", "Bash", command="ls"))]},
        "interrupted",
        1,
    ),
    (
        "the user pressed Esc",
        {"messages": [user("go"), reply("working"), user("[Request interrupted by user]")]},
        "interrupted",
        1,
    ),
    (
        "the transcript stops after a tool result",
        {
            "messages": [
                user("list"),
                reply("", tool_use("t1", "Bash", command="ls")),
                tool_result("t1", "a b"),
            ]
        },
        "interrupted",
        1,
    ),
    (
        "the last call was refused as too long",
        {
            "messages": [user("go"), reply("ok"), user("more"), reply("")],
            "requests": {
                2: failed("prompt_too_long", 400, "prompt is too long: 212301 tokens > 200000 maximum")
            },
        },
        "prompt_too_long",
        2,
    ),
    (
        "the last call hit a rate limit",
        {
            "messages": [user("go"), reply("")],
            "requests": {1: failed("rate_limited", 429, "rate_limit_error")},
        },
        "provider_error",
        1,
    ),
    (
        "a final-answer tool",
        {"messages": [user("fix"), reply("", tool_use("t1", "finish", outputs={})), tool_result("t1", "ok")]},
        "finished",
        1,
    ),
    (
        "SWE-agent's exit status",
        {"messages": [user("fix"), reply("done")], "metadata": {"exit_status": "exit_context"}},
        "prompt_too_long",
        1,
    ),
    ("an unknown stop reason", {"messages": [user("hi"), reply("x", stop="weird_reason")]}, "unknown", 1),
    ("nothing recorded", {"messages": []}, "unknown", None),
]


@pytest.mark.parametrize(("name", "spec", "cause", "call"), ENDINGS, ids=[c[0] for c in ENDINGS])
def test_how_a_session_ended(
    store: SessionStore, name: str, spec: dict[str, Any], cause: str, call: int | None
) -> None:
    sid = session(store, spec["messages"], requests=spec.get("requests"), metadata=spec.get("metadata"))
    ended = explain(store, sid).ended
    assert (ended.cause, ended.call) == (cause, call), ended.detail
    assert ended.detail


def test_a_forced_final_turn_is_ctxdesks_guard(store: SessionStore) -> None:
    guard = ContextEvent(
        kind="guard",
        trigger="turn_preflight",
        outcome="forced_final",
        turn_index=1,
        projected_tokens=7_812,
        limit_tokens=7_000,
    )
    sid = session(store, [user("a"), reply("b"), user("c"), reply("wrap up")], events=[("1", guard)])
    ended = explain(store, sid).ended
    assert ended.cause == "forced_final" and ended.call == 2
    assert "7,812" in ended.detail and "7,000" in ended.detail


def test_every_provider_skipped_is_ctxdesks_stop_and_a_skipped_fallback_is_not(store: SessionStore) -> None:
    skipped = ContextEvent(
        kind="guard", trigger="turn_preflight", outcome="skipped_provider", turn_index=1, model="gpt-4o-mini"
    )
    sid = session(store, [user("a"), reply("b"), user("c")], events=[("1", skipped)])
    ended = explain(store, sid).ended
    assert (ended.cause, ended.call) == ("forced_final", 2) and "skipped gpt-4o-mini" in ended.detail
    served = session(
        store, [user("a"), reply("b"), user("c"), reply("d", stop="end_turn")], events=[("1", skipped)]
    )
    assert explain(store, served).ended.cause == "finished"


def test_a_proxy_refusal_the_agent_got_past_does_not_end_the_session(store: SessionStore) -> None:
    refused = ContextEvent(kind="guard", trigger="proxy_policy", outcome="rejected", turn_index=1)
    sid = session(
        store,
        [user("a"), reply("b"), user("c"), reply("shorter", stop="end_turn")],
        source="proxy",
        events=[("1", refused)],
    )
    assert explain(store, sid).ended.cause == "finished"


def test_a_refused_tool_result_is_the_cause_of_the_forced_final_turn_after_it(store: SessionStore) -> None:
    refused = ContextEvent(
        kind="guard", trigger="tool_preflight", outcome="rejected", turn_index=1, projected_tokens=13_231,
        limit_tokens=11_648, details={"final_forced": True},
    )  # fmt: skip
    forced = ContextEvent(
        kind="guard", trigger="turn_preflight", outcome="forced_final", turn_index=1, projected_tokens=7_812,
        limit_tokens=11_648,
    )  # fmt: skip
    sid = session(
        store, [user("a"), reply("b"), user("c"), reply("wrap up")], events=[("1", refused), ("1", forced)]
    )
    ended = explain(store, sid).ended
    assert ended.cause == "forced_final"
    assert "a tool result would not fit (projected 13,231 tokens against a limit of 11,648)" in ended.detail


def test_a_proxy_policy_refusal(store: SessionStore) -> None:
    refused = ContextEvent(
        kind="guard",
        trigger="proxy_policy",
        outcome="rejected",
        turn_index=1,
        reason="over the 50,000-token budget",
    )
    sid = session(store, [user("a"), reply("b"), user("c")], source="proxy", events=[("1", refused)])
    ended = explain(store, sid).ended
    assert (ended.cause, ended.call) == ("policy_refused", 2)
    assert "50,000-token budget" in ended.detail


# -- compactions -----------------------------------------------------------------------------------


def compaction(trigger: str = "compact_threshold", **details: Any) -> ContextEvent:
    return ContextEvent(
        kind="compaction", trigger=trigger, outcome="compacted", turn_index=1,
        details={"before_tokens": 170_000, "after_tokens": 9_000, "removed_message_seqs": [0, 1], **details},
    )  # fmt: skip


CONVERSATION = [
    user("read app.py"),
    reply("app.py returns 42"),
    user("now util.py"),
    reply("util doubles x", stop="end_turn"),
]

COMPACTIONS: list[tuple[str, str, ContextEvent, dict[int, dict[str, Any]], dict[str, Any]]] = [
    (
        "Claude Code's default auto-compact point",
        "import:claude-code",
        compaction(source="import:claude-code", harness="claude-code"),
        {},
        {
            "by": "agent",
            "trigger": "auto",
            "threshold_tokens": 167_000,
            "call": 1,
            "sentence": "Claude Code compacted itself at call 1: its estimate reached 170,000 tokens, past its compaction point of 167,000 "
            "(auto-compact at limit 180,000 − 13,000)",
        },
    ),
    (
        "Claude Code with CLAUDE_AUTOCOMPACT_PCT_OVERRIDE",
        "import:claude-code",
        compaction(source="import:claude-code", agent_setting={"autocompact_pct_override": 80}),
        {},
        {"by": "agent", "trigger": "auto", "threshold_tokens": 144_000},
    ),
    (
        "Codex's model_auto_compact_token_limit",
        "import:codex",
        compaction(source="import:codex", agent_setting={"model_auto_compact_token_limit": 12_000}),
        {},
        {"by": "agent", "trigger": "auto", "threshold_tokens": 12_000},
    ),
    (
        "Gemini CLI's compressionThreshold",
        "import:gemini",
        compaction(source="import:gemini", agent_setting={"compressionThreshold": 0.7}),
        {},
        {"by": "agent", "trigger": "auto", "threshold_tokens": 140_000},
    ),
    (
        "reactive after a prompt-too-long",
        "import:claude-code",
        compaction(source="import:claude-code"),
        {1: failed("prompt_too_long", 400, "prompt is too long: 212301 tokens > 200000 maximum")},
        {"by": "agent", "trigger": "reactive", "after_failed_call": 1, "call": 1},
    ),
    (
        "a manual /compact with instructions",
        "import:claude-code",
        compaction("manual", source="import:claude-code", instructions="keep the API notes"),
        {},
        {"by": "user", "trigger": "manual", "instructions": "keep the API notes"},
    ),
    (
        "a proxy policy",
        "proxy",
        compaction("proxy_policy", policy="clear_tool_results"),
        {},
        {"by": "proxy", "trigger": "policy"},
    ),
    (
        "ctxdesk's threshold",
        "engine",
        compaction("compact_threshold"),
        {},
        {"by": "ctxdesk", "trigger": "threshold", "threshold_tokens": 190_000, "limit_tokens": 200_000},
    ),
    (
        "recorded by and trigger_kind win",
        "import:codex",
        compaction(source="import:codex", by="user", trigger_kind="manual"),
        {},
        {"by": "user", "trigger": "manual"},
    ),
]


@pytest.mark.parametrize(
    ("name", "source", "event", "requests", "expected"), COMPACTIONS, ids=[c[0] for c in COMPACTIONS]
)
def test_who_compacted_and_why(
    store: SessionStore,
    name: str,
    source: str,
    event: ContextEvent,
    requests: dict[int, dict[str, Any]],
    expected: dict[str, Any],
) -> None:
    sid = session(store, CONVERSATION, source=source, events=[("1", event)], requests=requests)
    [c] = explain(store, sid).compactions
    got = c.model_dump()
    assert {k: got[k] for k in expected if k != "sentence"} == {
        k: v for k, v in expected.items() if k != "sentence"
    }
    if "sentence" in expected:
        assert c.sentence == expected["sentence"]
    assert c.tokens_before == 170_000 and c.tokens_after == 9_000


def test_claude_codes_estimate_below_its_point_with_the_providers_count_past_it(store: SessionStore) -> None:
    """Claude Code compares the provider's count of the last call; its own estimate (preTokens) is lower."""
    event = compaction(source="import:claude-code", before_tokens=155_979)
    counted = {
        1: {"usage": ProviderUsage(input_tokens=3, cache_read_input_tokens=166_000, output_tokens=1_200)}
    }
    sid = session(store, CONVERSATION, source="import:claude-code", events=[("1", event)], requests=counted)
    [c] = explain(store, sid).compactions
    assert c.sentence == (
        "Claude Code compacted itself at call 1: its estimate reached 155,979 of 167,000 tokens "
        "(auto-compact at limit 180,000 − 13,000); the provider counted 167,203 for call 1"
    )


def test_a_reactive_compaction_names_the_refused_call_first(store: SessionStore) -> None:
    sid = session(
        store, CONVERSATION, source="import:claude-code", events=[("1", compaction(source="import:claude-code"))],
        requests={1: failed("prompt_too_long", 400, "prompt is too long: 212301 tokens > 200000 maximum")},
    )  # fmt: skip
    why = explain(store, sid)
    [f] = why.failed_calls
    assert (f.call, f.cause, f.status, f.prompt_tokens, f.maximum_tokens) == (
        1,
        "prompt_too_long",
        400,
        212_301,
        200_000,
    )
    assert f.next == "compacted reactively, then sent call 2"
    assert why.headline == (
        "The provider refused call 1: prompt is too long (212,301 > 200,000); "
        "Claude Code then compacted reactively, then sent call 2"
    )


def test_a_failed_calls_message_is_redacted(store: SessionStore) -> None:
    secret = "sk-ant-api03-" + "x" * 40
    sid = session(
        store, [user("go"), reply(""), user("again"), reply("ok")],
        requests={1: {"failure": {"cause": "provider_error", "status": 500, "message": f"bad key {secret}"}}},
    )  # fmt: skip
    [f] = explain(store, sid).failed_calls
    assert secret not in (f.message or "") and f.next == "sent call 2 (a later turn)"


def _failed(
    call: int, next_: str, message: str = "500 internal server error", cause: str = "provider_error"
) -> FailedCall:
    return FailedCall(event_seq=call, call=call, cause=cause, status=500, message=message, next=next_)


@pytest.mark.parametrize(
    ("failed", "said"),
    [
        pytest.param(
            [
                *(_failed(n, f"retried as call {n + 1}") for n in range(1, 11)),
                _failed(11, "stopped: no call followed", "API Error"),
            ],
            [
                "The provider answered calls 1 to 10 with an error, status 500 (500 internal server error); "
                "Claude Code retried each one, as calls 2 to 11",
                "The provider answered call 11 with an error, status 500 (API Error); Claude Code then stopped: no call followed",
            ],
            id="ten retries, then another failure",
        ),
        pytest.param(
            [
                _failed(1, "retried as call 2"),
                _failed(2, "retried as call 3"),
                _failed(3, "stopped: no call followed"),
            ],
            [
                "The provider answered calls 1 to 3 with an error, status 500 (500 internal server error); "
                "Claude Code retried each but the last, as calls 2 to 3, then stopped: no call followed"
            ],
            id="retries of one failure until the agent stopped",
        ),
        pytest.param(
            [_failed(1, "sent call 2 (a later turn)"), _failed(2, "stopped: no call followed")],
            [
                "The provider answered call 1 with an error, status 500 (500 internal server error); "
                "Claude Code then sent call 2 (a later turn)",
                "The provider answered call 2 with an error, status 500 (500 internal server error); "
                "Claude Code then stopped: no call followed",
            ],
            id="not a retry: two sentences",
        ),
        pytest.param(
            [
                _failed(1, "retried as call 2", cause="interrupted"),
                _failed(2, "retried as call 3", cause="interrupted"),
            ],
            [
                "Calls 1 to 2 were interrupted before their answers came; Claude Code retried each one, as calls 2 to 3"
            ],
            id="interrupted",
        ),
    ],
)
def test_a_run_of_retries_of_one_failure_is_one_sentence(failed: list[FailedCall], said: list[str]) -> None:
    assert failure_summaries(failed, "Claude Code") == said


def test_claude_codes_ten_retries_of_a_500_read_as_one_sentence_on_the_why_page(tmp_path: Path) -> None:
    from dashboard.analysis.why import sentences
    from engine.importers import import_files
    from engine.importers.locations import folder_files

    real_run = Path(__file__).parent / "fixtures/real_agents/claude-code/provider_error"
    with SessionStore(tmp_path / "why.db") as store:
        import_files(folder_files(real_run), store, on_error=lambda path, exc: None)
        [why] = [s for s in explain_store(store).sessions if s.failed_calls]
    said = sentences(why)
    assert len(why.failed_calls) == 11 and len(said) == 2
    assert said[0].startswith("The provider answered calls 1 to 10 with an error, status 500")
    assert said[0].endswith("Claude Code retried each one, as calls 2 to 11")


def test_agent_thresholds_without_a_window_say_so() -> None:
    assert agent_threshold("claude-code", window=None).tokens is None  # type: ignore[union-attr]
    assert agent_threshold("aider", window=200_000) is None
    gemini = agent_threshold("gemini", window=1_048_576)
    assert (
        gemini is not None and gemini.tokens == 524_288 and "default compressionThreshold 0.5" in gemini.rule
    )
    small = agent_threshold("qwen", window=32_768)  # less than the reserve and buffer: 0.85 of it
    assert small is not None and small.tokens == 27_852, small
    mid = agent_threshold("qwen", window=131_072)  # the window less the reserve and buffer, below 0.85 of it
    assert (
        mid is not None and mid.tokens == 98_072 and mid.rule.startswith("window 131,072 − 20,000 − 13,000")
    )
    large = agent_threshold("qwen", window=1_000_000)  # 0.85 of it is below the window less 33,000
    assert large is not None and large.tokens == 850_000 and "default autoCompactThreshold 0.85" in large.rule
    set_low = agent_threshold("qwen", window=131_072, setting={"autoCompactThreshold": 0.5})
    assert (
        set_low is not None
        and set_low.tokens == 65_536
        and set_low.rule.startswith("autoCompactThreshold 0.5")
    )


def test_codex_compacts_at_the_lesser_of_its_setting_and_nine_tenths_of_the_window() -> None:
    """Codex's ModelInfo::auto_compact_token_limit: min(model_auto_compact_token_limit, window × 9/10),
    of the model's whole window; a rollout records 95% of it (gpt-5.5: 258,400 of 272,000)."""
    default = agent_threshold("codex", window=258_400)
    assert default is not None and default.tokens == 244_800, default
    assert default.rule == "Codex's default: 90% of the window 272,000 (the file records 95% of it, 258,400)"
    configured = agent_threshold("codex", window=60_800, setting={"model_context_window": 64_000})
    assert (
        configured is not None
        and configured.tokens == 57_600
        and "model_context_window 64,000" in configured.rule
    )
    lower = agent_threshold(
        "codex",
        window=60_800,
        setting={"model_auto_compact_token_limit": 20_000, "model_context_window": 64_000},
    )
    assert lower is not None and (lower.tokens, lower.rule) == (
        20_000,
        "model_auto_compact_token_limit = 20,000",
    )
    higher = agent_threshold("codex", window=258_400, setting={"model_auto_compact_token_limit": 250_000})
    assert higher is not None and higher.tokens == 244_800
    assert higher.rule.endswith("below model_auto_compact_token_limit = 250,000"), higher.rule
    unknown = agent_threshold("codex", window=None)
    assert unknown is not None and unknown.tokens is None and "does not record" in unknown.rule


# -- what a compaction kept and dropped ------------------------------------------------------------

CAVEAT = (
    "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to "
    "these messages or otherwise consider them in your response unless the user explicitly asks you to."
)


def test_kept_and_dropped_without_false_alarms(store: SessionStore) -> None:
    messages = [
        user("Never touch the migrations folder."),
        user(CAVEAT),
        reply("", tool_use("t1", "Read", file_path="/repo/app.py")),
        tool_result("t1", "def main():\n    return 42\n"),
        reply("", tool_use("t2", "Bash", command="pytest -x tests/test_app.py")),
        tool_result("t2", "FAILED tests/test_app.py::test_main - AssertionError\nexit code 1", is_error=True),
        reply("", tool_use("t3", "Read", file_path="/repo/util.py")),
        tool_result("t3", "def helper(x):\n    return x * 2\n"),
        reply("", tool_use("t4", "Edit", file_path="/repo/util.py", old_string="2", new_string="3")),
        tool_result("t4", "ok"),
        reply("done", stop="end_turn"),
    ]
    event = compaction(
        source="import:claude-code", removed_message_seqs=list(range(8)),
        summary="The user asked about app.py; main() returns 42.",
    )  # fmt: skip
    sid = session(store, messages, source="import:claude-code", events=[("3", event)])
    [c] = explain(store, sid).compactions
    kept = {(i.kind, i.text) for i in c.kept}
    dropped = {(i.kind, i.text) for i in c.dropped}
    assert ("file", "/repo/app.py") in kept  # named in the summary
    assert ("file", "/repo/util.py") in kept  # an Edit refers to it again after the compaction
    assert ("instruction", "Never touch the migrations folder.") in dropped
    assert ("command", "pytest -x tests/test_app.py") in dropped
    assert any(kind == "error" for kind, _ in dropped)
    assert not any("Caveat" in text or "DO NOT respond" in text for _, text in kept | dropped)
    util = next(i for i in c.kept if i.text == "/repo/util.py")
    assert "referred to again by Edit" in (util.detail or "")


# -- the demo databases ----------------------------------------------------------------------------


def test_the_demo_keeps_its_forced_final_explanation() -> None:
    with SessionStore(DEMO / "demo-guard-limits.db", read_only=True) as store:
        report = {s.session_id: s for s in explain_store(store).sessions}
    forced = report["demo-small-window-final-5aacc716"]
    assert forced.ended.cause == "forced_final"
    assert forced.headline.startswith("ctxdesk's guard forced a final turn")
    overflow = report["demo-gateway-overflow-5034274d"]
    [f] = overflow.failed_calls
    [c] = overflow.compactions
    assert f.cause == "prompt_too_long" and c.trigger == "reactive" and c.after_failed_call == f.call
    assert overflow.ended.cause == "finished"


def test_the_demo_compactions_name_the_guards_estimate() -> None:
    with SessionStore(DEMO / "demo-coding-agent.db", read_only=True) as store:
        report = explain_store(store)
    compactions = [c for s in report.sessions for c in s.compactions]
    assert {c.by for c in compactions} == {"ctxdesk", "agent", "user"}
    for c in compactions:
        if c.trigger == "threshold":
            assert c.reached_tokens is not None and c.threshold_tokens is not None
            assert c.reached_tokens >= c.threshold_tokens, c.sentence  # the estimate it compared did cross it


def test_without_detail_the_endings_are_the_same_and_nothing_is_listed() -> None:
    """The Sessions page's "ended how" reads only the end of each transcript: the same answers."""
    with SessionStore(DEMO / "demo-coding-agent.db", read_only=True) as store:
        full, light = explain_store(store), explain_store(store, detail=False)
    for a, b in zip(full.sessions, light.sessions, strict=True):
        assert (a.ended, a.headline, a.ended_how) == (b.ended, b.headline, b.ended_how)
        assert [c.sentence for c in a.compactions] == [c.sentence for c in b.compactions]
        assert all(c.kept == () and c.dropped == () for c in b.compactions)
    assert any(c.kept for s in full.sessions for c in s.compactions)


def test_a_cleared_result_is_dropped_content_even_though_its_call_stays(store: SessionStore) -> None:
    messages = [
        user("read it"),
        reply("", tool_use("t1", "Read", file_path="/repo/app.py")),
        tool_result("t1", "def main():\n    return 42\n"),
        reply("app.py returns 42", stop="end_turn"),
    ]
    clearing = ContextEvent(
        kind="compaction", trigger="compact_threshold", outcome="compacted", turn_index=0,
        details={"before_tokens": 900, "after_tokens": 300, "removed_message_seqs": [], "cleared_message_seqs": [2]},
    )  # fmt: skip
    sid = session(store, messages, events=[("2", clearing)])
    [c] = explain(store, sid).compactions
    [item] = c.dropped
    assert (item.kind, item.text, c.kept) == ("file", "/repo/app.py", ())
    assert item.detail == "read at message 1; its content cleared, the call naming it kept"


# -- invariants ------------------------------------------------------------------------------------


STEPS = hs.lists(
    hs.sampled_from(["user", "text", "tool", "result", "interrupt", "fail", "compact", "force", "refuse"]),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(steps=STEPS, stop=hs.sampled_from([None, "end_turn", "max_tokens", "refusal", "length", "odd"]))
def test_any_session_gets_an_ending_in_the_vocabulary_and_valid_json(
    tmp_path_factory: pytest.TempPathFactory, steps: list[str], stop: str | None
) -> None:
    """Whatever a source recorded, in whatever order: one of the documented causes, a call that
    exists, and JSON in the documented shape."""
    messages: list[Message] = []
    requests: dict[int, dict[str, Any]] = {}
    events: list[tuple[str, ContextEvent]] = []
    open_tool = 0
    for i, step in enumerate(steps):
        replies = sum(1 for m in messages if m.role == "assistant")
        if step == "user":
            messages.append(user(f"do thing {i}"))
        elif step == "text":
            messages.append(reply(f"answer {i}", stop=stop))
        elif step == "tool":
            open_tool = i
            messages.append(reply("", tool_use(f"t{i}", "Read", file_path=f"/repo/f{i}.py")))
        elif step == "result" and open_tool:
            messages.append(tool_result(f"t{open_tool}", "contents"))
            open_tool = 0
        elif step == "interrupt":
            messages.append(user("[Request interrupted by user]"))
        elif step == "fail":
            messages.append(reply(""))
            requests[replies + 1] = failed("prompt_too_long", 400, "prompt is too long: 9 tokens > 8 maximum")
        elif step == "compact":
            events.append((str(replies), compaction(removed_message_seqs=list(range(len(messages))))))
        elif step == "force":
            events.append((str(replies), ContextEvent(kind="guard", outcome="forced_final", turn_index=0)))
        elif step == "refuse":
            events.append(
                (str(replies), ContextEvent(kind="guard", trigger="proxy_policy", outcome="rejected"))
            )
    with SessionStore(tmp_path_factory.mktemp("inv") / "s.db") as store:
        sid = session(store, messages, events=events, requests=requests)
        report = explain_store(store, [sid])
    [why] = report.sessions
    assert why.ended.cause in END_CAUSES and why.ended.detail
    assert why.ended.call is None or 1 <= why.ended.call <= why.calls + 1
    assert why.headline
    checked_json(report.to_json())
