"""What one model call cost: the provider's usage priced by the model table, part by part.

Pure: ``price_call(usage, prices)`` returns a frozen :class:`CallCost` (input, output, cache
reads, 5-minute and 1-hour cache writes, in tokens and USD). ``prices_for(model)`` reads the
model table; where a table lists no cache price the derivation is stated in ``Prices.notes``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.components import trusted
from engine.events import ProviderUsage
from engine.model_table import ModelInfo, ModelTable

#: Anthropic's prompt-cache prices as multiples of the base input price.
ANTHROPIC_CACHE_READ = 0.1
ANTHROPIC_CACHE_WRITE_5M = 1.25
ANTHROPIC_CACHE_WRITE_1H = 2.0
#: Keys of a request event's ``details`` this module reads (see docs/HELPERS.md, "Interfaces landed").
DETAIL_WRITE_5M = "cache_write_5m_tokens"
DETAIL_WRITE_1H = "cache_write_1h_tokens"
DETAIL_REASONING = "reasoning_tokens"
COST_PARTS = ("input", "output", "cache_read", "cache_write_5m", "cache_write_1h")


class Prices(BaseModel):
    """USD per token for one model, every price resolved (derived where the table lists none)."""

    model_config = ConfigDict(frozen=True)

    model: str = Field(description="Model name as listed in the table.")
    provider: str | None = Field(None, description="Provider of the table entry.")
    input: float = Field(ge=0, description="Uncached input.")
    output: float = Field(ge=0, description="Output (reasoning included).")
    cache_read: float = Field(ge=0, description="Input read from the prompt cache.")
    cache_write_5m: float = Field(ge=0, description="Input written to the cache (default, 5-minute TTL).")
    cache_write_1h: float = Field(ge=0, description="Input written to a 1-hour cache.")
    source: str = Field(description="Table the prices came from.")
    notes: tuple[str, ...] = Field((), description="Prices derived because the table lists none.")
    long_context_threshold: int | None = Field(
        None, description="Prompt tokens above which the whole call is priced at ``long_context``."
    )
    long_context: Prices | None = Field(
        None, description="Prices of a call whose prompt exceeds the threshold."
    )

    def for_prompt(self, prompt_tokens: int) -> Prices:
        """The prices a call with this many prompt tokens is billed at (the long-context tier when
        its prompt exceeds the threshold, as Anthropic and Google bill it)."""
        if (
            self.long_context is not None
            and self.long_context_threshold
            and prompt_tokens > self.long_context_threshold
        ):
            return self.long_context
        return self

    @property
    def caches(self) -> bool:
        """True when cache reads are cheaper than input (the provider has a prompt cache)."""
        return self.cache_read < self.input


def prices_from_info(info: ModelInfo) -> Prices | None:
    """Every price of one table entry, or None when it lists no input price."""
    base = info.input_cost_per_token
    if base is None:
        return None
    anthropic = info.provider == "anthropic" or info.name.startswith("claude")
    notes: list[str] = []
    output = info.output_cost_per_token
    if output is None:
        output = base
        notes.append("output priced as input (the table lists no output price)")
    read = info.cache_read_cost_per_token
    if read is None:
        read = base * ANTHROPIC_CACHE_READ if anthropic else base
        notes.append(
            f"cache read = {ANTHROPIC_CACHE_READ} x input (Anthropic)"
            if anthropic
            else "cache read priced as input (the table lists no cache price)"
        )
    write = info.cache_write_cost_per_token
    if write is None:
        write = base * ANTHROPIC_CACHE_WRITE_5M if anthropic else base
        notes.append(
            f"5-minute cache write = {ANTHROPIC_CACHE_WRITE_5M} x input (Anthropic)"
            if anthropic
            else "cache write priced as input (automatic caching has no write surcharge)"
        )
    write_1h = info.cache_write_1h_cost_per_token
    if write_1h is None:
        write_1h = base * ANTHROPIC_CACHE_WRITE_1H if anthropic else write
        if anthropic:
            notes.append(f"1-hour cache write = {ANTHROPIC_CACHE_WRITE_1H} x input (Anthropic)")
    source = info.cost_source or info.source
    long_context = None
    above = info.input_cost_per_token_above_threshold
    if info.long_context_threshold and above is not None:
        scale = above / base if base else 1.0  # a tier price the table omits scales with input
        long_context = Prices(
            model=info.name, provider=info.provider, input=above,
            output=_or(info.output_cost_per_token_above_threshold, output * scale),
            cache_read=_or(info.cache_read_cost_per_token_above_threshold, read * scale),
            cache_write_5m=_or(info.cache_write_cost_per_token_above_threshold, write * scale),
            cache_write_1h=write_1h * scale, source=source,
            notes=(f"long-context prices above {info.long_context_threshold:,} prompt tokens",),
        )  # fmt: skip
    return Prices(
        model=info.name,
        provider=info.provider,
        input=base,
        output=output,
        cache_read=read,
        cache_write_5m=write,
        cache_write_1h=write_1h,
        source=source,
        notes=tuple(notes),
        long_context_threshold=info.long_context_threshold if long_context else None,
        long_context=long_context,
    )


def _or(value: float | None, default: float) -> float:
    return default if value is None else value


def prices_for(model: str | None, table: ModelTable | None = None) -> Prices | None:
    """The prices of ``model`` in ``table`` (the bundled table by default), or None when unknown."""
    if not model:
        return None
    info = (table or ModelTable.bundled()).lookup(model)
    return prices_from_info(info) if info is not None else None


class CallCost(BaseModel):
    """One model call's cost, part by part. USD fields are 0 when ``priced`` is False."""

    model_config = ConfigDict(frozen=True)

    model: str | None = Field(description="Model the call ran on, as recorded.")
    priced_as: str | None = Field(description="Table entry the prices came from; None when unknown.")
    price_source: str | None = Field(description="Table the prices came from.")
    input_tokens: int = Field(ge=0, description="Uncached input tokens.")
    output_tokens: int = Field(ge=0, description="Output tokens, reasoning included.")
    reasoning_tokens: int = Field(ge=0, description="Part of output_tokens that was reasoning.")
    cache_read_tokens: int = Field(ge=0, description="Input tokens read from the prompt cache.")
    cache_write_5m_tokens: int = Field(ge=0, description="Input tokens written to a 5-minute cache.")
    cache_write_1h_tokens: int = Field(ge=0, description="Input tokens written to a 1-hour cache.")
    input_usd: float = Field(ge=0)
    output_usd: float = Field(ge=0)
    cache_read_usd: float = Field(ge=0)
    cache_write_5m_usd: float = Field(ge=0)
    cache_write_1h_usd: float = Field(ge=0)
    uncached_usd: float = Field(ge=0, description="What the same call would cost with no prompt cache.")
    ttl_split_known: bool = Field(
        description="False when all writes were priced as 5-minute for lack of a split."
    )
    notes: tuple[str, ...] = Field((), description="How prices were derived.")

    @property
    def priced(self) -> bool:
        return self.priced_as is not None

    @property
    def prompt_tokens(self) -> int:
        return (
            self.input_tokens
            + self.cache_read_tokens
            + self.cache_write_5m_tokens
            + self.cache_write_1h_tokens
        )

    @property
    def cache_write_tokens(self) -> int:
        return self.cache_write_5m_tokens + self.cache_write_1h_tokens

    @property
    def cache_write_usd(self) -> float:
        return self.cache_write_5m_usd + self.cache_write_1h_usd

    @property
    def total_usd(self) -> float:
        return self.input_usd + self.output_usd + self.cache_read_usd + self.cache_write_usd

    @property
    def cache_savings_usd(self) -> float:
        """What the prompt cache saved on this call (negative when writes cost more than reads saved)."""
        return self.uncached_usd - self.total_usd

    def as_dict(self) -> dict[str, Any]:
        """Plain values, the USD total and the derived sums included (for JSON and tables)."""
        return {
            **self.model_dump(),
            "notes": list(self.notes),
            "prompt_tokens": self.prompt_tokens,
            "cache_write_usd": self.cache_write_usd,
            "total_usd": self.total_usd,
        }


def split_cache_writes(
    usage: ProviderUsage, details: Mapping[str, Any] | None = None
) -> tuple[int, int, bool]:
    """(5-minute, 1-hour, split known) cache-write tokens of one call.

    The split comes from ``details`` (``cache_write_5m_tokens`` / ``cache_write_1h_tokens``);
    a stated 1-hour part leaves the rest as 5-minute; without any, every write is 5-minute.
    """
    details = details or {}
    total = usage.cache_creation_input_tokens
    w5, w1 = _count(details.get(DETAIL_WRITE_5M)), _count(details.get(DETAIL_WRITE_1H))
    if w1 is None and w5 is None:
        return total, 0, total == 0
    w1 = min(w1 or 0, total)
    return total - w1, w1, True


def price_call(
    usage: ProviderUsage,
    prices: Prices | None,
    *,
    model: str | None = None,
    details: Mapping[str, Any] | None = None,
) -> CallCost:
    """The cost of one call with ``usage`` under ``prices`` (all USD 0 when ``prices`` is None)."""
    write_5m, write_1h, split_known = split_cache_writes(usage, details)
    reasoning = min(_count((details or {}).get(DETAIL_REASONING)) or 0, usage.output_tokens)
    p = prices.for_prompt(usage.prompt_tokens) if prices is not None else None
    # not validated again (0.7 µs, not 2.5, per call of an import's cost pass): each value is of its
    # field's type and not negative, made from a valid usage and valid prices
    values = dict(
        model=model or (p.model if p else None),
        priced_as=p.model if p else None,
        price_source=p.source if p else None,
        input_tokens=usage.input_tokens,
        output_tokens=usage.output_tokens,
        reasoning_tokens=reasoning,
        cache_read_tokens=usage.cache_read_input_tokens,
        cache_write_5m_tokens=write_5m,
        cache_write_1h_tokens=write_1h,
        input_usd=usage.input_tokens * p.input if p else 0.0,
        output_usd=usage.output_tokens * p.output if p else 0.0,
        cache_read_usd=usage.cache_read_input_tokens * p.cache_read if p else 0.0,
        cache_write_5m_usd=write_5m * p.cache_write_5m if p else 0.0,
        cache_write_1h_usd=write_1h * p.cache_write_1h if p else 0.0,
        uncached_usd=usage.prompt_tokens * p.input + usage.output_tokens * p.output if p else 0.0,
        ttl_split_known=split_known,
        notes=p.notes if p else (),
    )
    return trusted(CallCost, values, _EVERY_COST_FIELD)


#: The set of given fields of every :func:`price_call` cost (all given; shared: nothing adds to it).
_EVERY_COST_FIELD = set(CallCost.model_fields)


def _count(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return max(0, int(value))
