"""Agents' version strings as numbers to compare: where an agent changed what it writes or when it
compacts from one release to the next (Codex: engine/importers/formats/codex/versions.py,
engine/explain/codex_point.py), the version its file names decides how it is read."""

from __future__ import annotations

import re


def release(version: object) -> tuple[int, ...] | None:
    """(major, minor[, patch]) of a version ("0.47.0", "1.0.102", "0.100.0-alpha.3", "v1.2"); None when
    unreadable. Compared with a shorter boundary, (0, 66, 0) < (0, 66) is False: 0.66.0 is from 0.66 on."""
    found = re.match(r"\s*v?(\d+)\.(\d+)(?:\.(\d+))?", version) if isinstance(version, str) else None
    if not found:
        return None
    return tuple(int(n) for n in found.groups() if n is not None)


__all__ = ["release"]
