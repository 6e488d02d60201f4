"""Known models' windows and prices: the bundled table, plus a user's LiteLLM JSON merged over it.

``ModelTable.bundled()`` reads ``engine/data/models.json`` (built by
``scripts/build_model_table.py``); ``ModelTable.from_litellm(path)`` reads LiteLLM's
``model_prices_and_context_window.json``. ``lookup(model)`` tolerates case, provider prefixes,
dated suffixes and unknown suffixes of a known name; see :func:`match_model_name`.
"""

from __future__ import annotations

import importlib.resources
import json
import math
import os
import re
from collections.abc import Collection, Iterator, Mapping
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from engine.errors import ConfigError

BUNDLED_TABLE = "models.json"

#: Trailing release dates: -20250514, -2024-08-06, @20250514 (Vertex), and the -latest alias.
_DATE_SUFFIX = re.compile(r"(?:[-@]\d{8}|-\d{4}-\d{2}-\d{2}|-latest)$")
#: Characters after which a known name may be continued by an unknown variant suffix.
_VARIANT_BOUNDARY = "-:@"
# OpenRouter and others spell Anthropic's versions with a dot: "claude-sonnet-4.5", "claude-3.5-sonnet".
_DOTTED_VERSION = re.compile(r"(?<=\d)\.(?=\d)")


class ModelInfo(BaseModel):
    """What a model table knows about one model. Costs are USD per token."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    name: str = Field(description="Model name as listed in the table, lower case.")
    provider: str | None = Field(None, description="LiteLLM provider id (anthropic, openai, gemini, ...).")
    context_window: int = Field(gt=0, description="Total tokens the model can attend to.")
    max_output_tokens: int | None = Field(
        None, gt=0, description="Most tokens one reply may have; None when no separate cap is known."
    )
    input_cost_per_token: float | None = Field(None, ge=0, description="USD per uncached input token.")
    output_cost_per_token: float | None = Field(None, ge=0, description="USD per output token.")
    cache_read_cost_per_token: float | None = Field(None, ge=0, description="USD per cache-read input token.")
    cache_write_cost_per_token: float | None = Field(
        None, ge=0, description="USD per cache-write input token (the default, 5-minute cache at Anthropic)."
    )
    cache_write_1h_cost_per_token: float | None = Field(
        None, ge=0, description="USD per input token written to a 1-hour cache (Anthropic's extended TTL)."
    )
    long_context_threshold: int | None = Field(
        None, gt=0, description="Prompt tokens above which a call is priced at the *_above_threshold prices."
    )
    input_cost_per_token_above_threshold: float | None = Field(None, ge=0, description="Input, long prompts.")
    output_cost_per_token_above_threshold: float | None = Field(
        None, ge=0, description="Output, long prompts."
    )
    cache_read_cost_per_token_above_threshold: float | None = Field(
        None, ge=0, description="Cache reads, long prompts."
    )
    cache_write_cost_per_token_above_threshold: float | None = Field(
        None, ge=0, description="5-minute cache writes, long prompts."
    )
    source: str = Field(description="Where context_window and max_output_tokens came from.")
    cost_source: str | None = Field(None, description="Where the costs came from, when any are known.")

    @model_validator(mode="after")
    def _output_below_window(self) -> ModelInfo:
        if self.max_output_tokens is not None and self.max_output_tokens >= self.context_window:
            raise ValueError(
                f"max_output_tokens ({self.max_output_tokens}) must be < context_window ({self.context_window})"
            )
        return self


def strip_provider(name: str) -> str:
    """``openrouter/anthropic/claude-x`` -> ``claude-x``."""
    return name.rsplit("/", 1)[-1]


def strip_date(name: str) -> str:
    """``claude-sonnet-4-20250514`` -> ``claude-sonnet-4`` (also -YYYY-MM-DD, @YYYYMMDD, -latest)."""
    return _DATE_SUFFIX.sub("", name)


def match_model_name(model: str, known: Collection[str], *, allow_prefix: bool = True) -> str | None:
    """The name in ``known`` (all lower case) that ``model`` refers to, or None.

    Tried in order, first hit wins: the exact name; the name without provider prefixes
    (``anthropic/claude-sonnet-4-5``); without a dated suffix (``claude-sonnet-4-20250514`` ->
    ``claude-sonnet-4``); the newest dated entry of an undated name (``claude-3-5-sonnet`` ->
    ``claude-3-5-sonnet-20241022``); a dotted version as a dashed whole name
    (``anthropic/claude-sonnet-4.5`` -> ``claude-sonnet-4-5``); with ``allow_prefix``, the longest
    known name that the model name continues after ``-``, ``:`` or ``@``
    (``gpt-4o-mini-search`` -> ``gpt-4o-mini``).
    """
    name = model.strip().lower()
    candidates = [name]
    while "/" in candidates[-1]:
        candidates.append(candidates[-1].split("/", 1)[1])
    for candidate in candidates:
        if candidate in known:
            return candidate
    bare = strip_date(candidates[-1])
    if bare in known:
        return bare
    dated = sorted(k for k in known if "/" not in k and strip_date(k) == bare)
    if dated:
        return dated[-1]
    dashed = _DOTTED_VERSION.sub("-", candidates[-1])
    if dashed != candidates[-1]:
        # Only whole names: "gpt-4.5-preview" must not become a variant of "gpt-4".
        found = match_model_name(dashed, known, allow_prefix=False)
        if found is not None:
            return found
    if allow_prefix:
        for i in range(len(bare) - 1, 0, -1):
            if bare[i] in _VARIANT_BOUNDARY and bare[:i] in known:
                return bare[:i]
    return None


class ModelTable:
    """An immutable name -> :class:`ModelInfo` mapping with tolerant lookup."""

    def __init__(self, entries: Mapping[str, ModelInfo], *, source: str) -> None:
        self._entries = {name.lower(): info for name, info in entries.items()}
        self.source = source

    def __repr__(self) -> str:
        return f"ModelTable({len(self)} models from {self.source})"

    def __len__(self) -> int:
        return len(self._entries)

    def __iter__(self) -> Iterator[ModelInfo]:
        return iter(self._entries.values())

    def names(self) -> list[str]:
        """Every listed model name, sorted."""
        return sorted(self._entries)

    def lookup(self, model: str) -> ModelInfo | None:
        """The entry ``model`` refers to (see :func:`match_model_name`), or None."""
        found = match_model_name(model, self._entries)
        return self._entries[found] if found is not None else None

    def merged(self, other: ModelTable) -> ModelTable:
        """A table with ``other``'s entries over this one's."""
        return ModelTable({**self._entries, **other._entries}, source=f"{other.source} over {self.source}")

    @classmethod
    def bundled(cls) -> ModelTable:
        """The table shipped in ``engine/data/models.json`` (loaded once)."""
        return _bundled_table()

    @classmethod
    def from_bundled_json(cls, text: str, *, source: str) -> ModelTable:
        """Parse the bundled table format: ``{"models": {name: ModelInfo fields}}``."""
        data = _parse_json(text, source)
        models = data.get("models")
        if not isinstance(models, dict):
            raise ConfigError('expected an object "models" mapping names to entries', source=source)
        entries = {}
        for name, fields in models.items():
            try:
                entries[name] = ModelInfo.model_validate({"name": name, **fields})
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"{name}: {exc}", source=source, field=name) from exc
        return cls(entries, source=source)

    @classmethod
    def from_litellm(cls, path: str | os.PathLike[str]) -> ModelTable:
        """Read LiteLLM's ``model_prices_and_context_window.json`` (entries without
        ``max_input_tokens`` are skipped: they state no window)."""
        source = os.fspath(path)
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigError(f"cannot read model table: {exc.strerror or exc}", source=source) from exc
        return cls.from_litellm_data(_parse_json(text, source), source=source)

    @classmethod
    def from_litellm_data(cls, data: Mapping[str, Any], *, source: str) -> ModelTable:
        entries: dict[str, ModelInfo] = {}
        aliases: dict[str, ModelInfo] = {}
        for key, raw in data.items():
            if key == "sample_spec":
                continue
            info = parse_litellm_entry(key, raw, source=source)
            if info is None:
                continue
            entries[info.name] = info
            # "gemini/gemini-2.5-pro" is also found as "gemini-2.5-pro", unless that is listed itself.
            if info.provider and info.name.startswith(f"{info.provider}/"):
                aliases.setdefault(info.name.removeprefix(f"{info.provider}/"), info)
        for alias, info in aliases.items():
            if alias not in entries:
                entries[alias] = info.model_copy(update={"name": alias})
        return cls(entries, source=source)


def parse_litellm_entry(key: str, raw: Any, *, source: str) -> ModelInfo | None:
    """One LiteLLM entry as :class:`ModelInfo`, or None when it states no input window."""
    if not isinstance(raw, dict):
        raise ConfigError(f"{key}: expected an object, got {type(raw).__name__}", source=source, field=key)
    context = _number(raw, "max_input_tokens", key, source, integer=True)
    if context is None or context <= 0:
        return None
    output = _number(raw, "max_output_tokens", key, source, integer=True)
    if output is None:  # LiteLLM's legacy field: the output cap where the provider states one.
        output = _number(raw, "max_tokens", key, source, integer=True)
    provider = raw.get("litellm_provider")
    costs = {
        "input_cost_per_token": _number(raw, "input_cost_per_token", key, source),
        "output_cost_per_token": _number(raw, "output_cost_per_token", key, source),
        "cache_read_cost_per_token": _number(raw, "cache_read_input_token_cost", key, source),
        "cache_write_cost_per_token": _number(raw, "cache_creation_input_token_cost", key, source),
        "cache_write_1h_cost_per_token": _number(
            raw, "cache_creation_input_token_cost_above_1hr", key, source
        ),
    }
    costs.update(litellm_tier_costs(raw, key, source))
    has_costs = any(v is not None for v in costs.values())
    try:
        return ModelInfo(
            name=key.lower(),
            provider=provider if isinstance(provider, str) else None,
            context_window=context,
            # LiteLLM lists some models with the whole window as output: no separate cap is known.
            max_output_tokens=output if output and 0 < output < context else None,
            source=source,
            cost_source=source if has_costs else None,
            **costs,
        )
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}", source=source, field=key) from exc


#: LiteLLM's long-context prices: ``input_cost_per_token_above_200k_tokens`` and the like.
LITELLM_TIER = re.compile(r"input_cost_per_token_above_(\d+)k_tokens")
#: ModelInfo field -> LiteLLM field stem of the long-context prices.
LITELLM_TIER_FIELDS = {
    "input_cost_per_token_above_threshold": "input_cost_per_token",
    "output_cost_per_token_above_threshold": "output_cost_per_token",
    "cache_read_cost_per_token_above_threshold": "cache_read_input_token_cost",
    "cache_write_cost_per_token_above_threshold": "cache_creation_input_token_cost",
}


def litellm_tier_costs(raw: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    """The long-context threshold and prices of a LiteLLM entry (the lowest tier it lists), or {}."""
    tiers = sorted(int(m.group(1)) for name in raw if (m := LITELLM_TIER.fullmatch(name)))
    if not tiers:
        return {}
    k = tiers[0]
    out: dict[str, Any] = {"long_context_threshold": k * 1000}
    for field, stem in LITELLM_TIER_FIELDS.items():
        out[field] = _number(raw, f"{stem}_above_{k}k_tokens", key, source)
    return out


def _number(raw: dict[str, Any], name: str, key: str, source: str, *, integer: bool = False) -> Any:
    value = raw.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(
            f"{key}.{name}: expected a number, got {value!r}", source=source, field=f"{key}.{name}"
        )
    if integer:
        if isinstance(value, float) and not value.is_integer():
            raise ConfigError(
                f"{key}.{name}: expected a whole number, got {value!r}", source=source, field=f"{key}.{name}"
            )
        return int(value)
    return float(value)


def _parse_json(text: str, source: str) -> dict[str, Any]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", source=source
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(f"expected a JSON object, got {type(data).__name__}", source=source)
    return data


@cache
def _bundled_table() -> ModelTable:
    resource = importlib.resources.files("engine") / "data" / BUNDLED_TABLE
    return ModelTable.from_bundled_json(resource.read_text(encoding="utf-8"), source="bundled")


@cache
def _litellm_table(path: str, mtime_ns: int, size: int) -> ModelTable:
    return ModelTable.from_litellm(path)


def load_model_table(litellm_path: str | os.PathLike[str] | None = None) -> ModelTable:
    """The bundled table, with a LiteLLM JSON merged over it when a path is given.

    Parsed tables are cached per (path, mtime, size), so resolving many models is cheap.
    """
    table = ModelTable.bundled()
    if litellm_path is None:
        return table
    path = os.fspath(litellm_path)
    try:
        stat = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"cannot read model table: {exc.strerror or exc}", source=path) from exc
    return table.merged(_litellm_table(path, stat.st_mtime_ns, stat.st_size))
