"""ctxdesk engine: measure, guard and compact what fills an LLM agent's context window.

The public API for an agent developer, in one place (``__all__``): the session manager and its
model clients, the canonical messages (and their Anthropic/OpenAI conversions), the budget, the
guard, compaction, offloading and tool deferral, settings, opening a session store, importing
agents' transcripts, the proxy's entry, log redaction and the error tree. Everything else lives
in the module that owns it and is imported from there (``engine.cost``, ``engine.settings``,
``engine.importers``, ``engine.store``, ... each declaring its own ``__all__``;
docs/architecture.md, "Public API").

Names load on first use (PEP 562), so ``import engine.store.factory`` or a single
``from engine import compact`` does not import every layer: the dashboard's first paint and the
CLI's start pay only for what they use. Importing the package changes no process-wide state:
log redaction is the explicit :func:`install_log_redaction` of an entry point.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from engine.lazy import lazy_exports

__version__ = "0.1.0"

#: Public name -> the module that owns it.
_PUBLIC: dict[str, str] = {
    # the session manager and its model clients
    "SessionManager": "engine.session",
    "TurnResult": "engine.session",
    "ModelClient": "engine.clients",
    "ModelRequest": "engine.clients",
    "ModelResponse": "engine.clients",
    "AnthropicClient": "engine.clients",
    "ScriptedClient": "engine.clients",
    "OpenAIClient": "engine.clients_openai",
    # messages
    "Message": "engine.messages",
    "TextBlock": "engine.messages",
    "ThinkingBlock": "engine.messages",
    "ToolUseBlock": "engine.messages",
    "ToolResultBlock": "engine.messages",
    "ImageBlock": "engine.messages",
    "DocumentBlock": "engine.messages",
    "from_anthropic": "engine.convert",
    "to_anthropic": "engine.convert",
    "from_openai": "engine.convert",
    "to_openai": "engine.convert",
    # what a turn measured and recorded
    "Tokenizer": "engine.tokens",
    "get_tokenizer": "engine.tokens",
    "ComponentTokens": "engine.events",
    "ContextEvent": "engine.events",
    "ProviderUsage": "engine.events",
    # budget, guard, compaction, offloading, tool deferral, prompt
    "ContextBudget": "engine.budget",
    "measure_budget": "engine.budget",
    "ContextGuard": "engine.guard",
    "GuardDecision": "engine.guard",
    "GuardTarget": "engine.guard",
    "compact": "engine.compaction",
    "force_compact": "engine.compaction",
    "restore_snapshot": "engine.compaction",
    "CompactionResult": "engine.compaction",
    "Summarizer": "engine.compaction",
    "AnthropicSummarizer": "engine.compaction",
    "OfflineSummarizer": "engine.compaction",
    "ResultStore": "engine.offload",
    "plan_offload": "engine.offload",
    "READ_RESULT_TOOL": "engine.offload",
    "ToolRegistry": "engine.deferral",
    "ToolSpec": "engine.deferral",
    "plan_deferral": "engine.deferral",
    "TOOL_SEARCH_TOOL": "engine.deferral",
    "PromptBuilder": "engine.prompt",
    # settings
    "Settings": "engine.settings",
    "ModelSettings": "engine.settings",
    "ResolvedModelSettings": "engine.settings",
    "SettingsWatcher": "engine.settings",
    "load_settings": "engine.settings",
    "save_settings": "engine.settings",
    "resolve_model_settings": "engine.settings",
    "limit_for_model": "engine.settings",
    "settings_path": "engine.settings",
    "SETTINGS_ENV_VAR": "engine.settings",
    "DEFAULT_SETTINGS_PATH": "engine.settings",
    "ModelTable": "engine.model_table",
    "load_model_table": "engine.model_table",
    # the session store, importers, the proxy
    "SessionStore": "engine.store",
    "open_store": "engine.store.factory",
    "import_file": "engine.importers",
    "import_files": "engine.importers",
    "detect_format": "engine.importers",
    "ImportResult": "engine.importers",
    "accuracy_report": "engine.importers",
    "ProxyServer": "engine.proxy",
    # log redaction (an explicit call of the entry points)
    "install_log_redaction": "engine.redact",
    "redact_secrets": "engine.redact",
    # errors
    "ContextDeskError": "engine.errors",
    "ConfigError": "engine.errors",
    "ContextLengthExceededError": "engine.errors",
    "ContextOverflowError": "engine.errors",
    "ExportError": "engine.errors",
    "ImportFormatError": "engine.errors",
    "MessageFormatError": "engine.errors",
    "NotADatabaseError": "engine.errors",
    "NotFoundError": "engine.errors",
    "OutputError": "engine.errors",
    "ProviderError": "engine.errors",
    "ResultStoreError": "engine.errors",
    "SchemaVersionError": "engine.errors",
    "StoreError": "engine.errors",
    "SummarizerUnavailableError": "engine.errors",
    "TokenizerError": "engine.errors",
    "ValidationError": "engine.errors",
}

#: Names this package exported before the API was trimmed (#34), still importable from here so
#: code written against them keeps working; new code imports them from the module named.
_FORMER: dict[str, str] = {
    "CacheAnalysis": "engine.cache_analysis",
    "PREFIX_RESET_EVENTS": "engine.cache_analysis",
    "analyze_cache": "engine.cache_analysis",
    "call_records": "engine.cache_analysis",
    "refit_calibration": "engine.calibration_pairs",
    "measure_request": "engine.components",
    "reconcile": "engine.components",
    "CallCost": "engine.cost",
    "Prices": "engine.cost",
    "price_call": "engine.cost",
    "prices_for": "engine.cost",
    "Finding": "engine.findings",
    "find_waste": "engine.findings",
    "LIMIT_SQL": "engine.limit",
    "recorded_limit": "engine.limit",
    "cost_rows": "engine.rollup",
    "root_of": "engine.rollup",
    "DEFAULT_COMPACT_THRESHOLD": "engine.settings",
    "DEFAULT_HARD_BLOCK_THRESHOLD": "engine.settings",
    "DEFAULT_NOTE_THRESHOLD": "engine.settings",
    "IMPORTED_LIMIT_PRECEDENCE": "engine.settings",
    "FileChangeWatcher": "engine.settings",
    "project_costs": "engine.store.costs",
    "refresh_request_costs": "engine.store.costs",
    "session_costs": "engine.store.costs",
    "format_table": "engine.textfmt",
    "tokenizer_ids": "engine.tokens",
    "find_safe_boundary": "engine.turns",
    "is_over_context_budget": "engine.turns",
    "parse_turn_boundaries": "engine.turns",
    "safe_cut_points": "engine.turns",
    "reproject": "engine.budget",
}

#: The public API: the names of ``_PUBLIC`` (tests/test_public_api.py keeps them equal).
__all__ = [
    "DEFAULT_SETTINGS_PATH",
    "READ_RESULT_TOOL",
    "SETTINGS_ENV_VAR",
    "TOOL_SEARCH_TOOL",
    "AnthropicClient",
    "AnthropicSummarizer",
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
    "PromptBuilder",
    "ProviderError",
    "ProviderUsage",
    "ProxyServer",
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
    "compact",
    "detect_format",
    "force_compact",
    "from_anthropic",
    "from_openai",
    "get_tokenizer",
    "import_file",
    "import_files",
    "install_log_redaction",
    "limit_for_model",
    "load_model_table",
    "load_settings",
    "measure_budget",
    "open_store",
    "plan_deferral",
    "plan_offload",
    "redact_secrets",
    "resolve_model_settings",
    "restore_snapshot",
    "save_settings",
    "settings_path",
    "to_anthropic",
    "to_openai",
]


__getattr__, __dir__ = lazy_exports(__name__, {**_PUBLIC, **_FORMER}, globals())

if TYPE_CHECKING:  # what type checkers and editors see; at run time these load on first use
    from engine.budget import ContextBudget, measure_budget
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
    from engine.convert import from_anthropic, from_openai, to_anthropic, to_openai
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
    from engine.guard import ContextGuard, GuardDecision, GuardTarget
    from engine.importers import ImportResult, accuracy_report, detect_format, import_file, import_files
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
    from engine.proxy import ProxyServer
    from engine.redact import install_log_redaction, redact_secrets
    from engine.session import SessionManager, TurnResult
    from engine.settings import (
        DEFAULT_SETTINGS_PATH,
        SETTINGS_ENV_VAR,
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
    from engine.store.factory import open_store
    from engine.tokens import Tokenizer, get_tokenizer
