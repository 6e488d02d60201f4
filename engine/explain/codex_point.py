"""Codex's own compaction point, by the Codex version that wrote the rollout (its ``session_meta``
``cli_version``, kept as the session's ``cli_version``).

The rule changed three times. Measured on the npm releases with gpt-5 (a 272,000-token window)
against the scripted model server, a usage padded past each candidate point
(``python scripts/codex_versions.py`` repeats it):

- before 0.49: no point of its own (nothing at 270,000 of 272,000), only
  ``model_auto_compact_token_limit``; the rollout records the whole window (0.40-0.47; 0.29 none);
- 0.49-0.65: that setting when set, else 9/10 of the model's own window, which a configured
  ``model_context_window`` does not move (nothing at 68,163 of a configured 64,000; gpt-5 compacted
  at 245,663, not at 243,663); from here the rollout records 95% of the window;
- 0.66-0.99: the setting when set (255,714 passed a setting of 260,000), else 9/10 of the window,
  the configured one when set;
- 0.100 on: the lesser of the two (gpt-5 compacted at 255,714 under a setting of 260,000).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.agent_versions import release

#: Codex compacts at 9/10 of the model's window by default (its ``ModelInfo::auto_compact_token_limit``).
CODEX_AUTO_COMPACT_SHARE = (9, 10)
#: From 0.49 a rollout records as the window (``model_context_window``) the share of it a prompt may
#: use, ``effective_context_window_percent`` (95 by default); before, the whole window.
CODEX_EFFECTIVE_WINDOW_PERCENT = 95
#: The first versions of each rule (module docstring).
EFFECTIVE_WINDOW_FROM = (0, 49)
CONFIGURED_WINDOW_FROM = (0, 66)
LESSER_FROM = (0, 100)


class CodexPoint(BaseModel):
    """Codex's compaction point (None: it had none) and the rule that gives it, in words."""

    model_config = ConfigDict(frozen=True)

    tokens: int | None
    rule: str


def codex_point(window: int | None, setting: dict[str, Any], version: str | None = None) -> CodexPoint:
    """Codex's point for a rollout whose window is ``window`` (as recorded), under ``setting``
    (``model_auto_compact_token_limit``, ``model_context_window`` of its config.toml), written by
    Codex ``version`` (None or unreadable: the current rule)."""
    found = release(version)
    limit = _positive(setting.get("model_auto_compact_token_limit"))
    configured = _positive(setting.get("model_context_window"))
    named = f"model_auto_compact_token_limit = {limit:,}" if limit else None
    if found is not None and found < EFFECTIVE_WINDOW_FROM:
        if named:
            return CodexPoint(tokens=limit, rule=named)
        return CodexPoint(
            tokens=None, rule=f"Codex {version} compacts only at model_auto_compact_token_limit (not set)"
        )
    if found is not None and found < CONFIGURED_WINDOW_FROM and named:
        return CodexPoint(tokens=limit, rule=named)
    if found is not None and found < CONFIGURED_WINDOW_FROM and configured:
        return CodexPoint(
            tokens=None,
            rule=f"Codex {version}'s default: 90% of the model's own window (not recorded: the file records the "
            f"configured model_context_window {configured:,})",
        )
    full = configured or (math.ceil(window * 100 / CODEX_EFFECTIVE_WINDOW_PERCENT) if window else None)
    if full is None:
        if named:
            return CodexPoint(tokens=limit, rule=named)
        return CodexPoint(tokens=None, rule="Codex's default: 90% of a model window the file does not record")
    share_of, out_of = CODEX_AUTO_COMPACT_SHARE
    default = full * share_of // out_of
    where = (
        f"model_context_window {full:,}"
        if configured
        else f"window {full:,} (the file records {CODEX_EFFECTIVE_WINDOW_PERCENT}% of it, {window:,})"
    )
    overrides = found is not None and found < LESSER_FROM  # the setting, even above 9/10
    if named and (overrides or limit <= default):  # type: ignore[operator]
        return CodexPoint(tokens=limit, rule=named)
    if named:
        return CodexPoint(tokens=default, rule=f"90% of the {where}, below {named}")
    return CodexPoint(tokens=default, rule=f"Codex's default: 90% of the {where}")


def _positive(value: Any) -> int | None:
    """A setting's count: a positive whole number (TOML may give ``2e5`` as a float), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0 or value != int(value):
        return None
    return int(value)


__all__ = ["CODEX_AUTO_COMPACT_SHARE", "CODEX_EFFECTIVE_WINDOW_PERCENT", "CodexPoint", "codex_point"]
