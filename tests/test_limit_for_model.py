"""The limit an imported session can know (engine.settings.limit_for_model): a documented precedence
(the user's entry for the model > the file's window > the model table > the user's defaults), never
the built-in window for a file, and ``Limit.source`` naming which gave it."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest

from engine.cli import main
from engine.limit import Limit
from engine.model_table import load_model_table
from engine.settings import Settings, limit_for_model, resolve_model_settings

TABLE = load_model_table(None)


def user(**levels: Any) -> Settings:
    return Settings.from_dict(levels)


CASES = [
    # (name, model, file window, file reserve, settings, expected limit or None)
    ("a file's own window, nothing else known", "some-private-model", 272_000, None, None,
     Limit(272_000, source="file")),
    ("a file's window and the reserve it recorded", "some-private-model", 100_000, 8_000, None,
     Limit(100_000, 8_000, source="file")),
    ("nothing gives a window: not known, never the built-in", "some-private-model", None, None, None, None),
    ("no model name, no window: not known", None, None, None, None, None),
    ("the file's window beats the model table", "gpt-4o", 272_000, None, None, Limit(272_000, source="file")),
    ("Cline's dated Claude model: the table's window", "claude-sonnet-4-5-20250929", None, None, None,
     Limit(200_000, 64_000, 256, source="model table")),
    ("OpenHands' claude-3-5-sonnet: the table's window", "claude-3-5-sonnet", None, None, None,
     Limit(200_000, 8_192, 256, source="model table")),
    ("OpenHands' gpt-4o with a provider prefix", "openai/gpt-4o", None, None, None,
     Limit(128_000, 16_384, 256, source="model table")),
    ("Gemini CLI's model", "gemini-2.5-pro", None, None, None, Limit(1_048_576, 65_536, 256, source="model table")),
    ("the table's window less the reserve the agent keeps (Claude Code's 20,000)", "claude-sonnet-4-5", None,
     20_000, None, Limit(200_000, 20_000, source="model table")),
    ("the user's max_output_tokens beats the agent's reserve", "claude-sonnet-4-5", None, 20_000,
     user(models={"claude-sonnet-4-5": {"max_output_tokens": 8_000}}), Limit(200_000, 8_000, 256, source="model table")),
    ("the user's entry beats the file", "gpt-4o", 272_000, None,
     user(models={"gpt-4o": {"context_window": 60_000, "max_output_tokens": 4_000}}),
     Limit(60_000, 4_000, 256, source="settings")),
    ("the user's provider entry beats the table", "claude-3-5-sonnet", None, None,
     user(providers={"anthropic": {"context_window": 90_000}}), Limit(90_000, 8_192, 256, source="settings")),
    ("the user's defaults come after the table", "gpt-4o", None, None, user(defaults={"context_window": 10_000}),
     Limit(128_000, 16_384, 256, source="model table")),
    ("the user's defaults give an unknown model its window", "some-private-model", None, None,
     user(defaults={"context_window": 64_000, "max_output_tokens": 4_000}),
     Limit(64_000, 4_000, 256, source="defaults")),
    ("the user's cap and buffer apply to a file's window", "some-private-model", 272_000, None,
     user(defaults={"context_budget": 50_000, "buffer_tokens": 1_000}),
     Limit(272_000, 0, 1_000, 50_000, source="file")),
    ("the user's cap applies to the table's window", "gpt-4o", None, None, user(models={"gpt-4o": {"context_budget": 40_000}}),
     Limit(128_000, 16_384, 256, 40_000, source="model table")),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "model", "window", "reserve", "settings", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_limit_for_model_cases(
    name: str,
    model: str | None,
    window: int | None,
    reserve: int | None,
    settings: Settings | None,
    expected: Limit | None,
) -> None:
    got = limit_for_model(
        model, file_window=window, file_output_reserve=reserve, settings=settings, table=TABLE
    )
    assert got == expected


@pytest.mark.parametrize("model", ["claude-sonnet-4-5-20250929", "gpt-4o", "gemini-2.5-flash"])
def test_without_a_file_window_it_is_the_limit_ctxdesk_models_and_the_session_manager_use(model: str) -> None:
    settings = user(defaults={"context_budget": 100_000})
    assert (
        limit_for_model(model, settings=settings, table=TABLE)
        == resolve_model_settings(model, settings=settings, table=TABLE).limit
    )


def test_ctxdesk_models_names_the_precedence_and_the_source(tmp_path: Path) -> None:
    empty = tmp_path / "settings.toml"
    empty.write_text("", encoding="utf-8")
    out = io.StringIO()
    assert main(["--settings", str(empty), "models", "claude-sonnet-4-5-20250929"], out=out) == 0
    text = out.getvalue()
    assert (
        "imported sessions of this model: limit 135,744 tokens (window 200,000 from the model table)" in text
    )
    assert "your [models]/[providers] entry > file's own window > model table > your [defaults]" in text
    out = io.StringIO()
    assert main(["--settings", str(empty), "models", "some-private-model"], out=out) == 0
    assert "limit not known unless the file records its window" in out.getvalue()
