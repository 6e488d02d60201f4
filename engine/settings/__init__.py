"""Context-window settings: typed levels, one TOML file, per-model resolution that names its sources.

Settings have three levels (``defaults``, ``providers.<id>``, ``models."<name>"``), each a
:class:`ModelSettings` whose fields are all optional. :func:`resolve_model_settings` takes each
field from the first level that sets it: model -> provider -> model table -> defaults -> built-in.

One module per job: ``models`` (the levels and their validation), ``resolve`` (per-model
resolution), ``files`` (the TOML file: find, read, write atomically), ``watch`` (live reload),
``toml_text`` (TOML values). Every name is re-exported here.
"""

from engine.locations import DEFAULT_SETTINGS_PATH, SETTINGS_ENV_VAR, settings_path  # where the file is
from engine.settings.files import (
    dump_settings_toml,
    load_settings,
    save_settings,
    write_atomically,
)
from engine.settings.resolve import (
    IMPORTED_LIMIT_PRECEDENCE,
    ResolvedModelSettings,
    infer_provider,
    limit_for_model,
    limit_source,
    resolve_model_settings,
)
from engine.settings.schema import (
    BUILTIN_SETTINGS,
    DEFAULT_BUFFER_TOKENS,
    DEFAULT_COMPACT_THRESHOLD,
    DEFAULT_CONTEXT_WINDOW,
    DEFAULT_HARD_BLOCK_THRESHOLD,
    DEFAULT_MAX_OUTPUT_TOKENS,
    DEFAULT_NOTE_THRESHOLD,
    DEFAULT_RESULT_OFFLOAD_THRESHOLD,
    DEFAULT_TOOL_DEFERRAL_THRESHOLD,
    MAX_SETTING_TOKENS,
    TABLE_FIELDS,
    TOP_LEVEL_KEYS,
    ModelSettings,
    Settings,
    Share,
    Tokens,
)
from engine.settings.watch import (
    FileChangeWatcher,
    SettingsWatcher,
)

__all__ = [
    "BUILTIN_SETTINGS",
    "DEFAULT_BUFFER_TOKENS",
    "DEFAULT_COMPACT_THRESHOLD",
    "DEFAULT_CONTEXT_WINDOW",
    "DEFAULT_HARD_BLOCK_THRESHOLD",
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "DEFAULT_NOTE_THRESHOLD",
    "DEFAULT_RESULT_OFFLOAD_THRESHOLD",
    "DEFAULT_SETTINGS_PATH",
    "DEFAULT_TOOL_DEFERRAL_THRESHOLD",
    "IMPORTED_LIMIT_PRECEDENCE",
    "MAX_SETTING_TOKENS",
    "SETTINGS_ENV_VAR",
    "TABLE_FIELDS",
    "TOP_LEVEL_KEYS",
    "FileChangeWatcher",
    "ModelSettings",
    "ResolvedModelSettings",
    "Settings",
    "SettingsWatcher",
    "Share",
    "Tokens",
    "dump_settings_toml",
    "infer_provider",
    "limit_for_model",
    "limit_source",
    "load_settings",
    "resolve_model_settings",
    "save_settings",
    "settings_path",
    "write_atomically",
]
