"""A big session's cost pass on two cores: the second half of its calls priced in a forked process
while this one prices and inserts the first half (:func:`record_session_costs`).

Pricing a call depends on the call before it (its cache verdict) and on the last call that wrote
the cache (the TTL in force), so the worker starts from where it expects the first half to end:
its last call and index, and the TTL its last cache writer left. Once the first half's rows are
in, this process reads that state back as the serial pass would and keeps the worker's rows only
when it is the one the worker assumed; otherwise it prices the second half itself. Either way the
rows are those of one process pricing every chunk in turn. The worker reads no database: what it
needs of the stored session (its model, compactions) is read here before it starts.
"""

from __future__ import annotations

import bisect
import itertools
import logging
import multiprocessing
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.cache_analysis import PREFIX_RESET_EVENTS, call_records
from engine.store.cost_writer import (
    VALUE_EVENT_ID,
    DatabaseReads,
    insert_cost_values,
    last_written,
    price_new_calls,
    record_request_costs,
)
from engine.store.event_batch import EVENT_COLUMNS, stored_event
from engine.store.records import StoredEvent, utc_now

logger = logging.getLogger(__name__)

#: Calls of one session from which its cost pass is split over two processes (below, starting
#: one costs more than it saves).
LANE_MIN_CALLS = 16_384
#: Longest the worker's answer is waited for once this process has priced its half (seconds).
LANE_WAIT_S = 300.0
#: Calls before the second half looked at (newest first) to find the last cache writer the worker
#: starts from (None: all); past them it takes the one stored before the pass (checked afterwards
#: either way).
WRITER_LOOKBACK: int | None = None


def record_session_costs(
    db: Any,
    conn: Any,
    session_id: str,
    event_ids: Sequence[int],
    written: dict[int, tuple[Any, ...]],
    *,
    chunk: int,
) -> None:
    """Write the cost rows of ``event_ids`` (request events just recorded into one session, in order)
    ``chunk`` at a time, each continuing from the rows of the last, as
    :func:`~engine.store.cost_writer.record_request_costs` does; ``written``: their rows as held
    (popped as they are priced). A session of :data:`LANE_MIN_CALLS` calls or more is priced in two
    lanes (the module's docstring); the rows are the same."""
    chunks = [list(event_ids[s : s + chunk]) for s in range(0, len(event_ids), chunk)]
    lane = _Lane.start(db, conn, session_id, chunks, written) if len(event_ids) >= LANE_MIN_CALLS else None
    try:
        for part in chunks if lane is None else chunks[: lane.first]:
            _price_here(db, conn, session_id, part, written)
    except BaseException:
        if lane is not None:
            lane.stop()  # not left waiting to send what nobody reads
        raise
    if lane is None:
        return
    values = lane.result()
    if values is None:
        logger.info("cost lane of %s not used: %s; priced here", session_id, "it gave up")
    elif lane.assumed_start != _stored_start(db, conn, session_id):
        logger.info("cost lane of %s not used: %s; priced here", session_id, "its start differs")
    else:
        for part in values:
            now = utc_now()
            for value in part:
                value[-1] = now  # computed_utc: when this process wrote it, as for its own chunks
            insert_cost_values(conn, db.P, part)
        for part in chunks[lane.first :]:
            for i in part:
                written.pop(i, None)
        return
    for part in chunks[lane.first :]:
        _price_here(db, conn, session_id, part, written)


def _price_here(
    db: Any, conn: Any, session_id: str, part: list[int], written: dict[int, tuple[Any, ...]]
) -> None:
    record_request_costs(
        db,  # its marker and reader: the cost writer never calls the store back
        conn,
        session_id,
        part,
        written={i: stored_event(written.pop(i)) for i in part if i in written},
    )


def _stored_start(db: Any, conn: Any, session_id: str) -> tuple[tuple[int, int] | None, bool]:
    """(last cost row's (event_id, call_index), whether the TTL in force is 1h) as stored now."""
    reads = DatabaseReads(db, conn, session_id)
    return reads.last_cost(), bool(reads.last_writer_1h())


def forkable() -> bool:
    """Whether this process may fork a lane: not while other threads run (a fork copies the locks they
    hold, logging's among them: the child could wait on one forever)."""
    return threading.active_count() == 1


class _GiveUp(Exception):
    """The worker lacks something the pass would read from the database: this process prices it."""


@dataclass
class _LaneReads:
    """:class:`~engine.store.cost_writer.CostReads` of the worker: what was read before it started,
    the held rows, and the rows it priced itself."""

    written: dict[int, tuple[Any, ...]]
    seqs: list[int]  # of the session's pending request events, in order
    ids: list[int]
    stored_resets: list[StoredEvent]
    stored_session: tuple[str | None, str | None] | None
    last: tuple[int, int] | None
    writer_1h: bool | None

    def last_cost(self) -> tuple[int, int] | None:
        return self.last

    def request_before(self, seq: int) -> int | None:
        at = bisect.bisect_left(self.seqs, seq)
        if at == 0:
            raise _GiveUp  # before the pass: only the database knows
        return self.ids[at - 1]

    def event(self, event_id: int) -> StoredEvent:
        if event_id not in self.written:
            raise _GiveUp
        return stored_event(self.written[event_id])

    def resets(self, after_seq: int, before_seq: int, kinds: Sequence[str]) -> list[StoredEvent]:
        return [e for e in self.stored_resets if after_seq < e.seq < before_seq and e.kind in kinds]

    def message_times(self, seqs: Sequence[int]) -> dict[int, str]:
        raise _GiveUp  # calls without a time of their own: their messages' are in the database

    def session(self) -> tuple[str | None, str | None] | None:
        return self.stored_session

    def last_writer_1h(self) -> bool | None:
        return self.writer_1h


class _Lane:
    """The worker pricing the chunks from ``first`` on."""

    def __init__(
        self, first: int, assumed_start: tuple[tuple[int, int] | None, bool], process: Any, pipe: Any
    ):
        self.first, self.assumed_start, self.process, self.pipe = first, assumed_start, process, pipe

    @classmethod
    def start(
        cls, db: Any, conn: Any, session_id: str, chunks: list[list[int]], written: dict[int, tuple[Any, ...]]
    ) -> _Lane | None:
        if "fork" not in multiprocessing.get_all_start_methods() or len(chunks) < 2:
            return None
        if not forkable():
            return None
        ids = [i for part in chunks for i in part]
        if any(i not in written for i in ids):
            return None  # recorded one by one, not held: read back from the database
        seq_at = _SEQ + 1  # a held row is ``id`` then EVENT_COLUMNS
        seqs = [written[i][seq_at] for i in ids]
        if any(a >= b for a, b in itertools.pairwise(seqs)):
            return None
        first = len(chunks) // 2
        reads = DatabaseReads(db, conn, session_id)
        stored_last = reads.last_cost()
        if reads.request_before(seqs[0]) != (stored_last[0] if stored_last else None):
            return None  # earlier calls without rows: the serial pass writes nothing, as it should
        first_half = [i for part in chunks[:first] for i in part]
        last = (first_half[-1], (stored_last[1] if stored_last else -1) + len(first_half))
        writer_1h = _last_writer_1h(first_half, written)
        if writer_1h is None:
            writer_1h = reads.last_writer_1h()
        # what the worker reads of the database: the session and its compactions over its half
        lane_reads = _LaneReads(
            written=written, seqs=seqs, ids=ids,
            stored_resets=reads.resets(written[first_half[-1]][seq_at] - 1, seqs[-1] + 1, sorted(PREFIX_RESET_EVENTS)),
            stored_session=reads.session(), last=last, writer_1h=writer_1h,
        )  # fmt: skip
        context = multiprocessing.get_context("fork")
        receiver, sender = context.Pipe(duplex=False)
        process = context.Process(
            target=_work, args=(lane_reads, session_id, chunks[first:], sender), daemon=True
        )
        process.start()
        sender.close()
        return cls(first, (last, bool(writer_1h)), process, receiver)

    def stop(self) -> None:
        """End the worker unread."""
        self.pipe.close()
        self.process.terminate()
        self.process.join()

    def result(self) -> list[list[list[Any]]] | None:
        """The worker's values, chunk by chunk; None when it gave up, failed, died or did not answer
        within :data:`LANE_WAIT_S` of this process's half (then it is stopped)."""
        deadline = time.monotonic() + LANE_WAIT_S
        try:
            while not self.pipe.poll(0.5):
                if not self.process.is_alive() or time.monotonic() > deadline:
                    self.process.kill()
                    return None
            return self.pipe.recv()
        except (EOFError, OSError):
            return None
        finally:
            self.pipe.close()
            self.process.join()


#: Where a held event row's ``seq`` is among EVENT_COLUMNS.
_SEQ = 1
#: Where a held event row (``id`` then EVENT_COLUMNS) holds the cache tokens its call created.
_CACHE_CREATION = EVENT_COLUMNS.index("provider_cache_creation_tokens") + 1


def _last_writer_1h(first_half: list[int], written: dict[int, tuple[Any, ...]]) -> bool | None:
    """Whether the first half's last call that writes the cache writes 1h tokens (of its last
    :data:`WRITER_LOOKBACK` calls, all when None); None: none of those writes. A call writes the
    cache when its usage says it created some (engine.cost.split_cache_writes): only that one is priced."""
    looked_at = first_half if WRITER_LOOKBACK is None else first_half[-WRITER_LOOKBACK:]
    for event_id in reversed(looked_at):
        row = written[event_id]
        if row[_CACHE_CREATION]:
            (call,) = call_records([stored_event(row)])
            return bool(call.cost.cache_write_1h_tokens)
    return None


def _work(reads: _LaneReads, session_id: str, chunks: list[list[int]], sender: Any) -> None:
    """The worker: price ``chunks`` in turn (each from the rows of the last) and send their values."""
    out: list[list[list[Any]]] | None = None
    try:
        priced = []
        for part in chunks:
            values = price_new_calls(reads, session_id, [stored_event(reads.written[i]) for i in part], "")
            if values:
                last, writer_1h = last_written(values)
                reads.last = last
                if writer_1h is not None:
                    reads.writer_1h = writer_1h
            priced.append(values)
        out = priced
    except _GiveUp:
        out = None
    except Exception:  # reported, and priced by the parent instead
        logger.exception("cost lane failed")
        out = None
    sender.send(out)
    sender.close()


__all__ = ["LANE_MIN_CALLS", "VALUE_EVENT_ID", "record_session_costs"]
