"""Settings values are range-checked when loaded, so a typo never reaches a running agent."""

from __future__ import annotations

import time

import pytest

from engine.errors import ConfigError
from engine.settings import MAX_SETTING_TOKENS, SettingsWatcher, load_settings

HUGE = "99999999999999999999999999999"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f'[models."gpt-4o"]\ncontext_window = {HUGE}\n', "models.gpt-4o.context_window: must be <="),
        (f"max_output_tokens = {HUGE}\n", "max_output_tokens: must be <="),
        (f"[defaults]\nbuffer_tokens = {MAX_SETTING_TOKENS + 1}\n", "defaults.buffer_tokens: must be <="),
        ("[providers.anthropic]\nresult_offload_threshold = -1\n", "result_offload_threshold"),
        ("a = " + "[" * 50_000 + "]" * 50_000 + "\n", "nested too deeply"),
    ],
    ids=["huge-window", "huge-top-level", "huge-buffer", "negative-bytes", "deep-nesting"],
)
def test_out_of_range_or_nested_values_are_config_errors_naming_the_field(tmp_path, text, message):
    path = tmp_path / "settings.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert message in str(caught.value)
    assert str(path) in str(caught.value)


def test_the_largest_allowed_window_loads(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(f'[models."m"]\ncontext_window = {MAX_SETTING_TOKENS}\n')
    assert load_settings(path).models["m"].context_window == MAX_SETTING_TOKENS


def test_an_out_of_range_reload_keeps_the_last_valid_settings_and_records_the_error(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text('[models."gpt-4o"]\ncontext_window = 64000\n')
    with SettingsWatcher(path, watch=False) as watcher:
        path.write_text(f'[models."gpt-4o"]\ncontext_window = {HUGE}\n')
        time.sleep(0.01)
        kept = watcher.reload_now()
        assert kept.models["gpt-4o"].context_window == 64000
        assert watcher.last_error is not None
        assert "context_window" in str(watcher.last_error)
