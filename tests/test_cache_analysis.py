"""Cache analysis: per call reads, writes and the cause of each rebuild (table-driven, tiny builders)."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cache_analysis import (
    CACHE_CAUSES,
    FIXES,
    MIN_REWRITTEN,
    TTL_1H_S,
    CallRecord,
    analyze_cache,
    call_records,
    parse_utc,
)
from engine.cost import price_call, prices_for
from engine.events import ComponentTokens, ContextEvent, ProviderUsage

SONNET = "claude-sonnet-4-20250514"
T0 = dt.datetime(2025, 9, 3, 0, 0, tzinfo=dt.UTC)


def call(
    i: int,
    *,
    read: int = 0,
    write: int = 0,
    inp: int = 10,
    at_s: float | None = None,
    model: str = SONNET,
    components: ComponentTokens | None = None,
    reset: str | None = None,
    details: dict[str, Any] | None = None,
    **hashes: Any,
) -> CallRecord:
    u = ProviderUsage(
        input_tokens=inp, output_tokens=50, cache_read_input_tokens=read, cache_creation_input_tokens=write
    )
    prices = prices_for(model)
    return CallRecord(
        index=i,
        model=model,
        usage=u,
        cost=price_call(u, prices, model=model, details=details),
        prices=prices,
        at=T0 + dt.timedelta(seconds=at_s if at_s is not None else 10 * i),
        components=components,
        reset_before=reset,
        **hashes,
    )


def comp(
    system: int = 3_000, tools: int = 10_000, conversation: int = 5_000, tool_results: int = 5_000
) -> ComponentTokens:
    return ComponentTokens(system=system, tools=tools, conversation=conversation, tool_results=tool_results)


def causes(calls: list[CallRecord]) -> list[str | None]:
    return [c.cause for c in analyze_cache(calls).calls]


CASES = {
    "growing prefix: cold start then reads": (
        [call(0, write=20_000), call(1, read=20_000, write=500), call(2, read=20_500, write=700)],
        ["cold_start", None, None],
    ),
    "gap past the 5-minute TTL": (
        [call(0, write=20_000), call(1, read=20_000, write=500), call(2, write=20_600, at_s=20 + 360)],
        ["cold_start", None, "ttl_expired"],
    ),
    "the same gap under a 1-hour cache is a prefix change, not expiry": (
        [
            call(0, write=20_000, details={"cache_write_1h_tokens": 20_000}),
            call(1, write=20_100, at_s=10 + 360, details={"cache_write_1h_tokens": 20_100}),
        ],
        ["cold_start", "prefix_changed"],
    ),
    "model switch": (
        [call(0, write=20_000), call(1, write=20_300, model="claude-opus-4-1-20250805")],
        ["cold_start", "model_switch"],
    ),
    "a compaction after the cache expired: the expiry rebuilt it": (
        [call(0, write=20_000), call(1, write=8_000, at_s=10 + 360, reset="compaction (proxy_policy)")],
        ["cold_start", "ttl_expired"],
    ),
    "compaction event between the calls": (
        [call(0, write=20_000), call(1, write=8_000, reset="compaction (compact_threshold)")],
        ["cold_start", "compaction"],
    ),
    "prompt shrank by half without an event: compacted": (
        [call(0, write=40_000), call(1, write=15_000)],
        ["cold_start", "compaction"],
    ),
    "tools reordered (same names, new hash)": (
        [
            call(0, write=20_000, tools_sha256="a", tool_names=("Bash", "Read")),
            call(1, write=20_200, tools_sha256="b", tool_names=("Read", "Bash")),
        ],
        ["cold_start", "tools_reordered"],
    ),
    "tools changed (a tool added)": (
        [
            call(0, write=20_000, tools_sha256="a", tool_names=("Bash",)),
            call(1, write=20_900, tools_sha256="b", tool_names=("Bash", "mcp__x")),
        ],
        ["cold_start", "tools_changed"],
    ),
    "system prompt changed (hashes)": (
        [call(0, write=20_000, system_sha256="s1"), call(1, write=20_100, system_sha256="s2")],
        ["cold_start", "system_changed"],
    ),
    "system prompt changed (token counts, no hashes)": (
        [call(0, write=23_000, components=comp()), call(1, write=23_050, components=comp(system=3_050))],
        ["cold_start", "system_changed"],
    ),
    "earlier tool results cleared": (
        [
            call(0, write=23_000, components=comp()),
            call(1, read=13_000, write=8_000, components=comp(tool_results=3_000)),
        ],
        ["cold_start", "tool_results_cleared"],
    ),
    "read stopped short of the previous prompt: breakpoint": (
        [call(0, write=20_000), call(1, read=13_000, write=7_500)],
        ["cold_start", "breakpoint"],
    ),
    "previous prompt re-sent uncached: no breakpoint": (
        [call(0, write=5_000), call(1, read=5_000, inp=8_000), call(2, read=5_000, inp=9_000)],
        ["cold_start", None, "uncached_prefix"],
    ),
    "rewrite below the noise floor is normal": (
        [call(0, write=20_000), call(1, read=19_500, write=MIN_REWRITTEN - 1 + 500)],
        ["cold_start", None],
    ),
}


@pytest.mark.parametrize(("calls", "expected"), CASES.values(), ids=CASES.keys())
def test_each_call_gets_the_cause_of_its_rebuild(calls: list[CallRecord], expected: list[str | None]) -> None:
    assert causes(calls) == expected


def test_rebuild_money_is_the_write_premium_over_a_read_and_expected_causes_lose_nothing() -> None:
    calls = [
        call(0, write=20_000),
        call(1, write=20_600, at_s=400),
        call(2, write=8_000, reset="compaction (manual)"),
    ]
    result = analyze_cache(calls)
    expired = result.calls[1]
    assert expired.rebuilt_tokens == 20_010  # the previous prompt: 10 uncached + 20,000 written
    assert expired.lost_usd == pytest.approx(20_010 * (3.75e-6 - 0.3e-6))
    assert result.calls[2].lost_usd == 0 and result.calls[0].lost_usd == 0
    assert result.lost_usd == pytest.approx(expired.lost_usd)
    assert 0 < result.lost_share < 1
    assert result.by_cause[0].cause == "ttl_expired"
    assert "7 min" in expired.explanation and "5 min" in expired.explanation
    assert expired.fix == FIXES["ttl_expired"]


def test_explanations_name_the_calls_with_people_counting_from_one() -> None:
    calls = [
        *[call(i, read=20_000 if i else 0, write=0 if i else 20_000, tools_sha256="a", tool_names=("A", "B")) for i in range(12)],
        call(12, write=20_300, tools_sha256="b", tool_names=("B", "A")),
    ]  # fmt: skip
    last = analyze_cache(calls).calls[-1]
    assert last.cause == "tools_reordered"
    assert "between calls 12 and 13" in last.explanation
    assert "move dynamic tools after the cached prefix" in (last.fix or "")


def test_every_cause_has_a_fix() -> None:
    assert set(CACHE_CAUSES) - {"cold_start"} <= set(FIXES)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 50_000), st.integers(0, 50_000), st.integers(0, 50_000), st.integers(0, 4_000)
        ),
        min_size=1,
        max_size=12,
    )
)
def test_rebuilt_tokens_never_exceed_what_the_call_wrote_or_sent_uncached(
    rows: list[tuple[int, int, int, int]],
) -> None:
    calls, t = [], 0
    for i, (read, write, inp, gap) in enumerate(rows):
        t += gap
        calls.append(call(i, read=read, write=write, inp=inp, at_s=t))
    result = analyze_cache(calls)
    for c, r in zip(result.calls, calls, strict=True):
        assert 0 <= c.rebuilt_tokens <= r.usage.cache_creation_input_tokens + r.usage.input_tokens
        assert c.lost_usd >= 0
    assert result.lost_usd <= result.total_usd + 1e-12 or result.total_usd == 0


# -- from stored events -----------------------------------------------------------------------


class _Event:
    """The StoredEvent fields call_records reads."""

    def __init__(self, seq: int, event: ContextEvent, created_utc: str = "2025-09-03T00:00:00Z") -> None:
        self.id = 100 + seq
        self.seq = seq
        self.created_utc = created_utc
        for name in (
            "kind",
            "trigger",
            "outcome",
            "model",
            "turn_index",
            "usage",
            "components",
            "message_seq",
            "details",
        ):
            setattr(self, name, getattr(event, name))


def request(seq: int, read: int, write: int, **details: Any) -> _Event:
    u = ProviderUsage(
        input_tokens=5, output_tokens=20, cache_read_input_tokens=read, cache_creation_input_tokens=write
    )
    return _Event(seq, ContextEvent(kind="request", model=SONNET, usage=u, message_seq=seq, details=details))


def test_a_proxy_edit_only_sent_again_resets_no_prefix() -> None:
    events = [
        request(0, 0, 20_000),
        _Event(1, ContextEvent(kind="compaction", trigger="proxy_policy", outcome="compacted")),
        request(2, 2_000, 9_000),
        _Event(3, ContextEvent(kind="compaction", trigger="proxy_policy", outcome="kept")),
        request(4, 11_000, 300),
    ]
    calls = call_records(events)
    assert [c.reset_before for c in calls] == [None, "compaction (proxy_policy)", None]


def test_call_records_take_the_time_from_details_then_the_message_then_the_event() -> None:
    events = [
        request(0, 0, 20_000, call_utc="2025-09-03T00:00:00Z"),
        request(1, 20_000, 100),
        _Event(2, ContextEvent(kind="compaction", trigger="manual", outcome="compacted")),
        request(3, 0, 9_000),
        _Event(4, ContextEvent(kind="guard", outcome="ok")),
    ]
    calls = call_records(events, message_times={1: "2025-09-03T00:10:00.000Z"})
    assert [c.index for c in calls] == [0, 1, 2]
    assert calls[0].at == parse_utc("2025-09-03T00:00:00Z")
    assert calls[1].at == T0 + dt.timedelta(minutes=10)
    assert calls[2].reset_before == "compaction (manual)" and calls[1].reset_before is None
    assert [c.cause for c in analyze_cache(calls).calls] == ["cold_start", None, "compaction"]


def test_call_records_take_the_split_and_hashes_from_the_exact_request_row() -> None:
    events = [request(0, 0, 20_000), request(1, 0, 20_100)]
    rows = {
        100: {"tools_hash": "t", "system_hash": "s1", "cache_creation_1h_tokens": 20_000},
        101: {"tools_hash": "t", "system_hash": "s2", "cache_creation_1h_tokens": 0},
    }
    calls = call_records(events, exact_requests=rows)
    assert calls[0].cost.cache_write_1h_tokens == 20_000 and calls[0].cost.ttl_split_known
    assert calls[1].system_sha256 == "s2"
    result = analyze_cache(calls)
    assert result.calls[1].cause == "system_changed" and result.calls[1].ttl_s == TTL_1H_S


def test_parse_utc_accepts_z_offsets_and_naive_and_rejects_junk() -> None:
    assert parse_utc("2025-09-03T00:00:00Z") == T0
    assert parse_utc("2025-09-03T02:00:00+02:00") == T0
    assert parse_utc("2025-09-03T00:00:00") == T0
    assert parse_utc("yesterday") is None and parse_utc(None) is None


# -- the cache_rebuild finding -----------------------------------------------------------------


def test_find_waste_reports_each_avoidable_rebuild_cause_with_money_and_fix(tmp_path: Any) -> None:
    from engine.findings import find_waste
    from engine.messages import assistant, user
    from engine.store import SessionStore
    from engine.tokens import get_tokenizer

    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(model=SONNET, provider="anthropic")
        store.append_messages(
            sid, [user("go"), *[assistant(f"step {i}") for i in range(14)]], tokenizer=get_tokenizer(SONNET)
        )
        names = ["Bash", "Read"]
        for i in range(14):
            if i == 12:
                names = ["Read", "Bash"]
            read, write = (0, 20_000) if i in (0, 12) else (20_000 + 100 * i, 100)
            when = f"2025-09-03T00:{i:02d}:00Z" if i < 13 else "2025-09-03T00:30:00Z"  # call 14: 18 min gap
            if i == 13:
                read, write = 0, 21_400
            u = ProviderUsage(
                input_tokens=5,
                output_tokens=40,
                cache_read_input_tokens=read,
                cache_creation_input_tokens=write,
            )
            store.record_event(
                sid,
                ContextEvent(
                    kind="request", model=SONNET, usage=u, turn_index=0, message_seq=i + 1,
                    details={"call_utc": when, "tools_sha256": "-".join(names), "tool_names": names},
                ),
            )  # fmt: skip
        findings = [f for f in find_waste(store, sid) if f.kind == "cache_rebuild"]
    by_title = {f.title.split(" between")[0]: f for f in findings}
    assert set(by_title) == {"tool list reordered", "cache expired before the next call"}
    reordered = by_title["tool list reordered"]
    assert "between calls 12 and 13" in reordered.title
    assert "move dynamic tools after the cached prefix" in reordered.fix
    assert reordered.money == pytest.approx(reordered.tokens * (3.75e-6 - 0.3e-6))
    assert reordered.exact and reordered.tokenizer == "provider"


def test_a_harness_summarizer_call_and_the_call_after_it_are_compactions_not_losses() -> None:
    events = [
        request(0, 0, 30_000),
        request(1, 30_000, 2_000),
        request(2, 0, 33_000, compaction_call=True),
        request(3, 0, 6_000),
    ]
    calls = call_records(events)
    assert [c.reset_before for c in calls] == [None, None, "compaction call", "compaction"]
    result = analyze_cache(calls)
    assert [c.cause for c in result.calls] == ["cold_start", None, "compaction", "compaction"]
    assert result.lost_usd == 0


@pytest.mark.parametrize(
    ("before", "after", "cause", "words"),
    [
        (["Bash", "Read"], ["Read", "Bash"], "tools_reordered", "reordered"),
        (["Bash"], ["Bash", "mcp__db__query"], "tools_changed", "added mcp__db__query"),
        (["Bash", "Read"], ["Bash"], "tools_changed", "removed Read"),
    ],
)
def test_tool_names_alone_tell_a_reorder_from_a_change(
    before: list[str], after: list[str], cause: str, words: str
) -> None:
    events = [request(0, 0, 20_000, tools_sent=before), request(1, 0, 20_300, tools_sent=after)]
    second = analyze_cache(call_records(events)).calls[1]
    assert second.cause == cause and words in second.explanation


@pytest.mark.parametrize(("calls", "expected"), CASES.values(), ids=CASES.keys())
def test_each_explanation_is_a_sentence_that_says_the_cause_first(
    calls: list[CallRecord], expected: list[str | None]
) -> None:
    for result in analyze_cache(calls).calls:
        text = result.explanation
        assert text[0].isupper() and text.endswith("."), text
        if result.rebuilt_tokens and result.cause not in ("cold_start", "uncached_prefix"):
            cause, _, effect = text.rpartition(", so call ")
            assert cause and "wrote" not in cause, text  # what happened comes before what it cost
            assert effect.endswith("had already cached."), text


def test_the_ttl_sentence_reads_as_a_user_would_say_it() -> None:
    calls = [call(0, write=20_000), call(1, read=20_000, write=500), call(2, write=20_600, at_s=20 + 360)]
    assert analyze_cache(calls).calls[2].explanation == (
        "The cache had expired: 6 min passed since call 2, past the 5 min cache lifetime, so call 3 wrote "
        "20,510 tokens to the cache again that call 2 had already cached."
    )


@pytest.mark.parametrize(
    ("trigger_kind", "words"),
    [
        ("auto", "automatic compaction by the agent"),
        ("reactive", "reactive compaction by the agent"),
        (None, "compaction by the agent"),
    ],
)
def test_an_agents_compaction_is_named_as_the_agents_not_as_a_ctxdesk_trigger(
    trigger_kind: str | None, words: str
) -> None:
    details = {"by": "agent", **({"trigger_kind": trigger_kind} if trigger_kind else {})}
    events = [
        request(0, 0, 20_000),
        _Event(
            1,
            ContextEvent(
                kind="compaction", trigger="compact_threshold", outcome="compacted", details=details
            ),
        ),
        request(2, 0, 9_000),
    ]
    calls = call_records(events)
    assert calls[1].reset_before == words
    (rebuild,) = [c for c in analyze_cache(calls).calls if c.cause == "compaction"]
    article = "An" if words.startswith("automatic") else "A"
    assert rebuild.explanation.startswith(
        f"{article} {words} between calls 1 and 2 gave the prompt a new start"
    )
