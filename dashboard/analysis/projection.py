"""The timeline re-projected under edited settings (pure): where it would compact or force a final
turn (:func:`project_timeline`, judged by engine.budget.reproject), beside what the session
recorded (:func:`recorded_stops`), by turn or by model call (:func:`per_call`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pandas as pd

from dashboard.analysis.rows import recorded_int
from dashboard.analysis.stops import LIMIT_FIELDS
from engine.budget import reproject
from engine.events import COMPONENTS, ComponentTokens
from engine.settings import DEFAULT_COMPACT_THRESHOLD, DEFAULT_HARD_BLOCK_THRESHOLD, DEFAULT_NOTE_THRESHOLD


@dataclass(frozen=True)
class Projection:
    """The timeline re-projected under edited settings: where it would compact or block."""

    limit: int
    thresholds: tuple[float, float, float]
    compact_turns: tuple[int, ...]
    block_turns: tuple[int, ...]
    label: str = "edited settings"
    unit: str = "turn"

    @property
    def headline(self) -> str:
        parts = [f"limit {self.limit:,}"]
        more = len(self.compact_turns) - 1
        parts.append(
            f"would compact at {self.unit} {self.compact_turns[0]}" + (f" (and {more} more)" if more else "")
            if self.compact_turns
            else "would not compact"
        )
        parts.append(
            f"final turn at {self.unit} {self.block_turns[0]}" if self.block_turns else "no forced final turn"
        )
        return f"Under {self.label}: " + ", ".join(parts)


def components_list(turns: pd.DataFrame) -> list[ComponentTokens]:
    return [
        ComponentTokens(**{n: max(recorded_int(row.get(n)) or 0, 0) for n in COMPONENTS})
        for _, row in turns.iterrows()
    ]


#: The number of a session's first model call: calls are counted from 1, as the cost report and
#: the cache explanations count them (turns keep their recorded index, from 0).
FIRST_CALL = 1


def per_call(calls: pd.DataFrame, marks: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The timeline by model call instead of by turn: ``calls`` (dashboard.data.requests) numbered
    from ``FIRST_CALL`` in column ``turn`` (the real turn kept in ``real_turn``), and markers moved to
    the first call after their event."""
    frame = calls.reset_index(drop=True).rename(columns={"turn": "real_turn"})
    frame["turn"] = range(FIRST_CALL, FIRST_CALL + len(frame))
    frame["requests"] = 1
    if marks.empty or frame.empty:
        return frame, marks
    positions = frame["event_seq"].searchsorted(marks["event_seq"].to_numpy())
    moved = marks.assign(turn=[FIRST_CALL + min(int(p), len(frame) - 1) for p in positions])
    return frame, moved


def step_demand(checks: pd.DataFrame, steps: pd.DataFrame, unit: str = "turn") -> list[int | None]:
    """Per step of ``steps`` (dashboard.data.timeline, or :func:`per_call`), the most tokens any
    guard check or request of that step projected: what the guard compared with the thresholds,
    *before* a compaction made the request fit (the request events alone show the after).

    ``checks`` are the session's guard and request events (``dashboard.data.events``). By model
    call, a check belongs to the next request after it (a check after the last request, such as
    a refused tool result, to the last call).
    """
    if steps.empty:
        return []
    rows = checks[checks["projected_tokens"].notna()] if not checks.empty else checks
    if rows.empty:
        return [None] * len(steps)
    if unit == "turn":
        peak = rows.groupby("turn_index")["projected_tokens"].max()
        return [recorded_int(peak.get(t)) for t in steps["turn"].astype(int)]
    calls = steps["event_seq"].astype(int).to_numpy()
    position = calls.searchsorted(rows["seq"].astype(int).to_numpy())
    out: list[int | None] = [None] * len(steps)
    for index, projected in zip(position, rows["projected_tokens"], strict=True):
        i = min(int(index), len(steps) - 1)
        value = recorded_int(projected)
        if value is not None and (out[i] is None or value > out[i]):
            out[i] = value
    return out


def recorded_budget(settings: Mapping[str, Any]) -> Any | None:
    """The budget settings a session recorded (``sessions.settings_json``) as an object
    :func:`project_timeline` takes; None when the window fields were not recorded."""
    if any(recorded_int(settings.get(f)) is None for f in LIMIT_FIELDS):
        return None
    return SimpleNamespace(
        context_window=recorded_int(settings["context_window"]),
        max_output_tokens=recorded_int(settings["max_output_tokens"]),
        buffer_tokens=recorded_int(settings["buffer_tokens"]),
        context_budget=recorded_int(settings.get("context_budget")),
        note_threshold=float(settings.get("note_threshold") or DEFAULT_NOTE_THRESHOLD),
        compact_threshold=float(settings.get("compact_threshold") or DEFAULT_COMPACT_THRESHOLD),
        hard_block_threshold=float(settings.get("hard_block_threshold") or DEFAULT_HARD_BLOCK_THRESHOLD),
    )


def project_timeline(
    turns: pd.DataFrame,
    settings: Any,
    *,
    label: str = "edited settings",
    unit: str = "turn",
    demand: Sequence[int | None] | None = None,
) -> Projection | None:
    """Where the recorded turns would compact / force a final turn under ``settings``.

    ``settings`` is a ResolvedModelSettings (anything with the budget fields). Each step is
    judged by what the guard saw before any compaction (``demand``, :func:`step_demand`) when
    given, else by the breakdown that was sent; the judgement itself is engine.budget.reproject.
    What a compaction would then have freed is not simulated: under the settings the session
    ran with, the compactions and final turns it recorded come out where they happened.
    """
    if turns.empty:
        return None
    sent = components_list(turns)
    if demand is not None:  # the guard judged its own projection, not the breakdown reconciled later
        sent = [
            ComponentTokens(conversation=d) if d is not None and d != c.total else c
            for c, d in zip(sent, demand, strict=True)
        ]
    points = reproject(sent, settings)
    turn_numbers = turns["turn"].astype(int).tolist()
    return Projection(
        limit=points[0].limit,
        thresholds=(
            float(getattr(settings, "note_threshold", DEFAULT_NOTE_THRESHOLD)),
            float(settings.compact_threshold),
            float(settings.hard_block_threshold),
        ),
        # At the hard-block point the guard forces the final turn (a compaction may run first):
        # such steps are listed as final turns, not as compactions.
        compact_turns=tuple(
            t for t, p in zip(turn_numbers, points, strict=True) if p.would_compact and not p.would_block
        ),
        block_turns=tuple(t for t, p in zip(turn_numbers, points, strict=True) if p.would_block),
        label=label,
        unit=unit,
    )


#: Compaction triggers the thresholds decide (the others: manual, the agent's tool, a provider error).
#: Compactions the threshold projection predicts; one at the hard block is the projection's "block" step.
THRESHOLD_TRIGGERS = ("compact_threshold",)


@dataclass(frozen=True)
class RecordedStops:
    """What a session recorded, per step, to set beside a projection."""

    threshold_compactions: tuple[int, ...]
    other_compactions: tuple[tuple[int, str], ...]
    final_turns: tuple[int, ...]
    skipped: tuple[int, ...]

    @property
    def hard_block_turns(self) -> tuple[int, ...]:
        """Steps that reached the hard block: compacted there, or forced the final turn."""
        at_block = {step for step, trigger in self.other_compactions if trigger == "hard_block"}
        return tuple(sorted(at_block | set(self.final_turns)))

    def text(self, unit: str = "turn") -> str:
        parts = [
            f"compacted at {unit} {', '.join(map(str, self.threshold_compactions))} by threshold"
            if self.threshold_compactions
            else "no threshold compaction"
        ]
        for step, trigger in self.other_compactions:
            parts.append(f"compacted at {unit} {step} ({OTHER_TRIGGERS.get(trigger, trigger)})")
        parts.append(
            f"final turn forced at {unit} {self.final_turns[0]}"
            if self.final_turns
            else "no forced final turn"
        )
        if self.skipped:
            parts.append(f"a fallback provider skipped at {unit} {', '.join(map(str, self.skipped))}")
        return "Recorded: " + ", ".join(parts)


OTHER_TRIGGERS = {
    "hard_block": "at the hard block",
    "manual": "by hand",
    "tool": "by the agent's compact_context tool",
    "provider_error": "after the provider refused the request as too long",
}


def recorded_stops(marks: pd.DataFrame) -> RecordedStops:
    """Compactions, forced final turns and skipped providers a session recorded, by step of the
    markers' axis (``marks`` from dashboard.data.markers, or moved by :func:`per_call`)."""
    compacted = marks[marks["kind"] == "compaction"] if not marks.empty else marks
    threshold = sorted({int(t) for t, trig in zip(compacted["turn"], compacted["trigger"], strict=True)
                        if trig in THRESHOLD_TRIGGERS}) if not compacted.empty else []  # fmt: skip
    other = tuple(
        (int(t), str(trig))
        for t, trig in zip(compacted["turn"], compacted["trigger"], strict=True)
        if trig not in THRESHOLD_TRIGGERS
    ) if not compacted.empty else ()  # fmt: skip
    finals = (
        sorted({int(t) for t in marks[marks["outcome"] == "forced_final"]["turn"]}) if not marks.empty else []
    )
    skipped = (
        sorted({int(t) for t in marks[marks["outcome"] == "skipped_provider"]["turn"]})
        if not marks.empty
        else []
    )
    return RecordedStops(tuple(threshold), other, tuple(finals), tuple(skipped))
