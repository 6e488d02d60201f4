"""Saving settings rewrites only what changed (#32 item 11): the user's comments, header, top-level
keys, table quoting and number style survive a save; a file that is not TOML is never overwritten."""

from __future__ import annotations

import difflib
import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import ConfigError
from engine.settings import ModelSettings, Settings, load_settings, save_settings

USER_FILE = """\
# My ctxdesk settings -- hand-written, please keep my notes.
# (the header above is mine)
compact_trigger = 0.9   # seeds-style top-level key
database = "~/ctx/sessions.db"

[defaults]
buffer_tokens = 1_000  # safety margin I chose
note_threshold = 0.75

# Anthropic: my plan's output cap
[providers.anthropic]
max_output_tokens = 8_192

[models."claude-sonnet-4-6"]
context_window = 200_000   # the 1M beta is off
context_budget = 150_000

[models."gpt-4.1"]
context_window = 1_000_000
"""


def saved_diff(tmp_path: Path, edit: dict) -> tuple[list[str], Settings]:
    """Save the loaded file with ``edit`` applied (as the Model settings page does); the changed lines."""
    path = tmp_path / "settings.toml"
    path.write_text(USER_FILE, encoding="utf-8")
    loaded = load_settings(path)
    changed = loaded.model_copy(update=edit(loaded))  # type: ignore[operator]
    save_settings(changed, path)
    after = path.read_text(encoding="utf-8")
    lines = [
        line
        for line in difflib.unified_diff(USER_FILE.splitlines(), after.splitlines(), lineterm="", n=0)
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert load_settings(path) == changed.model_copy(update={"source": str(path)})
    return lines, changed


def model(loaded: Settings, name: str, **fields: object) -> dict[str, ModelSettings]:
    return {**loaded.models, name: loaded.models[name].model_copy(update=fields)}


SAVE_CASES = [
    ("one value changed: one line changed, written in the file's digit grouping",
     lambda s: {"models": model(s, "claude-sonnet-4-6", context_budget=120_000)},
     ["-context_budget = 150_000", "+context_budget = 120_000"]),
    ("a changed value keeps its comment",
     lambda s: {"models": model(s, "claude-sonnet-4-6", context_window=1_000_000)},
     ["-context_window = 200_000   # the 1M beta is off", "+context_window = 1_000_000   # the 1M beta is off"]),
    ("a top-level seeds key stays at the top level",
     lambda s: {"defaults": s.defaults.model_copy(update={"compact_threshold": 0.85})},
     ["-compact_trigger = 0.9   # seeds-style top-level key", "+compact_trigger = 0.85   # seeds-style top-level key"]),
    ("a new key is added to its own table",
     lambda s: {"models": model(s, "gpt-4.1", max_output_tokens=32_768)},
     ["+max_output_tokens = 32768"]),
    ("a key cleared is removed, nothing else",
     lambda s: {"defaults": s.defaults.model_copy(update={"note_threshold": None})},
     ["-note_threshold = 0.75"]),
    ("a new model gets a quoted table where its name needs one",
     lambda s: {"models": {**s.models, "gemini-2.5-pro": ModelSettings(context_window=1_048_576)}},
     ['+[models."gemini-2.5-pro"]', "+context_window = 1048576"]),
    ("saving unchanged settings changes nothing", lambda s: {}, []),
]  # fmt: skip


@pytest.mark.parametrize(("name", "edit", "expected"), SAVE_CASES, ids=[c[0] for c in SAVE_CASES])
def test_a_save_changes_only_the_edited_keys(tmp_path: Path, name: str, edit, expected: list[str]) -> None:
    lines, _ = saved_diff(tmp_path, edit)
    assert [line for line in lines if line.strip("+-")] == expected


def test_a_file_that_is_not_toml_is_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    broken = "# half-edited by hand\n[defaults\nbuffer_tokens = 1\n"
    path.write_text(broken, encoding="utf-8")
    with pytest.raises(ConfigError, match="not valid TOML") as raised:
        save_settings(Settings(defaults=ModelSettings(buffer_tokens=2)), path)
    assert raised.value.source == str(path)
    assert path.read_text(encoding="utf-8") == broken
    assert sorted(p.name for p in tmp_path.iterdir()) == ["settings.toml"], "no temp file left behind"


def test_a_file_with_invalid_settings_is_corrected_in_place_keeping_its_comments(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(
        "# mine\n[defaults]\nbuffer_tokens = -1  # oops\nnote_threshold = 0.7\n", encoding="utf-8"
    )
    save_settings(Settings(defaults=ModelSettings(buffer_tokens=100, note_threshold=0.7)), path)
    assert (
        path.read_text(encoding="utf-8")
        == "# mine\n[defaults]\nbuffer_tokens = 100  # oops\nnote_threshold = 0.7\n"
    )


levels = st.builds(
    ModelSettings,
    context_window=st.none() | st.integers(10_000, 2_000_000),
    buffer_tokens=st.none() | st.integers(0, 5_000),
    note_threshold=st.none() | st.sampled_from([0.5, 0.7, 0.8]),
)
names = st.sampled_from(["gpt-4o", "gpt-4.1", "claude-sonnet-4-6", "o3", "my model"])


@settings(max_examples=60, deadline=None)
@given(defaults=levels, models=st.dictionaries(names, levels, max_size=3))
def test_any_save_over_the_users_file_reads_back_and_keeps_its_comments(
    tmp_path_factory: pytest.TempPathFactory, defaults: ModelSettings, models: dict[str, ModelSettings]
) -> None:
    path = tmp_path_factory.mktemp("save") / "settings.toml"
    path.write_text(USER_FILE, encoding="utf-8")
    value = Settings(defaults=defaults, models=models, database="~/ctx/sessions.db")
    save_settings(value, path)
    text = path.read_text(encoding="utf-8")
    assert load_settings(path) == value.model_copy(update={"source": str(path)})
    assert text.startswith(
        "# My ctxdesk settings -- hand-written, please keep my notes.\n# (the header above is mine)\n"
    )
    assert tomllib.loads(text)  # plain TOML
