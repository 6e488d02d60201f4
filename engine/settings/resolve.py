"""Per-model resolution: each setting taken from the first level that sets it (model -> provider
-> model table -> defaults -> built-in), with the source of every field named.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import ValidationError
from engine.limit import Limit
from engine.model_table import ModelInfo, ModelTable, load_model_table, match_model_name
from engine.settings.schema import (
    BUILTIN_SETTINGS,
    TABLE_FIELDS,
    THRESHOLD_ORDER,
    ModelSettings,
    Settings,
    field_error,
)
from engine.settings.toml_text import toml_key
from engine.tokenizer_names import tokenizer_id_for_model


class ResolvedModelSettings(BaseModel):
    """Every setting of one model after resolution, with ``sources[field]`` saying where it came from."""

    model_config = ConfigDict(frozen=True)

    model: str
    provider: str | None
    context_window: int
    buffer_tokens: int
    max_output_tokens: int
    tokenizer: str
    note_threshold: float
    compact_threshold: float
    hard_block_threshold: float
    tool_response_max_bytes: int | None
    result_offload_threshold: int
    tool_deferral_threshold: float
    context_budget: int | None
    model_info: ModelInfo | None = Field(description="The model table entry used, with prices, if any.")
    sources: dict[str, str] = Field(
        description="field -> 'model:NAME (file)', 'provider:ID', 'table:NAME (src)', ..."
    )

    @property
    def limit(self) -> Limit:
        """The prompt limit these settings give (``engine.limit``): window less the reply reserve and
        buffer, capped by ``context_budget``; ``source`` says where the window came from."""
        return Limit.of_settings(self, source=limit_source(self.sources.get("context_window", "")))

    @property
    def effective_window(self) -> int:
        """Alias of ``limit.tokens`` (the capped limit, as on ``ContextBudget``); the uncapped value
        is ``limit.uncapped``."""
        return self.limit.tokens

    @property
    def budget_tokens(self) -> int:
        """Alias of ``limit.tokens``: thresholds apply to it."""
        return self.limit.tokens

    @property
    def note_tokens(self) -> int:
        return self.limit.threshold(self.note_threshold)

    @property
    def compact_tokens(self) -> int:
        return self.limit.threshold(self.compact_threshold)

    @property
    def hard_block_tokens(self) -> int:
        return self.limit.threshold(self.hard_block_threshold)

    @property
    def tool_deferral_tokens(self) -> int:
        return self.limit.threshold(self.tool_deferral_threshold)


def limit_source(field_source: str) -> str:
    """``Limit.source`` for where a resolved ``context_window`` came from (``sources`` labels):
    ``settings`` (a [models] or [providers] entry), ``model table``, ``defaults`` or ``built-in``."""
    if field_source.startswith(("model:", "provider:")):
        return "settings"
    if field_source.startswith("table:"):
        return "model table"
    if field_source.startswith("defaults"):
        return "defaults"
    return "built-in"


_PROVIDER_BY_PREFIX = (
    ("claude", "anthropic"),
    ("gpt-", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("gemini", "gemini"),
    ("gemma", "gemini"),
    ("mistral", "mistral"),
    ("ministral", "mistral"),
    ("codestral", "mistral"),
    ("devstral", "mistral"),
    ("magistral", "mistral"),
    ("pixtral", "mistral"),
    ("deepseek", "deepseek"),
    ("llama", "meta_llama"),
    ("qwen", "dashscope"),
    ("qwq", "dashscope"),
)


def infer_provider(model: str, info: ModelInfo | None = None) -> str | None:
    """The provider prefix of ``model`` if it has one, else the table's, else one guessed by name."""
    if "/" in model:
        return model.split("/", 1)[0].strip().lower()
    if info is not None and info.provider:
        return info.provider
    name = model.strip().lower()
    return next((provider for prefix, provider in _PROVIDER_BY_PREFIX if name.startswith(prefix)), None)


def resolve_model_settings(
    model: str,
    provider: str | None = None,
    settings: Settings | None = None,
    table: ModelTable | None = None,
) -> ResolvedModelSettings:
    """Resolve every field for ``model``: user model -> user provider -> model table -> defaults -> built-in.

    ``settings=None`` means no user settings (use :func:`load_settings` to read the file);
    ``table=None`` means the bundled table, with ``settings.model_table`` merged over it.
    Raises :class:`ConfigError` when the result is inconsistent (reply + buffer fill the window,
    thresholds out of order), naming the fields and where each came from.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValidationError(f"model must be a non-empty string, got {model!r}", field="model", value=model)
    settings = settings if settings is not None else Settings()
    table = table if table is not None else load_model_table(settings.model_table_path())
    info = table.lookup(model)
    provider = provider.strip().lower() if provider else infer_provider(model, info)
    in_file = f" ({Path(settings.source).name})" if settings.source else ""

    levels: list[tuple[str, str, ModelSettings]] = []
    model_keys = {key.lower(): key for key in settings.models}
    matched = match_model_name(model, model_keys, allow_prefix=False)
    if matched is not None:
        key = model_keys[matched]
        levels.append((f"model:{key}{in_file}", f"models.{toml_key(key)}", settings.models[key]))
    provider_keys = {key.lower(): key for key in settings.providers}
    if provider in provider_keys:
        key = provider_keys[provider]
        levels.append((f"provider:{key}{in_file}", f"providers.{toml_key(key)}", settings.providers[key]))

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    paths: dict[str, str] = {}
    for field in ModelSettings.model_fields:
        for label, path, level in levels:
            if getattr(level, field) is not None:
                values[field], sources[field], paths[field] = getattr(level, field), label, f"{path}.{field}"
                break
        else:
            table_value = getattr(info, field, None) if field in TABLE_FIELDS else None
            if info is not None and table_value is not None:
                values[field], sources[field] = table_value, f"table:{info.name} ({info.source})"
                paths[field] = f"table:{info.name}.{field}"
            elif getattr(settings.defaults, field) is not None:
                values[field], sources[field] = getattr(settings.defaults, field), f"defaults{in_file}"
                paths[field] = f"defaults.{field}"
            else:
                values[field], sources[field], paths[field] = (
                    getattr(BUILTIN_SETTINGS, field),
                    "builtin",
                    field,
                )
    if values["tokenizer"] is None:
        values["tokenizer"] = tokenizer_id_for_model(model)

    _check_resolved(model, values, sources, paths, settings.source)
    return ResolvedModelSettings(model=model, provider=provider, model_info=info, sources=sources, **values)


def _check_resolved(
    model: str, values: dict[str, Any], sources: dict[str, str], paths: dict[str, str], source: str | None
) -> None:
    reserved = values["max_output_tokens"] + values["buffer_tokens"]
    if reserved >= values["context_window"]:
        names = ("max_output_tokens", "buffer_tokens", "context_window")
        detail = ", ".join(f"{n}={values[n]:,} from {sources[n]}" for n in names)
        raise field_error(
            paths["max_output_tokens"],
            f"max_output_tokens + buffer_tokens must be < context_window for {model!r} ({detail})",
            source,
        )
    for low, high in itertools.pairwise(THRESHOLD_ORDER):
        if values[low] > values[high]:
            raise field_error(
                paths[low],
                f"must be <= {high} for {model!r}, got {values[low]} from {sources[low]} "
                f"> {values[high]} from {sources[high]}",
                source,
            )


#: Where the window of an imported session's limit comes from, first found wins (``Limit.source``).
IMPORTED_LIMIT_PRECEDENCE = ("settings", "file", "model table", "defaults")


def limit_for_model(
    model: str | None,
    *,
    file_window: int | None = None,
    file_output_reserve: int | None = None,
    settings: Settings | None = None,
    provider: str | None = None,
    table: ModelTable | None = None,
) -> Limit | None:
    """The limit an imported session of ``model`` can know, or None when nothing gives a window.

    The window, first found (:data:`IMPORTED_LIMIT_PRECEDENCE`, named in ``Limit.source``): the
    user's ``[models]`` / ``[providers]`` entry for it (``settings``: the override applies to
    imported sessions too) > the file's own ``file_window`` (``file``) > the bundled model table
    (``model table``) > the user's ``[defaults]`` (``defaults``). Never the built-in default: a
    window the file, the table and the user do not give is "not known".

    Without a file window the limit is the resolved settings' own (``ResolvedModelSettings.limit``,
    what ``ctxdesk models`` shows and the session manager would guard at), but for the reply reserve
    the agent keeps itself (``file_output_reserve``: Claude Code's 20,000) unless the user sets one. With one, it is the
    file's window less ``file_output_reserve`` (None: 0, the window taken as what the prompt may
    use, as Codex records it) unless the user's entry sets ``max_output_tokens``, less the user's
    ``buffer_tokens`` when set, capped by the user's ``context_budget``. ``settings`` None means
    no user settings, as for :func:`resolve_model_settings`.
    """
    if not model or not model.strip():
        return Limit(file_window, file_output_reserve or 0, source="file") if file_window else None
    r = resolve_model_settings(model, provider, settings=settings, table=table)
    kind = {field: limit_source(label) for field, label in r.sources.items()}
    window_from = kind["context_window"]
    user_reserve = kind["max_output_tokens"] == "settings"
    if not file_window and window_from not in ("settings", "model table", "defaults"):
        return None  # only the built-in window: not known
    if (file_output_reserve is None or user_reserve) and (window_from == "settings" or not file_window):
        return r.limit
    buffer = r.buffer_tokens if kind["buffer_tokens"] != "built-in" else 0
    reserve = r.max_output_tokens if user_reserve else file_output_reserve or 0
    if window_from == "settings" or not file_window:  # the user's or the table's window, the agent's reserve
        return Limit(r.context_window, reserve, buffer, r.context_budget, source=window_from)
    return Limit(file_window, reserve, buffer, r.context_budget, source="file")
