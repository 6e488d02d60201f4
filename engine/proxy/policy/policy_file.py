"""The settings file's policies for the proxy, re-read when the file changes, never on the request path.

:class:`PolicyFile` reads the file once when the proxy starts (an invalid file is a ConfigError
then) and afterwards from a watcher thread, which looks at the file every ``RELOAD_CHECK_S``: a
changed file is read once it stops changing (at most ``MAX_SETTINGS_BYTES``), parsed and validated there, and the new
settings and policies replace the old ones as one value. A file that cannot be read, is too large
or too deeply nested, or is invalid leaves the last good settings in force; ``error`` says why and
it is logged. The request path only reads the current value: it never waits for a parse.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.errors import ConfigError
from engine.policy_settings import PolicyConfig, split_policies
from engine.settings import Settings

logger = logging.getLogger(__name__)

#: How often (seconds) the watcher looks at the settings file; a change is read once two looks agree
#: (a file still being written is not read half-way).
RELOAD_CHECK_S = 0.25
#: How long (seconds) an emptied settings file stays empty before it is read: an editor saving in
#: place truncates the file before it writes it, and a process paused in between left the proxy
#: without the user's settings and policies (its guard off) until the next look.
EMPTY_SETTLED_S = 2.0
#: Largest settings file read (a settings file is a few KB; a bigger one is refused, the last good kept).
MAX_SETTINGS_BYTES = 1024 * 1024


def policy_config(data: Mapping[str, Any], *, source: str | None = None) -> PolicyConfig:
    """The policies of parsed settings TOML (``policies`` tables at the top, per provider, per model)."""
    return split_policies(data, source=source)[1]


def load_policy_file(path: str | os.PathLike[str]) -> tuple[Settings, PolicyConfig]:
    """Settings and policies of one file (ConfigError naming the file and what is wrong when it cannot
    be used: unreadable, over ``MAX_SETTINGS_BYTES``, nested too deeply to parse, or invalid)."""
    source = str(path)
    try:
        with open(path, "rb") as file:
            raw = file.read(MAX_SETTINGS_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read settings: {exc}", source=source) from exc
    if len(raw) > MAX_SETTINGS_BYTES:
        raise ConfigError(f"settings file over {MAX_SETTINGS_BYTES:,} bytes: not read", source=source)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read settings: {exc}", source=source) from exc
    except RecursionError as exc:  # tomllib recurses once per level of nesting
        raise ConfigError("cannot read settings: nested too deeply", source=source) from exc
    settings = Settings.from_dict(data, source=source)
    return settings, settings.policies


def without_policies(data: Mapping[str, Any]) -> dict[str, Any]:
    """Settings TOML without its ``policies`` tables."""
    return split_policies(data)[0]


@dataclass(frozen=True)
class Loaded:
    """Settings and the policies read with them (swapped together, never one without the other)."""

    settings: Settings | None
    config: PolicyConfig


class PolicyFile:
    """The settings file's policies, re-read by a watcher thread when the file changes."""

    def __init__(self, path: str | os.PathLike[str] | None, settings: Settings | None = None) -> None:
        self.path = Path(path) if path else None
        self.error: str | None = None
        self._loaded = Loaded(settings, PolicyConfig())
        self._signature: tuple[int, int] | None = None
        self._seen: tuple[int, int] | None = None  # the signature at the watcher's previous look
        self._empty_since: float | None = None  # when the file was first seen emptied
        self._stop = threading.Event()
        self._watcher: threading.Thread | None = None
        if self.path is not None:
            self._loaded = Loaded(*load_policy_file(self.path))
            self._signature = self._seen = self._stat()
            self._watcher = threading.Thread(target=self._watch, name="ctxdesk-settings-watcher", daemon=True)
            self._watcher.start()

    @property
    def loaded(self) -> Loaded:
        """The settings and policies in force."""
        return self._loaded

    @property
    def settings(self) -> Settings | None:
        return self._loaded.settings

    @property
    def config(self) -> PolicyConfig:
        return self._loaded.config

    def current(self) -> PolicyConfig:
        """The policies in force (no I/O: the watcher keeps them current)."""
        return self._loaded.config

    def close(self) -> None:
        """Stop watching the file."""
        self._stop.set()
        if self._watcher is not None:
            self._watcher.join(5)

    def reload(self) -> bool:
        """Read the file again if it changed since it was last read and has stayed the same since the
        previous look; whether new settings are in force."""
        signature = self._stat()
        settled, self._seen = signature == self._seen, signature
        if signature == self._signature or self.path is None or not settled or self._being_written(signature):
            return False
        self._signature = signature
        try:
            self._loaded = Loaded(*load_policy_file(self.path))
        except ConfigError as exc:  # keep the last valid settings and policies
            self.error = str(exc)
            logger.warning("ctxdesk proxy: %s; the last valid settings stay in force", exc)
            return False
        self.error = None
        return True

    def _being_written(self, signature: tuple[int, int] | None) -> bool:
        """An emptied file (truncated, its new text not yet written) until it stays empty EMPTY_SETTLED_S."""
        if signature is None or signature[1] > 0:
            self._empty_since = None
            return False
        now = time.monotonic()
        if self._empty_since is None:
            self._empty_since = now
        return now - self._empty_since < EMPTY_SETTLED_S

    def _watch(self) -> None:
        while not self._stop.wait(RELOAD_CHECK_S):
            self.reload()

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = self.path.stat() if self.path else None
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size) if st else None
