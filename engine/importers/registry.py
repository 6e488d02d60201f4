"""Every transcript format ctxdesk reads, in detection order: the one list that detection
(:mod:`engine.importers.detect`), parsing (:mod:`engine.importers.api`), ``ctxdesk import
--from`` (:mod:`engine.importers.locations`) and the README's agents table read.

A new format is a module in :mod:`engine.importers.formats` declaring ``FORMAT`` and one line
here. Order matters only where shapes overlap: a sniff may assume the formats before it
declined (the specific shapes first, generic message lists last).
"""

from __future__ import annotations

from engine.importers.formats import ImportFormat
from engine.importers.formats import aider as _aider
from engine.importers.formats import anthropic_api as _anthropic_api
from engine.importers.formats import claude_code as _claude_code
from engine.importers.formats import claude_web as _claude_web
from engine.importers.formats import cline as _cline
from engine.importers.formats import cline_cli as _cline_cli
from engine.importers.formats import codex as _codex
from engine.importers.formats import continue_cli as _continue_cli
from engine.importers.formats import copilot as _copilot
from engine.importers.formats import gemini as _gemini
from engine.importers.formats import kilo as _kilo
from engine.importers.formats import langchain as _langchain
from engine.importers.formats import letta as _letta
from engine.importers.formats import mini_swe_agent as _mini_swe_agent
from engine.importers.formats import openai_chat as _openai_chat
from engine.importers.formats import openai_responses as _openai_responses
from engine.importers.formats import opencode as _opencode
from engine.importers.formats import openhands as _openhands
from engine.importers.formats import qwen as _qwen
from engine.importers.formats import swe_agent as _swe_agent

#: Every format, in the order detection tries them.
REGISTRY: tuple[ImportFormat, ...] = (
    _aider.FORMAT,
    _qwen.FORMAT,  # before Claude Code, whose sniff takes its lines (the same types and ids)
    _claude_code.FORMAT,
    _codex.FORMAT,
    _gemini.FORMAT,
    _copilot.FORMAT,
    _opencode.FORMAT,
    _kilo.FORMAT,
    _cline_cli.FORMAT,
    _continue_cli.FORMAT,
    _cline.FORMAT,
    _claude_web.FORMAT,
    _langchain.FORMAT,
    _openai_responses.FORMAT,
    _letta.FORMAT,
    _mini_swe_agent.FORMAT,
    _swe_agent.FORMAT,
    _openhands.FORMAT,
    _anthropic_api.FORMAT,
    _openai_chat.FORMAT,
)
_BY_NAME = {f.name: f for f in REGISTRY}

#: Format names; an imported session's source is ``import:<name>``.
FORMATS: tuple[str, ...] = tuple(_BY_NAME)
#: Agents that keep their sessions in a place of their own (``ctxdesk import --from NAME``).
AGENTS: tuple[str, ...] = tuple(f.name for f in REGISTRY if f.locations is not None)


def format_named(name: str) -> ImportFormat:
    """The registered format called ``name``; ValueError naming the known ones otherwise."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown format {name!r}: one of {', '.join(FORMATS)}") from None


def agents_table() -> str:
    """The README's agents table (Markdown), from the registry: the agents with a place of their
    own first (with their ``--from`` command), then every other format."""
    rows = ["| agent | where its files live | command |", "|---|---|---|"]
    rows += [f"| {f.agent} | {f.files} | `ctxdesk import --from {f.name}` |" for f in REGISTRY if f.locations]
    rows.append("| all of the above | | `ctxdesk import --from all`; live: `ctxdesk dashboard --from all` |")
    rows += [
        f"| {f.agent} | {f.files} | `ctxdesk import FILE_OR_DIR --db DB` |"
        for f in REGISTRY
        if not f.locations
    ]
    return "\n".join(rows)
