"""The one prompt limit of a model call, and its thresholds: every reader (guard, session manager,
proxy, importers, store roll-ups, report, dashboard) takes the number from here.

A :class:`Limit` is ``window - output_reserve - buffer``, capped by ``cap`` (the settings'
``context_budget``) when set; a threshold is a share of it, floored to whole tokens. A stored call
says its limit through the columns of ``context_events``; :func:`recorded_limit` reads them (the
recorded ``limit_tokens`` wins, else the recorded window less the recorded reserve and buffer) and
:data:`LIMIT_SQL` is the same rule in SQL (tests/test_limit.py proves the two agree).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from engine.errors import ValidationError

__all__ = ["LIMIT_SQL", "Limit", "LimitColumns", "SettingsFields", "recorded_limit", "threshold_tokens"]


#: Limit field -> the setting that gives it (engine.settings.ModelSettings).
_SETTING_NAMES = {
    "window": "context_window",
    "output_reserve": "max_output_tokens",
    "buffer": "buffer_tokens",
}


def threshold_tokens(limit: int, share: float) -> int:
    """Tokens at which ``share`` of ``limit`` is reached (floored: never claims a threshold not yet met)."""
    return math.floor(limit * share)


@dataclass(frozen=True, slots=True)
class Limit:
    """The tokens a prompt may use: window less the reply reserve and a safety buffer, capped by ``cap``.

    ``source`` names where the window came from (``"settings"``, ``"file"``, ``"model table"``,
    ``"recorded"``), for pages that say how a number was known.
    """

    window: int
    output_reserve: int = 0
    buffer: int = 0
    cap: int | None = None
    source: str = ""

    def __post_init__(self) -> None:
        for name, setting in _SETTING_NAMES.items():  # errors name the setting a user writes
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValidationError(
                    f"{setting} must be a whole number >= 0, got {value!r}", field=setting, value=value
                )
        if self.window - self.output_reserve - self.buffer <= 0:
            raise ValidationError(
                f"output reserve ({self.output_reserve:,}) + buffer ({self.buffer:,}) leave no room in the "
                f"context window ({self.window:,})",
                field="context_window",
                value=self.window,
            )
        if self.cap is not None and (not isinstance(self.cap, int) or self.cap <= 0):
            raise ValidationError(
                f"context_budget must be > 0, got {self.cap!r}", field="context_budget", value=self.cap
            )

    @classmethod
    def of_settings(cls, settings: SettingsFields, source: str = "settings") -> Limit:
        """The limit of resolved model settings (``engine.settings.ResolvedModelSettings`` or alike)."""
        return cls(
            window=settings.context_window,
            output_reserve=settings.max_output_tokens,
            buffer=settings.buffer_tokens,
            cap=settings.context_budget,
            source=source,
        )

    @property
    def uncapped(self) -> int:
        """Window less reserve and buffer, before any ``context_budget`` cap."""
        return self.window - self.output_reserve - self.buffer

    @property
    def tokens(self) -> int:
        """The limit itself: what every page shows and every decision compares with."""
        return self.uncapped if self.cap is None else min(self.uncapped, self.cap)

    def threshold(self, share: float) -> int:
        """Tokens at which ``share`` of the limit is reached (floored)."""
        return threshold_tokens(self.tokens, share)

    def share_of(self, used: int) -> float:
        """``used`` as a share of the limit (1.0 = at the limit)."""
        return used / self.tokens

    def columns(self) -> dict[str, int | None]:
        """The ``context_events`` columns that record this limit."""
        return {
            "context_window": self.window,
            "max_output_tokens": self.output_reserve,
            "buffer_tokens": self.buffer,
            "limit_tokens": self.tokens,
        }


class SettingsFields(Protocol):
    """What :meth:`Limit.of_settings` reads."""

    @property
    def context_window(self) -> int: ...
    @property
    def max_output_tokens(self) -> int: ...
    @property
    def buffer_tokens(self) -> int: ...
    @property
    def context_budget(self) -> int | None: ...


class LimitColumns(Protocol):
    """What a recorded call (a ``ContextEvent``, a stored event, a row) says about its limit."""

    limit_tokens: int | None
    context_window: int | None
    max_output_tokens: int | None
    buffer_tokens: int | None


def recorded_limit(row: LimitColumns | dict[str, Any]) -> int | None:
    """The limit a recorded call's use is measured against: the ``limit_tokens`` it recorded, else the
    window it recorded less the reserve and buffer where recorded; None when neither gives a positive one.
    Accepts an object with the four attributes or a mapping (a frame row as a dict); NaN is missing."""
    get = row.get if isinstance(row, dict) else lambda name: getattr(row, name, None)
    limit = _whole(get("limit_tokens"))
    if limit is not None:
        return limit if limit > 0 else None
    window = _whole(get("context_window"))
    if window is None:
        return None
    rest = window - (_whole(get("max_output_tokens")) or 0) - (_whole(get("buffer_tokens")) or 0)
    return rest if rest > 0 else None


def _whole(value: Any) -> int | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):  # pandas' NA and other missing markers
        return None


#: :func:`recorded_limit` over the columns of ``context_events`` (valid in SQLite, PostgreSQL and DuckDB).
LIMIT_SQL = (
    "(CASE WHEN limit_tokens IS NOT NULL THEN (CASE WHEN limit_tokens > 0 THEN limit_tokens END)"
    " WHEN context_window - coalesce(max_output_tokens, 0) - coalesce(buffer_tokens, 0) > 0"
    " THEN context_window - coalesce(max_output_tokens, 0) - coalesce(buffer_tokens, 0) END)"
)
