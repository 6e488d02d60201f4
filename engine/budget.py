"""Context budget arithmetic: what a request uses, by component, against its model's limit.

Pure: ``measure_budget`` counts a request's parts (``engine.components.measure_request``) into a
frozen :class:`ContextBudget`; ``reproject`` recomputes limits and levels of recorded breakdowns
under other settings. The limit is ``engine.limit.Limit`` (window less reply reserve and buffer,
capped by ``context_budget``); thresholds are shares of it, floored to whole tokens.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from engine.components import HistoryTotals, measure_request
from engine.errors import ValidationError
from engine.events import ComponentTokens
from engine.limit import Limit, SettingsFields, threshold_tokens
from engine.messages import Message
from engine.tokens import Tokenizer

__all__ = [
    "LEVELS",
    "NOTE_TEMPLATE",
    "BudgetSettings",
    "ContextBudget",
    "HistoryTotals",
    "Level",
    "ProjectedPoint",
    "Thresholds",
    "classify_level",
    "compute_limit",
    "format_note",
    "limit_for",
    "measure_budget",
    "measure_components",
    "message_components",
    "reproject",
    "threshold_tokens",
    "used_percent",
]

Level = Literal["ok", "note", "compact", "hard_block"]
LEVELS: tuple[Level, ...] = ("ok", "note", "compact", "hard_block")

#: The note the model sees once usage crosses the note threshold (integer percent, floored).
NOTE_TEMPLATE = (
    "[Context: {pct}% used. You can call compact_context to free space before continuing "
    "with large operations.]"
)


class BudgetSettings(SettingsFields, Protocol):
    """The fields of ``engine.settings.ResolvedModelSettings`` the budget reads: the limit's, and
    the thresholds."""

    @property
    def note_threshold(self) -> float: ...
    @property
    def compact_threshold(self) -> float: ...
    @property
    def hard_block_threshold(self) -> float: ...


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Shares of the limit at which usage earns a note, triggers compaction, blocks the request."""

    note: float
    compact: float
    hard_block: float

    def __post_init__(self) -> None:
        for name in ("note", "compact", "hard_block"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and 0 < value <= 1):
                raise ValidationError(
                    f"{name} threshold must be in (0, 1], got {value!r}", field=name, value=value
                )

    @classmethod
    def from_settings(cls, settings: BudgetSettings) -> Thresholds:
        return cls(settings.note_threshold, settings.compact_threshold, settings.hard_block_threshold)

    def as_dict(self) -> dict[str, float]:
        return {"note": self.note, "compact": self.compact, "hard_block": self.hard_block}


def compute_limit(
    context_window: int, max_output_tokens: int, buffer_tokens: int, context_budget: int | None = None
) -> int:
    """Alias of ``Limit(...).tokens`` (``engine.limit``): window less reply reserve and buffer, capped
    by ``context_budget``; raises :class:`ValidationError` for values that leave no room."""
    return Limit(context_window, max_output_tokens, buffer_tokens, context_budget).tokens


def limit_for(settings: BudgetSettings) -> int:
    """Alias of ``Limit.of_settings(settings).tokens`` (equals ``ResolvedModelSettings.limit.tokens``)."""
    return Limit.of_settings(settings).tokens


def classify_level(used: int, limit: int, thresholds: Thresholds) -> Level:
    """``hard_block`` / ``compact`` / ``note`` once ``used`` reaches that threshold, else ``ok``."""
    if used >= threshold_tokens(limit, thresholds.hard_block):
        return "hard_block"
    if used >= threshold_tokens(limit, thresholds.compact):
        return "compact"
    if used >= threshold_tokens(limit, thresholds.note):
        return "note"
    return "ok"


def used_percent(used: int, limit: int) -> int:
    """Whole percent of ``limit`` used, floored (never claims a threshold not yet reached)."""
    return used * 100 // limit


def format_note(used: int, limit: int) -> str:
    return NOTE_TEMPLATE.format(pct=used_percent(used, limit))


@dataclass(frozen=True, slots=True)
class ContextBudget:
    """One request's token use by component, against its limit and thresholds."""

    context_window: int
    max_output_tokens: int
    buffer_tokens: int
    components: ComponentTokens
    thresholds: Thresholds
    context_budget: int | None = None

    def __post_init__(self) -> None:
        self.limit  # noqa: B018 -- validates the window arithmetic once, so the properties cannot fail later

    @classmethod
    def from_settings(cls, settings: BudgetSettings, components: ComponentTokens) -> ContextBudget:
        return cls(
            context_window=settings.context_window,
            max_output_tokens=settings.max_output_tokens,
            buffer_tokens=settings.buffer_tokens,
            components=components,
            thresholds=Thresholds.from_settings(settings),
            context_budget=settings.context_budget,
        )

    @property
    def limit(self) -> Limit:
        """The request's limit (``engine.limit``)."""
        return Limit(self.context_window, self.max_output_tokens, self.buffer_tokens, self.context_budget)

    @property
    def effective_window(self) -> int:
        """Alias of ``limit.tokens``: window - reply reserve - buffer, capped by ``context_budget``."""
        return self.limit.tokens

    @property
    def used(self) -> int:
        return self.components.total

    @property
    def remaining(self) -> int:
        """Tokens left under the limit; negative when the request is over it."""
        return self.limit.tokens - self.used

    @property
    def used_ratio(self) -> float:
        return self.used / self.limit.tokens

    @property
    def used_pct(self) -> int:
        """Whole percent of the limit used, floored."""
        return used_percent(self.used, self.limit.tokens)

    @property
    def level(self) -> Level:
        return classify_level(self.used, self.limit.tokens, self.thresholds)

    @property
    def note_text(self) -> str | None:
        """The context note for the model, or None below the note threshold."""
        return None if self.level == "ok" else format_note(self.used, self.limit.tokens)


def message_components(tokenizer: Tokenizer, message: Message) -> tuple[int, int]:
    """(conversation, tool_results) tokens of one message; they add up to ``count_message``.

    Tool-result blocks (and the whole content of a ``tool`` role message) are tool results;
    everything else, framing overhead included, is conversation. Both come from the
    tokenizer's per-message cache.
    """
    return tokenizer.count_message_parts(message)


def measure_components(
    *,
    tokenizer: Tokenizer,
    system: str = "",
    skills: Iterable[str] = (),
    tools: Sequence[dict[str, Any]] = (),
    summary: str | None = None,
    messages: Iterable[Message] = (),
    offloaded_bytes: int = 0,
) -> ComponentTokens:
    """Count each part of a request: :func:`engine.components.measure_request` with every part optional."""
    return measure_request(
        tokenizer,
        system=system,
        skills=tuple(skills),
        tools=tools,
        summary=summary,
        messages=messages,
        offloaded_bytes=offloaded_bytes,
    )


def measure_budget(
    *,
    settings: BudgetSettings,
    tokenizer: Tokenizer,
    system: str = "",
    skills: Iterable[str] = (),
    tools: Sequence[dict[str, Any]] = (),
    summary: str | None = None,
    messages: Iterable[Message] = (),
    offloaded_bytes: int = 0,
) -> ContextBudget:
    """The budget of one request: its components measured with ``tokenizer``, under ``settings``."""
    components = measure_components(
        tokenizer=tokenizer,
        system=system,
        skills=skills,
        tools=tools,
        summary=summary,
        messages=messages,
        offloaded_bytes=offloaded_bytes,
    )
    return ContextBudget.from_settings(settings, components)


@dataclass(frozen=True, slots=True)
class ProjectedPoint:
    """One recorded request re-projected under settings: its limit, use and what would happen."""

    limit: int
    used: int
    pct: float
    level: Level
    would_compact: bool
    would_block: bool

    @property
    def remaining(self) -> int:
        return self.limit - self.used

    @property
    def over_limit(self) -> bool:
        return self.used > self.limit


def reproject(components_list: Iterable[ComponentTokens], settings: BudgetSettings) -> list[ProjectedPoint]:
    """Re-project recorded per-request breakdowns under ``settings`` (e.g. edited in the dashboard).

    ``pct`` is the exact percentage of the limit (for charts); ``would_compact`` means the
    compaction threshold is reached, ``would_block`` the hard-block threshold.
    """
    limit = Limit.of_settings(settings).tokens
    thresholds = Thresholds.from_settings(settings)
    points = []
    for components in components_list:
        used = components.total
        level = classify_level(used, limit, thresholds)
        points.append(
            ProjectedPoint(
                limit=limit,
                used=used,
                pct=used * 100 / limit,
                level=level,
                would_compact=level in ("compact", "hard_block"),
                would_block=level == "hard_block",
            )
        )
    return points
