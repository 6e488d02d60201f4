"""Times as sources write them, as the one UTC text the store keeps (``2026-01-01T00:00:00.000Z``)."""

from __future__ import annotations

import functools
import re
from datetime import UTC, date, datetime
from typing import Any

#: A time already in the form :func:`utc_text` writes (milliseconds, ``Z``).
_CANONICAL_UTC = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")


@functools.lru_cache(maxsize=1024)
def _is_date(text: str) -> bool:
    """``YYYY-MM-DD`` names a day (a session's messages share a few days: checked once each)."""
    try:
        date.fromisoformat(text)
    except ValueError:
        return False
    return True


def utc_text(value: Any) -> str | None:
    """A source's timestamp as ISO 8601 UTC text (``...Z``); epoch seconds or milliseconds too."""
    if isinstance(value, str) and _CANONICAL_UTC.fullmatch(value) is not None:
        # already as written here (most sources: JavaScript's toISOString): checked, not rebuilt
        valid = (
            value[11:13] <= "23" and value[14:16] <= "59" and value[17:19] <= "59" and _is_date(value[:10])
        )
        return value if valid else None
    return rebuilt_utc_text(value)


def rebuilt_utc_text(value: Any) -> str | None:
    """:func:`utc_text` by parsing and formatting ``value`` again, whatever its form."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        if isinstance(value, int | float):
            seconds = value / 1000 if value > 10**11 else value
            moment = datetime.fromtimestamp(seconds, tz=UTC)
        elif isinstance(value, str) and value.strip():
            moment = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            moment = moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
        else:
            return None
    except (ValueError, OverflowError, OSError):
        return None
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def local_utc_text(value: str) -> str | None:
    """A time a source wrote in its machine's local zone without saying which (Aider's
    ``datetime.now()``), as :func:`utc_text`: read in this machine's zone, where the agent most likely
    ran. None when it is no time."""
    try:
        moment = datetime.fromisoformat(value.strip())
    except (ValueError, AttributeError):
        return None
    try:
        return utc_text(moment.astimezone(UTC).isoformat())  # a naive time: this machine's local zone
    except (OverflowError, OSError):
        return None
