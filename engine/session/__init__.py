"""The session manager and its parts: ``manager`` (the turn loop), ``history`` (the history the
next request sends and every write to the transcript), ``guarding`` (the session's one guard and
its lifecycle), ``calls`` (model calls: fallbacks, the emergency retry, request events),
``assembly`` (pure request assembly: prompt, tools, component tokens), ``tools`` (tool
execution, built-in tools), ``targets`` (the models and their live settings), ``compacting``
(when and how it compacts), ``event_building`` (the request, note and resume events)."""

from engine.session.assembly import FINAL_TURN_NOTE, RequestView, assemble_request
from engine.session.compacting import (
    COMPACTION_TARGET_SHARE,
    EMERGENCY_STRATEGY,
    SUMMARIZER_FALLBACK_STRATEGY,
    Compactor,
    compaction_target,
)
from engine.session.event_building import request_event, settings_snapshot
from engine.session.manager import (
    DEFAULT_MAX_STEPS,
    STATUS_ACTIVE,
    STATUS_FINAL,
    SessionManager,
    TurnResult,
)
from engine.session.targets import SettingsSource, Target, Targets
from engine.session.tools import BUILTIN_TOOL_NAMES, ToolExecutor, ToolHandler

__all__ = [
    "BUILTIN_TOOL_NAMES",
    "COMPACTION_TARGET_SHARE",
    "DEFAULT_MAX_STEPS",
    "EMERGENCY_STRATEGY",
    "FINAL_TURN_NOTE",
    "STATUS_ACTIVE",
    "STATUS_FINAL",
    "SUMMARIZER_FALLBACK_STRATEGY",
    "Compactor",
    "RequestView",
    "SessionManager",
    "SettingsSource",
    "Target",
    "Targets",
    "ToolExecutor",
    "ToolHandler",
    "TurnResult",
    "assemble_request",
    "compaction_target",
    "request_event",
    "settings_snapshot",
]
