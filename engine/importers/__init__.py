"""Importers: real agent transcripts into ctxdesk session databases.

``import_file(path, store)`` detects the format (Claude Code JSONL, OpenAI message lists,
SWE-agent .traj, OpenHands trajectories, Anthropic request logs), writes one session per
conversation (Claude Code sub-agents as child sessions) in one transaction, and records a
``request`` event per model call with our estimate beside the provider's usage.
``accuracy_report`` compares the two.
"""

from engine.importers.accuracy import AccuracyReport, CallComparison, accuracy_report
from engine.importers.api import ProgressCallback, detect_format, import_file, import_files, parse_file
from engine.importers.model import FORMATS, ImportedSession, ImportResult

__all__ = [
    "FORMATS",
    "AccuracyReport",
    "CallComparison",
    "ImportResult",
    "ImportedSession",
    "ProgressCallback",
    "accuracy_report",
    "detect_format",
    "import_file",
    "import_files",
    "parse_file",
]
