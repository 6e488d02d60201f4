"""The what-if replay (#35.4): the provider's own context edits beside ctxdesk's, on recorded sessions."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from engine.events import ContextEvent, ProviderUsage
from engine.importers.api import import_file
from engine.importers.batch import import_files
from engine.importers.locations import folder_files
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.policy_settings import Policies
from engine.replay import (
    AnthropicCompact,
    AsSent,
    ClearToolUses,
    CtxdeskPolicies,
    OpenAICompaction,
    PromptCache,
    load_recorded_session,
    plan_server_compaction,
    replay_session,
)
from engine.replay.cache import ANTHROPIC_CACHE, OPENAI_CACHE, CacheRules
from engine.replay.provider import CLEARED_PLACEHOLDER, clear_tool_uses
from engine.settings import resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
REAL = ROOT / "tests" / "fixtures" / "real_agents"
SHARED = ROOT.parent / "shared" / "sessions"
TOK = get_tokenizer("o200k_base")


def tool_history(n: int, size: int = 200, names: tuple[str, ...] = ("Read",)) -> list[Message]:
    """A user prompt, then ``n`` tool calls each answered by a result of about ``size`` words."""
    out = [user("look at the files")]
    for i in range(n):
        out.append(assistant("", tool_use(f"t{i}", names[i % len(names)], path=f"f{i}")))
        out.append(tool_result(f"t{i}", f"line {i} " * size))
    return out


def cleared_ids(messages: tuple[Message, ...]) -> set[str]:
    return {
        b.tool_use_id
        for m in messages
        if isinstance(m.content, list)
        for b in m.content
        if getattr(b, "type", "") == "tool_result" and b.content == CLEARED_PLACEHOLDER
    }


CLEAR_CASES = {
    "under the trigger: nothing": (ClearToolUses(trigger=10_000, keep=1), 9_000, set()),
    "over: all but the last keep": (ClearToolUses(trigger=1_000, keep=2), 5_000, {"t0", "t1", "t2"}),
    "keep 0: every result": (ClearToolUses(trigger=1_000, keep=0), 5_000, {"t0", "t1", "t2", "t3", "t4"}),
    "exclude_tools spares them": (
        ClearToolUses(trigger=1_000, keep=1, exclude_tools=("Skill",)), 5_000, {"t0", "t2"},
    ),
    "clear_at_least not reached: not applied": (
        ClearToolUses(trigger=1_000, keep=1, clear_at_least=1_000_000), 5_000, set(),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", CLEAR_CASES)
def test_provider_clearing_clears_what_the_edit_says(name: str) -> None:
    edit, prompt, expected = CLEAR_CASES[name]
    history = tool_history(5, names=("Read", "Skill"))
    out = clear_tool_uses(history, edit, prompt, TOK.count_message)
    assert cleared_ids(out.messages) == expected
    assert out.cleared_uses == len(expected)
    before = sum(TOK.count_message(m) for m in history)
    assert sum(TOK.count_message(m) for m in out.messages) == before - out.cleared_tokens
    assert (out.cleared_tokens > 0) == bool(expected)


def test_provider_clearing_of_inputs_empties_the_cleared_calls_inputs_only() -> None:
    out = clear_tool_uses(
        tool_history(3), ClearToolUses(trigger=1, keep=1, clear_tool_inputs=True), 10, TOK.count_message
    )
    inputs = {
        b.id: b.input
        for m in out.messages
        if isinstance(m.content, list)
        for b in m.content
        if b.type == "tool_use"
    }
    assert inputs == {"t0": {}, "t1": {}, "t2": {"path": "f2"}}


def test_clear_tool_uses_reads_the_wire_shape_the_proxy_sends() -> None:
    edit = ClearToolUses.from_wire({
        "type": "clear_tool_uses_20250919", "trigger": {"type": "input_tokens", "value": 30_000},
        "keep": {"type": "tool_uses", "value": 2}, "clear_at_least": {"type": "input_tokens", "value": 5_000},
        "exclude_tools": ["Skill"], "clear_tool_inputs": True,
    })  # fmt: skip
    assert edit == ClearToolUses(
        trigger=30_000, keep=2, clear_at_least=5_000, exclude_tools=("Skill",), clear_tool_inputs=True
    )


def test_anthropic_compaction_refuses_a_trigger_below_its_documented_minimum() -> None:
    with pytest.raises(ValueError, match="50000"):
        AnthropicCompact(trigger=10_000)


COMPACTION_CASES = {
    "under the threshold": ([user("a"), assistant("b"), user("c")], 100, None),
    "summarizes up to the new input": ([user("a"), assistant("b"), user("c"), user("d")], 2_000, 2),
    "nothing before the new input": ([user("a")], 2_000, None),
}


@pytest.mark.parametrize("name", COMPACTION_CASES)
def test_server_compaction_summarizes_what_precedes_the_new_input(name: str) -> None:
    sent, prompt, through = COMPACTION_CASES[name]
    plan = plan_server_compaction(sent, OpenAICompaction(compact_threshold=1_000), prompt)
    assert (plan.through if plan else None) == through


CACHE_CASES = {
    # (rules, [(parts, at_s)], expected [(read, written)])
    "anthropic: a grown prompt reads the previous one": (
        ANTHROPIC_CACHE, [([("h", 2000), ("a", 500)], 0), ([("h", 2000), ("a", 500), ("b", 300)], 10)],
        [(0, 2500), (2500, 300)],
    ),
    "anthropic: an edit in the middle loses the cache after the head": (
        ANTHROPIC_CACHE, [([("h", 2000), ("a", 500), ("b", 300)], 0), ([("h", 2000), ("A", 100), ("b", 300)], 10)],
        [(0, 2800), (2000, 400)],
    ),
    "anthropic: past the lifetime nothing is read": (
        ANTHROPIC_CACHE, [([("h", 2000)], 0), ([("h", 2000), ("a", 10)], 301)], [(0, 2000), (0, 2010)],
    ),
    "openai: any prefix, read in 128-token steps, writes not billed": (
        OPENAI_CACHE, [([("h", 1500), ("a", 500), ("b", 300)], 0), ([("h", 1500), ("a", 500), ("c", 9)], 10)],
        [(0, 0), (1920, 0)],
    ),
    "under the minimum nothing is cached": (ANTHROPIC_CACHE, [([("h", 500)], 0), ([("h", 500)], 1)], [(0, 0), (0, 0)]),
}  # fmt: skip


@pytest.mark.parametrize("name", CACHE_CASES)
def test_the_cache_reads_only_an_unchanged_live_prefix(name: str) -> None:
    rules, requests, expected = CACHE_CASES[name]
    cache = PromptCache(rules)
    assert [(u.read, u.written) for u in (cache.send(p, at) for p, at in requests)] == expected


@settings(max_examples=60, deadline=None)
@given(
    hs.lists(
        hs.tuples(
            hs.lists(hs.tuples(hs.sampled_from("abcdef"), hs.integers(0, 3000)), max_size=6),
            hs.integers(0, 400),
        ),
        max_size=8,
    ),
    hs.sampled_from([ANTHROPIC_CACHE, OPENAI_CACHE]),
)
def test_the_cache_never_reads_or_writes_more_than_the_prompt(requests: list, rules: CacheRules) -> None:
    cache, clock = PromptCache(rules), 0
    for parts, pause in requests:
        clock += pause
        use = cache.send(parts, clock)
        total = sum(t for _, t in parts)
        assert 0 <= use.read <= total and 0 <= use.written <= total - use.read


def session_db(tmp_path: Path, calls: int = 12) -> tuple[SessionStore, str]:
    """A session-manager-like session: tool results of ~1,600 tokens, a minute apart, usage recorded."""
    store = SessionStore(tmp_path / "s.db")
    sid = store.create_session(model="claude-sonnet-4-5", provider="anthropic")
    history = [user("read every file")]
    store.append_messages(sid, history, tokenizer=TOK)
    for i in range(calls):
        sent = len(history)
        answer = [
            assistant("", tool_use(f"t{i}", "Read", path=f"f{i}")),
            tool_result(f"t{i}", f"row {i} " * 800),
        ]
        prompt = 3_000 + TOK.count_messages(history)
        store.record_event(sid, ContextEvent(
            kind="request", turn_index=0, model="claude-sonnet-4-5", provider="anthropic", message_seq=sent,
            usage=ProviderUsage(input_tokens=prompt, output_tokens=50),
            details={"messages_sent": sent, "call_utc": f"2026-11-28T08:{i:02d}:00Z"},
        ))  # fmt: skip
        store.append_messages(sid, answer, tokenizer=TOK)
        history += answer
    return store, sid


def test_replay_measures_each_variant_by_one_rule_and_the_head_the_provider_counted(tmp_path: Path) -> None:
    store, sid = session_db(tmp_path)
    with store:
        recorded = load_recorded_session(store, sid)
    assert len(recorded.calls) == 12 and recorded.calls[3].history[-1].content[0].tool_use_id == "t2"
    out = replay_session(recorded, [AsSent()], tokenizer=TOK)
    (as_sent,) = out.variants
    # the unedited replay sends what the provider counted, call by call (the head is its system prompt)
    assert [c.prompt_tokens for c in as_sent.calls] == [c.prompt_tokens for c in out.recorded.calls]
    assert (
        as_sent.calls[0].cache_read_tokens == 0
        and as_sent.calls[1].cache_read_tokens == as_sent.calls[0].prompt_tokens
    )
    assert out.priced and as_sent.total("cost_usd") > 0


def test_provider_clearing_saves_tokens_but_rebuilds_the_cache_every_call_ctxdesk_clears_stick(
    tmp_path: Path,
) -> None:
    store, sid = session_db(tmp_path)
    with store:
        recorded = load_recorded_session(store, sid)
    resolved = resolve_model_settings("claude-sonnet-4-5", "anthropic")
    policies = Policies(clear_tool_results={"trigger": 10_000, "keep": 2})
    native = Policies(clear_tool_results={"trigger": 10_000, "keep": 2, "native": True})
    out = replay_session(
        recorded,
        [AsSent(), ClearToolUses(trigger=10_000, keep=2), CtxdeskPolicies(policies=policies), CtxdeskPolicies(policies=native)],
        tokenizer=TOK, resolved=resolved,
    )  # fmt: skip
    plain, provider, ours, ours_native = out.variants
    assert provider.total("prompt_tokens") < plain.total("prompt_tokens")
    assert ours.total("prompt_tokens") < plain.total("prompt_tokens")
    edited = [c for c in provider.calls if c.edits]
    assert edited and all("clear_tool_uses_20250919" in c.edits[0] for c in edited)
    # the provider's edit moves with every request: each edited call reads only up to the newly cleared result
    assert all(c.cache_read_tokens < c.prompt_tokens - 1_000 for c in edited[1:])
    # the native policy asks the provider for the same edit: the same calls as the provider's own
    assert [c.prompt_tokens for c in ours_native.calls] == [c.prompt_tokens for c in provider.calls]
    assert out.variants[0].calls[0].edits == ()


def test_server_compaction_is_billed_its_own_iteration_and_shrinks_later_prompts(tmp_path: Path) -> None:
    store, sid = session_db(tmp_path, calls=20)
    with store:
        recorded = load_recorded_session(store, sid)
    plain, compacted = replay_session(
        recorded, [AsSent(), OpenAICompaction(compact_threshold=15_000)], tokenizer=TOK
    ).variants
    assert compacted.total("compactions") >= 1
    first = next(i for i, c in enumerate(compacted.calls) if c.compactions)
    call = compacted.calls[first]
    assert call.billed_input_tokens > call.prompt_tokens  # the compaction iteration read the whole context
    assert call.prompt_tokens < plain.calls[first].prompt_tokens
    assert compacted.peak_prompt_tokens < plain.peak_prompt_tokens


@pytest.mark.parametrize("scenario", ["claude-code/compact_auto", "codex/auto-compact"])
def test_replay_of_real_agent_sessions_matches_the_provider_where_nothing_is_edited(
    tmp_path: Path, scenario: str
) -> None:
    with SessionStore(tmp_path / "a.db") as store:
        folder = REAL / scenario
        files = (
            sorted((folder / "transcripts").glob("*.jsonl")) if (folder / "transcripts").exists() else None
        )
        if files:
            for path in files:
                import_file(path, store)
        else:
            import_files(folder_files(folder), store, on_error=lambda path, exc: None)
        sessions = [s for s in store.list_sessions() if ":" not in s.id]
        recorded = load_recorded_session(store, sessions[0].id)
    out = replay_session(
        recorded, [AsSent(), CtxdeskPolicies(policies=Policies(clear_tool_results={"trigger": 1_000, "keep": 1}))],
        tokenizer=get_tokenizer(recorded.model),
    )  # fmt: skip
    assert out.recorded is not None
    as_sent = out.variants[0]
    # the head is carried from each call's own usage: the prompt the provider counted, call by call
    assert [c.prompt_tokens for c in as_sent.calls] == [c.prompt_tokens for c in out.recorded.calls]
    assert out.variants[1].total("prompt_tokens") <= as_sent.total("prompt_tokens")


@pytest.mark.shared
@pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared")
def test_replay_of_a_real_claude_code_session_reads_the_cache_as_the_provider_did(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "cc.db") as store:
        import_file(SHARED / "claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl", store)
        sid = next(s.id for s in store.list_sessions() if ":" not in s.id)
        recorded = load_recorded_session(store, sid)
    out = replay_session(recorded, [AsSent()], tokenizer=get_tokenizer(recorded.model))
    ours, theirs = out.variants[0].totals(), out.recorded.totals()
    assert ours["prompt_tokens"] == theirs["prompt_tokens"]
    assert abs(ours["cache_read_tokens"] - theirs["cache_read_tokens"]) <= 0.02 * theirs["cache_read_tokens"]
    assert abs(ours["cost_usd"] - theirs["cost_usd"]) <= 0.05 * theirs["cost_usd"]
