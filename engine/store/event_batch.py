"""Events recorded inside one batched write (:meth:`SqlSessionStore.batched_costs`): held in memory
and inserted with one ``executemany``, instead of one ``INSERT … RETURNING`` and one ``max(seq)``
query per event (an import of 500,000 calls spent most of its writer's time there).

An event's id is known when it is recorded: the store reserves ids (``_reserve_ids``: SQLite
holds the file's write lock, so the next ids are ``max(id) + 1`` on; PostgreSQL draws them from the
column's sequence) and each session's next ``seq`` is read once. Held rows are written before any
other statement of the transaction runs (the store's ``_flush_events`` hook: a read, a nested
write such as an exact request referring to its event), so nothing ever sees a missing event. The
cost writer gets each request event as written (what a read of its redacted row would give),
without reading it back: its row is held until the commit, and made an event a chunk at a time.
"""

from __future__ import annotations

import json
from typing import Any

from engine.errors import NotFoundError
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.store.records import StoredEvent, constructed, utc_now

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
    """The events of one batched transaction not yet inserted (one per thread, while it runs)."""

    def __init__(self, store: Any, conn: Any) -> None:
        """``store``: the :class:`engine.store.sql_store.SqlSessionStore` whose transaction ``conn`` is."""
        self.store, self.conn = store, conn
        self.rows: list[tuple[Any, ...]] = []
        self._next_seq: dict[str, int] = {}
        self._ids: list[int] = []
        self._last_id = 0
        self._block = 0

    def add(self, session_id: str, event: ContextEvent) -> int:
        """Hold ``event`` (its row redacted now); returns the id it will have."""
        if session_id not in self._next_seq:
            self.store._lock_session(self.conn, session_id)
            self._next_seq[session_id] = self.store._next_event_seq(self.conn, session_id)
        seq = self._next_seq[session_id]
        self._next_seq[session_id] = seq + 1
        event_id = self._next_id()
        row = (event_id, *self.store._event_row(session_id, seq, event, utc_now()))
        self.rows.append(row)
        if event.kind == "request" and event.usage is not None:  # its cost row, once the transaction commits
            # held as its row (a third of the memory of the event it reads as: :func:`stored_event`)
            self.store._pending_cost(session_id, event_id, row)
        if len(self.rows) >= HELD_ROWS:  # nothing else ran since: the reserved ids and seqs stay good
            self._insert(self.rows)
            self.rows = []
        return event_id

    def stored(self, row: tuple[Any, ...]) -> StoredEvent:
        """:func:`stored_event` of a row this batch made."""
        return stored_event(row)

    def flush(self) -> None:
        """Insert the held rows; ids and seqs are read afresh for the next event (a statement run
        between may have written or deleted events)."""
        rows, self.rows = self.rows, []
        self._next_seq, self._ids, self._last_id = {}, [], 0
        if rows:
            self._insert(rows)

    def _insert(self, rows: list[tuple[Any, ...]]) -> None:
        try:
            self.store._insert_events(self.conn, rows)
        except self.store._integrity_errors as exc:
            sessions = sorted({r[1] for r in rows})
            raise NotFoundError(f"cannot record events for session(s) {sessions} ({exc})") from exc

    def _next_id(self) -> int:
        if not self._ids:
            n = _ID_BLOCKS[min(self._block, len(_ID_BLOCKS) - 1)]
            self._block += 1
            # past what this batch reserved and holds (SQLite's next id counts inserted rows only)
            ids = self.store._reserve_ids(self.conn, "context_events", n, after=self._last_id)
            self._ids = list(reversed(ids))
        self._last_id = self._ids.pop()
        return self._last_id


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
