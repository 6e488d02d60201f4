"""ctxdesk engine: measure, guard and compact what fills an LLM agent's context window."""

from engine.budget import ContextBudget, measure_budget, reproject
from engine.cache_analysis import PREFIX_RESET_EVENTS, CacheAnalysis, analyze_cache, call_records
from engine.calibration_pairs import refit_calibration
from engine.clients import AnthropicClient, ModelClient, ModelRequest, ModelResponse, ScriptedClient
from engine.clients_openai import OpenAIClient
from engine.compaction import (
    AnthropicSummarizer,
    CompactionResult,
    OfflineSummarizer,
    Summarizer,
    compact,
    force_compact,
    restore_snapshot,
)
from engine.components import measure_request, reconcile
from engine.convert import from_anthropic, from_openai, to_anthropic, to_openai
from engine.cost import CallCost, Prices, price_call, prices_for
from engine.deferral import TOOL_SEARCH_TOOL, ToolRegistry, ToolSpec, plan_deferral
from engine.errors import (
    ConfigError,
    ContextDeskError,
    ContextLengthExceededError,
    ContextOverflowError,
    ExportError,
    ImportFormatError,
    MessageFormatError,
    NotADatabaseError,
    NotFoundError,
    OutputError,
    ProviderError,
    ResultStoreError,
    SchemaVersionError,
    StoreError,
    SummarizerUnavailableError,
    TokenizerError,
    ValidationError,
)
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.findings import Finding, find_waste
from engine.guard import ContextGuard, GuardDecision, GuardTarget
from engine.importers import ImportResult, accuracy_report, detect_format, import_file, import_files
from engine.limit import LIMIT_SQL, recorded_limit
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from engine.model_table import ModelTable, load_model_table
from engine.offload import READ_RESULT_TOOL, ResultStore, plan_offload
from engine.prompt import PromptBuilder
from engine.redact import install_log_redaction, redact_secrets
from engine.rollup import cost_rows, root_of
from engine.session import SessionManager, TurnResult
from engine.settings import (
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_HARD_BLOCK_THRESHOLD,
    DEFAULT_NOTE_THRESHOLD,
    DEFAULT_SETTINGS_PATH,
    IMPORTED_LIMIT_PRECEDENCE,
    SETTINGS_ENV_VAR,
    FileChangeWatcher,
    ModelSettings,
    ResolvedModelSettings,
    Settings,
    SettingsWatcher,
    limit_for_model,
    load_settings,
    resolve_model_settings,
    save_settings,
    settings_path,
)
from engine.store import SessionStore
from engine.store.costs import project_costs, refresh_request_costs, session_costs
from engine.store.factory import open_store
from engine.textfmt import format_table
from engine.tokens import Tokenizer, get_tokenizer, tokenizer_ids
from engine.turns import find_safe_boundary, is_over_context_budget, parse_turn_boundaries, safe_cut_points

__version__ = "0.1.0"


__all__ = [
    "DEFAULT_COMPACT_THRESHOLD",
    "DEFAULT_HARD_BLOCK_THRESHOLD",
    "DEFAULT_NOTE_THRESHOLD",
    "DEFAULT_SETTINGS_PATH",
    "IMPORTED_LIMIT_PRECEDENCE",
    "LIMIT_SQL",
    "PREFIX_RESET_EVENTS",
    "READ_RESULT_TOOL",
    "SETTINGS_ENV_VAR",
    "TOOL_SEARCH_TOOL",
    "AnthropicClient",
    "AnthropicSummarizer",
    "CacheAnalysis",
    "CallCost",
    "CompactionResult",
    "ComponentTokens",
    "ConfigError",
    "ContextBudget",
    "ContextDeskError",
    "ContextEvent",
    "ContextGuard",
    "ContextLengthExceededError",
    "ContextOverflowError",
    "DocumentBlock",
    "ExportError",
    "FileChangeWatcher",
    "Finding",
    "GuardDecision",
    "GuardTarget",
    "ImageBlock",
    "ImportFormatError",
    "ImportResult",
    "Message",
    "MessageFormatError",
    "ModelClient",
    "ModelRequest",
    "ModelResponse",
    "ModelSettings",
    "ModelTable",
    "NotADatabaseError",
    "NotFoundError",
    "OfflineSummarizer",
    "OpenAIClient",
    "OutputError",
    "Prices",
    "PromptBuilder",
    "ProviderError",
    "ProviderUsage",
    "ResolvedModelSettings",
    "ResultStore",
    "ResultStoreError",
    "SchemaVersionError",
    "ScriptedClient",
    "SessionManager",
    "SessionStore",
    "Settings",
    "SettingsWatcher",
    "StoreError",
    "Summarizer",
    "SummarizerUnavailableError",
    "TextBlock",
    "ThinkingBlock",
    "Tokenizer",
    "TokenizerError",
    "ToolRegistry",
    "ToolResultBlock",
    "ToolSpec",
    "ToolUseBlock",
    "TurnResult",
    "ValidationError",
    "accuracy_report",
    "analyze_cache",
    "call_records",
    "compact",
    "cost_rows",
    "detect_format",
    "find_safe_boundary",
    "find_waste",
    "force_compact",
    "format_table",
    "from_anthropic",
    "from_openai",
    "get_tokenizer",
    "import_file",
    "import_files",
    "install_log_redaction",
    "is_over_context_budget",
    "limit_for_model",
    "load_model_table",
    "load_settings",
    "measure_budget",
    "measure_request",
    "open_store",
    "parse_turn_boundaries",
    "plan_deferral",
    "plan_offload",
    "price_call",
    "prices_for",
    "project_costs",
    "reconcile",
    "recorded_limit",
    "redact_secrets",
    "refit_calibration",
    "refresh_request_costs",
    "reproject",
    "resolve_model_settings",
    "restore_snapshot",
    "root_of",
    "safe_cut_points",
    "save_settings",
    "session_costs",
    "settings_path",
    "to_anthropic",
    "to_openai",
    "tokenizer_ids",
]
