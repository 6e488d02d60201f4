"""The settings file's policies for the proxy, re-read when the file changes.

``PolicyFile`` checks the file at most every ``RELOAD_CHECK_S`` seconds from the request path;
when an edit is invalid the last valid policies stay in force (``error`` says why).
"""

from __future__ import annotations

import os
import threading
import time
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.policy_settings import PolicyConfig, split_policies
from engine.settings import Settings

#: How often (seconds) the request path may stat the settings file for changes.
RELOAD_CHECK_S = 0.5


def policy_config(data: Mapping[str, Any], *, source: str | None = None) -> PolicyConfig:
    """The policies of parsed settings TOML (``policies`` tables at the top, per provider, per model)."""
    return split_policies(data, source=source)[1]


def load_policy_file(path: str | os.PathLike[str]) -> tuple[Settings, PolicyConfig]:
    """Settings and policies of one file (ConfigError naming the field when invalid)."""
    source = str(path)
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read settings: {exc}", source=source) from exc
    settings = Settings.from_dict(data, source=source)
    return settings, settings.policies


def without_policies(data: Mapping[str, Any]) -> dict[str, Any]:
    """Settings TOML without its ``policies`` tables."""
    return split_policies(data)[0]


class PolicyFile:
    """The settings file's policies, re-read when the file changes (checked at most every 0.5 s)."""

    def __init__(self, path: str | os.PathLike[str] | None, settings: Settings | None = None) -> None:
        self.path = Path(path) if path else None
        self.settings = settings
        self.config = PolicyConfig()
        self.error: str | None = None
        self._signature: tuple[int, int] | None = None
        self._checked = 0.0
        self._lock = threading.Lock()
        if self.path is not None:
            self.settings, self.config = load_policy_file(self.path)
            self._signature = self._stat()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat() if self.path else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st else None

    def current(self) -> PolicyConfig:
        if self.path is None:
            return self.config
        now = time.monotonic()
        if now - self._checked < RELOAD_CHECK_S:
            return self.config
        with self._lock:
            self._checked = now
            signature = self._stat()
            if signature != self._signature:
                self._signature = signature
                try:
                    self.settings, self.config = load_policy_file(self.path)
                    self.error = None
                except ConfigError as exc:  # keep the last valid policies
                    self.error = str(exc)
        return self.config
