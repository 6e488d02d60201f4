"""Context-window settings: typed levels, one TOML file, per-model resolution that names its sources.

Settings have three levels (``defaults``, ``providers.<id>``, ``models."<name>"``), each a
:class:`ModelSettings` whose fields are all optional. :func:`resolve_model_settings` takes each
field from the first level that sets it: model -> provider -> model table -> defaults -> built-in.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import os
import re
import tempfile
import threading
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

import watchfiles
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import PydanticCustomError

from engine.errors import ConfigError, ValidationError
from engine.model_table import ModelInfo, ModelTable, load_model_table, match_model_name
from engine.policy_settings import PolicyConfig, policies_toml, split_policies
from engine.tokenizer_names import tokenizer_id_for_model, tokenizer_ids

logger = logging.getLogger(__name__)

DEFAULT_CONTEXT_WINDOW = 131_072
DEFAULT_BUFFER_TOKENS = 256
DEFAULT_MAX_OUTPUT_TOKENS = 4096
DEFAULT_NOTE_THRESHOLD = 0.80
DEFAULT_COMPACT_THRESHOLD = 0.95
DEFAULT_HARD_BLOCK_THRESHOLD = 0.98
DEFAULT_RESULT_OFFLOAD_THRESHOLD = 4096
DEFAULT_TOOL_DEFERRAL_THRESHOLD = 0.10

SETTINGS_ENV_VAR = "CTXDESK_SETTINGS"
DEFAULT_SETTINGS_PATH = Path("~/.config/ctxdesk/settings.toml")

#: Top-level keys of the seeds' settings files, read as fields of [defaults].
TOP_LEVEL_KEYS = {
    "context_budget": "context_budget",
    "max_output_tokens": "max_output_tokens",
    "compact_trigger": "compact_threshold",
    "hard_block": "hard_block_threshold",
    "result_offload_threshold": "result_offload_threshold",
    "tool_deferral_threshold": "tool_deferral_threshold",
}
#: Fields a model table may supply, between the provider and defaults levels.
TABLE_FIELDS = ("context_window", "max_output_tokens")
_THRESHOLD_ORDER = ("note_threshold", "compact_threshold", "hard_block_threshold")


#: Largest token count a setting may hold: above any real model's window (10M today), far below
#: SQLite's INTEGER range, so a typo like 99999999999999999999 is rejected when the file is read.
MAX_SETTING_TOKENS = 1_000_000_000
#: A positive whole number (tokens or bytes), and a share of the window in (0, 1].
Tokens = Annotated[int, Field(gt=0, le=MAX_SETTING_TOKENS)]
Share = Annotated[float, Field(gt=0, le=1)]


class ModelSettings(BaseModel):
    """One level of settings (defaults, a provider or a model); None means "not set here"."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    context_window: Tokens | None = Field(
        None, description=f"Total tokens the model attends to. Built-in: {DEFAULT_CONTEXT_WINDOW:,}."
    )
    buffer_tokens: Annotated[int, Field(ge=0, le=MAX_SETTING_TOKENS)] | None = Field(
        None, description=f"Safety margin kept free in the window. Built-in: {DEFAULT_BUFFER_TOKENS}."
    )
    max_output_tokens: Tokens | None = Field(
        None, description=f"Tokens reserved for the reply. Built-in: {DEFAULT_MAX_OUTPUT_TOKENS:,}."
    )
    tokenizer: str | None = Field(
        None, description="Tokenizer id from engine.tokens.tokenizer_ids(); unset picks one by model name."
    )
    note_threshold: Share | None = Field(
        None, description=f"Share of the window that adds a note. Built-in: {DEFAULT_NOTE_THRESHOLD}."
    )
    compact_threshold: Share | None = Field(
        None,
        description=f"Share of the window that triggers compaction. Built-in: {DEFAULT_COMPACT_THRESHOLD}.",
    )
    hard_block_threshold: Share | None = Field(
        None,
        description=f"Share of the window that blocks requests. Built-in: {DEFAULT_HARD_BLOCK_THRESHOLD}.",
    )
    tool_response_max_bytes: Tokens | None = Field(
        None, description="Largest tool response kept inline, in bytes. Built-in: no limit."
    )
    result_offload_threshold: Tokens | None = Field(
        None,
        description=f"Tool results over this many bytes are offloaded. Built-in: {DEFAULT_RESULT_OFFLOAD_THRESHOLD}.",
    )
    tool_deferral_threshold: Share | None = Field(
        None,
        description="Share of the effective window tool definitions may take before they are deferred. "
        f"Built-in: {DEFAULT_TOOL_DEFERRAL_THRESHOLD}.",
    )
    context_budget: Tokens | None = Field(
        None, description="Explicit cap in tokens below the effective window. Built-in: none."
    )

    @field_validator("tokenizer")
    @classmethod
    def _known_tokenizer(cls, value: str | None) -> str | None:
        if value is not None and value not in tokenizer_ids():
            raise PydanticCustomError(
                "unknown_tokenizer",
                "unknown tokenizer '{value}', expected one of {known}",
                {"value": value, "known": ", ".join(tokenizer_ids())},
            )
        return value

    @model_validator(mode="after")
    def _thresholds_in_order(self) -> ModelSettings:
        set_here = [
            (name, getattr(self, name)) for name in _THRESHOLD_ORDER if getattr(self, name) is not None
        ]
        for (low_name, low), (high_name, high) in itertools.pairwise(set_here):
            if low > high:
                raise PydanticCustomError(
                    "threshold_order",
                    "must be <= {other} ({other_value}), got {value}",
                    {"field": low_name, "other": high_name, "other_value": high, "value": low},
                )
        return self


BUILTIN_SETTINGS = ModelSettings(
    context_window=DEFAULT_CONTEXT_WINDOW,
    buffer_tokens=DEFAULT_BUFFER_TOKENS,
    max_output_tokens=DEFAULT_MAX_OUTPUT_TOKENS,
    note_threshold=DEFAULT_NOTE_THRESHOLD,
    compact_threshold=DEFAULT_COMPACT_THRESHOLD,
    hard_block_threshold=DEFAULT_HARD_BLOCK_THRESHOLD,
    result_offload_threshold=DEFAULT_RESULT_OFFLOAD_THRESHOLD,
    tool_deferral_threshold=DEFAULT_TOOL_DEFERRAL_THRESHOLD,
)


class Settings(BaseModel):
    """Everything in one settings file. Build from TOML data with :meth:`from_dict`."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    defaults: ModelSettings = Field(default_factory=ModelSettings, description="Settings for every model.")
    providers: dict[str, ModelSettings] = Field(
        default_factory=dict, description="Settings per LiteLLM provider id (anthropic, openai, gemini, ...)."
    )
    models: dict[str, ModelSettings] = Field(
        default_factory=dict, description="Settings per model name (matched like model table names)."
    )
    model_table: str | None = Field(
        None,
        description="A LiteLLM model_prices_and_context_window.json merged over the bundled table; "
        "relative paths are relative to the settings file.",
    )
    database: str | None = Field(
        None,
        description="The session database commands use when none is named: a SQLite file or a "
        "postgresql:// URL (a team's shared store); $CTXDESK_DB overrides it.",
    )
    policies: PolicyConfig = Field(
        default_factory=PolicyConfig,
        description='What the proxy may change in requests ([policies], and [providers|models."NAME".policies]).',
    )
    source: str | None = Field(None, exclude=True, description="The file these settings were read from.")

    @field_validator("providers", "models")
    @classmethod
    def _unique_ignoring_case(cls, value: dict[str, ModelSettings]) -> dict[str, ModelSettings]:
        seen: dict[str, str] = {}
        for key in value:
            if key.lower() in seen:
                raise PydanticCustomError(
                    "duplicate_key", "'{a}' and '{b}' differ only in case", {"a": seen[key.lower()], "b": key}
                )
            seen[key.lower()] = key
        return value

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, source: str | None = None) -> Settings:
        """Validate parsed TOML; top-level seed keys (``compact_trigger``, ...) go to defaults.

        Raises :class:`ConfigError` naming the field (``models."gpt-4.1".context_window``) and file.
        """
        data = dict(data)
        if "source" in data:
            raise _field_error("source", "unknown setting (set by ctxdesk, not in the file)", source)
        data, policies = split_policies(data, source=source)
        data["policies"] = policies
        renames: dict[tuple[str, ...], str] = {}
        defaults = data.get("defaults", {})
        if isinstance(defaults, dict):
            defaults = dict(defaults)
            for key, field in TOP_LEVEL_KEYS.items():
                if key not in data:
                    continue
                if field in defaults:
                    raise _field_error(key, f"also set as defaults.{field}; set it once", source)
                defaults[field] = data.pop(key)
                renames[("defaults", field)] = key
            data["defaults"] = defaults
        try:
            return cls.model_validate({**data, "source": source})
        except PydanticValidationError as exc:
            raise _from_pydantic(exc, source, renames) from exc

    def model_table_path(self) -> Path | None:
        """``model_table`` as a path, relative ones taken from the settings file's directory."""
        if self.model_table is None:
            return None
        path = Path(self.model_table).expanduser()
        if not path.is_absolute() and self.source:
            path = Path(self.source).parent / path
        return path


class ResolvedModelSettings(BaseModel):
    """Every setting of one model after resolution, with ``sources[field]`` saying where it came from."""

    model_config = ConfigDict(frozen=True)

    model: str
    provider: str | None
    context_window: int
    buffer_tokens: int
    max_output_tokens: int
    tokenizer: str
    note_threshold: float
    compact_threshold: float
    hard_block_threshold: float
    tool_response_max_bytes: int | None
    result_offload_threshold: int
    tool_deferral_threshold: float
    context_budget: int | None
    model_info: ModelInfo | None = Field(description="The model table entry used, with prices, if any.")
    sources: dict[str, str] = Field(
        description="field -> 'model:NAME (file)', 'provider:ID', 'table:NAME (src)', ..."
    )

    @property
    def effective_window(self) -> int:
        """Tokens the prompt may use: context_window - max_output_tokens - buffer_tokens."""
        return self.context_window - self.max_output_tokens - self.buffer_tokens

    @property
    def budget_tokens(self) -> int:
        """The effective window, capped by context_budget when one is set; thresholds apply to it."""
        if self.context_budget is None:
            return self.effective_window
        return min(self.effective_window, self.context_budget)

    @property
    def note_tokens(self) -> int:
        return math.floor(self.budget_tokens * self.note_threshold)

    @property
    def compact_tokens(self) -> int:
        return math.floor(self.budget_tokens * self.compact_threshold)

    @property
    def hard_block_tokens(self) -> int:
        return math.floor(self.budget_tokens * self.hard_block_threshold)

    @property
    def tool_deferral_tokens(self) -> int:
        return math.floor(self.budget_tokens * self.tool_deferral_threshold)


_PROVIDER_BY_PREFIX = (
    ("claude", "anthropic"),
    ("gpt-", "openai"),
    ("chatgpt", "openai"),
    ("o1", "openai"),
    ("o3", "openai"),
    ("o4", "openai"),
    ("gemini", "gemini"),
    ("gemma", "gemini"),
    ("mistral", "mistral"),
    ("ministral", "mistral"),
    ("codestral", "mistral"),
    ("devstral", "mistral"),
    ("magistral", "mistral"),
    ("pixtral", "mistral"),
    ("deepseek", "deepseek"),
    ("llama", "meta_llama"),
    ("qwen", "dashscope"),
    ("qwq", "dashscope"),
)


def infer_provider(model: str, info: ModelInfo | None = None) -> str | None:
    """The provider prefix of ``model`` if it has one, else the table's, else one guessed by name."""
    if "/" in model:
        return model.split("/", 1)[0].strip().lower()
    if info is not None and info.provider:
        return info.provider
    name = model.strip().lower()
    return next((provider for prefix, provider in _PROVIDER_BY_PREFIX if name.startswith(prefix)), None)


def resolve_model_settings(
    model: str,
    provider: str | None = None,
    settings: Settings | None = None,
    table: ModelTable | None = None,
) -> ResolvedModelSettings:
    """Resolve every field for ``model``: user model -> user provider -> model table -> defaults -> built-in.

    ``settings=None`` means no user settings (use :func:`load_settings` to read the file);
    ``table=None`` means the bundled table, with ``settings.model_table`` merged over it.
    Raises :class:`ConfigError` when the result is inconsistent (reply + buffer fill the window,
    thresholds out of order), naming the fields and where each came from.
    """
    if not isinstance(model, str) or not model.strip():
        raise ValidationError(f"model must be a non-empty string, got {model!r}", field="model", value=model)
    settings = settings if settings is not None else Settings()
    table = table if table is not None else load_model_table(settings.model_table_path())
    info = table.lookup(model)
    provider = provider.strip().lower() if provider else infer_provider(model, info)
    in_file = f" ({Path(settings.source).name})" if settings.source else ""

    levels: list[tuple[str, str, ModelSettings]] = []
    model_keys = {key.lower(): key for key in settings.models}
    matched = match_model_name(model, model_keys, allow_prefix=False)
    if matched is not None:
        key = model_keys[matched]
        levels.append((f"model:{key}{in_file}", f"models.{_toml_key(key)}", settings.models[key]))
    provider_keys = {key.lower(): key for key in settings.providers}
    if provider in provider_keys:
        key = provider_keys[provider]
        levels.append((f"provider:{key}{in_file}", f"providers.{_toml_key(key)}", settings.providers[key]))

    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    paths: dict[str, str] = {}
    for field in ModelSettings.model_fields:
        for label, path, level in levels:
            if getattr(level, field) is not None:
                values[field], sources[field], paths[field] = getattr(level, field), label, f"{path}.{field}"
                break
        else:
            table_value = getattr(info, field, None) if field in TABLE_FIELDS else None
            if info is not None and table_value is not None:
                values[field], sources[field] = table_value, f"table:{info.name} ({info.source})"
                paths[field] = f"table:{info.name}.{field}"
            elif getattr(settings.defaults, field) is not None:
                values[field], sources[field] = getattr(settings.defaults, field), f"defaults{in_file}"
                paths[field] = f"defaults.{field}"
            else:
                values[field], sources[field], paths[field] = (
                    getattr(BUILTIN_SETTINGS, field),
                    "builtin",
                    field,
                )
    if values["tokenizer"] is None:
        values["tokenizer"] = tokenizer_id_for_model(model)

    _check_resolved(model, values, sources, paths, settings.source)
    return ResolvedModelSettings(model=model, provider=provider, model_info=info, sources=sources, **values)


def _check_resolved(
    model: str, values: dict[str, Any], sources: dict[str, str], paths: dict[str, str], source: str | None
) -> None:
    reserved = values["max_output_tokens"] + values["buffer_tokens"]
    if reserved >= values["context_window"]:
        names = ("max_output_tokens", "buffer_tokens", "context_window")
        detail = ", ".join(f"{n}={values[n]:,} from {sources[n]}" for n in names)
        raise _field_error(
            paths["max_output_tokens"],
            f"max_output_tokens + buffer_tokens must be < context_window for {model!r} ({detail})",
            source,
        )
    for low, high in itertools.pairwise(_THRESHOLD_ORDER):
        if values[low] > values[high]:
            raise _field_error(
                paths[low],
                f"must be <= {high} for {model!r}, got {values[low]} from {sources[low]} "
                f"> {values[high]} from {sources[high]}",
                source,
            )


# -- TOML file -------------------------------------------------------------------------------


def settings_path(path: str | os.PathLike[str] | None = None) -> Path | None:
    """The settings file to use: ``path``, else $CTXDESK_SETTINGS, else the default file if it exists."""
    if path is not None:
        return Path(path).expanduser()
    from_env = os.environ.get(SETTINGS_ENV_VAR)
    if from_env:
        return Path(from_env).expanduser()
    default = DEFAULT_SETTINGS_PATH.expanduser()
    return default if default.is_file() else None


def load_settings(path: str | os.PathLike[str] | None = None) -> Settings:
    """Read and validate the settings file (see :func:`settings_path`); no file gives empty Settings."""
    resolved = settings_path(path)
    if resolved is None:
        return Settings()
    source = str(resolved)
    try:
        data = tomllib.loads(resolved.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise ConfigError("settings file not found", source=source) from None
    except OSError as exc:
        raise ConfigError(f"cannot read settings file: {exc.strerror or exc}", source=source) from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"not UTF-8 text at byte {exc.start}", source=source) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"invalid TOML: {exc}", source=source) from exc
    except RecursionError:
        raise ConfigError("invalid TOML: nested too deeply", source=source) from None
    try:
        settings = Settings.from_dict(data, source=source)
    except RecursionError:
        raise ConfigError("settings nested too deeply", source=source) from None
    table = settings.model_table_path()
    if table is not None and not table.is_file():
        raise _field_error("model_table", f"file not found: {table}", source)
    return settings


def dump_settings_toml(settings: Settings) -> str:
    """The settings as TOML text that :func:`load_settings` reads back to equal settings."""
    lines = ["# ctxdesk settings: context windows, budgets and thresholds per model"]
    if settings.model_table is not None:
        lines.append(f"model_table = {_toml_string(settings.model_table)}")
    if settings.database is not None:
        lines.append(f"database = {_toml_string(settings.database)}")
    if settings.policies.base.active:
        lines += ["", "[policies]", *policies_toml(settings.policies.base)]
    sections = [("defaults", settings.defaults)] if settings.defaults != ModelSettings() else []
    sections += [(f"providers.{_toml_key(k)}", v) for k, v in settings.providers.items()]
    sections += [(f"models.{_toml_key(k)}", v) for k, v in settings.models.items()]
    for header, level in sections:
        lines += ["", f"[{header}]"]
        for field, value in level.model_dump(exclude_none=True).items():
            lines.append(f"{field} = {_toml_value(value)}")
    for kind, entries in (("providers", settings.policies.providers), ("models", settings.policies.models)):
        for name, policies in entries.items():
            if policies.active:
                lines += ["", f"[{kind}.{_toml_key(name)}.policies]", *policies_toml(policies)]
    return "\n".join(lines) + "\n"


def save_settings(settings: Settings, path: str | os.PathLike[str]) -> Path:
    """Write settings as TOML atomically: a temp file in the same directory, then os.replace."""
    target = Path(path).expanduser()
    text = dump_settings_toml(settings)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        mode = target.stat().st_mode & 0o777 if target.exists() else 0o644
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                handle.write(text)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise ConfigError(f"cannot write settings file: {exc.strerror or exc}", source=str(target)) from exc
    return target


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else _toml_string(key)


def _toml_string(text: str) -> str:
    escaped = []
    for char in text:
        if char in '"\\':
            escaped.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            escaped.append(f"\\u{ord(char):04x}")
        else:
            escaped.append(char)
    return '"' + "".join(escaped) + '"'


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"no TOML form for settings value {value!r}")
    return repr(value)


# -- errors ----------------------------------------------------------------------------------


def _field_error(
    field: str, problem: str, source: str | None, *, more: Sequence[tuple[str, str]] = ()
) -> ConfigError:
    """ConfigError shaped ``FIELD: PROBLEM[; FIELD2: PROBLEM2] (in FILE)``, ``.field`` the first field."""
    error = ConfigError("; ".join(f"{f}: {p}" for f, p in [(field, problem), *more]), source=source)
    error.field = field
    return error


def _from_pydantic(
    exc: PydanticValidationError, source: str | None, renames: dict[tuple[str, ...], str]
) -> ConfigError:
    problems = []
    for err in exc.errors(include_url=False):
        loc = tuple(str(part) for part in err["loc"])
        ctx = err.get("ctx") or {}
        if "field" in ctx:
            loc += (ctx["field"],)
        if loc in renames:
            field = renames[loc]
        else:
            field = ".".join(part if i == 0 else _toml_key(part) for i, part in enumerate(loc))
        problems.append((field, _describe(err, top_level=len(loc) == 1)))
    return _field_error(*problems[0], source, more=problems[1:])


def _describe(err: Mapping[str, Any], *, top_level: bool) -> str:
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f"got {value!r}" if not isinstance(value, dict) else "got a table"
    bounds = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}
    if kind in bounds:
        limit = next(iter(v for k, v in ctx.items() if k in ("gt", "ge", "lt", "le")))
        return f"must be {bounds[kind]} {limit}, {got}"
    if kind in ("int_type", "int_parsing"):
        return f"must be an integer, {got}"
    if kind in ("float_type", "float_parsing"):
        return f"must be a number, {got}"
    if kind == "string_type":
        return f"must be a string, {got}"
    if kind in ("dict_type", "model_type"):
        return f"must be a table, {got}"
    if kind == "extra_forbidden":
        known = (
            [*Settings.model_fields.keys() - {"source"}, *TOP_LEVEL_KEYS]
            if top_level
            else ModelSettings.model_fields
        )
        return f"unknown setting (known: {', '.join(sorted(known))})"
    return err["msg"]


# -- live reload -----------------------------------------------------------------------------


def _file_signature(path: Path) -> tuple[int, int, int] | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_mtime_ns, stat.st_size, stat.st_ino)


class SettingsWatcher:
    """Holds the last valid :class:`Settings` of one file and reloads it when the file changes.

    A daemon thread watches the file's directory with watchfiles (editors and
    :func:`save_settings` replace the file, so watching the file itself would lose it). An
    invalid edit is rejected: the error is kept in ``last_error`` and logged, and ``current``
    stays the last valid settings. The initial load raises :class:`ConfigError` if invalid.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        on_change: Callable[[Settings], None] | None = None,
        *,
        watch: bool = True,
        debounce_ms: int = 200,
        poll_ms: int = 1000,
    ) -> None:
        self.path = Path(path).expanduser().absolute()
        self.last_error: ConfigError | None = None
        self._on_change = on_change
        self._debounce_ms = debounce_ms
        self._poll_ms = poll_ms
        self._lock = threading.Lock()
        self._stop_event = threading.Event()
        self._current = load_settings(self.path)
        self._signature = _file_signature(self.path)
        self._thread: threading.Thread | None = None
        if watch:
            self._thread = threading.Thread(
                target=self._run, name=f"settings-watcher:{self.path.name}", daemon=True
            )
            self._thread.start()

    @property
    def current(self) -> Settings:
        return self._current

    def reload_now(self) -> Settings:
        """Reload synchronously; returns the settings in force afterwards (old ones if the file is invalid)."""
        with self._lock:
            self._signature = _file_signature(self.path)
            try:
                new = load_settings(self.path)
            except ConfigError as exc:
                self.last_error = exc
                logger.warning("settings change rejected, previous settings stay in force: %s", exc)
                return self._current
            self.last_error = None
            changed, self._current = new != self._current, new
        if changed and self._on_change is not None:
            self._on_change(new)
        return new

    def stop(self, timeout: float = 5.0) -> None:
        """Stop watching and wait for the thread to end."""
        self._stop_event.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def __enter__(self) -> SettingsWatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _is_our_file(self, change: watchfiles.Change, path: str) -> bool:
        return Path(path) == self.path

    def _run(self) -> None:
        # yield_on_timeout lets a stat check catch changes made before the OS watch was set up,
        # or through a symlink whose target lies outside the watched directory.
        for changes in watchfiles.watch(
            self.path.parent,
            watch_filter=self._is_our_file,
            debounce=self._debounce_ms,
            rust_timeout=self._poll_ms,
            yield_on_timeout=True,
            stop_event=self._stop_event,
            raise_interrupt=False,
            recursive=False,
        ):
            if not changes and _file_signature(self.path) == self._signature:
                continue
            try:
                self.reload_now()
            except Exception:  # the thread's boundary: an on_change failure must not end watching
                logger.exception("settings watcher: on_change callback failed for %s", self.path)
