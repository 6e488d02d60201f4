"""Following agents' session files: re-import what they append, while something reads the database.

``ImportFollower(db, agent, settings=)`` is a background thread that, every ``interval`` seconds, imports
the agent's session files into ``db``: unchanged files are skipped from their size and
modification time alone, a grown file adds only its new messages, a new file is imported
whole. Failures of one file are kept in ``errors`` (the last per file) and never stop it.
"""

from __future__ import annotations

import threading
from pathlib import Path

from engine.errors import ContextDeskError
from engine.importers.batch import import_files
from engine.importers.detect import LineCache
from engine.importers.locations import agent_files
from engine.settings import Settings
from engine.store import SessionStore

FOLLOW_INTERVAL_S = 2.0


class ImportFollower(threading.Thread):
    def __init__(
        self, db: Path, agent: str, *, interval: float = FOLLOW_INTERVAL_S, settings: Settings | None = None
    ) -> None:
        super().__init__(name=f"ctxdesk-follow-{agent}", daemon=True)
        self.db = Path(db)
        self.agent = agent
        self.settings = settings  # the user's windows apply to followed sessions too
        self.interval = interval
        self.errors: dict[str, str] = {}
        self.passes = 0
        self.added_messages = 0
        self._stop_event = threading.Event()
        self.cache = LineCache()  # files being written: later passes decode only appended lines

    def import_once(self) -> int:
        """One pass; returns the messages it added."""
        added = 0
        files = agent_files(self.agent)
        with SessionStore(self.db) as store:
            results = import_files(
                files,
                store,
                on_error=lambda path, exc: self.errors.__setitem__(str(path), str(exc)),
                live=True,
                cache=self.cache,
                settings=self.settings,
            )
        for result in results:
            self.errors.pop(str(Path(result.path)), None)
            added += sum(s.added_messages for s in result.sessions)
        self.passes += 1
        self.added_messages += added
        return added

    def run(self) -> None:
        while not self._stop_event.wait(self.interval):
            try:
                self.import_once()
            except ContextDeskError as exc:  # the database itself: keep trying, say why
                self.errors[str(self.db)] = str(exc)

    def stop(self, timeout: float = 5.0) -> None:
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
