"""The settings model: typed levels, validated with errors that name the field and the file.

Settings have three levels (``defaults``, ``providers.<id>``, ``models."<name>"``), each a
:class:`ModelSettings` whose fields are all optional. :func:`resolve_model_settings` takes each
field from the first level that sets it: model -> provider -> model table -> defaults -> built-in.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticCustomError

from engine.errors import ConfigError
from engine.policy_settings import PolicyConfig, split_policies
from engine.settings.toml_text import toml_key
from engine.tokenizer_names import tokenizer_ids

DEFAULT_CONTEXT_WINDOW = 131_072
DEFAULT_BUFFER_TOKENS = 256
DEFAULT_MAX_OUTPUT_TOKENS = 4096
DEFAULT_NOTE_THRESHOLD = 0.80
DEFAULT_COMPACT_THRESHOLD = 0.95
DEFAULT_HARD_BLOCK_THRESHOLD = 0.98
DEFAULT_RESULT_OFFLOAD_THRESHOLD = 4096
DEFAULT_TOOL_DEFERRAL_THRESHOLD = 0.10


#: Top-level keys of the seeds' settings files, read as fields of [defaults].
TOP_LEVEL_KEYS = {
    "context_budget": "context_budget",
    "max_output_tokens": "max_output_tokens",
    "compact_trigger": "compact_threshold",
    "hard_block": "hard_block_threshold",
    "result_offload_threshold": "result_offload_threshold",
    "tool_deferral_threshold": "tool_deferral_threshold",
}
#: Fields a model table may supply, between the provider and defaults levels.
TABLE_FIELDS = ("context_window", "max_output_tokens")
THRESHOLD_ORDER = ("note_threshold", "compact_threshold", "hard_block_threshold")


#: Largest token count a setting may hold: above any real model's window (10M today), far below
#: SQLite's INTEGER range, so a typo like 99999999999999999999 is rejected when the file is read.
MAX_SETTING_TOKENS = 1_000_000_000
#: A positive whole number (tokens or bytes), and a share of the window in (0, 1].
Tokens = Annotated[int, Field(gt=0, le=MAX_SETTING_TOKENS)]
Share = Annotated[float, Field(gt=0, le=1)]


class ModelSettings(BaseModel):
    """One level of settings (defaults, a provider or a model); None means "not set here"."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    context_window: Tokens | None = Field(
        None, description=f"Total tokens the model attends to. Built-in: {DEFAULT_CONTEXT_WINDOW:,}."
    )
    buffer_tokens: Annotated[int, Field(ge=0, le=MAX_SETTING_TOKENS)] | None = Field(
        None, description=f"Safety margin kept free in the window. Built-in: {DEFAULT_BUFFER_TOKENS}."
    )
    max_output_tokens: Tokens | None = Field(
        None, description=f"Tokens reserved for the reply. Built-in: {DEFAULT_MAX_OUTPUT_TOKENS:,}."
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer id from engine.tokens.tokenizer_ids(); unset picks one by model name."
    )
    note_threshold: Share | None = Field(
        None, description=f"Share of the window that adds a note. Built-in: {DEFAULT_NOTE_THRESHOLD}."
    )
    compact_threshold: Share | None = Field(
        None,
        description=f"Share of the window that triggers compaction. Built-in: {DEFAULT_COMPACT_THRESHOLD}.",
    )
    hard_block_threshold: Share | None = Field(
        None,
        description=f"Share of the window that blocks requests. Built-in: {DEFAULT_HARD_BLOCK_THRESHOLD}.",
    )
    tool_response_max_bytes: Tokens | None = Field(
        None, description="Largest tool response kept inline, in bytes. Built-in: no limit."
    )
    result_offload_threshold: Tokens | None = Field(
        None,
        description=f"Tool results over this many bytes are offloaded. Built-in: {DEFAULT_RESULT_OFFLOAD_THRESHOLD}.",
    )
    tool_deferral_threshold: Share | None = Field(
        None,
        description="Share of the effective window tool definitions may take before they are deferred. "
        f"Built-in: {DEFAULT_TOOL_DEFERRAL_THRESHOLD}.",
    )
    context_budget: Tokens | None = Field(
        None, description="Explicit cap in tokens below the effective window. Built-in: none."
    )

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str | None) -> str | None:
        if value is not None and value not in tokenizer_ids():
            raise PydanticCustomError(
                "unknown_tokenizer",
                "unknown tokenizer '{value}', expected one of {known}",
                {"value": value, "known": ", ".join(tokenizer_ids())},
            )
        return value

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> ModelSettings:
        set_here = [
            (name, getattr(self, name)) for name in THRESHOLD_ORDER if getattr(self, name) is not None
        ]
        for (low_name, low), (high_name, high) in itertools.pairwise(set_here):
            if low > high:
                raise PydanticCustomError(
                    "threshold_order",
                    "must be <= {other} ({other_value}), got {value}",
                    {"field": low_name, "other": high_name, "other_value": high, "value": low},
                )
        return self


BUILTIN_SETTINGS = ModelSettings(
    context_window=DEFAULT_CONTEXT_WINDOW,
    buffer_tokens=DEFAULT_BUFFER_TOKENS,
    max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS,
    note_threshold=DEFAULT_NOTE_THRESHOLD,
    compact_threshold=DEFAULT_COMPACT_THRESHOLD,
    hard_block_threshold=DEFAULT_HARD_BLOCK_THRESHOLD,
    result_offload_threshold=DEFAULT_RESULT_OFFLOAD_THRESHOLD,
    tool_deferral_threshold=DEFAULT_TOOL_DEFERRAL_THRESHOLD,
)


class Settings(BaseModel):
    """Everything in one settings file. Build from TOML data with :meth:`from_dict`."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    defaults: ModelSettings = Field(default_factory=ModelSettings, description="Settings for every model.")
    providers: dict[str, ModelSettings] = Field(
        default_factory=dict, description="Settings per LiteLLM provider id (anthropic, openai, gemini, ...)."
    )
    models: dict[str, ModelSettings] = Field(
        default_factory=dict, description="Settings per model name (matched like model table names)."
    )
    model_table: str | None = Field(
        None,
        description="A LiteLLM model_prices_and_context_window.json merged over the bundled table; "
        "relative paths are relative to the settings file.",
    )
    database: str | None = Field(
        None,
        description="The session database commands use when none is named: a SQLite file or a "
        "postgresql:// URL (a team's shared store); $CTXDESK_DB overrides it.",
    )
    policies: PolicyConfig = Field(
        default_factory=PolicyConfig,
        description='What the proxy may change in requests ([policies], and [providers|models."NAME".policies]).',
    )
    source: str | None = Field(None, exclude=True, description="The file these settings were read from.")

    @field_validator("providers", "models")
    @classmethod
    def _unique_ignoring_case(cls, value: dict[str, ModelSettings]) -> dict[str, ModelSettings]:
        seen: dict[str, str] = {}
        for key in value:
            if key.lower() in seen:
                raise PydanticCustomError(
                    "duplicate_key", "'{a}' and '{b}' differ only in case", {"a": seen[key.lower()], "b": key}
                )
            seen[key.lower()] = key
        return value

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> Settings:
        """Validate parsed TOML; top-level seed keys (``compact_trigger``, ...) go to defaults.

        Raises :class:`ConfigError` naming the field (``models."gpt-4.1".context_window``) and file.
        """
        data = dict(data)
        if "source" in data:
            raise field_error("source", "unknown setting (set by ctxdesk, not in the file)", source)
        data, policies = split_policies(data, source=source)
        data["policies"] = policies
        renames: dict[tuple[str, ...], str] = {}
        defaults = data.get("defaults", {})
        if isinstance(defaults, dict):
            defaults = dict(defaults)
            for key, field in TOP_LEVEL_KEYS.items():
                if key not in data:
                    continue
                if field in defaults:
                    raise field_error(key, f"also set as defaults.{field}; set it once", source)
                defaults[field] = data.pop(key)
                renames[("defaults", field)] = key
            data["defaults"] = defaults
        try:
            return cls.model_validate({**data, "source": source})
        except PydanticValidationError as exc:
            raise from_pydantic(exc, source, renames) from exc

    def model_table_path(self) -> Path | None:
        """``model_table`` as a path, relative ones taken from the settings file's directory."""
        if self.model_table is None:
            return None
        path = Path(self.model_table).expanduser()
        if not path.is_absolute() and self.source:
            path = Path(self.source).parent / path
        return path


# -- errors ----------------------------------------------------------------------------------


def field_error(
    field: str, problem: str, source: str | None, *, more: Sequence[tuple[str, str]] = ()
) -> ConfigError:
    """ConfigError shaped ``FIELD: PROBLEM[; FIELD2: PROBLEM2] (in FILE)``, ``.field`` the first field."""
    error = ConfigError("; ".join(f"{f}: {p}" for f, p in [(field, problem), *more]), source=source)
    error.field = field
    return error


def from_pydantic(
    exc: PydanticValidationError, source: str | None, renames: dict[tuple[str, ...], str]
) -> ConfigError:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(str(part) for part in err["loc"])
        ctx = err.get("ctx") or {}
        if "field" in ctx:
            loc += (ctx["field"],)
        if loc in renames:
            field = renames[loc]
        else:
            field = ".".join(part if i == 0 else toml_key(part) for i, part in enumerate(loc))
        problems.append((field, _describe(err, top_level=len(loc) == 1)))
    return field_error(*problems[0], source, more=problems[1:])


def _describe(err: Mapping[str, Any], *, top_level: bool) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f"got {value!r}" if not isinstance(value, dict) else "got a table"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")))
        return f"must be {bounds[kind]} {limit}, {got}"
    if kind in ("int_type", "int_parsing"):
        return f"must be an integer, {got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, {got}"
    if kind == "string_type":
        return f"must be a string, {got}"
    if kind in ("dict_type", "model_type"):
        return f"must be a table, {got}"
    if kind == "extra_forbidden":
        known = (
            [*Settings.model_fields.keys() - {"source"}, *TOP_LEVEL_KEYS]
            if top_level
            else ModelSettings.model_fields
        )
        return f"unknown setting (known: {', '.join(sorted(known))})"
    return err["msg"]
