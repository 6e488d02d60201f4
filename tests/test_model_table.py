"""Model table: the bundled JSON, tolerant name lookup, LiteLLM import and merge."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ConfigError
from engine.model_table import ModelInfo, ModelTable, load_model_table, match_model_name

ROOT = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).parent / "fixtures" / "litellm_small.json"
SHARED_MODELS = Path(os.environ.get("CTXDESK_SHARED_DIR", ROOT.parent / "shared")) / "models"
SHARED_LITELLM = SHARED_MODELS / "litellm-1.109.1_model_prices_and_context_window_backup.json"


def info(
    name: str, window: int = 100_000, output: int | None = 4_000, provider: str | None = None
) -> ModelInfo:
    return ModelInfo(
        name=name, provider=provider, context_window=window, max_output_tokens=output, source="test"
    )


def table(*names: str) -> ModelTable:
    return ModelTable({n: info(n) for n in names}, source="test")


# -- bundled table ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "window", "output", "provider"),
    [
        ("claude-sonnet-4-20250514", 200_000, 64_000, "anthropic"),
        ("claude-3-5-sonnet-20241022", 200_000, 8_192, "anthropic"),
        ("gpt-4", 8_192, 4_096, "openai"),
        ("gpt-4o", 128_000, 16_384, "openai"),
        ("gemini-2.5-pro", 1_048_576, 65_536, "gemini"),
    ],
)
def test_bundled_table_lists_well_known_models(model: str, window: int, output: int, provider: str) -> None:
    found = ModelTable.bundled().lookup(model)
    assert found is not None
    assert (found.context_window, found.max_output_tokens, found.provider) == (window, output, provider)


def test_bundled_table_covers_every_wanted_provider_with_a_few_hundred_models() -> None:
    bundled = ModelTable.bundled()
    assert 150 <= len(bundled) <= 600
    providers = {entry.provider for entry in bundled}
    assert {"anthropic", "openai", "gemini", "meta_llama", "mistral", "deepseek", "dashscope"} <= providers
    assert 200 <= sum(entry.provider != "openrouter" for entry in bundled) <= 400


def test_a_model_only_a_router_lists_is_priced_as_the_router_bills_it() -> None:
    # OpenHands' multi_swe_bench run in ../shared: 105 calls of meta-llama/llama-4-maverick via OpenRouter
    found = ModelTable.bundled().lookup("meta-llama/llama-4-maverick")
    assert found is not None and found.provider == "openrouter"
    assert (found.context_window, found.max_output_tokens) == (1_048_576, 16_384)
    assert (found.input_cost_per_token, found.output_cost_per_token) == (
        pytest.approx(0.15e-6),
        pytest.approx(0.6e-6),
    )
    assert ModelTable.bundled().lookup("openrouter/auto") is None  # the router's own routing is no model


def test_no_router_entry_answers_a_name_a_provider_entry_answers() -> None:
    entries = list(ModelTable.bundled())
    own = {e.name for e in entries if e.provider != "openrouter"}
    routed = [e.name for e in entries if e.provider == "openrouter"]
    assert routed, "the fallback router gives entries"
    assert [name for name in routed if match_model_name(name, own) is not None] == []
    assert ModelTable.bundled().lookup("anthropic/claude-3.5-sonnet").provider == "anthropic"


def test_bundled_entries_record_their_source_and_carry_prices() -> None:
    bundled = ModelTable.bundled()
    assert {entry.source for entry in bundled} <= {"models.dev", "litellm-1.109.1", "litellm-1.75.0"}
    sonnet = bundled.lookup("claude-sonnet-4-20250514")
    assert sonnet is not None
    assert sonnet.input_cost_per_token == pytest.approx(3e-6)
    assert sonnet.output_cost_per_token == pytest.approx(15e-6)
    assert sonnet.cache_read_cost_per_token == pytest.approx(0.3e-6)
    assert sonnet.cache_write_cost_per_token == pytest.approx(3.75e-6)


def test_bundled_names_are_lower_case_and_sorted() -> None:
    names = ModelTable.bundled().names()
    assert names == sorted(names)
    assert all(name == name.lower() for name in names)


# -- lookup ----------------------------------------------------------------------------------

KNOWN = (
    "claude-sonnet-4",
    "claude-sonnet-4-5",
    "claude-3-5-sonnet-20240620",
    "claude-3-5-sonnet-20241022",
    "gpt-4",
    "gpt-4o",
    "gpt-4o-mini",
)


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        pytest.param("gpt-4o", "gpt-4o", id="exact"),
        pytest.param("GPT-4o", "gpt-4o", id="case"),
        pytest.param("openai/gpt-4o", "gpt-4o", id="provider-prefix"),
        pytest.param("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", id="anthropic-prefix"),
        pytest.param("openrouter/anthropic/claude-sonnet-4-5", "claude-sonnet-4-5", id="two-prefixes"),
        pytest.param("claude-sonnet-4-20250514", "claude-sonnet-4", id="dated-suffix"),
        pytest.param("claude-sonnet-4@20250514", "claude-sonnet-4", id="vertex-dated"),
        pytest.param("gpt-4o-mini-2024-07-18", "gpt-4o-mini", id="iso-dated"),
        pytest.param("claude-3-5-sonnet-20241022", "claude-3-5-sonnet-20241022", id="dated-listed-exact"),
        pytest.param("claude-3-5-sonnet", "claude-3-5-sonnet-20241022", id="undated-takes-newest"),
        pytest.param("claude-3-5-sonnet-latest", "claude-3-5-sonnet-20241022", id="latest-alias"),
        pytest.param("gpt-4o-mini-search-preview", "gpt-4o-mini", id="longest-prefix"),
        pytest.param("claude-sonnet-4-5-thinking", "claude-sonnet-4-5", id="longest-prefix-not-shorter"),
        pytest.param("gpt-4.5-preview", None, id="dot-is-not-a-variant-boundary"),
        pytest.param("anthropic/claude-sonnet-4.5", "claude-sonnet-4-5", id="openrouter-dotted-version"),
        pytest.param("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet-20241022", id="dotted-undated"),
        pytest.param("gpt-4omni", None, id="prefix-needs-boundary"),
        pytest.param("llama-3", None, id="unknown"),
    ],
)
def test_lookup_tolerates_case_prefixes_and_dated_names(query: str, expected: str | None) -> None:
    found = table(*KNOWN).lookup(query)
    assert (found.name if found else None) == expected


def test_match_without_prefix_matching_only_takes_exact_or_dated_names() -> None:
    assert match_model_name("gpt-4o-mini-search", {"gpt-4o-mini"}, allow_prefix=False) is None
    assert match_model_name("openai/gpt-4o-2024-08-06", {"gpt-4o"}, allow_prefix=False) == "gpt-4o"


@given(st.sampled_from(ModelTable.bundled().names()), st.sampled_from(["", "openai/", "Anthropic/"]))
def test_every_bundled_name_is_found_whatever_its_case_and_prefix(name: str, prefix: str) -> None:
    found = ModelTable.bundled().lookup(prefix + name.upper())
    assert found is not None and found.name == name


def test_model_info_rejects_an_output_cap_that_fills_the_window() -> None:
    with pytest.raises(ValueError, match="max_output_tokens"):
        info("x", window=8_192, output=8_192)


# -- LiteLLM import --------------------------------------------------------------------------


def test_from_litellm_reads_windows_costs_and_provider() -> None:
    imported = ModelTable.from_litellm(FIXTURE)
    gpt4o = imported.lookup("gpt-4o")
    assert gpt4o is not None
    assert (gpt4o.context_window, gpt4o.max_output_tokens, gpt4o.provider) == (128_000, 16_384, "openai")
    assert gpt4o.input_cost_per_token == pytest.approx(2.5e-6)
    assert gpt4o.cache_read_cost_per_token == pytest.approx(1.25e-6)
    assert gpt4o.source == str(FIXTURE)
    assert "sample_spec" not in imported.names()


def test_from_litellm_finds_provider_routed_entries_by_bare_name() -> None:
    imported = ModelTable.from_litellm(FIXTURE)
    assert imported.lookup("gemini-2.5-pro") == imported.lookup("gemini/gemini-2.5-pro").model_copy(
        update={"name": "gemini-2.5-pro"}
    )


def test_from_litellm_drops_an_output_cap_equal_to_the_window() -> None:
    large = ModelTable.from_litellm(FIXTURE).lookup("mistral/mistral-large-latest")
    assert large is not None
    assert large.context_window == 262_144
    assert large.max_output_tokens is None


def test_user_table_merged_over_bundled_wins_and_keeps_the_rest(tmp_path: Path) -> None:
    user = tmp_path / "litellm.json"
    user.write_text(
        json.dumps(
            {"gpt-4o": {"max_input_tokens": 64_000, "max_output_tokens": 2_000, "litellm_provider": "openai"}}
        )
    )
    merged = load_model_table(user)
    assert merged.lookup("gpt-4o").context_window == 64_000
    assert merged.lookup("gpt-4o").source == str(user)
    assert merged.lookup("claude-sonnet-4-20250514").context_window == 200_000


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("{not json", "invalid JSON at line 1", id="syntax"),
        pytest.param("[1, 2]", "expected a JSON object", id="array"),
        pytest.param(
            '{"m": {"max_input_tokens": "lots"}}', "m.max_input_tokens: expected a number", id="type"
        ),
        pytest.param('{"m": {"max_input_tokens": 10.5}}', "expected a whole number", id="fraction"),
        pytest.param('{"m": 5}', "m: expected an object", id="entry"),
    ],
)
def test_bad_litellm_file_is_a_config_error_naming_the_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "prices.json"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message) as caught:
        ModelTable.from_litellm(path)
    assert caught.value.source == str(path)
    assert str(path) in str(caught.value)


def test_missing_litellm_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read model table"):
        load_model_table(tmp_path / "absent.json")


# -- against ../shared -----------------------------------------------------------------------


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_MODELS.is_dir(), reason="../shared/models not present")
def test_bundled_table_is_what_the_build_script_makes_from_shared() -> None:
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "build_model_table.py"),
            "--check",
            "--shared",
            str(SHARED_MODELS),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_LITELLM.is_file(), reason="../shared LiteLLM table not present")
def test_fixture_entries_are_copied_from_the_real_litellm_file() -> None:
    real = json.loads(SHARED_LITELLM.read_text())
    fixture = json.loads(FIXTURE.read_text())
    assert {key: real[key] for key in fixture} == fixture


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_LITELLM.is_file(), reason="../shared LiteLLM table not present")
def test_the_full_litellm_file_imports() -> None:
    imported = ModelTable.from_litellm(SHARED_LITELLM)
    assert len(imported) > 2_000
    assert imported.lookup("anthropic/claude-sonnet-4-5").context_window == 200_000
