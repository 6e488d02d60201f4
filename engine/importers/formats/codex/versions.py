"""What changed in Codex's rollouts and rules from one release to the next, by its ``cli_version``.

Each boundary was found on the npm releases run offline against the scripted model server (the
same scenario by each release, the rollouts compared; scripts/codex_versions.py repeats it).
"""

from __future__ import annotations

import re

#: Before 0.66 a call's ``token_count`` is written before the items of the reply it counts (from
#: 0.45 written again after them, the same totals); from 0.66 after them. 0.40-0.65 compared.
ITEMS_BEFORE_COUNT_FROM = (0, 66)


def codex_release(version: object) -> tuple[int, int] | None:
    """(major, minor) of a Codex ``cli_version`` ("0.47.0", "0.100.0-alpha.3"); None when unreadable."""
    found = re.match(r"\s*(\d+)\.(\d+)", version) if isinstance(version, str) else None
    return (int(found[1]), int(found[2])) if found else None


def counts_before_items(version: object) -> bool:
    """Whether a rollout of this Codex version writes a call's usage before the reply it counts."""
    release = codex_release(version)
    return release is not None and release < ITEMS_BEFORE_COUNT_FROM


__all__ = ["ITEMS_BEFORE_COUNT_FROM", "codex_release", "counts_before_items"]
