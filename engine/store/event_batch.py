"""Events recorded inside one batched write (:meth:`SqlSessionStore.batched_costs`): held in memory
and inserted with one ``executemany``, instead of one ``INSERT … RETURNING`` and one ``max(seq)``
query per event (an import of 500,000 calls spent most of its writer's time there).

An event's id is known when it is recorded: the store reserves ids (its database's ``reserve_ids``: SQLite
holds the file's write lock, so the next ids are ``max(id) + 1`` on; PostgreSQL draws them from the
column's sequence) and each session's next ``seq`` is read once. Held rows are written before any
other statement of the transaction runs (the store's ``_flush_events``: a read, a nested
write such as an exact request referring to its event), so nothing ever sees a missing event. The
cost writer gets each request event as written (what a read of its redacted row would give),
without reading it back: its row is held until the commit, and made an event a chunk at a time.
The store drives the batch (reads, reservations, inserts) and the batch never calls the store: the
flow goes one way, sql_store -> event_batch.
"""

from __future__ import annotations

import json
from typing import Any

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.redact import redact_row
from engine.store.records import StoredEvent, constructed, json_text, utc_now

#: context_events' columns as the store's ``record_event`` writes them (all but ``id``).
EVENT_COLUMNS = (
    "session_id", "seq", "turn_index", "kind", "trigger", "outcome", "reason", "provider", "model",
    "context_window", "max_output_tokens", "buffer_tokens", "limit_tokens", "projected_tokens",
    "remaining_tokens", "system_tokens", "skills_tokens", "tools_tokens", "summary_tokens",
    "conversation_tokens", "tool_results_tokens", "offloaded_bytes", "provider_input_tokens",
    "provider_output_tokens", "provider_cache_read_tokens", "provider_cache_creation_tokens",
    "message_seq", "details_json", "created_utc", "unattributed_tokens", "components_basis",
    "messages_excluded",
)  # fmt: skip
#: Ids reserved at a time (doubling up to the last): PostgreSQL's sequence skips what a flush left unused.
_ID_BLOCKS = (16, 256, 4096)
#: Held rows are inserted once this many wait (same transaction): memory stays bounded however many
#: calls a session has (a million-line transcript held 500,000 rows until its commit).
HELD_ROWS = 4096


class EventBatch:
    """The events of one batched transaction not yet inserted (one per thread, while it runs): their
    rows, each session's next seq and the ids reserved for them. It asks nothing of the store: the
    store (:class:`engine.store.sql_store.SqlSessionStore`, whose transaction ``conn`` is) gives it what
    it reads (a session's next seq, reserved ids) and inserts the rows it takes from it."""

    def __init__(self, store: Any, conn: Any) -> None:
        self.store, self.conn = store, conn
        self.rows: list[tuple[Any, ...]] = []
        self._next_seq: dict[str, int] = {}
        self._ids: list[int] = []
        self.last_id = 0
        self._block = 0
        #: What this transaction's requests stored of a value, by its identity (kept with it): its part
        #: and its cache markers (:func:`engine.store.payloads.insert_request`). An import's requests send
        #: their history again, the same objects: each is written out, hashed and walked once.
        self.parts: dict[Any, tuple[Any, Any]] = {}

    def knows(self, session_id: str) -> bool:
        """Whether the session's next seq is known (else: :meth:`start` it)."""
        return session_id in self._next_seq

    def start(self, session_id: str, next_seq: int) -> None:
        self._next_seq[session_id] = next_seq

    def ids_wanted(self) -> int:
        """How many ids to reserve before the next :meth:`add` (0: it has one), each past :attr:`last_id`."""
        return 0 if self._ids else _ID_BLOCKS[min(self._block, len(_ID_BLOCKS) - 1)]

    def give_ids(self, ids: list[int]) -> None:
        self._block += 1
        self._ids = list(reversed(ids))

    def add(self, session_id: str, event: ContextEvent) -> tuple[Any, ...]:
        """Hold ``event`` (its row redacted now: ``id`` then :data:`EVENT_COLUMNS`); returns its row."""
        seq = self._next_seq[session_id]
        self._next_seq[session_id] = seq + 1
        self.last_id = self._ids.pop()
        row = (self.last_id, *event_row(session_id, seq, event, utc_now()))
        self.rows.append(row)
        return row

    @property
    def full(self) -> bool:
        """Held rows are inserted once this many wait: memory stays bounded however many calls."""
        return len(self.rows) >= HELD_ROWS

    def take(self) -> list[tuple[Any, ...]]:
        """The held rows, to insert now (nothing else ran since: the reserved ids and seqs stay good)."""
        rows, self.rows = self.rows, []
        return rows

    def flush(self) -> list[tuple[Any, ...]]:
        """The held rows, to insert before another statement runs; ids and seqs are read afresh for
        the next event (that statement may write or delete events)."""
        self._next_seq, self._ids, self.last_id = {}, [], 0
        return self.take()

    def stored(self, row: tuple[Any, ...]) -> StoredEvent:
        """:func:`stored_event` of a row this batch made."""
        return stored_event(row)


#: An event row's values kept as they are: the session id (a key) and ``created_utc`` (a time this
#: store made, no text of the source's), so that a unique time per row is not scanned for secrets.
_EVENT_KEPT = frozenset({0, EVENT_COLUMNS.index("created_utc")})


def event_row(session_id: str, seq: int, event: ContextEvent, now: str) -> list[Any]:
    """The ``context_events`` row of ``event`` (:data:`EVENT_COLUMNS` order), redacted."""
    c = event.components
    u = event.usage
    return redact_row((
        session_id, seq, event.turn_index, event.kind, event.trigger, event.outcome, event.reason,
        event.provider, event.model, event.context_window, event.max_output_tokens,
        event.buffer_tokens, event.limit_tokens, event.projected_tokens, event.remaining_tokens,
        c.system if c else None, c.skills if c else None, c.tools if c else None, c.summary if c else None,
        c.conversation if c else None, c.tool_results if c else None, c.offloaded_bytes if c else None,
        u.input_tokens if u else None, u.output_tokens if u else None,
        u.cache_read_input_tokens if u else None, u.cache_creation_input_tokens if u else None,
        event.message_seq, json_text(event.details), now,
        c.unattributed if c else None, event.components_basis,
        json_text(list(event.messages_excluded)) if event.messages_excluded else None,
    ), keys=_EVENT_KEPT)  # fmt: skip


def stored_event(row: tuple[Any, ...]) -> StoredEvent:
    """The event of a held row (``id`` then :data:`EVENT_COLUMNS`) as a read of the row would give
    it (values redacted, details as JSON text), built without validation: every value is one this
    store just made from a valid event."""
    (
        event_id, session_id, seq, turn_index, kind, trigger, outcome, reason, provider, model,
        context_window, max_output_tokens, buffer_tokens, limit_tokens, projected_tokens, remaining_tokens,
        system, skills, tools, summary, conversation, tool_results, offloaded_bytes,
        p_input, p_output, p_cache_read, p_cache_creation,
        message_seq, details_json, created_utc, unattributed, components_basis, messages_excluded,
    ) = row  # fmt: skip
    components = (
        constructed(ComponentTokens, {
            "system": system or 0, "skills": skills or 0, "tools": tools or 0, "summary": summary or 0,
            "conversation": conversation or 0, "tool_results": tool_results or 0,
            "unattributed": unattributed or 0, "offloaded_bytes": offloaded_bytes or 0,
        })
        if system is not None
        else None
    )  # fmt: skip
    usage = (
        None
        if p_input is None and p_output is None and p_cache_read is None and p_cache_creation is None
        else constructed(ProviderUsage, {
            "input_tokens": p_input or 0, "output_tokens": p_output or 0,
            "cache_read_input_tokens": p_cache_read or 0, "cache_creation_input_tokens": p_cache_creation or 0,
        })
    )  # fmt: skip
    # each model's set of given fields is shared (2 KB apiece)
    return constructed(StoredEvent, {
        "id": event_id, "session_id": session_id, "seq": seq, "turn_index": turn_index, "kind": kind,
        "trigger": trigger, "outcome": outcome, "reason": reason, "provider": provider, "model": model,
        "context_window": context_window, "max_output_tokens": max_output_tokens,
        "buffer_tokens": buffer_tokens, "limit_tokens": limit_tokens, "projected_tokens": projected_tokens,
        "remaining_tokens": remaining_tokens, "components": components, "components_basis": components_basis,
        "usage": usage, "message_seq": message_seq,
        "details": json.loads(details_json) if details_json else {}, "created_utc": created_utc,
        "messages_excluded": tuple(json.loads(messages_excluded)) if messages_excluded else (),
    })  # fmt: skip
