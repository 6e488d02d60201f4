"""Live reload: :class:`SettingsWatcher` keeps the last valid settings of one file and reloads
them when the file changes; :class:`FileChangeWatcher` only counts a file's changes, as they
happen (for a page that rereads the file itself).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path

import watchfiles

from engine.errors import ConfigError
from engine.settings.files import load_settings
from engine.settings.schema import Settings

logger = logging.getLogger("engine.settings")  # the name it logged under before the split


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


class FileChangeWatcher:
    """Counts changes of one file as the OS reports them (inotify through watchfiles).

    ``generation`` grows by one for each batch of changes (an edit, a replace by rename, a delete);
    a reader compares it with the value it last saw, an attribute read with no I/O, so it can look
    as often as it likes. ``wait(since, timeout)`` blocks until the generation passes ``since``.
    The parent directory is watched, so editors that replace the file are followed; a stat check on
    each idle ``poll_ms`` catches what the OS watch cannot see (a symlink's target elsewhere).
    """

    def __init__(self, path: str | os.PathLike[str], *, debounce_ms: int = 30, poll_ms: int = 500) -> None:
        self.path = Path(path).expanduser().absolute()
        self.generation = 0
        self._signature = _file_signature(self.path)
        self._changed = threading.Condition()
        self._stop_event = threading.Event()
        self._debounce_ms, self._poll_ms = debounce_ms, poll_ms
        self._thread = threading.Thread(target=self._run, name=f"file-watcher:{self.path.name}", daemon=True)
        self._thread.start()

    def wait(self, since: int, timeout: float) -> int:
        """The generation once it is past ``since``, or as it is after ``timeout`` seconds."""
        with self._changed:
            self._changed.wait_for(lambda: self.generation > since, timeout)
            return self.generation

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        self._thread.join(timeout)

    def __enter__(self) -> FileChangeWatcher:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _bump(self) -> None:
        with self._changed:
            self.generation += 1
            self._changed.notify_all()

    def _run(self) -> None:
        if not self.path.parent.is_dir():
            return  # nothing to watch: a page that rereads the file still sees it appear
        for changes in watchfiles.watch(
            self.path.parent,
            watch_filter=lambda _change, path: Path(path) == self.path,
            debounce=self._debounce_ms,
            step=10,
            rust_timeout=self._poll_ms,
            yield_on_timeout=True,
            stop_event=self._stop_event,
            raise_interrupt=False,
            recursive=False,
        ):
            signature = _file_signature(self.path)
            if changes or signature != self._signature:
                self._signature = signature
                self._bump()
