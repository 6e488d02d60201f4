"""Who ran a session, and each agent's own compaction rule: Claude Code's auto-compact point,
Codex's ``model_auto_compact_token_limit``, Gemini CLI's ``compressionThreshold``, Qwen Code's
``context.autoCompactThreshold``, ctxdesk's ``compact_threshold``.

The rules are the agents' published defaults; a setting recorded with the compaction
(``details.agent_setting``) overrides them, and a compaction below the default point says that
some override not in the file was in force rather than claiming a threshold that was not.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.explain.codex_point import codex_point
from engine.store import SessionRecord

# The importers (their registry, Claude Code's summary reserve) load on first use only: explaining
# how the sessions of a database ended (the dashboard's Sessions page, in a worker process) asks
# for neither when no session came from an importer, and loading them was most of that worker's
# processor time. AGENT_LABELS and CLAUDE_CODE_SUMMARY_RESERVE read as before (module __getattr__).

#: The shorter forms a sentence reads better with than the importer registry's names, and the
#: sources that are no import format.
_LABELS_OF_OUR_OWN: dict[str, str] = {
    "codex": "Codex", "copilot": "Copilot CLI", "cline": "Cline", "claude-web": "Claude.ai",
    "openai": "The agent (OpenAI chat log)", "openai-responses": "The agent (OpenAI Responses log)",
    "anthropic": "The agent (Anthropic Messages log)", "ctxdesk": "ctxdesk", "proxy": "The agent",
}  # fmt: skip

#: Claude Code keeps this many tokens below its auto-compact window free (its summary buffer).
CLAUDE_CODE_AUTOCOMPACT_BUFFER = 13_000
#: Gemini CLI compresses the chat when it reaches this share of the model's window.
GEMINI_DEFAULT_COMPRESSION_THRESHOLD = 0.5
#: Qwen Code (0.24) compacts at ``context.autoCompactThreshold`` (this default) of the window, capped
#: at the window less its summary's output reserve and a buffer (its ``computeThresholds``).
QWEN_DEFAULT_AUTO_COMPACT_THRESHOLD = 0.85
QWEN_SUMMARY_RESERVE = 20_000
QWEN_AUTOCOMPACT_BUFFER = 13_000


@functools.cache
def _agent_labels() -> dict[str, str]:
    from engine.importers.registry import REGISTRY

    return {**{f.name: f.agent for f in REGISTRY}, **_LABELS_OF_OUR_OWN}


def _summary_reserve() -> int:
    from engine.importers.formats.claude_code.session import SUMMARY_RESERVE

    return SUMMARY_RESERVE


def __getattr__(name: str) -> Any:
    """``AGENT_LABELS``: display names of the agents, keyed by the import format (``import:<name>``)
    or the source: the importer registry's names, with the shorter forms a sentence reads better
    with. ``CLAUDE_CODE_SUMMARY_RESERVE``: the output tokens Claude Code reserves for the summary it
    writes when compacting (one number: the importer records it as the reserve below the window)."""
    if name == "AGENT_LABELS":
        return _agent_labels()
    if name == "CLAUDE_CODE_SUMMARY_RESERVE":
        return _summary_reserve()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def agent_of(session: SessionRecord) -> str:
    """The agent's key: the import format (``claude-code``, ``codex``, ...), ``ctxdesk`` for the
    session manager, ``proxy`` for traffic recorded by ``ctxdesk proxy``."""
    return agent_of_source(session.source)


def agent_of_source(source: str | None) -> str:
    """:func:`agent_of` a session whose ``sessions.source`` is ``source``."""
    source = source or "engine"
    if source.startswith("import:"):
        return source.removeprefix("import:")
    if source == "engine":
        return "ctxdesk"
    return source


def agent_label(agent: str) -> str:
    if agent in _LABELS_OF_OUR_OWN:  # no importer's registry needed
        return _LABELS_OF_OUR_OWN[agent]
    return _agent_labels().get(agent, agent)


@dataclass(frozen=True)
class AgentThreshold:
    """The token count at which an agent compacts on its own, and how that number was found."""

    tokens: int | None
    rule: str
    setting: dict[str, Any] = field(default_factory=dict)


def agent_threshold(
    agent: str, *, window: int | None, setting: Mapping[str, Any] | None = None, version: str | None = None
) -> AgentThreshold | None:
    """The agent's own compaction point for a model ``window``, under ``setting`` (what the file or
    importer recorded: Claude Code ``autocompact_pct_override`` / ``auto_compact_window``, Codex
    ``model_auto_compact_token_limit``, Gemini CLI ``compressionThreshold``, Qwen Code
    ``autoCompactThreshold``), by the agent's ``version`` where its rule changed (Codex:
    :mod:`engine.explain.codex_point`); None for an agent without a rule of its own."""
    setting = dict(setting or {})
    if agent == "claude-code":
        return _claude_code(window, setting)
    if agent == "codex":
        point = codex_point(window, setting, version)
        return AgentThreshold(point.tokens, point.rule, setting)
    if agent == "gemini":
        share = _share(setting.get("compressionThreshold"))
        rule_share = share if share is not None else GEMINI_DEFAULT_COMPRESSION_THRESHOLD
        name = "compressionThreshold" if share is not None else "default compressionThreshold"
        if window:
            tokens = math.floor(window * rule_share)
            return AgentThreshold(tokens, f"{name} {rule_share:g} × window {window:,}", setting)
        return AgentThreshold(None, f"{name} {rule_share:g} of a window not recorded", setting)
    if agent == "qwen":
        return _qwen(window, setting)
    return None


def _qwen(window: int | None, setting: dict[str, Any]) -> AgentThreshold:
    share = _share(setting.get("autoCompactThreshold"))
    rule_share = share if share is not None else QWEN_DEFAULT_AUTO_COMPACT_THRESHOLD
    name = "autoCompactThreshold" if share is not None else "default autoCompactThreshold"
    if not window:
        return AgentThreshold(None, f"{name} {rule_share:g} of a window not recorded", setting)
    ceiling = window - QWEN_SUMMARY_RESERVE - QWEN_AUTOCOMPACT_BUFFER
    proportional = math.floor(window * rule_share)
    if 0 < ceiling < proportional:
        rule = (
            f"window {window:,} − {QWEN_SUMMARY_RESERVE:,} − {QWEN_AUTOCOMPACT_BUFFER:,}, below {name} "
            f"{rule_share:g} × window"
        )
        return AgentThreshold(ceiling, rule, setting)
    return AgentThreshold(proportional, f"{name} {rule_share:g} × window {window:,}", setting)


def _claude_code(window: int | None, setting: dict[str, Any]) -> AgentThreshold:
    override_window = _int(setting.get("auto_compact_window"))
    pct = _int(setting.get("autocompact_pct_override"))
    if override_window:
        effective = override_window
        base = f"auto-compact window {override_window:,} − {CLAUDE_CODE_AUTOCOMPACT_BUFFER:,}"
    elif window:
        effective = window - _summary_reserve()
        # its limit: the window less the summary reserve, as every page shows it
        base = f"auto-compact at limit {effective:,} − {CLAUDE_CODE_AUTOCOMPACT_BUFFER:,}"
    else:
        return AgentThreshold(None, "the model's window is not recorded", setting)
    tokens = effective - CLAUDE_CODE_AUTOCOMPACT_BUFFER
    if pct is not None and 0 < pct <= 100:
        by_pct = math.floor(effective * pct / 100)
        if by_pct < tokens:
            return AgentThreshold(
                by_pct, f"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE={pct}: {pct}% of {effective:,}", setting
            )
    return AgentThreshold(tokens, base, setting)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    return None


def _share(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        share = float(value)
    except ValueError:
        return None
    return share if 0 < share <= 1 else None
