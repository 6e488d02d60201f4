"""Recording proxied calls off the request path: a queue and one writer thread.

The relay hands each finished exchange (request bytes, response chunks, timing) to
:meth:`Recorder.submit`, which never blocks and never raises. The writer thread hands it to
:class:`engine.proxy.recording.writer.ExchangeWriter`, which parses it, finds its session, and writes it
in one transaction. A failed write is retried; when it still fails, a ``degraded`` event says
so (the agent's request has long been answered). No API key or Authorization header is kept.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from engine.errors import ContextDeskError
from engine.proxy.recording.exchange import Exchange
from engine.proxy.recording.sessions import SessionResolver
from engine.proxy.recording.writer import ExchangeWriter, QuietTime
from engine.settings import Settings
from engine.store.factory import is_database_url, open_store

logger = logging.getLogger(__name__)

WRITE_ATTEMPTS = 4
RETRY_DELAYS_S = (0.05, 0.25, 1.0)
#: Exchanges waiting for the writer before new ones are dropped (and counted as degraded).
QUEUE_LIMIT = 10_000
#: Told the (session id, event id) of every event one exchange's write stored, once it is committed.
OnRecorded = Callable[[Sequence[tuple[str, int]]], None]


class Recorder:
    """Writes exchanges to the session database from one background thread."""

    def __init__(
        self, db_path: str | Path, *, settings: Settings | Callable[[], Settings | None] | None = None,
        on_recorded: OnRecorded | None = None,
    ) -> None:  # fmt: skip
        """``db_path``: a SQLite file, or a ``postgresql://`` URL (any SessionStoreBackend);
        ``settings``: model windows, or where to read the ones in force (a settings file re-read);
        ``on_recorded``: told what each write stored (the live OTLP export), from the writer thread."""
        # a file, or a team's postgresql:// URL (engine.store.factory.open_store picks the backend)
        self.db_path: str | Path = str(db_path) if is_database_url(str(db_path)) else Path(db_path)
        self.settings = settings
        self.resolver = SessionResolver()
        self.recorded = 0
        self.failed = 0
        self.dropped = 0
        self._queue: queue.Queue[Exchange | None] = queue.Queue()
        self._in_flight = 0
        self._in_flight_changed = threading.Condition()
        self.quiet = QuietTime()  # requests not yet answered by the upstream: the writer waits for them
        self._store = open_store(self.db_path)
        self.on_recorded = on_recorded
        self._written: list[tuple[str, int]] = []  # what the write under way stored
        writer_store = self._store if on_recorded is None else _NotingStore(self._store, self._written)
        self.writer = ExchangeWriter(writer_store, self.resolver, settings, pause=self.quiet.wait)
        self._thread = threading.Thread(target=self._run, name="ctxdesk-proxy-recorder", daemon=True)
        self._thread.start()

    # -- the request side ------------------------------------------------------------------
    def begin(self) -> None:
        """A request arrived: :meth:`flush` waits for its exchange to be submitted too."""
        with self._in_flight_changed:
            self._in_flight += 1

    def hold(self) -> Hold:
        """A request is on its way to the upstream: the writer keeps off the GIL until the returned
        hold is released (once the answer's headers are on their way to the agent)."""
        self.quiet.hold()
        return Hold(self)

    def release(self) -> None:
        """The upstream answered (or failed): the writer may parse and record again."""
        self.quiet.release()

    def submit(self, exchange: Exchange) -> None:
        """Queue an exchange for writing (once: a second submit of it is ignored); never blocks, never raises."""
        if exchange.submitted:
            return
        exchange.submitted = True
        with self._in_flight_changed:
            self._in_flight = max(0, self._in_flight - 1)
            self._in_flight_changed.notify_all()
        if self._queue.qsize() >= QUEUE_LIMIT:
            self.dropped += 1
            return
        self._queue.put_nowait(exchange)

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every request begun so far is answered and written (tests, shutdown)."""
        deadline = time.monotonic() + timeout
        with self._in_flight_changed:
            if not self._in_flight_changed.wait_for(lambda: self._in_flight == 0, timeout):
                return False
        done = threading.Event()
        self._queue.put_nowait(_Marker(done))  # type: ignore[arg-type]
        return done.wait(max(0.0, deadline - time.monotonic()))

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put_nowait(None)
        self._thread.join(timeout)
        self._store.close()

    # -- the writer thread -----------------------------------------------------------------
    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            if isinstance(item, _Marker):
                item.done.set()
                continue
            self.quiet.wait()  # and between a write's steps (the writer's pause)
            self._write_with_retries(item)

    def _write_with_retries(self, exchange: Exchange) -> None:
        error: Exception | None = None
        for attempt in range(WRITE_ATTEMPTS):
            self._written.clear()  # a failed attempt's transaction was rolled back
            try:
                self.write(exchange)
            except (ContextDeskError, OSError, ValueError, KeyError, TypeError) as exc:
                error = exc
                if attempt < len(RETRY_DELAYS_S):
                    time.sleep(RETRY_DELAYS_S[attempt])
                continue
            self.recorded += 1
            if self.on_recorded is not None and self._written:
                self.on_recorded(list(self._written))
            return
        self.failed += 1
        logger.warning("ctxdesk proxy: could not record %s %s: %s", exchange.method, exchange.path, error)
        try:
            self.writer.record_degraded(exchange, error, WRITE_ATTEMPTS)
        except (ContextDeskError, OSError) as exc:
            logger.warning("ctxdesk proxy: could not record the degraded event either: %s", exc)

    def write(self, exchange: Exchange) -> None:
        """Parse and store one exchange (raises on a store failure; the writer thread retries)."""
        self.writer.write(exchange)


class Hold:
    """One request's claim on the writer's quiet time; releasing it more than once is harmless."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder: Recorder | None = recorder

    def release(self) -> None:
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.release()


class _NotingStore:
    """The recorder's store, noting the (session id, event id) of each event recorded through it."""

    def __init__(self, store: Any, written: list[tuple[str, int]]) -> None:
        self._store = store
        self._written = written

    def record_event(self, session_id: str, event: Any, *args: Any, **kwargs: Any) -> int:
        event_id = self._store.record_event(session_id, event, *args, **kwargs)
        self._written.append((session_id, event_id))
        return event_id

    def __getattr__(self, name: str) -> Any:  # everything else is the store's own
        return getattr(self._store, name)


class _Marker:
    def __init__(self, done: threading.Event) -> None:
        self.done = done
