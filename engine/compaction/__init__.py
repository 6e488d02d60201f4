"""Compaction: strategies that shrink a history to a token target, summarizers, and the calls
that apply them (``compact`` pure, ``force_compact`` on a stored session).

Plans are frozen :class:`CompactionResult` values; the summary is kept beside the messages,
never inside them, and the transcript is never modified.
"""

from engine.compaction.config import (
    STRATEGY_NAMES,
    Chain,
    ClearToolResults,
    Emergency,
    RollingIterations,
    Sandwich,
    SlidingWindow,
    StrategyConfig,
    Summarize,
    TreeSummary,
    Truncate,
    parse_strategy,
)
from engine.compaction.context_tool import COMPACT_CONTEXT_TOOL, describe_report, run_compact_context_tool
from engine.compaction.offline import OfflineSummarizer
from engine.compaction.operations import (
    CompactionReport,
    compact,
    default_summarizer,
    force_compact,
    restore_snapshot,
)
from engine.compaction.result import CompactionResult, PlanContext, SummaryCache
from engine.compaction.strategies import (
    plan_chain,
    plan_clear_tool_results,
    plan_compaction,
    plan_emergency,
    plan_rolling_iterations,
    plan_sandwich,
    plan_sliding_window,
    plan_summarize,
    plan_tree_summary,
    plan_truncate,
)
from engine.compaction.summarizers import AnthropicSummarizer, Summarizer

__all__ = [
    "COMPACT_CONTEXT_TOOL",
    "STRATEGY_NAMES",
    "AnthropicSummarizer",
    "Chain",
    "ClearToolResults",
    "CompactionReport",
    "CompactionResult",
    "Emergency",
    "OfflineSummarizer",
    "PlanContext",
    "RollingIterations",
    "Sandwich",
    "SlidingWindow",
    "StrategyConfig",
    "Summarize",
    "Summarizer",
    "SummaryCache",
    "TreeSummary",
    "Truncate",
    "compact",
    "default_summarizer",
    "describe_report",
    "force_compact",
    "parse_strategy",
    "plan_chain",
    "plan_clear_tool_results",
    "plan_compaction",
    "plan_emergency",
    "plan_rolling_iterations",
    "plan_sandwich",
    "plan_sliding_window",
    "plan_summarize",
    "plan_tree_summary",
    "plan_truncate",
    "restore_snapshot",
    "run_compact_context_tool",
]
