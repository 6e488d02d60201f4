"""Where the real agent CLIs (Claude Code, Codex, Gemini CLI) and ccusage are installed, for end-to-end
tests and fixture scripts: ``bench.peers`` pins them and says where they live (``$CTXDESK_AGENTS_BIN``,
else ``~/.cache/ctxdesk-agents/node_modules/.bin``); ``python -m bench.peers install`` installs them.
"""

from __future__ import annotations

from pathlib import Path

from bench.peers import AGENTS_BIN_ENV_VAR, agents_bin, npm_bin

__all__ = ["AGENTS_BIN_ENV_VAR", "agent_bin", "agents_bin"]


def agent_bin(name: str) -> Path | None:
    """The CLI ``name`` (claude, codex, gemini, ccusage) when installed, else None."""
    return npm_bin(name)
