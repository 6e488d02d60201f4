"""Why a session stopped (pure, no streamlit, no I/O): the guard events that stopped it, the settings
in force with where each came from, what grew, and the settings that would have avoided the stop."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pandas as pd

from dashboard.analysis.rows import components_of, recorded_int
from engine.events import COMPONENTS
from engine.settings import DEFAULT_COMPACT_THRESHOLD, DEFAULT_HARD_BLOCK_THRESHOLD

#: Tokens the reference left in context takes once an output is offloaded (a one-line stub).
OFFLOAD_STUB_TOKENS = 40
#: Bytes per token assumed when an output's size was not recorded (English text and code).
BYTES_PER_TOKEN_ESTIMATE = 4
LIMIT_FIELDS = ("context_window", "max_output_tokens", "buffer_tokens")


#: Guard threshold names (``details.thresholds``) -> the setting each one is.
THRESHOLD_SETTINGS = {
    "note": "note_threshold",
    "compact": "compact_threshold",
    "hard_block": "hard_block_threshold",
}


@dataclass(frozen=True)
class LimitLine:
    """One setting in force at a stop: its value and where it came from.

    ``value`` None with ``unset`` means the setting is recorded as not set (e.g. no
    ``tool_response_max_bytes``); None without it means nothing recorded its value.
    """

    field: str
    value: int | float | str | None
    source: str
    unset: bool = False

    @property
    def text(self) -> str:
        if self.value is None:
            return "not set" if self.unset else "not recorded"
        if isinstance(self.value, bool):
            return str(self.value).lower()
        if isinstance(self.value, int):
            return f"{self.value:,}"
        if isinstance(self.value, float):
            return f"{self.value:g}"
        return self.value


@dataclass(frozen=True)
class Growth:
    component: str
    before: int
    after: int

    @property
    def delta(self) -> int:
        return self.after - self.before


@dataclass(frozen=True)
class StopExplanation:
    """Everything the "Why did it stop?" page shows for one guard stop."""

    outcome: str
    turn: int | None
    model: str | None
    provider: str | None
    limit_lines: tuple[LimitLine, ...]
    limit: int | None
    projected: int | None
    hard_block_threshold: float
    growth: tuple[Growth, ...]
    growth_estimated: bool
    first_request: bool
    tipping_seq: int | None
    tipping_component: str | None
    tipping_tokens: int | None
    suggestions: tuple[str, ...]

    @property
    def over_by(self) -> int | None:
        if self.limit is None or self.projected is None:
            return None
        return self.projected - math.floor(self.limit * self.hard_block_threshold)

    @property
    def formula(self) -> str:
        values = {line.field: line.value for line in self.limit_lines}
        if any(values.get(f) is None for f in LIMIT_FIELDS):
            return f"limit = {self.limit:,}" if self.limit is not None else "limit not recorded"
        w, o, b = (int(values[f]) for f in LIMIT_FIELDS)
        text = f"limit = context_window {w:,} - max_output_tokens {o:,} - buffer_tokens {b:,} = {w - o - b:,}"
        if self.limit is not None and self.limit != w - o - b:
            text += f" (capped by context_budget to {self.limit:,})"
        return text


def stop_events(guards: pd.DataFrame) -> pd.DataFrame:
    """The guard events that stopped a session: skipped providers, tool results refused with the
    final turn forced (the cause), and forced final turns not already explained by such a refusal."""
    if guards.empty:
        return guards
    details = guards["details"]
    refused = (guards["outcome"] == "rejected") & details.map(
        lambda d: bool(d.get("final_forced") or d.get("tipping"))
    )
    explained_turns = set(guards.loc[refused, "turn_index"])
    forced = (guards["outcome"] == "forced_final") & ~guards["turn_index"].isin(explained_turns)
    return guards[refused | forced | (guards["outcome"] == "skipped_provider")]


def settings_for_model(settings: Mapping[str, Any], model: str | None) -> Mapping[str, Any]:
    """The settings a session recorded for ``model``: its own, or the fallback model's."""
    if model and settings.get("model") not in (None, model):
        for fallback in settings.get("fallbacks") or []:
            if isinstance(fallback, Mapping) and fallback.get("model") == model:
                return fallback
        return {}
    return settings


def _setting_line(
    name: str, source: str, settings: Mapping[str, Any], thresholds: Mapping[str, Any]
) -> LimitLine:
    """A setting the guard named a source for: its value from the event's thresholds, else from the
    settings the session recorded (a recorded null is "not set")."""
    for short, full in THRESHOLD_SETTINGS.items():
        if full == name and thresholds.get(short, thresholds.get(full)) is not None:
            return LimitLine(name, float(thresholds.get(short, thresholds.get(full))), source)
    if name in settings:
        value = settings[name]
        if value is None:
            return LimitLine(name, None, source, unset=True)
        if isinstance(value, int | float | str) and not isinstance(value, bool):
            return LimitLine(name, value, source)
        return LimitLine(name, str(value), source)
    return LimitLine(name, None, source)


def _capped(event: Mapping[str, Any]) -> bool:
    """The event's recorded limit is under window - output reserve - buffer (the settings' context_budget)."""
    limit, parts = recorded_int(event.get("limit_tokens")), [recorded_int(event.get(f)) for f in LIMIT_FIELDS]
    if limit is None or any(p is None for p in parts):
        return False
    window, output, buffer = parts
    return limit < window - output - buffer


def explain_stop(
    event: Mapping[str, Any],
    previous_request: Mapping[str, Any] | None,
    *,
    tipping_bytes: int | None = None,
    settings: Mapping[str, Any] | None = None,
) -> StopExplanation:
    """Explain one guard event (forced_final, skipped_provider, or a refused tool result).

    ``event`` is a context_events row with ``details`` parsed; ``previous_request`` the last
    request event before it (for growth); ``tipping_bytes`` the size of the tipping output;
    ``settings`` what the session recorded (``sessions.settings_json``), for values the event
    only names a source for (tokenizer, note_threshold, ...).
    """
    details = event.get("details") or {}
    sources = details.get("sources") or {}
    thresholds = details.get("thresholds") or {}
    recorded = settings_for_model(settings or {}, event.get("model"))
    # The guard records thresholds as {"note", "compact", "hard_block"}; accept the settings' names too.
    hard = float(
        thresholds.get("hard_block", thresholds.get("hard_block_threshold", DEFAULT_HARD_BLOCK_THRESHOLD))
    )
    compact = float(thresholds.get("compact", thresholds.get("compact_threshold", DEFAULT_COMPACT_THRESHOLD)))
    derived = {
        "limit_tokens": "context_window - max_output_tokens - buffer_tokens"
        + (" (capped by context_budget)" if _capped(event) else ""),
        "projected_tokens": "the guard's estimate of the request",
    }
    lines = [
        LimitLine(
            f,
            recorded_int(event.get(f))
            if recorded_int(event.get(f)) is not None
            else recorded_int(recorded.get(f)),
            str(sources.get(f, derived.get(f, "not recorded"))),
        )
        for f in (*LIMIT_FIELDS, "limit_tokens", "projected_tokens")
    ]
    lines += [
        LimitLine(
            name,
            value,
            str(sources.get(name, "recorded with the event" if thresholds else "built-in default")),
        )
        for name, value in (("compact_threshold", compact), ("hard_block_threshold", hard))
    ]
    for name, source in sources.items():
        if name not in {line.field for line in lines}:
            lines.append(_setting_line(name, str(source), recorded, thresholds))
    tipping = details.get("tipping") or {}
    before = components_of(previous_request) if previous_request is not None else dict.fromkeys(COMPONENTS, 0)
    # A tool-result check records no breakdown: "now" is then the previous request plus the output.
    estimated = not any(recorded_int(event.get(f"{n}_tokens", event.get(n))) is not None for n in COMPONENTS)
    after = components_of(event)
    if estimated:
        after = dict(before)
        component = tipping.get("component") or ("tool_results" if tipping.get("tool_name") else None)
        if component in after and recorded_int(tipping.get("tokens")):
            after[component] += recorded_int(tipping.get("tokens")) or 0
    growth = tuple(
        sorted((Growth(n, before[n], after[n]) for n in COMPONENTS), key=lambda g: (-g.delta, g.component))
    )
    first_request = previous_request is None
    # Before the first request nothing grew: the request as a whole did not fit, no message tipped it.
    grew = not first_request and bool(growth) and growth[0].delta > 0
    tipping_seq = recorded_int(
        tipping.get("message_seq", None if first_request else event.get("message_seq"))
    )
    tipping_component = tipping.get("component") or (
        "tool_results" if tipping.get("tool_name") else growth[0].component if grew else None
    )
    tipping_tokens = recorded_int(tipping.get("tokens"))
    if tipping_tokens is None and grew:
        tipping_tokens = growth[0].delta
    limit = recorded_int(event.get("limit_tokens"))
    projected = recorded_int(event.get("projected_tokens"))
    suggestions = suggest_settings(
        projected=projected,
        context_window=recorded_int(event.get("context_window")),
        max_output_tokens=recorded_int(event.get("max_output_tokens")),
        buffer_tokens=recorded_int(event.get("buffer_tokens")),
        limit=limit,
        hard_block_threshold=hard,
        compact_threshold=compact,
        previous_total=sum(before.values()) if previous_request is not None else None,
        tipping_component=tipping_component,
        tipping_tokens=tipping_tokens,
        tipping_bytes=tipping_bytes,
        result_offload_threshold=recorded_int(recorded.get("result_offload_threshold")),
    )
    return StopExplanation(
        outcome=str(event.get("outcome")), turn=recorded_int(event.get("turn_index")), model=event.get("model"),
        provider=event.get("provider"), limit_lines=tuple(lines), limit=limit, projected=projected,
        hard_block_threshold=hard, growth=growth, growth_estimated=estimated, first_request=first_request,
        tipping_seq=tipping_seq, tipping_component=tipping_component,
        tipping_tokens=tipping_tokens, suggestions=suggestions,
    )  # fmt: skip


def min_limit_for(projected: int, hard_block_threshold: float) -> int:
    """The smallest limit whose hard-block point, floor(limit * threshold), lies above ``projected``."""
    limit = max(math.ceil(projected / hard_block_threshold), 1)
    while math.floor(limit * hard_block_threshold) <= projected:
        limit += 1
    while limit > 1 and math.floor((limit - 1) * hard_block_threshold) > projected:
        limit -= 1
    return limit


def suggest_settings(
    *,
    projected: int | None,
    context_window: int | None,
    max_output_tokens: int | None,
    buffer_tokens: int | None,
    limit: int | None,
    hard_block_threshold: float,
    compact_threshold: float,
    previous_total: int | None,
    tipping_component: str | None,
    tipping_tokens: int | None,
    tipping_bytes: int | None,
    result_offload_threshold: int | None = None,
) -> tuple[str, ...]:
    """Settings that would have avoided the stop, each as ``"name ≥ N"`` / ``"name ≤ M"`` plus why."""
    if projected is None:
        return ()
    out: list[str] = []
    if context_window is not None and max_output_tokens is not None and buffer_tokens is not None:
        needed_limit = min_limit_for(projected, hard_block_threshold)
        needed = needed_limit + max_output_tokens + buffer_tokens
        out.append(
            f"context_window ≥ {needed:,} (now {context_window:,}): the request of {projected:,} tokens "
            f"stays under {hard_block_threshold:.0%} of the limit"
        )
        room = context_window - buffer_tokens - needed_limit
        if 0 < room < max_output_tokens:
            out.append(
                f"max_output_tokens ≤ {room:,} (now {max_output_tokens:,}): less reserved for the reply"
            )
    if limit:
        block_at = math.floor(limit * hard_block_threshold)
        if tipping_component == "tool_results" and tipping_tokens:
            saved = tipping_tokens - OFFLOAD_STUB_TOKENS
            if projected - saved < block_at:
                if tipping_bytes:
                    size = f"the {tipping_bytes:,}-byte output"
                else:  # a refused output never reached the transcript: estimate its size
                    tipping_bytes = tipping_tokens * BYTES_PER_TOKEN_ESTIMATE
                    size = f"the output (about {tipping_bytes:,} bytes)"
                if result_offload_threshold is not None and result_offload_threshold < tipping_bytes:
                    # The threshold in force is already below the estimate: the output stayed under it
                    # (the estimate is high), so only a lower threshold than the one in force helps.
                    out.append(
                        f"result_offload_threshold below {result_offload_threshold:,} bytes (now "
                        f"{result_offload_threshold:,}): the output of about {tipping_tokens:,} tokens stayed under "
                        f"it; offloaded, it would have saved about {saved:,} tokens"
                    )
                else:
                    out.append(
                        f"result_offload_threshold ≤ {max(tipping_bytes - 1, 1):,} bytes: {size} would have been "
                        f"offloaded, saving about {saved:,} tokens"
                    )
        if previous_total is not None and previous_total > 0:
            share = previous_total / limit
            if share < compact_threshold:
                proposed = max(math.floor(share * 20) / 20, 0.05)
                out.append(
                    f"compact_threshold {proposed:.2f} (now {compact_threshold:.2f}): the previous request "
                    f"was at {share:.0%}, so compaction would have run before this turn"
                )
    return tuple(out)


_SUGGESTED = re.compile(
    r"^(?P<field>[a-z_]+) (?:(?P<op>[≥≤]) |(?P<below>below) )?(?P<value>[\d,]+(?:\.\d+)?)"
)


def suggestion_edit(suggestion: str) -> tuple[str, int | float] | None:
    """The (setting, value) a suggestion of :func:`suggest_settings` asks for, ready to put into
    the settings: ``context_window ≥ 9,323`` gives 9323; ``below 16,384`` gives 16383."""
    m = _SUGGESTED.match(suggestion)
    if m is None:
        return None
    text = m["value"].replace(",", "")
    value: int | float = float(text) if "." in text else int(text)
    if m["below"]:
        value = value - 1
    return m["field"], value
