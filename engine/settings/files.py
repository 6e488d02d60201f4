"""The settings file: where it is, reading and validating it, writing it back atomically as TOML
that reads back to equal settings.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions
import tomlkit.items

from engine.errors import ConfigError
from engine.locations import settings_path
from engine.policy_settings import policies_toml
from engine.settings.schema import (
    TOP_LEVEL_KEYS,
    ModelSettings,
    Settings,
    field_error,
)
from engine.settings.toml_text import toml_key, toml_string, toml_value

# -- TOML file -------------------------------------------------------------------------------


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
        raise field_error("model_table", f"file not found: {table}", source)
    return settings


def dump_settings_toml(settings: Settings) -> str:
    """The settings as TOML text that :func:`load_settings` reads back to equal settings."""
    lines = ["# ctxdesk settings: context windows, budgets and thresholds per model"]
    if settings.model_table is not None:
        lines.append(f"model_table = {toml_string(settings.model_table)}")
    if settings.database is not None:
        lines.append(f"database = {toml_string(settings.database)}")
    if settings.policies.base.active:
        lines += ["", "[policies]", *policies_toml(settings.policies.base)]
    sections = [("defaults", settings.defaults)] if settings.defaults != ModelSettings() else []
    sections += [(f"providers.{toml_key(k)}", v) for k, v in settings.providers.items()]
    sections += [(f"models.{toml_key(k)}", v) for k, v in settings.models.items()]
    for header, level in sections:
        lines += ["", f"[{header}]"]
        for field, value in level.model_dump(exclude_none=True).items():
            lines.append(f"{field} = {toml_value(value)}")
    for kind, entries in (("providers", settings.policies.providers), ("models", settings.policies.models)):
        for name, policies in entries.items():
            if policies.active:
                lines += ["", f"[{kind}.{toml_key(name)}.policies]", *policies_toml(policies)]
    return "\n".join(lines) + "\n"


def save_settings(settings: Settings, path: str | os.PathLike[str]) -> Path:
    """Write settings as TOML atomically: a temp file in the same directory, then os.replace.

    An existing file is updated in place (:func:`updated_settings_text`): only the keys whose
    values changed are rewritten, comments, order, quoting and top-level keys kept. A file that is
    not valid TOML is never overwritten (:class:`ConfigError`, the file left as it was).
    """
    target = Path(path).expanduser()
    try:
        existing = target.read_bytes().decode("utf-8") if target.is_file() else None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"cannot save: cannot read the settings file ({exc}); left as it was", source=str(target)
        ) from exc
    text = (
        dump_settings_toml(settings)
        if existing is None
        else updated_settings_text(existing, settings, source=str(target))
    )
    try:
        write_atomically(target, text)
    except OSError as exc:
        raise ConfigError(f"cannot write settings file: {exc.strerror or exc}", source=str(target)) from exc
    return target


def write_atomically(target: Path, text: str) -> None:
    """``text`` into ``target`` whole or not at all: a temp file in the same directory, flushed to
    disk, then renamed over it (its permissions kept). Raises OSError; the temp file is removed."""
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


def updated_settings_text(existing: str, settings: Settings, *, source: str | None = None) -> str:
    """``existing`` settings TOML changed only where ``settings`` differ from it: a changed value
    replaced in place, a key ``settings`` no longer has removed, a new one added; comments,
    layout, quoting and the seeds' top-level keys (``compact_trigger``...) are kept. Raises
    :class:`ConfigError` when ``existing`` is not TOML or the result would not read back as
    ``settings`` (nothing is written then)."""
    try:
        document = tomlkit.parse(existing)
    except tomlkit.exceptions.ParseError as exc:
        raise ConfigError(
            f"cannot save: the settings file is not valid TOML ({exc}); left as it was", source=source
        ) from exc
    desired = tomllib.loads(dump_settings_toml(settings))
    defaults = desired.get("defaults", {})
    for key, field in TOP_LEVEL_KEYS.items():  # a value the user set at the top level stays there
        if key in document and field in defaults:
            desired[key] = defaults.pop(field)
    if "defaults" in desired and not defaults and "defaults" not in document:
        del desired["defaults"]
    _merge(document, desired)
    text = tomlkit.dumps(document)
    try:
        written = Settings.from_dict(tomllib.loads(text))
    except (tomllib.TOMLDecodeError, ConfigError) as exc:
        raise ConfigError(
            f"cannot save: the updated file would not read back ({exc}); left as it was", source=source
        ) from exc
    if written != settings.model_copy(update={"source": None}):
        raise ConfigError(
            "cannot save: the updated file would not read back as the settings saved; left as it was",
            source=source,
        )
    return text


def _merge(container: Any, desired: dict[str, Any]) -> None:
    """Make a tomlkit table hold ``desired``, touching only the keys whose values differ."""
    for key in [k for k in container if k not in desired]:
        del container[key]
    for key, value in desired.items():
        current = container.get(key)
        if current is None:
            container[key] = value
        elif isinstance(value, dict) and isinstance(current, dict):  # tomlkit tables are dicts
            _merge(current, value)
        elif _plain(current) != value:
            container[key] = _styled_like(current, value)


def _styled_like(current: Any, value: Any) -> Any:
    """``value`` written as the user wrote the value it replaces: digit groups kept (``120_000``)."""
    if isinstance(current, tomlkit.items.Integer) and "_" in current.as_string() and type(value) is int:
        return tomlkit.integer(f"{value:_}")
    return value


def _plain(value: Any) -> Any:
    """A tomlkit item as plain Python (to compare with the value a save wants)."""
    return value.unwrap() if hasattr(value, "unwrap") else value
