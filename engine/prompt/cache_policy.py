"""Whether clearing old tool results pays for the prompt-cache rebuild it causes (pure).

Clearing a tool result changes the prompt from that result on: the next call reads the
unchanged head from the cache and writes everything after the edit point again. The tokens
cleared are then not read again on every later call. ``plan_cache_clearing`` weighs the two in
units of the uncached input price and clears only when the saving over the calls expected to
follow exceeds the rebuild, and in batches: each rebuild has a fixed cost while uncleared
tokens cost a cache read per call, so the batch that minimises the cost per call is the
economic-order quantity ``sqrt(2 x rebuild cost x growth per call / read price)``
(``batch_tokens``). ``expected_remaining_calls`` estimates the calls to come from the calls
made so far. A cache that has expired (the session idle past ``cache_lifetime_s``) holds nothing
to lose: the call writes its whole prompt either way, so clearing then costs no rebuild at all.
No I/O, clock or model call here: callers measure, this decides.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cost import Prices, prices_for

#: How long a provider keeps a prompt prefix cached after its last use, in seconds: Anthropic's
#: default breakpoints 5 minutes, ``"ttl": "1h"`` ones an hour; OpenAI's in-memory cache "5 to 10
#: minutes of inactivity, up to one hour" (taken as the hour: never judged cold while it may be
#: warm), ``prompt_cache_retention: "24h"`` a day.
ANTHROPIC_CACHE_S = 5 * 60
ANTHROPIC_CACHE_1H_S = 60 * 60
OPENAI_CACHE_S = 60 * 60
OPENAI_CACHE_24H_S = 24 * 60 * 60
#: No pause shorter than this leaves any provider's cache cold.
SHORTEST_CACHE_S = min(ANTHROPIC_CACHE_S, OPENAI_CACHE_S)

#: A session that has made n calls is expected to make about n more (the median of a
#: scale-free length distribution), at least this many and at most ``MAX_EXPECTED_CALLS``.
MIN_EXPECTED_CALLS = 1.0
MAX_EXPECTED_CALLS = 200.0


@dataclass(frozen=True)
class CacheRates:
    """Cache prices relative to the uncached input price (1.0)."""

    read: float = 0.1  # a cache read (Anthropic: 0.1x input)
    write: float = 1.25  # a cache write (Anthropic 5-minute cache: 1.25x input)

    @classmethod
    def from_prices(cls, prices: Prices | None) -> CacheRates:
        """The model table's prices as ratios; Anthropic's list ratios when unknown or uncached."""
        if prices is None or prices.input <= 0 or not prices.cache_read < prices.input:
            return ANTHROPIC_RATES
        write = prices.cache_write_5m / prices.input if prices.cache_write_5m > 0 else 1.0
        return cls(read=prices.cache_read / prices.input, write=write)

    @classmethod
    def for_model(cls, model: str | None) -> CacheRates:
        return cls.from_prices(prices_for(model)) if model else ANTHROPIC_RATES


ANTHROPIC_RATES = CacheRates()
#: OpenAI bills no cache writes (a miss costs the input price) and reads at a discount.
OPENAI_RATES = CacheRates(read=0.1, write=1.0)


@dataclass(frozen=True)
class ClearingDecision:
    """Clear now or not, and the arithmetic behind it (token counts; gain in input-price tokens)."""

    clear: bool
    reason: str
    freed_tokens: int
    rebuild_tokens: int  # tokens written to the cache again because of the edit
    expected_calls: float  # calls expected after this one
    gain: float  # saving minus the rebuild's extra cost; > 0 means clearing pays


def expected_remaining_calls(calls_so_far: int) -> float:
    """Calls expected after this one, from the calls the session has made (this one included)."""
    return min(MAX_EXPECTED_CALLS, max(MIN_EXPECTED_CALLS, float(calls_so_far)))


def batch_tokens(rebuild_tokens: int, growth_per_call: float, rates: CacheRates = ANTHROPIC_RATES) -> int:
    """Tokens worth clearing at once: the batch size that minimises rebuild plus read cost per
    call when ``growth_per_call`` clearable tokens arrive each call."""
    if growth_per_call <= 0 or rates.read <= 0:
        return 0
    fixed = rebuild_tokens * max(0.0, rates.write - rates.read)
    return int((2 * fixed * growth_per_call / rates.read) ** 0.5)


def plan_cache_clearing(
    *,
    suffix_tokens: int,
    freed_tokens: int,
    calls_so_far: int,
    rates: CacheRates = ANTHROPIC_RATES,
    remaining_calls: float | None = None,
    growth_per_call: float | None = None,
    must_clear: bool = False,
    cache_cold: bool = False,
) -> ClearingDecision:
    """Whether clearing ``freed_tokens`` is worth the cache rebuild it causes.

    ``suffix_tokens``: the tokens the previous call sent from the first edit point on (read from
    the cache if nothing is cleared). Without clearing this call reads that suffix from the
    cache and every later call reads the freed tokens again; with clearing this call writes the
    shorter suffix. With ``growth_per_call`` (tokens the prompt grows per call) clearing also
    waits for a batch of ``batch_tokens``. ``must_clear`` (the prompt would not fit otherwise)
    clears whatever the arithmetic says. ``cache_cold`` (the cache expired since the last call):
    nothing is read either way, so clearing rebuilds nothing extra and always pays.
    """
    freed = max(0, min(freed_tokens, suffix_tokens))
    rebuild = suffix_tokens - freed
    calls = remaining_calls if remaining_calls is not None else expected_remaining_calls(calls_so_far)
    keep_cost = suffix_tokens * rates.read + freed * rates.read * calls
    clear_cost = rebuild * rates.write
    gain = keep_cost - clear_cost
    numbers = f"{freed:,} tokens freed over ~{calls:g} more calls vs {rebuild:,} tokens rebuilt in the cache"
    if freed == 0:
        return ClearingDecision(False, "nothing to clear", 0, 0, calls, 0.0)
    if must_clear:
        return ClearingDecision(True, f"the prompt must shrink: {numbers}", freed, rebuild, calls, gain)
    if cache_cold:
        gain = suffix_tokens * rates.write + freed * rates.read * calls - rebuild * rates.write
        return ClearingDecision(
            True, f"the prompt cache has expired, nothing extra to rebuild: {freed:,} tokens freed",
            freed, 0, calls, gain,
        )  # fmt: skip
    if gain <= 0:
        return ClearingDecision(
            False, f"not worth a cache rebuild yet: {numbers}", freed, rebuild, calls, gain
        )
    batch = batch_tokens(rebuild, growth_per_call or 0.0, rates)
    if freed < batch:
        return ClearingDecision(
            False, f"waiting for a batch of {batch:,} tokens: {numbers}", freed, rebuild, calls, gain
        )
    return ClearingDecision(True, f"pays for the cache rebuild: {numbers}", freed, rebuild, calls, gain)


def _is_model_item(message: object) -> bool:
    if not isinstance(message, dict):
        return False
    return message.get("role") == "assistant" or message.get("type") in (
        "function_call",
        "custom_tool_call",
        "reasoning",
    )


#: Recent calls whose new messages estimate how fast clearable tokens arrive.
GROWTH_WINDOW_CALLS = 5


def recent_growth(sizes: list[int], messages: list[object], calls: int = GROWTH_WINDOW_CALLS) -> float:
    """Tokens the history gained per call over its last ``calls`` calls (each call's answer and
    what followed it)."""
    seen, previous, start = 0, False, 0
    for index in range(len(messages) - 1, -1, -1):
        current = _is_model_item(messages[index])
        if previous and not current:
            seen += 1
            start = index + 1
            if seen == calls:
                break
        previous = current
    else:
        start, seen = 0, max(seen, 1)
    return sum(sizes[start:]) / max(seen, 1)


def calls_in_history(messages: list[object]) -> int:
    """Model calls a request's history shows (runs of assistant messages or items), this one included."""
    calls, previous = 1, False
    for message in messages:
        current = _is_model_item(message)
        calls += current and not previous
        previous = current
    return calls


def _has_breakpoint(message: object) -> bool:
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(isinstance(b, dict) and b.get("cache_control") for b in content)


def rebuild_start(messages: list[object], first_index: int) -> int:
    """Where an edit at ``first_index`` makes the cache rebuild from.

    Without cache_control markers (OpenAI: any prefix is cached automatically) that is the edit
    itself. With markers (Anthropic) the cache holds entries only at breakpoints and a lookup
    reaches back 20 blocks from the request's own breakpoints, which agents put on their last
    messages: so an older edit rebuilds from just after the last marked message before it (from
    the first message when there is none; the system prompt and tools stay cached)."""
    marked = [i for i, m in enumerate(messages) if _has_breakpoint(m)]
    if not marked:
        return first_index
    before = [i for i in marked if i < first_index]
    return before[-1] + 1 if before else 0


def plan_request_clearing(
    messages: list[object],
    first_index: int,
    freed_tokens: int,
    *,
    count: Callable[[str], int],
    rates: CacheRates = ANTHROPIC_RATES,
    must_clear: bool = False,
    already_saved: Sequence[tuple[int, int]] = (),
    cache_cold: bool = False,
) -> ClearingDecision:
    """``plan_cache_clearing`` over one request's history (Anthropic Messages, OpenAI Chat or
    Responses items): the edit starts at message ``first_index``; the last message is new in this
    call (never cached), so the rebuilt suffix runs from ``rebuild_start`` to the one before it.
    ``already_saved``: (message index, tokens) that earlier clearing already took out of what is sent."""
    sizes = [count(json.dumps(m, ensure_ascii=False, sort_keys=True)) for m in messages]
    for index, saved in already_saved:  # cleared earlier: the history as sent is shorter there
        sizes[index] = max(0, sizes[index] - saved)
    calls = calls_in_history(messages)
    return plan_cache_clearing(
        suffix_tokens=sum(sizes[rebuild_start(messages, first_index) : -1]),
        freed_tokens=freed_tokens,
        calls_so_far=calls,
        rates=rates,
        growth_per_call=recent_growth(sizes, messages),
        must_clear=must_clear,
        cache_cold=cache_cold,
    )


def _has_ttl_1h(value: object) -> bool:
    if isinstance(value, dict):
        marker = value.get("cache_control")
        if isinstance(marker, dict) and marker.get("ttl") == "1h":
            return True
        return any(_has_ttl_1h(v) for v in value.values() if isinstance(v, (dict, list)))
    return isinstance(value, list) and any(_has_ttl_1h(v) for v in value)


def cache_lifetime_s(provider: str, body: Mapping[str, Any]) -> int:
    """How long the provider keeps this request's prefix cached after its last use (seconds)."""
    if provider == "anthropic":
        marked = (body.get("system"), body.get("tools"), body.get("messages"))
        return ANTHROPIC_CACHE_1H_S if _has_ttl_1h(list(marked)) else ANTHROPIC_CACHE_S
    return OPENAI_CACHE_24H_S if body.get("prompt_cache_retention") == "24h" else OPENAI_CACHE_S
