"""The settings file: where it is, reading and validating it, writing it back atomically as TOML
that reads back to equal settings.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import tomllib
from pathlib import Path

from engine.errors import ConfigError
from engine.policy_settings import policies_toml
from engine.settings.models import (
    DEFAULT_SETTINGS_PATH,
    SETTINGS_ENV_VAR,
    ModelSettings,
    Settings,
    field_error,
)
from engine.settings.toml_text import toml_key, toml_string, toml_value

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
