"""An import's cost pass in a worker process while it goes on writing (:class:`CostFeed`).

Pricing a session's new calls (:func:`engine.store.cost_writer.price_new_calls`) reads the calls
and what is stored before them, nothing else. While a store holds a feed, every batch of events it
inserts is sent to the worker (the request events and the compactions between them), and, the
first time a transaction inserts a session's events, what the pass would read of the database
before them (:class:`_Before`). The worker prices each chunk of a session's calls the moment it
fills, as the serial pass would chunk them, while this process parses and writes on. Once the
transaction commits, the store asks for a session's rows (:meth:`CostFeed.finish`) and goes on; it
writes them once answered (:meth:`CostFeed.settled`: at a later commit, at the latest before the
session is priced again or the feed ends), and only when the database still reads as the worker
assumed and the worker priced exactly the calls that were pending; otherwise (it gave up, died, was
slow, or something else wrote) the store prices them itself (engine.store.cost_lanes). Either way
the rows are those of the serial pass.

The sending goes through a queue whose thread pickles and writes in the background: the writer is
never held up by a busy worker.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import logging
import multiprocessing
import os
import pickle
import queue
import shutil
import signal
import tempfile
import time
from collections import deque
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cache_analysis import PREFIX_RESET_EVENTS
from engine.store import cost_lanes
from engine.store.cost_writer import DatabaseReads, last_written, price_new_calls
from engine.store.event_batch import EVENT_COLUMNS, stored_event
from engine.store.records import StoredEvent, utc_now

logger = logging.getLogger(__name__)

#: Longest the worker's rows of a session are waited for once the transaction commits (seconds).
TAKE_WAIT_S = 300.0
#: How often the worker, waiting for work, checks that the writer is still there (seconds).
_ORPHAN_CHECK_S = 2.0
#: Where a held row (``id`` then EVENT_COLUMNS) holds its session, seq and kind.
_SESSION, _SEQ, _KIND = 1, 2, EVENT_COLUMNS.index("kind") + 1
#: The kinds the pass reads: calls, and the events that reset the prompt cache between them.
_FED_KINDS = frozenset({"request", *PREFIX_RESET_EVENTS})


@dataclass(frozen=True)
class _Before:
    """What pricing a session's first new calls reads of the database (:class:`CostReads`), stored
    before the first event a transaction inserted into it (``first_seq``)."""

    last: tuple[int, int] | None
    request_before: int | None
    prev: StoredEvent | None
    resets: tuple[StoredEvent, ...]
    session: tuple[str | None, str | None] | None
    writer_1h: bool | None

    def key(self) -> tuple[Any, ...]:
        """What two reads must share to price alike (``prev`` is the event of ``last``)."""
        return (
            self.last,
            self.request_before,
            tuple(e.id for e in self.resets),
            self.session,
            self.writer_1h,
        )


def read_before(db: Any, conn: Any, session_id: str, first_seq: int) -> _Before:
    """:class:`_Before` of ``session_id`` as the database reads inside ``conn``'s transaction."""
    reads = DatabaseReads(db, conn, session_id)
    last = reads.last_cost()
    prev = reads.event(last[0]) if last is not None else None
    resets = reads.resets(prev.seq, first_seq, sorted(PREFIX_RESET_EVENTS)) if prev is not None else []
    return _Before(
        last, reads.request_before(first_seq), prev, tuple(resets), reads.session(), reads.last_writer_1h()
    )


class CostFeed:
    """The worker pricing the calls a store inserts, and what this process sent it this transaction."""

    def __init__(self, process: Any, inbox: Any, answers: Any, spool: str) -> None:
        self.process, self.inbox, self.answers, self.spool = process, inbox, answers, spool
        #: Per session fed this transaction: (first seq, what was read before it), None when not fed.
        self._fed: dict[str, tuple[int, tuple[Any, ...]] | None] = {}
        self.broken = False
        #: Sessions asked for, in order: (id, (first seq, what was read), event ids).
        self._awaiting: deque[tuple[str, tuple[int, tuple[Any, ...]], list[int]]] = deque()
        self._awaited: dict[str, int] = {}  # how many of each session's are in _awaiting
        #: Sessions whose rows were taken from the worker, and those priced here instead (a log line).
        self.taken = self.refused = 0

    @classmethod
    def start(cls, chunk: int) -> CostFeed | None:
        """A worker forked now, pricing ``chunk`` calls at a time; None where this process may not
        fork (no fork, or other threads running: :func:`engine.store.cost_lanes.forkable`)."""
        if "fork" not in multiprocessing.get_all_start_methods() or not cost_lanes.forkable():
            return None
        context = multiprocessing.get_context("fork")
        inbox = context.Queue()
        answers, sender = context.Pipe(duplex=False)
        spool = tempfile.mkdtemp(prefix="ctxdesk-cost-feed-")
        process = context.Process(target=_serve, args=(inbox, sender, chunk, spool, os.getpid()), daemon=True)
        process.start()
        sender.close()
        return cls(process, inbox, answers, spool)

    def send(self, db: Any, conn: Any, rows: Sequence[tuple[Any, ...]]) -> None:
        """Send the worker the calls and compactions of ``rows`` (held rows just inserted in
        ``conn``'s transaction), a session's :class:`_Before` first."""
        if self.broken:
            return
        by_session: dict[str, list[tuple[Any, ...]]] = {}
        for row in rows:
            if row[_KIND] in _FED_KINDS:
                by_session.setdefault(row[_SESSION], []).append(row)
        for session_id, part in by_session.items():
            if session_id in self._awaited:  # its last rows not in yet: priced here, after them
                self._fed.setdefault(session_id, None)
            if session_id not in self._fed:
                first_seq = part[0][_SEQ]
                try:
                    before = read_before(db, conn, session_id, first_seq)
                except Exception:  # priced here once committed, reading as it always does
                    logger.debug("cost feed: %s not fed", session_id, exc_info=True)
                    self._fed[session_id] = None
                    continue
                self._fed[session_id] = (first_seq, before.key())
                self.inbox.put(("begin", session_id, before))
            if self._fed[session_id] is not None:
                self.inbox.put(("rows", session_id, part))

    def finish(self, session_id: str, event_ids: list[int]) -> bool:
        """Ask the worker for the cost rows of ``event_ids`` (a committed transaction's pending calls
        of one session, in order); False when it was not fed them (the store prices them now). The
        answer is read by :meth:`settled`."""
        fed = self._fed.pop(session_id, None)
        if fed is None or self.broken:
            return False
        self.inbox.put(("finish", session_id, event_ids))
        self._awaiting.append((session_id, fed, event_ids))
        self._awaited[session_id] = self._awaited.get(session_id, 0) + 1
        return True

    def settled(
        self, db: Any, conn: Any, wait_for: Collection[str] | None
    ) -> Iterator[tuple[str, list[int], Iterator[list[list[Any]]] | None]]:
        """(session id, event ids, the worker's values a chunk at a time or None: price them here, read
        from the database) of the sessions asked for, in the order asked: those answered already, and all of those
        in ``wait_for`` (None: every one) waited for. Values are taken only when the database still
        reads as the worker assumed (``computed_utc`` now)."""
        while self._awaiting:
            session_id, (first_seq, assumed), event_ids = self._awaiting[0]
            must = wait_for is None or any(s in wait_for for s in self._awaited)
            if not self.broken and not must and not self.answers.poll(0):
                return
            self._awaiting.popleft()
            self._awaited[session_id] -= 1
            if not self._awaited[session_id]:
                del self._awaited[session_id]
            answer = None if self.broken else self._answer(session_id)
            if answer is not None and read_before(db, conn, session_id, first_seq).key() != assumed:
                _forget(answer)  # something else wrote the session meanwhile
                answer = None
            if answer is None:
                self.refused += 1
                yield session_id, event_ids, None
            else:
                self.taken += 1
                yield session_id, event_ids, _chunks(answer)

    def _answer(self, session_id: str) -> _Answer | None:
        """The worker's values for the next session asked for (None: it gave up); breaks the feed
        when the worker died or did not answer within :data:`TAKE_WAIT_S`."""
        deadline = time.monotonic() + TAKE_WAIT_S
        try:
            while not self.answers.poll(0.5):
                if not self.process.is_alive() or time.monotonic() > deadline:
                    raise OSError("the cost worker did not answer")
            answered, values = self.answers.recv()
        except (EOFError, OSError) as exc:
            logger.info("cost feed stopped (%s); the store prices the calls", exc)
            self._break()
            return None
        if answered != session_id:
            self._break()
            return None
        return values

    def end_transaction(self) -> None:
        """Forget what this transaction fed and the worker holds (its sessions that are not taken:
        a transaction that rolled back, or wrote no call)."""
        if self._fed and not self.broken:
            self.inbox.put(("drop",))
        self._fed.clear()

    def _break(self) -> None:
        self.broken = True
        self._fed.clear()
        self.process.kill()

    def abandon(self) -> None:
        """Stop the worker now, unread (the import failed or was interrupted)."""
        self._break()

    def close(self) -> None:
        """End the worker (at once when broken)."""
        if not self.broken:
            with contextlib.suppress(OSError, ValueError):
                self.inbox.put(None)
        else:
            self.inbox.cancel_join_thread()
        self.inbox.close()
        self.process.join(5.0)
        if self.process.is_alive():
            self.process.kill()
            self.process.join()
        self.answers.close()
        shutil.rmtree(self.spool, ignore_errors=True)
        if self.taken or self.refused:
            logger.debug("cost feed: %d session pass(es) taken, %d priced here", self.taken, self.refused)


#: A session's values as the worker answers them: the file its full chunks were spilled to (None: none
#: were), and the values after them.
_Answer = tuple[str | None, list[list[Any]]]


def _chunks(answer: _Answer) -> Iterator[list[list[Any]]]:
    """The answer's values a chunk at a time (the spilled ones read back, the file then removed),
    ``computed_utc`` now: when this process writes them."""
    path, tail = answer
    now = utc_now()
    if path is not None:
        with open(path, "rb") as fh:
            while True:
                try:
                    part = pickle.load(fh)
                except EOFError:
                    break
                for value in part:
                    value[-1] = now
                yield part
        os.unlink(path)
    for value in tail:
        value[-1] = now
    yield tail


def _forget(answer: _Answer) -> None:
    if answer[0] is not None:
        os.unlink(answer[0])


class _GiveUp(Exception):
    """The pass would read what the worker was not given: the store prices the session."""


class _Pricing:
    """One session's calls in the worker: :class:`engine.store.cost_writer.CostReads` over what it was
    sent, and the values of the chunks priced so far."""

    def __init__(self, session_id: str, before: _Before, chunk: int, spill_to: str) -> None:
        self.session_id, self.before, self.chunk, self.spill_to = session_id, before, chunk, spill_to
        self.spilled = False
        self.last, self.writer_1h = before.last, before.writer_1h
        self.last_request = before.request_before  # of the calls before the next chunk
        self.known = {before.prev.id: before.prev} if before.prev is not None else {}
        self.reset_events: list[StoredEvent] = list(before.resets)
        self.pending: list[StoredEvent] = []
        self.ids: list[int] = []
        self.values: list[list[Any]] = []
        self.gave_up = False

    def add(self, rows: list[tuple[Any, ...]]) -> None:
        for row in rows:
            event = stored_event(row)
            if event.kind != "request":
                self.reset_events.append(event)
            elif event.usage is not None:
                self.pending.append(event)
                self.ids.append(event.id)
                if len(self.pending) == self.chunk:
                    self.price()

    def price(self) -> None:
        """Price the pending calls as one chunk, as the serial pass prices it (nothing once the
        worker gave up)."""
        part, self.pending = self.pending, []
        if self.gave_up or not part:
            return
        try:
            values = price_new_calls(self, self.session_id, part, "")
        except _GiveUp:
            self.gave_up = True
            return
        if values:  # what the database would read once they are stored
            last, writer_1h = last_written(values)
            self.last = last
            if writer_1h is not None:
                self.writer_1h = writer_1h
        self.last_request = part[-1].id
        self.known = {e.id: e for e in part}
        self.values += values
        if len(self.values) >= self.chunk:  # to disk: a long session's rows are not all held here
            with open(self.spill_to, "ab") as fh:
                pickle.dump(self.values, fh, protocol=pickle.HIGHEST_PROTOCOL)
            self.values, self.spilled = [], True

    def answer(self) -> _Answer:
        return (self.spill_to if self.spilled else None, self.values)

    # -- CostReads over what was sent --------------------------------------------------------------
    def last_cost(self) -> tuple[int, int] | None:
        return self.last

    def request_before(self, seq: int) -> int | None:
        return self.last_request  # asked of the chunk's first call only

    def event(self, event_id: int) -> StoredEvent:
        if event_id not in self.known:
            raise _GiveUp
        return self.known[event_id]

    def resets(self, after_seq: int, before_seq: int, kinds: Sequence[str]) -> list[StoredEvent]:
        return [e for e in self.reset_events if after_seq < e.seq < before_seq and e.kind in kinds]

    def message_times(self, seqs: Sequence[int]) -> dict[int, str]:
        raise _GiveUp  # calls without a time of their own: their messages' are in the database

    def session(self) -> tuple[str | None, str | None] | None:
        return self.before.session

    def last_writer_1h(self) -> bool | None:
        return self.writer_1h


def _serve(inbox: Any, answers: Any, chunk: int, spool: str, writer: int) -> None:
    """The worker: price what it is sent until told to stop (None); answer each ``finish`` with
    (session id, its :data:`_Answer` or None), spilling full chunks to files in ``spool``; ends when
    its parent (the ``writer`` process) is gone."""
    gc.freeze()  # what it inherited is never walked
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the writer's to handle: it stops this process
    sessions: dict[str, _Pricing] = {}
    begun = itertools.count()
    while True:
        try:
            message = inbox.get(timeout=_ORPHAN_CHECK_S)
        except queue.Empty:
            if os.getppid() != writer:
                return  # the writer died without a word: nobody reads what this would price
            continue
        if message is None:
            break
        op = message[0]
        try:
            if op == "begin":
                path = os.path.join(spool, f"{next(begun)}.pickle")
                sessions[message[1]] = _Pricing(message[1], message[2], chunk, path)
            elif op == "rows":
                if (pricing := sessions.get(message[1])) is not None:
                    pricing.add(message[2])
            elif op == "finish":
                pricing = sessions.pop(message[1], None)
                answer = None
                if pricing is not None:
                    pricing.price()
                    if not pricing.gave_up and pricing.ids == message[2]:
                        answer = pricing.answer()
                    elif pricing.spilled:
                        _forget(pricing.answer())
                answers.send((message[1], answer))
            elif op == "drop":
                sessions.clear()
        except Exception:  # that session is priced by the store
            logger.exception("cost feed worker failed on %s", op)
            if op == "finish":
                answers.send((message[1], None))
            elif op != "drop":
                sessions.pop(message[1], None)
    answers.close()
