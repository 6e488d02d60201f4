"""Importers: real agent transcripts into ctxdesk session databases.

``import_file(path, store)`` detects the format (Claude Code, Codex CLI, Gemini CLI, Cline /
Roo Code, OpenHands, SWE-agent, Aider, Letta, LangChain, OpenAI chat and Responses lists,
Anthropic request logs), writes one session per conversation (sub-agents as child sessions)
in one transaction, and records a ``request`` event per model call with our estimate beside
the provider's usage. Importing a file again adds only what is new. ``agent_files(agent)``
finds the sessions an agent keeps; ``ImportFollower`` follows them as they grow;
``accuracy_report`` compares estimates with the provider's counts. Every format is a registered
:class:`ImportFormat` (``REGISTRY``, in detection order; one module per format under
``engine.importers.formats``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

#: Public name -> the module that owns it. Names load on first use (PEP 562): reading an import's
#: progress file (the dashboard) does not import every format module, and a format module loads
#: when a file is detected or parsed.
_OWNERS: dict[str, str] = {
    "AccuracyReport": "engine.importers.accuracy",
    "CallComparison": "engine.importers.accuracy",
    "accuracy_report": "engine.importers.accuracy",
    "ProgressCallback": "engine.importers.api",
    "detect_format": "engine.importers.api",
    "import_file": "engine.importers.api",
    "imported_files": "engine.importers.api",
    "parse_file": "engine.importers.api",
    "import_files": "engine.importers.batch",
    "ImportFollower": "engine.importers.follow",
    "agent_files": "engine.importers.locations",
    "agent_roots": "engine.importers.locations",
    "folder_files": "engine.importers.locations",
    "pool_size": "engine.importers.parallel",
    "ImportedSession": "engine.importers.parsing.parsed",
    "ImportResult": "engine.importers.parsing.parsed",
    "ImportProgress": "engine.importers.progress",
    "progress_line": "engine.importers.progress",
    "read_status": "engine.importers.progress",
    "status_path": "engine.importers.progress",
    "write_status": "engine.importers.progress",
    "AGENTS": "engine.importers.registry",
    "FORMATS": "engine.importers.registry",
    "REGISTRY": "engine.importers.registry",
    "ImportFormat": "engine.importers.registry",
    "agents_table": "engine.importers.registry",
}


__getattr__, __dir__ = lazy_exports(__name__, _OWNERS, globals())

if TYPE_CHECKING:  # what type checkers and editors see; at run time these load on first use
    from engine.importers.accuracy import AccuracyReport, CallComparison, accuracy_report
    from engine.importers.api import (
        ProgressCallback,
        detect_format,
        import_file,
        imported_files,
        parse_file,
    )
    from engine.importers.batch import import_files
    from engine.importers.follow import ImportFollower
    from engine.importers.locations import agent_files, agent_roots, folder_files
    from engine.importers.parallel import pool_size
    from engine.importers.parsing.parsed import ImportedSession, ImportResult
    from engine.importers.progress import (
        ImportProgress,
        progress_line,
        read_status,
        status_path,
        write_status,
    )
    from engine.importers.registry import AGENTS, FORMATS, REGISTRY, ImportFormat, agents_table


__all__ = [
    "AGENTS",
    "FORMATS",
    "REGISTRY",
    "AccuracyReport",
    "CallComparison",
    "ImportFollower",
    "ImportFormat",
    "ImportProgress",
    "ImportResult",
    "ImportedSession",
    "ProgressCallback",
    "accuracy_report",
    "agent_files",
    "agent_roots",
    "agents_table",
    "detect_format",
    "folder_files",
    "import_file",
    "import_files",
    "imported_files",
    "parse_file",
    "pool_size",
    "progress_line",
    "read_status",
    "status_path",
    "write_status",
]
