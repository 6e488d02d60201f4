"""Where the real agent CLIs (Claude Code, Codex, Gemini CLI) are installed, for end-to-end tests and fixture scripts.

``$CTXDESK_AGENTS_BIN`` names a ``node_modules/.bin`` folder (.ci/run installs the pinned CLIs and sets it);
a developer machine defaults to /work/agents/node_modules/.bin.
"""

from __future__ import annotations

import os
from pathlib import Path

AGENTS_BIN_ENV_VAR = "CTXDESK_AGENTS_BIN"
DEFAULT_AGENTS_BIN = Path("/work/agents/node_modules/.bin")


def agents_bin() -> Path:
    return Path(os.environ.get(AGENTS_BIN_ENV_VAR) or DEFAULT_AGENTS_BIN)


def agent_bin(name: str) -> Path | None:
    """The CLI ``name`` (claude, codex, gemini, ccusage) when installed, else None."""
    path = agents_bin() / name
    return path if path.exists() else None
