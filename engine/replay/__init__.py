"""Replay a recorded session under other context management, side by side (#35.4): the provider's
own edits (Anthropic ``clear_tool_uses_20250919`` and ``compact_20260112``, OpenAI Responses'
compaction) beside ctxdesk's proxy policies, per call: prompt tokens, cache reads, cost, compactions.
"""

from engine.policy_settings import Policies  # what CtxdeskPolicies runs
from engine.replay.cache import CacheRules, PromptCache, cache_rules_for
from engine.replay.provider import (
    AnthropicCompact,
    ClearToolUses,
    OpenAICompaction,
    clear_tool_uses,
    plan_server_compaction,
)
from engine.replay.recorded import RecordedCall, RecordedSession, load_recorded_session
from engine.replay.run import (
    AsSent,
    CtxdeskPolicies,
    ReplayedCall,
    SessionReplay,
    Variant,
    VariantReplay,
    replay_session,
    variant_label,
)

__all__ = [
    "AnthropicCompact",
    "AsSent",
    "CacheRules",
    "ClearToolUses",
    "CtxdeskPolicies",
    "OpenAICompaction",
    "Policies",
    "PromptCache",
    "RecordedCall",
    "RecordedSession",
    "ReplayedCall",
    "SessionReplay",
    "Variant",
    "VariantReplay",
    "cache_rules_for",
    "clear_tool_uses",
    "load_recorded_session",
    "plan_server_compaction",
    "replay_session",
    "variant_label",
]
