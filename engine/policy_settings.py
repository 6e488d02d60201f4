"""The ``[policies]`` tables of the settings file: what the proxy may change in an agent's requests.

Settings shape (a public interface; all off unless set)::

    [policies]                                   # every model
    guard = { action = "compact" }               # or "error"
    clear_tool_results = { trigger = 30000, keep = 2, exclude_tools = ["Skill", "Agent", "Task"] }
    offload = { threshold_bytes = 20000 }
    compaction = { strategy = "chain", trigger = 0.9 }

    [models."claude-sonnet-4-5".policies]        # per model (and [providers."ID".policies]):
    offload = { threshold_bytes = 50000 }        # each policy set here overrides the wider one

Pure pydantic models: the settings file validates them when it is read (so ``ctxdesk models``, the
dashboard and running engines accept a file with policies), the proxy applies them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator
from pydantic import ValidationError as PydanticValidationError

from engine.errors import ConfigError

POLICY_NAMES = ("guard", "clear_tool_results", "offload", "compaction")
#: Settings levels that may hold a ``policies`` table besides the top level.
POLICY_LEVELS = ("providers", "models")


class _Policy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _CacheAwarePolicy(_Policy):
    """A policy with a ``cache_aware`` knob: true, false or "strict"."""

    @field_validator("cache_aware", mode="before", check_fields=False)
    @classmethod
    def _true_false_or_strict(cls, value: Any) -> Any:
        if isinstance(value, bool) or value == "strict":
            return value
        raise ValueError(f'must be true, false or "strict", not {value!r}')


class GuardPolicy(_Policy):
    action: Literal["error", "compact"] = Field(
        "error", description="Over the effective window: refuse in the provider's shape, or compact first."
    )


class ClearToolResultsPolicy(_CacheAwarePolicy):
    trigger: int = Field(30_000, ge=0, description="Prompt tokens above which old tool results are cleared.")
    keep: int = Field(3, ge=0, description="Most recent tool results always kept.")
    clear_at_least: int = Field(0, ge=0, description="Clear only when this many tokens can be freed at once.")
    exclude_tools: tuple[str, ...] = Field((), description="Tools whose results are never cleared.")
    clear_tool_inputs: bool = Field(False, description="Also clear the inputs of the cleared calls.")
    cache_aware: bool | Literal["strict"] = Field(
        False,
        description="true: clear only in batches that pay for the prompt-cache rebuild they cause "
        "(engine.prompt.cache_policy), or at once when the session idled past the provider's cache "
        'lifetime (nothing cached to lose). "strict": never edit a prefix the provider still caches: '
        "clear only once the session idled past that lifetime. Either way the window still forces clearing.",
    )
    native: bool = Field(
        False,
        description="true: ask the provider to clear (Anthropic's own clear_tool_uses_20250919 edit with this "
        "trigger, keep, clear_at_least, exclude_tools and clear_tool_inputs, beta context-management-2025-06-27) "
        "instead of editing the request; what it cleared is recorded from its answer. Anthropic Messages only.",
    )


class OffloadPolicy(_Policy):
    threshold_bytes: int = Field(20_000, gt=0, description="Tool results over this many bytes are offloaded.")


class CompactionPolicy(_CacheAwarePolicy):
    strategy: str = Field("chain", description="Compaction strategy (engine.compaction).")
    trigger: float = Field(0.9, gt=0, le=1, description="Share of the effective window that triggers it.")
    cache_aware: bool | Literal["strict"] = Field(
        False,
        description='true or "strict": a compaction rewrites the whole cached history, so over the trigger it '
        "waits until the session idled past the provider's cache lifetime (nothing cached to lose), or "
        "until the prompt would not fit the effective window.",
    )


class Policies(_Policy):
    guard: GuardPolicy | None = None
    clear_tool_results: ClearToolResultsPolicy | None = None
    offload: OffloadPolicy | None = None
    compaction: CompactionPolicy | None = None

    @property
    def active(self) -> bool:
        return any(getattr(self, name) is not None for name in POLICY_NAMES)

    def over(self, other: Policies) -> Policies:
        """These policies, each one not set here taken from ``other``."""
        return Policies(
            **{
                n: getattr(self, n) if getattr(self, n) is not None else getattr(other, n)
                for n in POLICY_NAMES
            }
        )


class PolicyConfig(_Policy):
    """Policies for every model, per provider and per model (names matched case-insensitively)."""

    base: Policies = Field(default_factory=Policies)
    providers: dict[str, Policies] = Field(default_factory=dict)
    models: dict[str, Policies] = Field(default_factory=dict)

    def for_model(self, model: str | None, provider: str | None) -> Policies:
        out = self.base
        providers = {k.lower(): v for k, v in self.providers.items()}
        models = {k.lower(): v for k, v in self.models.items()}
        if provider and provider.lower() in providers:
            out = providers[provider.lower()].over(out)
        if model and model.lower() in models:
            out = models[model.lower()].over(out)
        return out

    @property
    def active(self) -> bool:
        return self.base.active or any(p.active for p in (*self.providers.values(), *self.models.values()))


def _policies(raw: Any, where: str, source: str | None) -> Policies:
    if not isinstance(raw, dict):
        raise ConfigError("must be a table", source=source, field=where)
    try:
        return Policies.model_validate(raw)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        place = ".".join(str(p) for p in (where, *err["loc"]))
        raise ConfigError(err["msg"].removeprefix("Value error, "), source=source, field=place) from exc


def split_policies(
    data: Mapping[str, Any], *, source: str | None = None
) -> tuple[dict[str, Any], PolicyConfig]:
    """(settings TOML without its ``policies`` tables, the validated policies); ConfigError naming the field."""
    out = {k: v for k, v in data.items() if k != "policies"}
    raw = data.get("policies")
    if isinstance(raw, dict) and raw and set(raw) <= {"base", "providers", "models"}:
        # Settings.model_dump's own shape (a form's draft written back): already split.
        try:
            return out, PolicyConfig.model_validate(raw)
        except PydanticValidationError as exc:
            err = exc.errors()[0]
            raise ConfigError(
                err["msg"], source=source, field=".".join(map(str, ("policies", *err["loc"])))
            ) from exc
    base = _policies(raw, "policies", source) if "policies" in data else Policies()
    found: dict[str, dict[str, Policies]] = {level: {} for level in POLICY_LEVELS}
    for level in POLICY_LEVELS:
        entries = out.get(level)
        if not isinstance(entries, dict):
            continue
        kept: dict[str, Any] = {}
        for name, entry in entries.items():
            if isinstance(entry, dict) and "policies" in entry:
                found[level][name] = _policies(entry["policies"], f'{level}."{name}".policies', source)
                entry = {k: v for k, v in entry.items() if k != "policies"}
                if not entry:  # a table that only held policies is no settings level
                    continue
            kept[name] = entry
        out[level] = kept
    return out, PolicyConfig(base=base, providers=found["providers"], models=found["models"])


def policies_toml(policies: Policies) -> list[str]:
    """``name = { key = value, ... }`` lines of the policies that are set (TOML inline tables)."""
    lines = []
    for name in POLICY_NAMES:
        policy = getattr(policies, name)
        if policy is not None:
            fields = ", ".join(f"{k} = {_toml_inline(v)}" for k, v in policy.model_dump().items())
            lines.append(f"{name} = {{ {fields} }}")
    return lines


def _toml_inline(value: Any) -> str:
    import json

    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # a JSON string is a TOML basic string
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_inline(v) for v in value) + "]"
    raise TypeError(f"no TOML form for policy value {value!r}")
