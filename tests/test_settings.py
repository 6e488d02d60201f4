"""Settings: resolution order and sources, TOML errors, atomic save, live reload."""

from __future__ import annotations

import os
import shutil
import stat
import threading
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

import engine
from engine.errors import ConfigError, ValidationError
from engine.model_table import ModelInfo, ModelTable
from engine.settings import (
    DEFAULT_BUFFER_TOKENS,
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_HARD_BLOCK_THRESHOLD,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_NOTE_THRESHOLD,
    DEFAULT_RESULT_OFFLOAD_THRESHOLD,
    DEFAULT_TOOL_DEFERRAL_THRESHOLD,
    SETTINGS_ENV_VAR,
    ModelSettings,
    Settings,
    SettingsWatcher,
    dump_settings_toml,
    load_settings,
    resolve_model_settings,
    save_settings,
)

FIXTURE = Path(__file__).parent / "fixtures" / "litellm_small.json"
FILE = "/etc/ctxdesk/settings.toml"  # a label only: resolution never reads it
IN_FILE = " (settings.toml)"

# A table with one model, so resolution cases do not depend on the bundled data.
TABLE = ModelTable(
    {
        "gpt-4o": ModelInfo(
            name="gpt-4o", provider="openai", context_window=128_000, max_output_tokens=16_384, source="test"
        )
    },
    source="test",
)


def settings(**data: Any) -> Settings:
    return Settings.from_dict(data, source=FILE)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


# -- constants and fields --------------------------------------------------------------------


def test_builtin_defaults_are_the_documented_constants() -> None:
    resolved = resolve_model_settings("unknown-model", table=TABLE)
    assert (resolved.context_window, resolved.buffer_tokens, resolved.max_output_tokens) == (
        131_072,
        256,
        4096,
    )
    assert (resolved.note_threshold, resolved.compact_threshold, resolved.hard_block_threshold) == (
        0.80,
        0.95,
        0.98,
    )
    assert (resolved.result_offload_threshold, resolved.tool_deferral_threshold) == (4096, 0.10)
    assert (resolved.tool_response_max_bytes, resolved.context_budget) == (None, None)
    assert (DEFAULT_CONTEXT_WINDOW, DEFAULT_BUFFER_TOKENS, DEFAULT_MAX_OUTPUT_TOKENS) == (131_072, 256, 4096)
    assert (DEFAULT_NOTE_THRESHOLD, DEFAULT_COMPACT_THRESHOLD, DEFAULT_HARD_BLOCK_THRESHOLD) == (
        0.80,
        0.95,
        0.98,
    )
    assert (DEFAULT_RESULT_OFFLOAD_THRESHOLD, DEFAULT_TOOL_DEFERRAL_THRESHOLD) == (4096, 0.10)
    assert set(resolved.sources.values()) == {"builtin"}


@pytest.mark.parametrize("model_class", [ModelSettings, Settings])
def test_every_settings_field_has_a_description(model_class: type) -> None:
    assert all(field.description for field in model_class.model_fields.values())


def test_public_names_are_exported_from_engine() -> None:
    for name in (
        "ModelSettings",
        "ModelTable",
        "ResolvedModelSettings",
        "Settings",
        "SettingsWatcher",
        "load_settings",
        "resolve_model_settings",
        "save_settings",
    ):
        assert name in engine.__all__
        assert getattr(engine, name) is not None


# -- resolution ------------------------------------------------------------------------------


def test_worked_example_gpt_4o_leaves_111_360_tokens() -> None:
    resolved = resolve_model_settings("gpt-4o")
    assert (resolved.context_window, resolved.max_output_tokens, resolved.buffer_tokens) == (
        128_000,
        16_384,
        256,
    )
    assert resolved.effective_window == 111_360
    assert resolved.sources["context_window"] == "table:gpt-4o (models.dev)"
    assert resolved.sources["buffer_tokens"] == "builtin"
    assert resolved.model_info is not None and resolved.model_info.input_cost_per_token == pytest.approx(
        2.5e-6
    )


@pytest.mark.parametrize(
    ("data", "model", "field", "value", "source"),
    [
        pytest.param({}, "gpt-4o", "context_window", 128_000, "table:gpt-4o (test)", id="table-over-builtin"),
        pytest.param(
            {"defaults": {"context_window": 50_000}},
            "gpt-4o",
            "context_window",
            128_000,
            "table:gpt-4o (test)",
            id="table-over-defaults",
        ),
        pytest.param(
            {"defaults": {"context_window": 50_000}},
            "my-local-model",
            "context_window",
            50_000,
            "defaults" + IN_FILE,
            id="defaults-when-table-has-no-entry",
        ),
        pytest.param({}, "my-local-model", "context_window", 131_072, "builtin", id="builtin-last"),
        pytest.param(
            {"providers": {"openai": {"context_window": 64_000}}, "defaults": {"context_window": 50_000}},
            "gpt-4o",
            "context_window",
            64_000,
            "provider:openai" + IN_FILE,
            id="provider-over-table",
        ),
        pytest.param(
            {
                "models": {"gpt-4o": {"context_window": 32_000}},
                "providers": {"openai": {"context_window": 64_000}},
            },
            "gpt-4o",
            "context_window",
            32_000,
            "model:gpt-4o" + IN_FILE,
            id="model-over-provider",
        ),
        pytest.param(
            {"defaults": {"buffer_tokens": 1_000}},
            "gpt-4o",
            "buffer_tokens",
            1_000,
            "defaults" + IN_FILE,
            id="table-does-not-supply-buffer",
        ),
        pytest.param(
            {"defaults": {"buffer_tokens": 1_000}, "providers": {"openai": {"buffer_tokens": 2_000}}},
            "gpt-4o",
            "buffer_tokens",
            2_000,
            "provider:openai" + IN_FILE,
            id="provider-over-defaults",
        ),
        pytest.param(
            {
                "providers": {"openai": {"max_output_tokens": 8_000}},
                "models": {"gpt-4o": {"max_output_tokens": 4_000}},
            },
            "openai/gpt-4o",
            "max_output_tokens",
            4_000,
            "model:gpt-4o" + IN_FILE,
            id="model-matched-through-provider-prefix",
        ),
        pytest.param(
            {"compact_trigger": 0.9},
            "gpt-4o",
            "compact_threshold",
            0.9,
            "defaults" + IN_FILE,
            id="seed-top-level-key-is-a-default",
        ),
        pytest.param(
            {"defaults": {"tokenizer": "chars/4"}, "models": {"gpt-4o": {"tokenizer": "cl100k_base"}}},
            "gpt-4o",
            "tokenizer",
            "cl100k_base",
            "model:gpt-4o" + IN_FILE,
            id="tokenizer-from-model",
        ),
        pytest.param({}, "gpt-4o", "tokenizer", "o200k_base", "builtin", id="tokenizer-by-model-name"),
    ],
)
def test_each_level_wins_over_the_levels_below(
    data: dict[str, Any], model: str, field: str, value: object, source: str
) -> None:
    resolved = resolve_model_settings(model, settings=settings(**data), table=TABLE)
    assert getattr(resolved, field) == value
    assert resolved.sources[field] == source


def test_source_labels_are_one_of_the_five_kinds() -> None:
    data = {"models": {"gpt-4o": {"note_threshold": 0.5}}, "providers": {"openai": {"buffer_tokens": 10}}}
    resolved = resolve_model_settings("gpt-4o", settings=settings(**data), table=TABLE)
    kinds = {label.split(":")[0].split(" ")[0] for label in resolved.sources.values()}
    assert kinds == {"model", "provider", "table", "builtin"}
    assert set(resolved.sources) == set(ModelSettings.model_fields)


def test_labels_have_no_file_when_settings_were_built_in_code() -> None:
    built = Settings(models={"gpt-4o": ModelSettings(context_window=90_000)})
    resolved = resolve_model_settings("gpt-4o", settings=built, table=TABLE)
    assert resolved.sources["context_window"] == "model:gpt-4o"


@pytest.mark.parametrize(
    ("model", "provider", "expected"),
    [
        pytest.param("gpt-4o", "Azure", "azure", id="given"),
        pytest.param("bedrock/claude-x", None, "bedrock", id="name-prefix"),
        pytest.param("gpt-4o", None, "openai", id="table"),
        pytest.param("claude-sonnet-9", None, "anthropic", id="name-guess"),
        pytest.param("my-local-model", None, None, id="unknown"),
    ],
)
def test_provider_is_given_or_inferred(model: str, provider: str | None, expected: str | None) -> None:
    assert resolve_model_settings(model, provider, table=TABLE).provider == expected


def test_model_settings_match_dated_and_case_variants_but_not_longer_names() -> None:
    data = settings(models={"GPT-4o": {"context_window": 90_000}})
    assert resolve_model_settings("gpt-4o-2024-08-06", settings=data, table=TABLE).context_window == 90_000
    assert resolve_model_settings("OpenAI/gpt-4o", settings=data, table=TABLE).context_window == 90_000
    mini = resolve_model_settings("gpt-4o-mini", settings=data, table=TABLE)
    assert mini.sources["context_window"] == "table:gpt-4o (test)"


@pytest.mark.parametrize(
    ("model", "window", "output"),
    [
        ("claude-sonnet-4-20250514", 200_000, 64_000),
        ("anthropic/claude-sonnet-4-5", 200_000, 64_000),
        ("claude-sonnet-4-5-20991231", 200_000, 64_000),
        ("openai/gpt-4o", 128_000, 16_384),
        ("gpt-4", 8_192, 4_096),
    ],
)
def test_dated_and_prefixed_names_resolve_from_the_bundled_table(
    model: str, window: int, output: int
) -> None:
    resolved = resolve_model_settings(model)
    assert (resolved.context_window, resolved.max_output_tokens) == (window, output)


def test_thresholds_in_tokens_apply_to_the_capped_budget() -> None:
    resolved = resolve_model_settings(
        "gpt-4o", settings=settings(defaults={"context_budget": 100_000}), table=TABLE
    )
    # one meaning: the limit is capped; the old names are aliases of it, the uncapped value is named so
    assert (resolved.limit.uncapped, resolved.limit.tokens) == (111_360, 100_000)
    assert resolved.effective_window == resolved.budget_tokens == 100_000
    assert resolved.limit.source == "model table"  # gpt-4o's window is in TABLE
    assert (resolved.note_tokens, resolved.compact_tokens, resolved.hard_block_tokens) == (
        80_000,
        95_000,
        98_000,
    )
    assert resolved.tool_deferral_tokens == 10_000


def test_resolved_settings_are_frozen() -> None:
    resolved = resolve_model_settings("gpt-4o", table=TABLE)
    with pytest.raises(ValueError, match="frozen"):
        resolved.context_window = 1  # type: ignore[misc]


def test_output_and_buffer_filling_the_window_is_a_config_error_naming_field_and_sources() -> None:
    data = settings(models={"gpt-4o": {"max_output_tokens": 127_900}})
    with pytest.raises(ConfigError) as caught:
        resolve_model_settings("gpt-4o", settings=data, table=TABLE)
    assert caught.value.field == "models.gpt-4o.max_output_tokens"
    assert caught.value.source == FILE
    assert "model:gpt-4o (settings.toml)" in str(caught.value)
    assert "table:gpt-4o (test)" in str(caught.value)


def test_thresholds_out_of_order_across_levels_are_a_config_error() -> None:
    data = settings(models={"gpt-4o": {"note_threshold": 0.97}})
    with pytest.raises(ConfigError, match="must be <= compact_threshold") as caught:
        resolve_model_settings("gpt-4o", settings=data, table=TABLE)
    assert caught.value.field == "models.gpt-4o.note_threshold"


def test_empty_model_name_is_a_validation_error() -> None:
    with pytest.raises(ValidationError):
        resolve_model_settings("  ", table=TABLE)


# -- TOML file -------------------------------------------------------------------------------


def test_load_reads_sections_and_top_level_seed_keys(tmp_path: Path) -> None:
    path = write(
        tmp_path / "settings.toml",
        """
        context_budget = 90000
        compact_trigger = 0.9
        hard_block = 0.97
        result_offload_threshold = 8192
        tool_deferral_threshold = 0.2

        [defaults]
        buffer_tokens = 512

        [providers.anthropic]
        max_output_tokens = 8192

        [models."gpt-4.1"]
        context_window = 1000000
        """.replace("        ", ""),
    )
    loaded = load_settings(path)
    assert loaded.source == str(path)
    assert loaded.defaults == ModelSettings(
        context_budget=90_000,
        compact_threshold=0.9,
        hard_block_threshold=0.97,
        result_offload_threshold=8192,
        tool_deferral_threshold=0.2,
        buffer_tokens=512,
    )
    assert loaded.providers["anthropic"].max_output_tokens == 8192
    assert loaded.models["gpt-4.1"].context_window == 1_000_000


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        pytest.param(
            '[models."gpt-4o"]\ncontext_window = -5\n',
            "models.gpt-4o.context_window",
            "models.gpt-4o.context_window: must be > 0, got -5",
            id="negative-window",
        ),
        pytest.param(
            '[models."gpt-4.1"]\ncontext_window = "big"\n',
            'models."gpt-4.1".context_window',
            "must be an integer, got 'big'",
            id="wrong-type",
        ),
        pytest.param(
            "[defaults]\nnote_threshold = 0.96\ncompact_threshold = 0.9\n",
            "defaults.note_threshold",
            "must be <= compact_threshold (0.9), got 0.96",
            id="note-over-compact",
        ),
        pytest.param(
            "[providers.openai]\nhard_block_threshold = 1.5\n",
            "providers.openai.hard_block_threshold",
            "must be <= 1",
            id="threshold-over-one",
        ),
        pytest.param(
            "[defaults]\ncontext_windw = 5\n", "defaults.context_windw", "unknown setting", id="typo"
        ),
        pytest.param(
            "compact_trigger = 0\n", "compact_trigger", "must be > 0", id="seed-key-named-as-written"
        ),
        pytest.param(
            "hard_block = 0.9\n[defaults]\nhard_block_threshold = 0.9\n",
            "hard_block",
            "set it once",
            id="set-twice",
        ),
        pytest.param(
            "[defaults]\ntokenizer = 'bpe'\n", "defaults.tokenizer", "unknown tokenizer 'bpe'", id="tokenizer"
        ),
        pytest.param("defaults = 3\n", "defaults", "must be a table", id="section-type"),
        pytest.param('model_table = "absent.json"\n', "model_table", "file not found", id="missing-table"),
        pytest.param("[defaults\n", None, "invalid TOML", id="syntax"),
        pytest.param(
            "[models.GPT-4o]\n[models.gpt-4o]\n", "models", "differ only in case", id="case-duplicate"
        ),
    ],
)
def test_bad_settings_file_is_a_config_error_naming_field_and_file(
    tmp_path: Path, text: str, field: str | None, message: str
) -> None:
    path = write(tmp_path / "settings.toml", text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value)
    assert str(caught.value).endswith(f"(in {path})")
    assert caught.value.source == str(path)
    assert caught.value.field == field


def test_path_comes_from_argument_then_env_then_default_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv(SETTINGS_ENV_VAR, raising=False)
    assert load_settings() == Settings()

    default = tmp_path / ".config" / "ctxdesk" / "settings.toml"
    default.parent.mkdir(parents=True)
    write(default, "[defaults]\nbuffer_tokens = 1\n")
    assert load_settings().defaults.buffer_tokens == 1

    from_env = write(tmp_path / "env.toml", "[defaults]\nbuffer_tokens = 2\n")
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(from_env))
    assert load_settings().defaults.buffer_tokens == 2

    given_path = write(tmp_path / "arg.toml", "[defaults]\nbuffer_tokens = 3\n")
    assert load_settings(given_path).defaults.buffer_tokens == 3


def test_explicit_settings_path_that_does_not_exist_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="settings file not found"):
        load_settings(tmp_path / "absent.toml")


def test_model_table_path_is_relative_to_the_settings_file_and_used_in_resolution(tmp_path: Path) -> None:
    shutil.copy(FIXTURE, tmp_path / "prices.json")
    path = write(tmp_path / "settings.toml", 'model_table = "prices.json"\n')
    loaded = load_settings(path)
    assert loaded.model_table_path() == tmp_path / "prices.json"
    resolved = resolve_model_settings("deepseek-chat", settings=loaded)
    assert resolved.context_window == 131_072
    assert resolved.sources["context_window"] == f"table:deepseek-chat ({tmp_path / 'prices.json'})"


# -- dump and save ---------------------------------------------------------------------------

_share = st.floats(min_value=0, max_value=1, exclude_min=True)
_level = st.builds(
    lambda counts, ordered, others: ModelSettings(**counts, **ordered, **others),
    st.fixed_dictionaries(
        {},
        optional={
            "context_window": st.integers(1, 10**7),
            "buffer_tokens": st.integers(0, 10**5),
            "max_output_tokens": st.integers(1, 10**6),
            "tool_response_max_bytes": st.integers(1, 10**9),
            "result_offload_threshold": st.integers(1, 10**9),
            "context_budget": st.integers(1, 10**7),
        },
    ),
    st.lists(_share, min_size=3, max_size=3)
    .map(sorted)
    .flatmap(
        lambda shares: st.fixed_dictionaries(
            {},
            optional={
                "note_threshold": st.just(shares[0]),
                "compact_threshold": st.just(shares[1]),
                "hard_block_threshold": st.just(shares[2]),
            },
        )
    ),
    st.fixed_dictionaries(
        {},
        optional={"tool_deferral_threshold": _share, "tokenizer": st.sampled_from(["o200k_base", "chars/4"])},
    ),
)
_keys = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
_settings = st.builds(
    Settings,
    defaults=_level,
    providers=st.dictionaries(_keys, _level, max_size=3).filter(
        lambda d: len({k.lower() for k in d}) == len(d)
    ),
    models=st.dictionaries(_keys, _level, max_size=3).filter(lambda d: len({k.lower() for k in d}) == len(d)),
    model_table=st.none() | _keys,
)


@given(_settings)
def test_dump_then_parse_gives_equal_settings(value: Settings) -> None:
    assert Settings.from_dict(tomllib.loads(dump_settings_toml(value))) == value


def test_save_writes_atomically_and_round_trips(tmp_path: Path) -> None:
    path = write(tmp_path / "settings.toml", "[defaults]\nbuffer_tokens = 1\n")
    path.chmod(0o600)
    inode_before = path.stat().st_ino
    value = settings(
        compact_trigger=0.9,
        providers={"anthropic": {"max_output_tokens": 8192}},
        models={"gpt-4.1": {"context_window": 1_000_000}, "o3": {}},
    )
    assert save_settings(value, path) == path
    assert path.stat().st_ino != inode_before, "replaced by a new file, not rewritten in place"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert os.listdir(tmp_path) == ["settings.toml"], "no temp file left behind"
    assert load_settings(path) == value.model_copy(update={"source": str(path)})


def test_save_creates_missing_directories(tmp_path: Path) -> None:
    path = save_settings(Settings(), tmp_path / "a" / "b" / "settings.toml")
    assert load_settings(path) == Settings(source=str(path))


# -- live reload -----------------------------------------------------------------------------


def test_watcher_picks_up_edits_and_rejects_invalid_ones(tmp_path: Path) -> None:
    path = write(tmp_path / "settings.toml", "[defaults]\nbuffer_tokens = 100\n")
    seen: list[Settings] = []
    changed = threading.Event()

    def on_change(new: Settings) -> None:
        seen.append(new)
        changed.set()

    with SettingsWatcher(path, on_change) as watcher:
        assert watcher.current.defaults.buffer_tokens == 100
        write(path, "[defaults]\nbuffer_tokens = 200\n")
        assert wait_for(lambda: watcher.current.defaults.buffer_tokens == 200), "edit not picked up in 5 s"
        assert changed.wait(1) and seen[-1].defaults.buffer_tokens == 200

        write(path, "[defaults]\nbuffer_tokens = -1\n")
        assert wait_for(lambda: watcher.last_error is not None), "invalid edit not noticed in 5 s"
        assert "defaults.buffer_tokens" in str(watcher.last_error)
        assert watcher.current.defaults.buffer_tokens == 200

        save_settings(Settings(defaults=ModelSettings(buffer_tokens=300)), path)
        assert wait_for(lambda: watcher.current.defaults.buffer_tokens == 300), "atomic save not picked up"
        assert watcher.last_error is None
    assert len(seen) == 2


def test_reload_now_without_a_thread(tmp_path: Path) -> None:
    path = write(tmp_path / "settings.toml", "[defaults]\nbuffer_tokens = 1\n")
    watcher = SettingsWatcher(path, watch=False)
    write(path, "[defaults\n")
    assert watcher.reload_now().defaults.buffer_tokens == 1
    assert watcher.last_error is not None and "invalid TOML" in str(watcher.last_error)
    write(path, "[defaults]\nbuffer_tokens = 2\n")
    assert watcher.reload_now().defaults.buffer_tokens == 2
    assert watcher.last_error is None
    watcher.stop()


def test_watcher_refuses_an_invalid_file_at_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        SettingsWatcher(write(tmp_path / "settings.toml", "[defaults]\ncontext_window = 0\n"), watch=False)
