"""Events recorded inside one batched write (:meth:`SqlSessionStore.batched_costs`): held in memory
and inserted with one ``executemany``, instead of one ``INSERT … RETURNING`` and one ``max(seq)``
query per event (an import of 500,000 calls spent most of its writer's time there).

An event's id is known when it is recorded: the store reserves ids (``_reserve_ids``: SQLite
holds the file's write lock, so the next ids are ``max(id) + 1`` on; PostgreSQL draws them from the
column's sequence) and each session's next ``seq`` is read once. Held rows are written before any
other statement of the transaction runs (the store's ``_flush_events`` hook: a read, a nested
write such as an exact request referring to its event), so nothing ever sees a missing event. The
cost writer gets each request event as written (what a read of its redacted row would give),
without reading it back.
"""

from __future__ import annotations

import json
from typing import Any

from engine.errors import NotFoundError
from engine.events import ComponentTokens, ContextEvent
from engine.store.records import StoredEvent, share_fields_set, usage_from_row, utc_now

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
#: StoredEvent's fields that are a column as they are.
_PLAIN_FIELDS = (
    "id", "session_id", "seq", "turn_index", "kind", "trigger", "outcome", "reason", "provider", "model",
    "context_window", "max_output_tokens", "buffer_tokens", "limit_tokens", "projected_tokens",
    "remaining_tokens", "components_basis", "message_seq", "created_utc",
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
            self.store._pending_cost(session_id, event_id, self.stored(row))
        if len(self.rows) >= HELD_ROWS:  # nothing else ran since: the reserved ids and seqs stay good
            self._insert(self.rows)
            self.rows = []
        return event_id

    def stored(self, row: tuple[Any, ...]) -> StoredEvent:
        """The event as a read of its row would give it (values redacted, details as JSON text),
        built without validation: every value is one this store just made from a valid event."""
        d = dict(zip(("id", *EVENT_COLUMNS), row, strict=True))
        components = (
            ComponentTokens.model_construct(
                system=d["system_tokens"] or 0, skills=d["skills_tokens"] or 0, tools=d["tools_tokens"] or 0,
                summary=d["summary_tokens"] or 0, conversation=d["conversation_tokens"] or 0,
                tool_results=d["tool_results_tokens"] or 0, offloaded_bytes=d["offloaded_bytes"] or 0,
                unattributed=d["unattributed_tokens"] or 0,
            )
            if d["system_tokens"] is not None
            else None
        )  # fmt: skip
        usage = usage_from_row(d, construct=True)
        fields = {k: d[k] for k in _PLAIN_FIELDS}
        event = StoredEvent.model_construct(
            **fields, components=components, usage=usage,
            details=json.loads(d["details_json"]) if d["details_json"] else {},
            messages_excluded=tuple(json.loads(d["messages_excluded"])) if d["messages_excluded"] else (),
        )  # fmt: skip
        # held until the commit prices them: each model's set of given fields is shared (2 KB apiece)
        for part in (components, usage):
            if part is not None:
                share_fields_set(part)
        return share_fields_set(event)

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
