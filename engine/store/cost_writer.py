"""The ``request_costs`` rows of request events as they are recorded (migration m003).

A store (:class:`engine.store.sql_store.SqlSessionStore`) calls :func:`record_request_costs` once
the transaction that recorded request events has committed, in a transaction of its own, one pass
per session: pricing and the cache analysis hold no write lock and cannot undo an event. What it
reads through is all it needs: a store, or the database a store holds (the store passes its
:class:`engine.store.backend.SqlDatabase`, so the writer never calls the store back), with the open
connection (``tx_rows``, ``P``), on either backend.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from operator import itemgetter
from typing import Any, Protocol

from engine.cache_analysis import (
    PREFIX_RESET_EVENTS,
    TTL_1H_S,
    TTL_5M_S,
    CallRecord,
    call_records,
    classify_call,
    event_time_is_call_time,
    parse_utc,
    summarize,
)
from engine.redact import redact_row
from engine.rollup import COST_ROW_KEYS, cost_row_tuples
from engine.store.records import StoredEvent, event_from_row, utc_now

COST_TABLE = "request_costs"
#: A cost row's values (engine.rollup.COST_ROW_KEYS but the call's turn and fix), in column order.
_ROW_KEYS = tuple(k for k in COST_ROW_KEYS if k not in ("turn_index", "fix"))
#: The table's columns: those values, the session's id second and ``computed_utc`` last.
_COLUMNS = (_ROW_KEYS[0], "session_id", *_ROW_KEYS[1:], "computed_utc")


#: A row's values kept as they are: the session id (a key) and ``computed_utc`` (a time this writer
#: made), so that a time unique to each pass is not scanned for secrets row after row.
_KEPT = frozenset({_COLUMNS.index("session_id"), _COLUMNS.index("computed_utc")})
#: A cost row's values, read in one call: of a row (a dict), of a :func:`engine.rollup.cost_row_tuples` row.
_row_values = itemgetter(*_ROW_KEYS)
_tuple_values = itemgetter(*map(COST_ROW_KEYS.index, _ROW_KEYS))
_TTL_KNOWN = _ROW_KEYS.index("ttl_split_known")
#: Ids per ``IN (...)`` list (SQLite allows 32,766 variables; PostgreSQL more).
_IN_CHUNK = 500


def last_cache_writer_sql(p: str = "?") -> str:
    """The session's last call that wrote the prompt cache (its TTL judges the next call): one step
    of the partial index ``request_costs_cache_writes`` (m005), however many calls wrote nothing."""
    return (
        f"SELECT cache_write_1h_tokens FROM {COST_TABLE} WHERE session_id = {p}"
        " AND cache_write_5m_tokens + cache_write_1h_tokens > 0 ORDER BY call_index DESC LIMIT 1"
    )


#: :func:`last_cache_writer_sql` for SQLite.
LAST_CACHE_WRITER_SQL = last_cache_writer_sql()


def insert_cost_rows(conn: Any, p: str, rows: Iterable[Mapping[str, Any]], session_id: str, now: str) -> int:
    """Insert cost rows (as :func:`engine.rollup.cost_rows` gives them) of one session; rows written."""
    return insert_cost_values(conn, p, cost_row_values(rows, session_id, now))


def cost_row_values(rows: Iterable[Mapping[str, Any]], session_id: str, now: str) -> list[list[Any]]:
    """The ``request_costs`` values (:data:`_COLUMNS` order, redacted) of cost rows of one session;
    ``now`` (``computed_utc``) last."""
    return _values(map(_row_values, rows), session_id, now)


def _values(picked: Iterable[Sequence[Any]], session_id: str, now: str) -> list[list[Any]]:
    """:func:`cost_row_values` of rows' values picked in :data:`_COLUMNS` order (but the two added here)."""
    values = []
    for row in picked:
        value = list(row)
        value[_TTL_KNOWN] = int(bool(value[_TTL_KNOWN]))
        value.insert(1, session_id)
        value.append(now)
        values.append(redact_row(value, keys=_KEPT))
    return values


def insert_cost_values(conn: Any, p: str, values: Sequence[Sequence[Any]]) -> int:
    """Insert :func:`cost_row_values`; rows written."""
    if values:
        conn.executemany(
            f"INSERT INTO {COST_TABLE} ({', '.join(_COLUMNS)}) VALUES ({', '.join([p] * len(_COLUMNS))})",
            values,
        )
    return len(values)


#: Where a cost row's ``event_id``, ``call_index`` and ``cache_write_{5m,1h}_tokens`` are in its values.
VALUE_EVENT_ID, VALUE_CALL_INDEX = _COLUMNS.index("event_id"), _COLUMNS.index("call_index")
_VALUE_WRITE_5M, _VALUE_WRITE_1H = (
    _COLUMNS.index("cache_write_5m_tokens"),
    _COLUMNS.index("cache_write_1h_tokens"),
)


class CostReads(Protocol):
    """What pricing a session's new calls reads of what is stored before them: the database
    (:class:`DatabaseReads`), or what a worker pricing part of them was given (engine.store.cost_lanes)."""

    def last_cost(self) -> tuple[int, int] | None:
        """(event_id, call_index) of the session's last cost row."""

    def request_before(self, seq: int) -> int | None:
        """The id of the session's last request event with usage before ``seq``."""

    def event(self, event_id: int) -> StoredEvent:
        """A stored event by id."""

    def resets(self, after_seq: int, before_seq: int, kinds: Sequence[str]) -> list[StoredEvent]:
        """The session's events of ``kinds`` strictly between two seqs."""

    def message_times(self, seqs: Sequence[int]) -> dict[int, str]:
        """{seq: the ``timestamp`` its stored meta holds} of messages of the session."""

    def session(self) -> tuple[str | None, str | None] | None:
        """(model, source) of the session."""

    def last_writer_1h(self) -> bool | None:
        """Whether the session's last call that wrote the cache wrote 1h tokens; None: none did."""


class DatabaseReads:
    """:class:`CostReads` of a session in a database (a store or the database it holds: ``tx_rows``,
    ``P``), inside ``conn``'s transaction."""

    def __init__(self, store: Any, conn: Any, session_id: str) -> None:
        self.store, self.conn, self.session_id, self.p = store, conn, session_id, store.P

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        return self.store.tx_rows(self.conn, sql, params)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        found = self._rows(sql, params)
        return found[0] if found else None

    def last_cost(self) -> tuple[int, int] | None:
        last = self._one(
            f"SELECT event_id, call_index FROM {COST_TABLE} WHERE session_id = {self.p}"
            " ORDER BY call_index DESC LIMIT 1",
            (self.session_id,),
        )
        return (last["event_id"], last["call_index"]) if last is not None else None

    def request_before(self, seq: int) -> int | None:
        p = self.p
        before = self._one(
            f"SELECT id FROM context_events WHERE session_id = {p} AND seq < {p} AND kind = 'request'"
            " AND provider_input_tokens IS NOT NULL ORDER BY seq DESC LIMIT 1",
            (self.session_id, seq),
        )
        return before["id"] if before is not None else None

    def event(self, event_id: int) -> StoredEvent:
        return event_from_row(self._one(f"SELECT * FROM context_events WHERE id = {self.p}", (event_id,)))

    def resets(self, after_seq: int, before_seq: int, kinds: Sequence[str]) -> list[StoredEvent]:
        p = self.p
        return list(
            map(
                event_from_row,
                self._rows(
                    f"SELECT * FROM context_events WHERE session_id = {p} AND seq > {p} AND seq < {p}"
                    f" AND kind IN ({', '.join([p] * len(kinds))})",
                    (self.session_id, after_seq, before_seq, *kinds),
                ),
            )
        )

    def message_times(self, seqs: Sequence[int]) -> dict[int, str]:
        p = self.p
        times: dict[int, str] = {}
        for chunk in range(0, len(seqs), _IN_CHUNK):
            part = seqs[chunk : chunk + _IN_CHUNK]
            for r in self._rows(
                f"SELECT seq, meta_json FROM messages WHERE session_id = {p} AND seq IN ({', '.join([p] * len(part))})",
                (self.session_id, *part),
            ):
                meta = json.loads(r["meta_json"]) if r["meta_json"] else {}
                if isinstance(meta, dict) and isinstance(meta.get("timestamp"), str):
                    times[int(r["seq"])] = meta["timestamp"]
        return times

    def session(self) -> tuple[str | None, str | None] | None:
        found = self._one(f"SELECT model, source FROM sessions WHERE id = {self.p}", (self.session_id,))
        return (found["model"], found["source"]) if found is not None else None

    def last_writer_1h(self) -> bool | None:
        writer = self._one(last_cache_writer_sql(self.p), (self.session_id,))
        return bool(writer["cache_write_1h_tokens"]) if writer is not None else None


def record_request_costs(
    store: Any,
    conn: Any,
    session_id: str,
    event_ids: Sequence[int],
    *,
    written: Mapping[int, StoredEvent] | None = None,
) -> int:
    """Price and analyse request events just recorded into one session, in seq order, inside
    ``conn``'s transaction: the rows one call per event would write.

    Incremental: it reads the session's previous call (its event and stored row), the compactions
    since, and the calls' message times. When earlier calls have no row (a database made before
    migration m003), nothing is written and ``refresh_request_costs`` fills the gap. Returns the
    number of rows written. ``written``: events as the store wrote them (not read back)."""
    p = store.P
    if not event_ids:
        return 0
    written = written or {}
    new: list[Any] = [written[i] for i in event_ids if i in written]
    unread = [i for i in event_ids if i not in written]
    for chunk in range(0, len(unread), _IN_CHUNK):
        ids = unread[chunk : chunk + _IN_CHUNK]
        found = store.tx_rows(
            conn, f"SELECT * FROM context_events WHERE id IN ({', '.join([p] * len(ids))})", tuple(ids)
        )
        new += map(event_from_row, found)
    values = price_new_calls(DatabaseReads(store, conn, session_id), session_id, new, utc_now())
    return insert_cost_values(conn, p, values)


def price_new_calls(reads: CostReads, session_id: str, events: Sequence[Any], now: str) -> list[list[Any]]:
    """The cost rows' values (:func:`cost_row_values`) of a session's new request events, priced after
    what ``reads`` says is stored before them; none when earlier calls have no rows."""
    new = sorted((e for e in events if e.kind == "request" and e.usage is not None), key=lambda e: e.seq)
    if not new:
        return []
    last = reads.last_cost()
    if (last[0] if last is not None else None) != reads.request_before(new[0].seq):
        return []  # earlier calls have no rows (made before m003): refresh_request_costs fills them
    # the previous call (when it has a row), then the compactions between calls: a compaction
    # before the session's first call does not mark it
    events = list(new)
    prev = None
    if last is not None:
        prev = reads.event(last[0])
        events.append(prev)
    events += reads.resets(
        prev.seq if prev is not None else new[0].seq, new[-1].seq, sorted(PREFIX_RESET_EVENTS)
    )
    # the messages' times, for the calls whose event gives no time of its own (call_records' fallback)
    seqs = sorted({
        e.message_seq for e in events
        if e.kind == "request" and e.message_seq is not None and parse_utc((e.details or {}).get("call_utc")) is None
    })  # fmt: skip
    times = reads.message_times(seqs) if seqs else {}
    session = reads.session()
    calls = call_records(
        events, message_times=times, default_model=session[0] if session else None,
        event_time_is_call_time=event_time_is_call_time(session[1] if session else None),
    )  # fmt: skip
    index = last[1] + 1 if last is not None else 0
    previous = _at_index(calls[0], index - 1) if prev is not None else None
    if prev is not None:
        calls = calls[1:]
    ttl = TTL_1H_S if reads.last_writer_1h() else TTL_5M_S
    currents, classified = [], []
    for offset, call in enumerate(calls):
        current = _at_index(call, index + offset)
        classified.append(classify_call(previous, current, ttl=ttl))
        currents.append(current)
        if current.cost.cache_write_5m_tokens + current.cost.cache_write_1h_tokens > 0:
            ttl = TTL_1H_S if current.cost.cache_write_1h_tokens else TTL_5M_S
        previous = current
    cost = cost_row_tuples(currents, summarize(classified, sum(c.cost.total_usd for c in currents)))
    return _values(map(_tuple_values, cost), session_id, now)


def last_written(values: Sequence[Sequence[Any]]) -> tuple[tuple[int, int] | None, bool | None]:
    """((event_id, call_index) of the last of cost rows' values, whether the last of them that wrote
    the cache wrote 1h tokens (None: none did)): what :class:`CostReads` reads once they are stored."""
    last = (values[-1][VALUE_EVENT_ID], values[-1][VALUE_CALL_INDEX]) if values else None
    for value in reversed(values):
        if value[_VALUE_WRITE_5M] + value[_VALUE_WRITE_1H] > 0:
            return last, bool(value[_VALUE_WRITE_1H])
    return last, None


def _at_index(call: CallRecord, index: int) -> CallRecord:
    """``call`` numbered ``index`` in its session, in place: a record :func:`call_records` just made
    for this pass and nothing else holds (``dataclasses.replace`` re-ran the frozen dataclass's
    ``__init__``; ``copy.copy`` cost a seventh of the pass)."""
    if call.index != index:
        object.__setattr__(call, "index", index)
    return call


def record_request_cost(store: Any, conn: Any, session_id: str, event_id: int) -> bool:
    """:func:`record_request_costs` of one event; True when its row was written."""
    return record_request_costs(store, conn, session_id, [event_id]) > 0
