"""Agents' version strings as numbers to compare: where an agent changed what it writes or when it
compacts from one release to the next (Codex: engine/importers/formats/codex/versions.py,
engine/explain/codex_point.py), the version its file names decides how it is read."""

from __future__ import annotations

import re


def release(version: object) -> tuple[int, int] | None:
    """(major, minor) of a version ("0.47.0", "0.100.0-alpha.3", "v1.2"); None when unreadable."""
    found = re.match(r"\s*v?(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return (int(found[1]), int(found[2])) if found else None


__all__ = ["release"]
