"""Recorded calls exported as they are written (``ctxdesk proxy --export-otlp URL``), off the request path.

The proxy's recorder hands :meth:`LiveExporter.submit` the (session, event) ids each write stored; the
call never blocks: a bounded queue takes them, or they are dropped and counted (a slow or dead
collector costs the proxy nothing). One background thread reads those events back from its own store
connection, builds the same spans ``ctxdesk export otlp`` sends (:func:`engine.otel.spans.session_spans`:
same ids, so a later ``export otlp`` of the session names the same spans) and posts them. A post that
fails is counted and logged, never retried (the next batch goes on; the database keeps everything for
a later ``export otlp``).

Each batch reads only the session's events it has not read yet (from the seq after the last one read);
the first batch of a session in this process reads them all once. A session's root span goes with its
first exported event: a session that already had exported events when this process first saw it (the
proxy restarted mid-session) had its root sent then, and it is not sent again.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from engine.errors import ContextDeskError, ExportError, ValidationError
from engine.otel.export import post_spans, traces_url
from engine.otel.spans import EXPORTED_KINDS, session_spans, trace_request
from engine.store.factory import is_database_url, open_store
from engine.store.records import StoredEvent

__all__ = ["LIVE_QUEUE_LIMIT", "LiveExportStats", "LiveExporter"]

logger = logging.getLogger(__name__)

#: Written events waiting for the exporter before new ones are dropped (a call is one or a few events).
LIVE_QUEUE_LIMIT = 10_000
#: Events taken from the queue into one export request at most.
LIVE_BATCH_EVENTS = 256
#: Seconds per export request: short, a dead collector must not hold the queue for long.
LIVE_TIMEOUT_S = 5.0
#: A drop or failed post is logged the first time and then every this many times (no log flood).
LOG_EVERY = 100

_Written = tuple[str, int]  # (session id, event id)


@dataclass(frozen=True)
class LiveExportStats:
    """What the exporter did so far: spans posted, events dropped (queue full), spans lost to failed posts."""

    url: str
    exported_spans: int
    requests: int
    dropped_events: int
    failed_spans: int
    failed_requests: int
    last_error: str | None
    #: Event rows read back from the store (each is read once, but a session's first batch reads all).
    read_events: int = 0


class LiveExporter:
    """Posts recorded calls to an OTLP/HTTP endpoint from one daemon thread; a context manager."""

    def __init__(
        self, db: str | Path, endpoint: str, *, headers: Mapping[str, str] | None = None,
        timeout: float = LIVE_TIMEOUT_S, queue_limit: int = LIVE_QUEUE_LIMIT, version: str = "",
    ) -> None:  # fmt: skip
        """``db``: the proxy's database (file or ``postgresql://`` URL), read on a connection of its own."""
        if queue_limit < 1:
            raise ValidationError("queue_limit must be at least 1", field="queue_limit", value=queue_limit)
        self.url = traces_url(endpoint)  # a malformed URL fails here, before the proxy starts
        self._db: str | Path = str(db) if is_database_url(str(db)) else Path(db)
        self._headers = dict(headers or {})
        self._timeout = timeout
        self._version = version
        self._queue: queue.Queue[list[_Written] | _Flush | None] = queue.Queue(maxsize=queue_limit)
        self._lock = threading.Lock()
        self._exported = self._requests = self._dropped = self._failed_spans = self._failed_requests = 0
        self._last_error: str | None = None
        self._rooted: set[str] = set()  # sessions whose root span was sent (here or before a restart)
        self._next_seq: dict[str, int] = {}  # per session: the seq after the last event read
        self._ahead: dict[str, dict[int, StoredEvent]] = {}  # per session: rows read, not handed over yet
        self._read = 0
        self._lossy: set[str] = set()  # sessions with events dropped here: their earlier events say nothing
        self._thread: threading.Thread | None = None

    # -- the proxy's side -------------------------------------------------------------------
    def submit(self, written: Iterable[_Written]) -> None:
        """Queue the events one write stored; never blocks, never raises (a full queue drops them)."""
        events = list(written)
        if not events:
            return
        try:
            self._queue.put_nowait(events)
        except queue.Full:
            with self._lock:
                self._dropped += len(events)
                dropped = self._dropped
                self._lossy.update(session_id for session_id, _ in events)
            if dropped == len(events) or dropped // LOG_EVERY != (dropped - len(events)) // LOG_EVERY:
                logger.warning(
                    "ctxdesk proxy: OTLP export to %s falls behind: %d event(s) dropped so far",
                    self.url,
                    dropped,
                )

    def stats(self) -> LiveExportStats:
        with self._lock:
            return LiveExportStats(
                url=self.url, exported_spans=self._exported, requests=self._requests,
                dropped_events=self._dropped, failed_spans=self._failed_spans,
                failed_requests=self._failed_requests, last_error=self._last_error, read_events=self._read,
            )  # fmt: skip

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until everything submitted so far was posted (or failed): tests, shutdown."""
        done = threading.Event()
        try:
            self._queue.put(_Flush(done), timeout=timeout)
        except queue.Full:
            return False
        return done.wait(timeout)

    def start(self) -> LiveExporter:
        self._thread = threading.Thread(target=self._run, name="ctxdesk-otlp-export", daemon=True)
        self._thread.start()
        return self

    def close(self, timeout: float = 30.0) -> None:
        """Post what is queued (within ``timeout``), then stop the thread."""
        if self._thread is None:
            return
        self.flush(timeout)
        with contextlib.suppress(
            queue.Full
        ):  # the thread is stuck on a post: a daemon, it goes with the process
            self._queue.put(None, timeout=1.0)
        self._thread.join(timeout=self._timeout + 1)
        self._thread = None

    def __enter__(self) -> LiveExporter:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the exporter thread ----------------------------------------------------------------
    def _run(self) -> None:
        with (
            open_store(self._db) as store,
            httpx.Client(timeout=self._timeout, headers=self._headers) as client,
        ):
            while True:
                item = self._queue.get()
                if item is None:
                    return
                if isinstance(item, _Flush):
                    item.done.set()
                    continue
                batch, stop, flushes = list(item), False, []
                while len(batch) < LIVE_BATCH_EVENTS:  # whatever else is waiting goes in the same request
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        stop = True
                        break
                    if isinstance(more, _Flush):
                        flushes.append(more)
                        break
                    batch.extend(more)
                self._export(store, client, batch)
                for flush in flushes:
                    flush.done.set()
                if stop:
                    return

    def _export(self, store: Any, client: httpx.Client, written: list[_Written]) -> None:
        spans: list[Any] = []
        try:
            for session_id, ids in _by_session(written).items():
                events, earlier = self._read_new(store, session_id, ids)
                if not events:
                    continue
                root, *children = session_spans(store.get_session(session_id), events)
                if session_id not in self._rooted:
                    self._rooted.add(session_id)
                    if not earlier:  # else its root went with those, before a restart
                        children.insert(0, root)
                spans += children
        except (ContextDeskError, OSError) as exc:  # the store could not be read: those events are lost here
            with self._lock:
                self._lossy.update(session_id for session_id, _ in written)
            self._failed(len(written), f"reading the recorded events: {exc}")
            return
        if not spans:
            return
        body = trace_request(spans, version=self._version).SerializeToString()
        try:
            post_spans(client, self.url, body, len(spans))
        except ExportError as exc:
            self._failed(len(spans), str(exc))
            return
        with self._lock:
            self._exported += len(spans)
            self._requests += 1

    def _read_new(self, store: Any, session_id: str, ids: set[int]) -> tuple[list[StoredEvent], bool]:
        """The exported events among ``ids``, reading only the session's events not read before, and
        whether exported events of the session precede them that this process never saw (a restart).

        Rows read ahead of the ids handed over (the exporter fell behind the writer) wait in
        ``_ahead`` for their turn instead of being read again."""
        known = self._next_seq.get(session_id)
        ahead = self._ahead.setdefault(session_id, {})
        read: list[StoredEvent] = []
        if not ids <= ahead.keys():
            read = store.list_events(session_id, from_seq=known or 0)
            ahead.update((e.id, e) for e in read)
            if not ids <= ahead.keys():  # written before the last row read, handed over after it: reread
                read = store.list_events(session_id)
                ahead.update((e.id, e) for e in read if e.id in ids)
            if read:
                self._next_seq[session_id] = max(known or 0, read[-1].seq + 1)
            with self._lock:
                self._read += len(read)
        mine = sorted((ahead.pop(i) for i in ids if i in ahead), key=lambda e: e.seq)
        while len(ahead) > self._queue.maxsize:  # never handed over (dropped): keep the newest
            del ahead[min(ahead)]
        events = [e for e in mine if e.kind in EXPORTED_KINDS]
        with self._lock:
            lossy = session_id in self._lossy
        if known is not None or lossy or not events:  # a dropped first call: its root goes now
            return events, False
        return events, any(e.kind in EXPORTED_KINDS and e.seq < events[0].seq for e in read)

    def _failed(self, spans: int, error: str) -> None:
        with self._lock:
            self._failed_spans += spans
            self._failed_requests += 1
            self._last_error = error
            failures = self._failed_requests
        if failures == 1 or failures % LOG_EVERY == 0:
            logger.warning("ctxdesk proxy: OTLP export failed (%d time(s) so far): %s", failures, error)


def _by_session(written: Iterable[_Written]) -> dict[str, set[int]]:
    grouped: dict[str, set[int]] = {}
    for session_id, event_id in written:
        grouped.setdefault(session_id, set()).add(event_id)
    return grouped


class _Flush:
    def __init__(self, done: threading.Event) -> None:
        self.done = done
