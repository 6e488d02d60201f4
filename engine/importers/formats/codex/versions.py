"""What changed in Codex's rollouts and rules from one release to the next, by its ``cli_version``.

Each boundary was found on the npm releases run offline against the scripted model server (the
same scenario by each release, the rollouts compared; scripts/codex_versions.py repeats it).
"""

from __future__ import annotations

from engine.agent_versions import release

#: Before 0.66 a call's ``token_count`` is written before the items of the reply it counts (from
#: 0.45 written again after them, the same totals); from 0.66 after them. 0.40-0.65 compared.
ITEMS_BEFORE_COUNT_FROM = (0, 66)


def counts_before_items(version: object) -> bool:
    """Whether a rollout of this Codex version writes a call's usage before the reply it counts."""
    found = release(version)
    return found is not None and found < ITEMS_BEFORE_COUNT_FROM


__all__ = ["ITEMS_BEFORE_COUNT_FROM", "counts_before_items"]
