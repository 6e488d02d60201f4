"""Where a call's context would be compacted: an imported agent's own point (the rule the "Why did it
stop?" page gives its compactions, engine.explain.agent_threshold), else ctxdesk's
``compact_threshold`` of the limit (the session manager's and the proxy's, or what ctxdesk would do
for an agent without a rule of its own)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from engine.explain import agent_label, agent_of_source, agent_threshold


@dataclass(frozen=True)
class CompactionPoint:
    """The point in tokens (None: there is none) and the rule that gives it, in words."""

    tokens: int | None
    rule: str


def compaction_point(
    agent: Mapping[str, Any], *, window: int | None, limit: int | None, compact_threshold: float
) -> CompactionPoint:
    """The point for one call; ``agent``: dashboard.data.agent_context of its session, ``window`` the
    window the call recorded, ``limit`` its limit (every page's), ``compact_threshold`` ctxdesk's."""
    key = agent_of_source(agent.get("source"))
    own = agent_threshold(
        key, window=window, setting=agent.get("agent_settings") or {}, version=agent.get("cli_version")
    )
    if own is not None:
        return CompactionPoint(own.tokens, f"{agent_label(key)}'s own: {own.rule}")
    if not limit:
        return CompactionPoint(None, "no limit recorded")
    whose = (
        "ctxdesk's"
        if key in ("ctxdesk", "proxy")
        else f"{agent_label(key)} has no rule ctxdesk knows; ctxdesk's"
    )
    return CompactionPoint(
        math.floor(limit * compact_threshold),
        f"{whose} compact_threshold {compact_threshold:g} × limit {limit:,}",
    )


__all__ = ["CompactionPoint", "compaction_point"]
