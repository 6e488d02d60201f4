"""Per-call cost: model-table prices (cache reads, 5-minute and 1-hour writes) and price_call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cost import price_call, prices_for, prices_from_info, split_cache_writes
from engine.events import ProviderUsage
from engine.model_table import ModelInfo, ModelTable
from tests.conftest import FIXTURES, SHARED_SESSIONS

SONNET = "claude-sonnet-4-20250514"


def usage(inp: int = 0, out: int = 0, read: int = 0, write: int = 0) -> ProviderUsage:
    return ProviderUsage(
        input_tokens=inp, output_tokens=out, cache_read_input_tokens=read, cache_creation_input_tokens=write
    )


def raw_claude_code_usage(path: Path) -> list[dict[str, int]]:
    """Usage per API response, straight from the JSONL (the last line of each message id wins,
    as in ccusage: earlier lines of a streamed response carry partial output counts)."""
    by_id: dict[str, dict[str, int]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        obj = json.loads(line)
        message = obj.get("message") or {}
        if obj.get("type") == "assistant" and message.get("usage") and message.get("model") != "<synthetic>":
            by_id[message["id"]] = message["usage"]
    return list(by_id.values())


def list_price(u: dict[str, int]) -> float:
    """Sonnet 4 list prices per million: 3 input, 15 output, 0.30 read, 3.75 write (5 min)."""
    return (
        u["input_tokens"] * 3
        + u["output_tokens"] * 15
        + u["cache_read_input_tokens"] * 0.3
        + u["cache_creation_input_tokens"] * 3.75
    ) / 1e6


# -- prices ------------------------------------------------------------------------------------


def test_bundled_sonnet_4_has_every_cache_price_with_the_1h_write_derived_at_twice_input() -> None:
    p = prices_for(SONNET)
    assert p is not None
    assert (p.input, p.output, p.cache_read, p.cache_write_5m) == pytest.approx(
        (3e-6, 15e-6, 0.3e-6, 3.75e-6)
    )
    assert p.cache_write_1h == pytest.approx(6e-6)
    assert p.caches and p.notes == ()


def test_litellm_1h_write_price_is_read_from_its_above_1hr_field() -> None:
    raw = {
        "claude-x-1": {
            "litellm_provider": "anthropic",
            "max_input_tokens": 200_000,
            "max_output_tokens": 8_000,
            "input_cost_per_token": 1e-6,
            "output_cost_per_token": 5e-6,
            "cache_read_input_token_cost": 1e-7,
            "cache_creation_input_token_cost": 1.25e-6,
            "cache_creation_input_token_cost_above_1hr": 2.5e-6,
        }
    }
    info = ModelTable.from_litellm_data(raw, source="t").lookup("claude-x-1")
    assert info is not None and info.cache_write_1h_cost_per_token == pytest.approx(2.5e-6)
    prices = prices_from_info(info)
    assert prices is not None and prices.cache_write_1h == pytest.approx(2.5e-6)


@pytest.mark.parametrize(
    ("info", "read", "write_5m", "write_1h", "note"),
    [
        pytest.param(
            ModelInfo(name="claude-y", provider="anthropic", context_window=1000, input_cost_per_token=1.0,
                      output_cost_per_token=5.0, source="t"),
            0.1, 1.25, 2.0, "Anthropic", id="anthropic-derived",
        ),
        pytest.param(
            ModelInfo(name="gpt-z", provider="openai", context_window=1000, input_cost_per_token=1.0,
                      output_cost_per_token=4.0, cache_read_cost_per_token=0.5, source="t"),
            0.5, 1.0, 1.0, "automatic caching", id="openai-no-write-surcharge",
        ),
        pytest.param(
            ModelInfo(name="m", provider="mistral", context_window=1000, input_cost_per_token=1.0,
                      output_cost_per_token=3.0, source="t"),
            1.0, 1.0, 1.0, "no cache price", id="no-cache-prices",
        ),
    ],
)  # fmt: skip
def test_missing_cache_prices_are_derived_and_the_derivation_is_noted(
    info: ModelInfo, read: float, write_5m: float, write_1h: float, note: str
) -> None:
    p = prices_from_info(info)
    assert p is not None
    assert (p.cache_read, p.cache_write_5m, p.cache_write_1h) == pytest.approx((read, write_5m, write_1h))
    assert any(note in n for n in p.notes)


def test_unknown_model_has_no_prices() -> None:
    assert prices_for("no-such-model-anywhere") is None
    assert prices_for(None) is None


# -- price_call --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("u", "details", "split", "total"),
    [
        pytest.param(usage(10, 100, 1000, 0), {}, (0, 0), 10 * 3 + 100 * 15 + 1000 * 0.3, id="read-only"),
        pytest.param(usage(0, 0, 0, 1000), {}, (1000, 0), 1000 * 3.75, id="write-no-split-is-5m"),
        pytest.param(
            usage(0, 0, 0, 1000),
            {"cache_write_1h_tokens": 400},
            (600, 400),
            600 * 3.75 + 400 * 6,
            id="split-1h",
        ),
        pytest.param(
            usage(0, 0, 0, 1000),
            {"cache_write_5m_tokens": 0, "cache_write_1h_tokens": 1000},
            (0, 1000),
            6000,
            id="all-1h",
        ),
    ],
)
def test_price_call_prices_each_part(
    u: ProviderUsage, details: dict[str, int], split: tuple[int, int], total: float
) -> None:
    cost = price_call(u, prices_for(SONNET), details=details)
    assert (cost.cache_write_5m_tokens, cost.cache_write_1h_tokens) == split
    assert cost.total_usd == pytest.approx(total / 1e6)
    assert cost.priced and cost.priced_as == SONNET


def test_reasoning_is_part_of_output_and_capped_by_it() -> None:
    cost = price_call(usage(out=100), prices_for("gpt-5"), details={"reasoning_tokens": 250})
    assert cost.reasoning_tokens == 100
    assert cost.output_usd == pytest.approx(100 * 1e-5)


def test_unpriced_call_keeps_tokens_and_costs_nothing() -> None:
    cost = price_call(usage(5, 6, 7, 8), None, model="mystery")
    assert not cost.priced and cost.total_usd == 0 and cost.prompt_tokens == 20 and cost.model == "mystery"


def test_cache_savings_compare_with_sending_everything_uncached() -> None:
    cost = price_call(usage(0, 0, 10_000, 0), prices_for(SONNET))
    assert cost.uncached_usd == pytest.approx(0.03)
    assert cost.cache_savings_usd == pytest.approx(0.03 - 0.003)


@given(
    st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6), st.integers(0, 10**6),
    st.one_of(st.none(), st.integers(-5, 2 * 10**6)),
)  # fmt: skip
def test_split_never_exceeds_the_writes_and_totals_add_up(
    inp: int, out: int, read: int, write: int, one_hour: int | None
) -> None:
    u = usage(inp, out, read, write)
    details = {} if one_hour is None else {"cache_write_1h_tokens": one_hour}
    w5, w1, _ = split_cache_writes(u, details)
    assert w5 + w1 == write and w5 >= 0 and w1 >= 0
    cost = price_call(u, prices_for(SONNET), details=details)
    parts = (
        cost.input_usd
        + cost.output_usd
        + cost.cache_read_usd
        + cost.cache_write_5m_usd
        + cost.cache_write_1h_usd
    )
    assert cost.total_usd == pytest.approx(parts)
    assert cost.prompt_tokens == u.prompt_tokens


# -- on real Claude Code files -----------------------------------------------------------------


def imported_cost(path: Path, tmp_path: Path) -> float:
    from engine.cost import price_call as price
    from engine.importers import import_file
    from engine.store import SessionStore

    with SessionStore(tmp_path / "cc.db") as store:
        import_file(path, store)
        total = 0.0
        for session in store.list_sessions():
            for event in store.list_events(session.id, kind="request"):
                if event.usage is not None:
                    total += price(event.usage, prices_for(event.model or session.model)).total_usd
    return total


@pytest.mark.parametrize(
    "name", ["claude-code__5c0375b4__head23.jsonl", "claude-code__fe5e1c67__head37.jsonl"]
)
def test_imported_claude_code_cost_equals_list_prices_on_the_raw_usage(name: str, tmp_path: Path) -> None:
    path = FIXTURES / "sessions" / name
    expected = sum(list_price(u) for u in raw_claude_code_usage(path))
    assert expected > 0
    assert imported_cost(path, tmp_path) == pytest.approx(expected, rel=1e-9)


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="needs ../shared/sessions")
@pytest.mark.parametrize(
    ("suffix", "ccusage_usd"),
    [("5c0375b4", 0.33115094999999994), ("fe5e1c67", 2.3932151999999998)],
)
def test_full_claude_code_sessions_cost_what_ccusage_reports(
    suffix: str, ccusage_usd: float, tmp_path: Path
) -> None:
    (path,) = SHARED_SESSIONS.glob(f"claude-code__*__{suffix}.jsonl")
    # ccusage 20.0.24 `ccusage claude session --offline --json` on the same file (bench/bench_cost.py reruns it)
    assert imported_cost(path, tmp_path) == pytest.approx(ccusage_usd, rel=0.01)


def test_bench_reads_a_streamed_response_both_ways_the_tools_do() -> None:
    from bench.bench_cost import read_raw

    path = FIXTURES / "sessions" / "claude-code__5c0375b4__head23.jsonl"
    raw = read_raw([(path, path.name)])
    assert raw.calls == len(raw_claude_code_usage(path))
    assert (
        raw.output_first < raw.output_last
    )  # early lines of a streamed response carry partial output counts
    assert raw.writes_without_split == 0


@pytest.mark.parametrize(
    ("prompt", "input_price"),
    [(200_000, 1.25e-6), (200_001, 2.5e-6)],
    ids=["at the threshold", "above it"],
)
def test_a_prompt_over_the_long_context_threshold_is_priced_whole_at_the_tier(
    prompt: int, input_price: float
) -> None:
    prices = prices_for("gemini-2.5-pro")
    assert prices is not None and prices.long_context_threshold == 200_000
    cost = price_call(usage(inp=prompt - 100_000, read=100_000, out=1_000), prices)
    assert cost.input_usd == pytest.approx((prompt - 100_000) * input_price)
    tier = prices.for_prompt(prompt)
    assert cost.cache_read_usd == pytest.approx(100_000 * tier.cache_read)
    assert cost.output_usd == pytest.approx(1_000 * tier.output)


def test_litellm_long_context_tier_is_read_from_its_lowest_above_field() -> None:
    raw = {
        "m-long": {
            "litellm_provider": "openai",
            "max_input_tokens": 1_000_000,
            "input_cost_per_token": 1e-6,
            "output_cost_per_token": 4e-6,
            "input_cost_per_token_above_272k_tokens": 2e-6,
            "output_cost_per_token_above_272k_tokens": 6e-6,
            "input_cost_per_token_above_272k_tokens_priority": 9e-6,
        }
    }
    info = ModelTable.from_litellm_data(raw, source="t").lookup("m-long")
    assert info is not None and info.long_context_threshold == 272_000
    assert (info.input_cost_per_token_above_threshold, info.output_cost_per_token_above_threshold) == (
        2e-6,
        6e-6,
    )
    prices = prices_from_info(info)
    assert (
        prices is not None
        and prices.for_prompt(300_000).input == 2e-6
        and prices.for_prompt(1000).input == 1e-6
    )
