"""The Model settings page's pure half: a draft of the settings file as plain dicts, parsed from
text fields and validated into engine.settings.Settings (no streamlit here)."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from engine.errors import ConfigError
from engine.settings import Settings

LEVELS = ("defaults", "providers", "models")
INT_FIELDS = (
    "context_window", "buffer_tokens", "max_output_tokens", "tool_response_max_bytes",
    "result_offload_threshold", "context_budget",
)  # fmt: skip
FLOAT_FIELDS = ("note_threshold", "compact_threshold", "hard_block_threshold", "tool_deferral_threshold")
EDITABLE_FIELDS = (
    "context_window", "max_output_tokens", "buffer_tokens", "context_budget", "note_threshold",
    "compact_threshold", "hard_block_threshold", "result_offload_threshold", "tool_response_max_bytes",
    "tool_deferral_threshold", "tokenizer",
)  # fmt: skip


def draft_of(settings: Settings) -> dict[str, Any]:
    """The settings as a plain nested dict (unset fields and empty levels left out)."""
    dumped = settings.model_dump(exclude_none=True, exclude={"source"})
    out: dict[str, Any] = {}
    for key, value in dumped.items():
        if isinstance(value, dict):
            value = {k: v for k, v in value.items() if v != {}}
            if not value:
                continue
        out[key] = value
    return out


def level_values(draft: dict[str, Any], level: str, name: str | None) -> dict[str, Any]:
    if level == "defaults":
        return dict(draft.get("defaults", {}))
    return dict(draft.get(level, {}).get(name or "", {}))


def parse_field(field: str, text: str) -> Any:
    """A text field's value: blank is "not set" (None); numbers parsed by the field's type."""
    text = text.strip()
    if not text:
        return None
    if field in INT_FIELDS or field in FLOAT_FIELDS:
        text = text.replace("_", "").replace(",", "")
    if field in INT_FIELDS:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(f"expected a whole number, got {text!r}", field=field) from None
    if field in FLOAT_FIELDS:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"expected a number like 0.95, got {text!r}", field=field) from None
    return text


def with_level(draft: dict[str, Any], level: str, name: str | None, values: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``draft`` with one level's values replaced (None values dropped, empty levels removed)."""
    if level not in LEVELS:
        raise ConfigError(f"unknown settings level {level!r}", field="level")
    out = copy.deepcopy(draft)
    clean = {k: v for k, v in values.items() if v is not None}
    if level == "defaults":
        if clean:
            out["defaults"] = clean
        else:
            out.pop("defaults", None)
        return out
    if not name:
        raise ConfigError(f"a {level[:-1]} name is required", field=level)
    table = dict(out.get(level, {}))
    if clean:
        table[name] = clean
    else:
        table.pop(name, None)
    if table:
        out[level] = table
    else:
        out.pop(level, None)
    return out


@dataclass(frozen=True)
class Validated:
    settings: Settings | None
    error: ConfigError | None


def validate(draft: dict[str, Any], *, source: str | None = None) -> Validated:
    """Settings from the draft, or the ConfigError naming the bad field."""
    try:
        return Validated(Settings.from_dict(draft, source=source), None)
    except ConfigError as exc:
        return Validated(None, exc)
