"""engine.prompt.cache_policy: clear tool results only in batches that pay for the cache rebuild."""

from __future__ import annotations

import functools
import itertools
import json

import pytest

from bench import bench_cache_policy
from engine.cost import Prices
from engine.policy_settings import ClearToolResultsPolicy, Policies
from engine.prompt.cache_policy import (
    ANTHROPIC_RATES,
    OPENAI_RATES,
    CacheRates,
    batch_tokens,
    cache_lifetime_s,
    calls_in_history,
    expected_remaining_calls,
    plan_cache_clearing,
    plan_request_clearing,
    rebuild_start,
    recent_growth,
)
from engine.proxy.policy.policies import SessionPolicyState, plan_edits
from engine.settings import resolve_model_settings
from engine.tokens import get_tokenizer


@pytest.mark.parametrize(
    ("name", "suffix", "freed", "calls", "must", "clear"),
    [
        ("large batch early in a long session pays", 20_000, 17_000, 20, False, True),
        ("small gain over a long cached suffix does not", 30_000, 1_000, 3, False, False),
        ("nothing freed never clears", 10_000, 0, 50, True, False),
        ("over the window clears even at a loss", 30_000, 1_000, 1, True, True),
        ("the same batch pays once more calls are expected", 12_000, 4_000, 30, False, True),
    ],
)
def test_plan_cache_clearing_weighs_saving_against_rebuild(name, suffix, freed, calls, must, clear):
    decision = plan_cache_clearing(
        suffix_tokens=suffix, freed_tokens=freed, calls_so_far=calls, must_clear=must
    )
    assert decision.clear is clear, (name, decision.reason)
    if freed:
        assert decision.rebuild_tokens == suffix - freed
        expected = suffix * 0.1 + freed * 0.1 * calls - (suffix - freed) * 1.25
        assert decision.gain == pytest.approx(expected)


def test_gain_grows_with_expected_calls_and_the_break_even_is_where_it_turns_positive():
    # keep cost: 10k*0.1 + 2k*0.1*R; clear cost: 8k*1.25 = 10k -> break even at R = 45
    below = plan_cache_clearing(suffix_tokens=10_000, freed_tokens=2_000, calls_so_far=1, remaining_calls=44)
    above = plan_cache_clearing(suffix_tokens=10_000, freed_tokens=2_000, calls_so_far=1, remaining_calls=46)
    assert not below.clear and below.gain < 0 and "not worth" in below.reason
    assert above.clear and above.gain > 0 and "pays" in above.reason


def test_batching_waits_for_the_economic_batch_then_clears():
    size = batch_tokens(3_000, 1_000)  # sqrt(2 * 3000 * 1.15 * 1000 / 0.1) = 8,306
    assert size == 8_306
    small = plan_cache_clearing(
        suffix_tokens=9_000, freed_tokens=6_000, calls_so_far=40, growth_per_call=1_000
    )
    large = plan_cache_clearing(
        suffix_tokens=12_000, freed_tokens=9_000, calls_so_far=40, growth_per_call=1_000
    )
    assert not small.clear and "batch of" in small.reason
    assert large.clear


def test_rates_from_model_prices_and_expected_calls_bounds():
    rates = CacheRates.from_prices(Prices(model="m", input=3e-6, output=15e-6, cache_read=0.3e-6, cache_write_5m=3.75e-6,
                                          cache_write_1h=6e-6, source="test"))  # fmt: skip
    assert rates.read == pytest.approx(0.1) and rates.write == pytest.approx(1.25)
    assert CacheRates.from_prices(None) == ANTHROPIC_RATES
    assert OPENAI_RATES.write == 1.0  # no write premium: clearing pays sooner
    assert batch_tokens(3_000, 1_000, OPENAI_RATES) < batch_tokens(3_000, 1_000)
    assert expected_remaining_calls(0) == 1.0 and expected_remaining_calls(10_000) == 200.0


def test_calls_in_history_counts_runs_of_model_items():
    anthropic = [
        {"role": "user"},
        {"role": "assistant"},
        {"role": "user"},
        {"role": "assistant"},
        {"role": "user"},
    ]
    responses = [{"role": "user"}, {"type": "reasoning"}, {"type": "function_call"}, {"type": "function_call"},
                 {"type": "function_call_output"}, {"type": "function_call_output"}]  # fmt: skip
    assert calls_in_history(anthropic) == 3
    assert calls_in_history(responses) == 2


def _session(rounds: int, lines: int) -> dict:
    messages = [{"role": "user", "content": "Fix the parser."}]
    for i in range(rounds):
        text = "\n".join(f"src/p{i}.py:{n}: v_{i}_{n} = f({n})" for n in range(lines))
        messages += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}],
            },
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
        ]
    return {"model": "claude-sonnet-4-6", "max_tokens": 1000, "messages": messages}


def test_request_clearing_measures_the_suffix_from_the_edit_point_without_the_new_message():
    tokenizer = get_tokenizer("anthropic")
    body = _session(6, 30)
    messages = body["messages"]
    decision = plan_request_clearing(messages, 2, 100, count=tokenizer.count)
    expected = sum(tokenizer.count(json.dumps(m, ensure_ascii=False, sort_keys=True)) for m in messages[2:-1])
    assert decision.rebuild_tokens == expected - 100
    assert decision.expected_calls == 7.0


def test_cache_aware_policy_clears_in_fewer_larger_batches_than_eager_clearing():
    tokenizer = get_tokenizer("anthropic")
    resolved = resolve_model_settings("claude-sonnet-4-6", "anthropic")

    def batches(policy: ClearToolResultsPolicy) -> list[int]:
        state, out = SessionPolicyState(), []
        for rounds in range(1, 41):
            outcome = plan_edits("anthropic_messages", _session(rounds, 30), Policies(clear_tool_results=policy),
                                 tokenizer=tokenizer, resolved=resolved, state=state)  # fmt: skip
            new = sum(1 for e in outcome.edits for c in e.changes if c.get("new"))
            if new:
                out.append(new)
        return out

    eager = batches(ClearToolResultsPolicy(trigger=5_000, keep=2))
    aware = batches(ClearToolResultsPolicy(trigger=5_000, keep=2, cache_aware=True))
    assert aware and len(aware) < len(eager)
    assert min(aware) > 1  # never a one-result re-edit of the cached prefix
    assert sum(aware) <= sum(eager)


def test_a_cache_gone_cold_makes_clearing_cost_no_rebuild():
    warm = plan_cache_clearing(suffix_tokens=30_000, freed_tokens=1_000, calls_so_far=3)
    cold = plan_cache_clearing(suffix_tokens=30_000, freed_tokens=1_000, calls_so_far=3, cache_cold=True)
    assert not warm.clear and warm.rebuild_tokens == 29_000
    assert cold.clear and cold.rebuild_tokens == 0 and cold.gain > 0
    assert "expired" in cold.reason
    nothing = plan_cache_clearing(suffix_tokens=30_000, freed_tokens=0, calls_so_far=3, cache_cold=True)
    assert not nothing.clear


def test_cache_lifetime_follows_the_providers_rules_and_the_requests_ttl():
    marked = {"type": "text", "text": "x", "cache_control": {"type": "ephemeral", "ttl": "1h"}}
    assert cache_lifetime_s("anthropic", {"messages": [{"role": "user", "content": "x"}]}) == 300
    assert cache_lifetime_s("anthropic", {"system": [marked], "messages": []}) == 3600
    assert cache_lifetime_s("anthropic", {"messages": [{"role": "user", "content": [marked]}]}) == 3600
    assert cache_lifetime_s("openai", {"messages": []}) == 3600  # "up to an hour": never judged cold early
    assert cache_lifetime_s("openai", {"input": [], "prompt_cache_retention": "24h"}) == 86_400


def test_cache_aware_clears_a_batch_it_would_wait_for_once_the_session_idled_past_the_cache():
    tokenizer = get_tokenizer("anthropic")
    resolved = resolve_model_settings("claude-sonnet-4-6", "anthropic")
    policies = Policies(clear_tool_results=ClearToolResultsPolicy(trigger=2_000, keep=2, cache_aware=True))

    def second_request(pause_s: float):
        state = SessionPolicyState()
        first = plan_edits("anthropic_messages", _session(6, 30), policies, tokenizer=tokenizer,
                           resolved=resolved, state=state, now=1_000.0)  # fmt: skip
        assert not any(c.get("new") for e in first.edits for c in e.changes)  # warm: not worth a rebuild yet
        return plan_edits("anthropic_messages", _session(7, 30), policies, tokenizer=tokenizer,
                          resolved=resolved, state=state, now=1_000.0 + pause_s)  # fmt: skip

    assert second_request(60).body is None  # within the 5-minute cache: still waiting for a batch
    after_lunch = second_request(40 * 60)
    (edit,) = after_lunch.edits
    assert [c["tool_use_id"] for c in edit.changes if c["new"]] == ["t0", "t1", "t2", "t3", "t4"]
    assert "the prompt cache had expired (idle 40 min > 5 min)" in edit.reason
    assert edit.after_tokens < edit.before_tokens


def test_an_anthropic_edit_behind_the_agents_breakpoints_rebuilds_every_message():
    marked = {
        "role": "user",
        "content": [{"type": "text", "text": "x", "cache_control": {"type": "ephemeral"}}],
    }
    plain = {"role": "user", "content": "x"}
    answer = {"role": "assistant", "content": "y"}
    assert rebuild_start([plain, answer, plain, answer, plain], 2) == 2  # no markers: any prefix is cached
    assert rebuild_start([plain, answer, plain, answer, marked], 2) == 0  # only the tail is marked
    assert rebuild_start([marked, answer, plain, answer, marked], 2) == 1  # a marker before the edit holds


def test_recent_growth_is_the_mean_of_the_last_calls_new_tokens():
    messages = [{"role": "user"}]
    for _ in range(7):
        messages += [{"role": "assistant"}, {"role": "user"}]
    sizes = [100] + [10, 50] * 5 + [10, 500] + [10, 1000]  # the last two calls grew faster
    assert recent_growth(sizes, messages, calls=2) == (510 + 1010) / 2
    assert recent_growth(sizes, messages, calls=5) == (60 * 3 + 510 + 1010) / 5
    assert recent_growth([5, 7], [{"role": "user"}, {"role": "assistant"}], calls=5) == 12


def test_cache_aware_is_read_from_the_settings_toml():
    import tomllib

    from engine.proxy.policy.policy_file import policy_config

    toml = "[policies]\nclear_tool_results = { trigger = 30000, keep = 2, cache_aware = true }\n"
    config = policy_config(tomllib.loads(toml))
    assert config.for_model("claude-sonnet-4-6", "anthropic").clear_tool_results.cache_aware is True
    assert ClearToolResultsPolicy().cache_aware is False  # off unless asked for


def test_results_cleared_earlier_count_as_their_placeholders_in_the_rebuild():
    tokenizer = get_tokenizer("anthropic")
    messages = _session(6, 30)["messages"]
    whole = plan_request_clearing(messages, 2, 100, count=tokenizer.count)
    sent = plan_request_clearing(messages, 2, 100, count=tokenizer.count, already_saved=[(2, 200), (4, 150)])
    assert sent.rebuild_tokens == whole.rebuild_tokens - 350


# The criterion of #17 ("Cache-aware"), on the bench's scripted sessions: with a policy on, the
# cache-read share is at least the agent's own (no policy, compacting itself at its auto-compact
# point), and what a policy rewrites is sent byte-identically on the following request.
_BENCH_CASES = [
    pytest.param(breakpoints, model, session, id=f"{model}-{session}calls")
    for _, breakpoints, *models in bench_cache_policy.CACHES
    for session, model in (("30", models[0]), ("80", models[0]), ("80", models[1]))
]
_ROWS = dict(bench_cache_policy.policy_rows())
_BENCH_POLICIES = {
    "clear, cache_aware": _ROWS["clear: trigger 20k, keep 2, cache_aware"],
    "offload": _ROWS["offload: threshold_bytes 4000"],
    "clear, strict": _ROWS["clear: trigger 20k, keep 2, cache_aware strict"],
    "compaction": _ROWS["compaction: chain, trigger 0.6"],
    "compaction, cache_aware": _ROWS["compaction: chain, trigger 0.6, cache_aware"],
}


@functools.cache
def _bench_replay(
    breakpoints: bool, model: str, session: str, policy: str | None
) -> bench_cache_policy.Replay:
    rounds, sizes = bench_cache_policy.SESSIONS[session]
    script = bench_cache_policy.tool_rounds(rounds, seed=17, sizes=sizes)
    return bench_cache_policy.replay(
        script, _BENCH_POLICIES[policy] if policy else None, model=model, breakpoints=breakpoints,
        compact_at=bench_cache_policy.compact_point(model, breakpoints),
    )  # fmt: skip


@pytest.mark.parametrize(("breakpoints", "model", "session"), _BENCH_CASES)
def test_the_agent_alone_compacts_itself_only_when_the_session_reaches_its_window(
    breakpoints, model, session
):
    alone = _bench_replay(breakpoints, model, session, None)
    assert alone.compactions == (
        1 if (model, session) in {("claude-sonnet-4-5", "80"), ("gpt-4o", "80")} else 0
    )
    if alone.compactions:  # the request after the summarizing one starts from the summary alone
        after = next(r for r in alone.requests if r.after_compaction)
        assert after.texts[0] == json.dumps(bench_cache_policy.summary_message(1), ensure_ascii=False)


_SHORT_OF_THE_CRITERION = (
    "cache_aware = true trades cache for cost: its batches rewrite history the agent alone reads from the "
    "cache, and the agent's own compaction rebuilds only its small summary prefix (bench: share 0.92 vs "
    "0.94 on 30 calls, 0.86 vs 0.97 on 80 calls inside the window, 0.86 vs 0.96 reaching it on "
    'claude-sonnet-4-5); cache_aware = "strict" is the setting that keeps the cache (tests below)'
)


@pytest.mark.parametrize(
    "policy",
    [pytest.param("clear, cache_aware", marks=pytest.mark.xfail(strict=True, reason=_SHORT_OF_THE_CRITERION)),
     "offload", "clear, strict", "compaction, cache_aware"],
)  # fmt: skip
@pytest.mark.parametrize(("breakpoints", "model", "session"), _BENCH_CASES)
def test_cache_read_share_with_the_policy_is_at_least_the_agent_alones(breakpoints, model, session, policy):
    alone = _bench_replay(breakpoints, model, session, None)
    with_policy = _bench_replay(breakpoints, model, session, policy)
    assert with_policy.share >= alone.share, (with_policy.share, alone.share)


@pytest.mark.parametrize("policy", ["clear, cache_aware", "offload"])
@pytest.mark.parametrize(("breakpoints", "model", "session"), _BENCH_CASES)
def test_the_prefix_sent_after_an_edit_is_byte_identical_on_the_following_request(
    breakpoints, model, session, policy
):
    requests = _bench_replay(breakpoints, model, session, policy).requests
    checked = 0
    for sent, following in itertools.pairwise(requests):
        if not sent.edited or following.after_compaction:
            continue
        if following.edited and policy != "offload":  # a new batch: the following request rewrites anew
            continue
        # offload edits only the newest result, so even a request that offloads its own keeps the prefix
        assert following.texts[: len(sent.texts)] == sent.texts
        checked += 1
    edits = sum(r.edited for r in requests)
    assert checked or not edits
    assert edits or (
        policy == "offload" and session == "30"
    )  # 30 calls of ~1k-token results: nothing over 4 kB


def test_a_session_that_idles_past_its_cache_has_cache_aware_clear_on_its_return_and_pay_less():
    rounds, sizes = bench_cache_policy.SESSIONS["80"]
    script = bench_cache_policy.tool_rounds(rounds, seed=17, sizes=sizes)
    point = bench_cache_policy.compact_point("claude-sonnet-4-6", True)

    def run(policy: str | None, watch_expiry: bool = True) -> bench_cache_policy.Replay:
        return bench_cache_policy.replay(
            script, _BENCH_POLICIES[policy] if policy else None, model="claude-sonnet-4-6", breakpoints=True,
            compact_at=point, pause_before=bench_cache_policy.PAUSE_AT, watch_expiry=watch_expiry,
        )  # fmt: skip

    alone, weighed, ignored = (
        run(None),
        run("clear, cache_aware"),
        run("clear, cache_aware", watch_expiry=False),
    )
    back = bench_cache_policy.PAUSE_AT  # the request sent after the pause (no compaction before it)
    assert weighed.requests[back].edited and not ignored.requests[back].edited
    rates = (0.1, 1.25)
    assert weighed.cost(*rates) < ignored.cost(*rates) < alone.cost(*rates)
    assert weighed.share > ignored.share


def test_the_proxy_controller_tells_cache_aware_how_long_the_agent_session_idled(tmp_path):
    from engine.proxy.policy.controller import Controller
    from engine.proxy.policy.policy_file import PolicyFile

    settings = tmp_path / "policies.toml"
    settings.write_text(
        "[policies]\nclear_tool_results = { trigger = 2000, keep = 2, cache_aware = true }\n",
        encoding="utf-8",
    )
    now = [5_000.0]
    controller = Controller(PolicyFile(settings), clock=lambda: now[0])

    def send(rounds: int, session: str):
        body = json.dumps(_session(rounds, 30)).encode()
        return controller.apply("anthropic_messages", body, {"X-Ctxdesk-Session": session})

    assert send(6, "a").body is None and send(6, "b").body is None
    now[0] += 60
    assert send(7, "a").body is None  # a minute later: the cache is warm, the batch not worth it yet
    now[0] += 30 * 60
    (edit,) = send(7, "b").edits  # b idled 31 minutes
    assert "the prompt cache had expired (idle 31 min > 5 min)" in edit.reason


def _session_with_pauses(case: str) -> tuple[list, dict[int, float]]:
    rounds, sizes = bench_cache_policy.SESSIONS["80"]
    script = bench_cache_policy.tool_rounds(rounds, seed=17, sizes=sizes)
    if case == "idle 2h":
        return script, {bench_cache_policy.PAUSE_AT: bench_cache_policy.PAUSE_S}
    return script, bench_cache_policy.human_pauses(rounds, seed=bench_cache_policy.INTERACTIVE_SEED)


def _rebuilt_per_round(replayed: bench_cache_policy.Replay) -> dict[int, int]:
    out: dict[int, int] = {}
    for sent in replayed.requests:
        out[sent.round] = out.get(sent.round, 0) + sent.rebuilt
    return out


# clear_tool_results' cache_aware = "strict" and compaction's cache_aware keep the criterion's mechanism
# on every request: they rewrite nothing the provider still holds, so the provider never writes again
# a token the agent alone would have had read. (Their counterparts do: that is the trade they decline.)
_COUNTERPARTS = {"clear, strict": "clear, cache_aware", "compaction, cache_aware": "compaction"}


@pytest.mark.parametrize("policy", list(_COUNTERPARTS))
@pytest.mark.parametrize(
    ("breakpoints", "model", "case"),
    [
        *[pytest.param(b, m, s, id=f"{m}-{s}calls") for _, b, *models in bench_cache_policy.CACHES
          for s, m in (("30", models[0]), ("80", models[0]), ("80", models[1]))],
        *[pytest.param(b, models[0], "idle 2h", id=f"{models[0]}-idle-2h")
          for _, b, *models in bench_cache_policy.CACHES],
        # a person's pauses of up to 25 min: past Anthropic's 5-minute cache (OpenAI's is taken as an hour)
        *[pytest.param(True, m, "interactive", id=f"{m}-interactive") for m in bench_cache_policy.CACHES[0][2:]],
    ],
)  # fmt: skip
def test_cache_keeping_policies_never_make_a_request_rebuild_more_of_the_cache_than_the_agent_alone(
    breakpoints, model, case, policy
):
    if case in ("30", "80"):
        rounds, sizes = bench_cache_policy.SESSIONS[case]
        script, pauses = bench_cache_policy.tool_rounds(rounds, seed=17, sizes=sizes), {}
    else:
        script, pauses = _session_with_pauses(case)

    def run(policy: str | None) -> bench_cache_policy.Replay:
        return bench_cache_policy.replay(
            script, _BENCH_POLICIES[policy] if policy else None, model=model, breakpoints=breakpoints,
            compact_at=bench_cache_policy.compact_point(model, breakpoints), pauses=pauses,
        )  # fmt: skip

    alone, keeping, counterpart = run(None), run(policy), run(_COUNTERPARTS[policy])
    mine, theirs = _rebuilt_per_round(keeping), _rebuilt_per_round(alone)
    # while the cache is warm, a request rebuilds only where the agent alone's does (its own compaction);
    # after a pause past the cache lifetime both write their whole prompt (nothing is held to keep)
    cache_s = bench_cache_policy.CACHE_S[breakpoints]
    warm = [r for r in mine if pauses.get(r, 0.0) <= cache_s]
    assert all(mine[r] <= theirs.get(r, 0) for r in warm), [(r, mine[r], theirs.get(r)) for r in warm]
    assert keeping.resent_share >= alone.resent_share
    if counterpart.edits:  # the counterpart rewrites cached prefixes on some warm request
        assert any(
            mine.get(r, 0) < rebuilt for r, rebuilt in _rebuilt_per_round(counterpart).items() if r in warm
        )
    if not pauses:  # nothing ever expires: it sends exactly what the agent sends
        assert keeping.edits == 0 and keeping.total == alone.total
    else:  # it edits only on the returns, and pays no more than the agent alone
        assert all(s.round in pauses for s in keeping.requests if s.edited)
        assert keeping.cost(0.1, 1.25) <= alone.cost(0.1, 1.25)
        if policy == "clear, strict":
            assert keeping.edits > 0 and keeping.cost(0.1, 1.25) < alone.cost(0.1, 1.25)


def test_strict_clearing_waits_on_a_warm_cache_and_clears_once_it_expired_or_the_window_forces_it():
    tokenizer = get_tokenizer("anthropic")
    policies = Policies(
        clear_tool_results=ClearToolResultsPolicy(trigger=2_000, keep=2, cache_aware="strict")
    )

    def second_request(pause_s: float, settings=None):
        resolved = resolve_model_settings("claude-sonnet-4-6", "anthropic", settings)
        state = SessionPolicyState()
        first = plan_edits("anthropic_messages", _session(6, 30), policies, tokenizer=tokenizer,
                           resolved=resolved, state=state, now=1_000.0)  # fmt: skip
        assert first.body is None  # 3,365 tokens: over the trigger, under every window here
        return plan_edits("anthropic_messages", _session(7, 30), policies, tokenizer=tokenizer,
                          resolved=resolved, state=state, now=1_000.0 + pause_s)  # fmt: skip

    assert second_request(60).body is None  # over the trigger, but the cache is warm
    (edit,) = second_request(6 * 60).edits
    assert "the prompt cache had expired (idle 6 min > 5 min)" in edit.reason
    from engine.settings import Settings

    small = Settings.from_dict(
        {
            "models": {
                "claude-sonnet-4-6": {"context_window": 4_000, "max_output_tokens": 100, "buffer_tokens": 0}
            }
        }
    )
    (forced,) = second_request(60, small).edits  # warm, but 3,924 tokens would not fit the 3,900 window
    assert [c["tool_use_id"] for c in forced.changes if c["new"]] == ["t0", "t1", "t2", "t3", "t4"]
    assert forced.after_tokens < 3_900 < forced.before_tokens


def test_strict_is_read_from_the_settings_toml():
    import tomllib

    from engine.proxy.policy.policy_file import policy_config

    toml = '[policies]\nclear_tool_results = { trigger = 30000, keep = 2, cache_aware = "strict" }\n'
    config = policy_config(tomllib.loads(toml))
    assert config.for_model("claude-sonnet-4-6", "anthropic").clear_tool_results.cache_aware == "strict"


def test_cache_aware_compaction_waits_on_a_warm_cache_and_compacts_once_it_expired_or_would_not_fit():
    from engine.policy_settings import CompactionPolicy
    from engine.settings import Settings

    tokenizer = get_tokenizer("anthropic")
    settings = Settings.from_dict(
        {
            "models": {
                "claude-sonnet-4-6": {"context_window": 6_000, "max_output_tokens": 100, "buffer_tokens": 0}
            }
        }
    )
    resolved = resolve_model_settings("claude-sonnet-4-6", "anthropic", settings)
    policies = Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.5, cache_aware=True))

    def second_request(rounds: int, pause_s: float):
        state = SessionPolicyState()
        first = plan_edits("anthropic_messages", _session(4, 30), policies, tokenizer=tokenizer,
                           resolved=resolved, state=state, now=1_000.0)  # fmt: skip
        assert first.body is None  # under the trigger (2,950)
        return plan_edits("anthropic_messages", _session(rounds, 30), policies, tokenizer=tokenizer,
                          resolved=resolved, state=state, now=1_000.0 + pause_s)  # fmt: skip

    assert second_request(6, 60).body is None  # 3,365 tokens: over the trigger, but the cache is warm
    (cold,) = second_request(6, 6 * 60).edits
    assert cold.policy == "compaction" and "the prompt cache had expired" in cold.reason
    (forced,) = second_request(12, 60).edits  # warm, but over the 5,900-token effective window
    assert "would not fit the limit (5,900 tokens)" in forced.reason
    assert forced.after_tokens < 5_900 < forced.before_tokens
    eager = Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.5))
    state = SessionPolicyState()
    (edit,) = plan_edits("anthropic_messages", _session(6, 30), eager, tokenizer=tokenizer, resolved=resolved,
                         state=state, now=1_000.0).edits  # fmt: skip
    assert "cache" not in edit.reason  # without cache_aware it compacts at the trigger, warm or not
