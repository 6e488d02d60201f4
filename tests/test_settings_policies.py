"""The settings file's [policies] tables are part of the settings: every reader accepts and checks them,
and writers (the dashboard's Save) keep them."""

from __future__ import annotations

import pytest

from dashboard import settings_form
from engine.errors import ConfigError
from engine.policy_settings import ClearToolResultsPolicy, CompactionPolicy, GuardPolicy, OffloadPolicy
from engine.settings import dump_settings_toml, load_settings

TEXT = """
[policies]
guard = { action = "compact" }
clear_tool_results = { trigger = 30000, keep = 2, exclude_tools = ["Skill", "Agent", "Task"] }

[models."gpt-4o"]
context_window = 128000

[models."claude-sonnet-4-5".policies]
offload = { threshold_bytes = 50000 }
compaction = { strategy = "chain", trigger = 0.8, cache_aware = true }

[providers.anthropic.policies]
clear_tool_results = { trigger = 1000, keep = 1, clear_tool_inputs = true, cache_aware = "strict" }
"""


def test_policies_load_with_the_settings_and_resolve_per_model(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(TEXT)
    settings = load_settings(path)
    assert settings.models["gpt-4o"].context_window == 128_000
    assert "claude-sonnet-4-5" not in settings.models  # a table holding only policies is no settings level
    sonnet = settings.policies.for_model("claude-sonnet-4-5", "anthropic")
    assert sonnet.guard == GuardPolicy(action="compact")
    assert sonnet.offload == OffloadPolicy(threshold_bytes=50_000)
    assert sonnet.clear_tool_results == ClearToolResultsPolicy(
        trigger=1000, keep=1, clear_tool_inputs=True, cache_aware="strict"
    )
    assert sonnet.compaction == CompactionPolicy(strategy="chain", trigger=0.8, cache_aware=True)
    gpt = settings.policies.for_model("gpt-4o", "openai")
    assert gpt.clear_tool_results.exclude_tools == ("Skill", "Agent", "Task") and gpt.offload is None


def test_dumped_settings_read_back_equal_policies_included(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(TEXT)
    settings = load_settings(path)
    path.write_text(dump_settings_toml(settings))
    assert load_settings(path) == settings


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('[policies]\nguard = { action = "explode" }\n', "policies.guard.action"),
        ("[policies]\noffload = { threshold_bytes = 0 }\n", "policies.offload.threshold_bytes"),
        (
            '[models."m".policies]\nclear_tool_results = { keep = -1 }\n',
            'models."m".policies.clear_tool_results.keep',
        ),
        ("[policies]\nshrink = { x = 1 }\n", "policies.shrink"),
        (
            '[policies]\nclear_tool_results = { cache_aware = "sometimes" }\n',
            "policies.clear_tool_results.cache_aware",
        ),
    ],
)
def test_an_invalid_policy_is_a_config_error_naming_its_field(tmp_path, text, field):
    path = tmp_path / "settings.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    assert field in str(caught.value)


def test_saving_an_edit_from_the_dashboard_form_keeps_the_policies(tmp_path):
    path = tmp_path / "settings.toml"
    path.write_text(TEXT)
    loaded = settings_form.read_file(path)
    draft = {**loaded.draft, "models": {**loaded.draft["models"], "gpt-4o": {"context_window": 64_000}}}
    settings_form.save_draft(draft, loaded)
    saved = load_settings(path)
    assert saved.models["gpt-4o"].context_window == 64_000
    assert saved.policies == load_settings_text(tmp_path, TEXT).policies


def load_settings_text(tmp_path, text):
    other = tmp_path / "original.toml"
    other.write_text(text)
    return load_settings(other)
