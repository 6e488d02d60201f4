"""Numbers read from a recorded row (an event, a timeline step, a call) as the analysis uses them:
missing (None, NaN, NA, text) is None, never a crash or a ``nan`` on the page."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from engine.events import COMPONENTS


def recorded_int(value: Any) -> int | None:
    """A recorded count as an int, or None when it was not recorded."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def components_of(row: Mapping[str, Any]) -> dict[str, int]:
    """Component tokens of an event row (``system_tokens`` ... or already-short names); 0 where
    a component was not recorded."""
    return {name: recorded_int(row.get(f"{name}_tokens", row.get(name))) or 0 for name in COMPONENTS}
