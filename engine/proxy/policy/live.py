"""Manual compaction of a live session: the agent's re-sent history becomes the compacted one.

A compaction applied to a proxied session (dashboard Compaction page, or ``force_compact``)
writes a snapshot: the compacted history covering transcript seqs 0..through_seq. On each
following request of that agent (matched by its own session id), the messages that re-send
exactly that transcript range (matched by role, text and tool ids) are replaced by the
snapshot's messages, rendered in the provider's shape, summary first; newer messages follow
unchanged. The rendering depends only on the snapshot, so the rewritten prefix is the same
bytes on every request. Restoring the full transcript (the dashboard's undo) ends the rewrite.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from engine.errors import ContextDeskError
from engine.messages import Message, ToolResultBlock, ToolUseBlock
from engine.proxy.wire import WireApi

#: Seconds between two looks at a session's latest snapshot.
SNAPSHOT_CHECK_S = 0.5
#: Headers that carry an agent's own session id (the proxy's main session id for it).
LIVE_SESSION_HEADERS = ("x-ctxdesk-session", "x-claude-code-session-id", "session_id", "session-id")


def message_key(message: Message) -> tuple[Any, ...]:
    """What must match between a re-sent message and the transcript: role, text, tool ids."""
    blocks = message.content if isinstance(message.content, list) else []
    return (
        "user" if message.role == "tool" else message.role,
        message.text.strip(),
        tuple(b.id for b in blocks if isinstance(b, ToolUseBlock)),
        tuple(b.tool_use_id for b in blocks if isinstance(b, ToolResultBlock)),
    )


@dataclass(frozen=True)
class LiveRewrite:
    messages: list[Any]
    snapshot_id: int
    replaced: int
    through_seq: int


@dataclass
class _Cached:
    checked: float
    snapshot: Any
    keys: list[tuple[Any, ...]]


class LiveCompactions:
    """Looks up a session's latest snapshot (cached briefly) and rewrites matching requests."""

    def __init__(self, db: Any) -> None:
        self._db = db
        self._store: Any = None
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    def _open(self) -> Any:
        if self._store is None:
            from engine.store.factory import open_store

            self._store = open_store(self._db, read_only=True)
        return self._store

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    @staticmethod
    def session_of(headers: Any) -> str | None:
        lowered = {k.lower(): v for k, v in headers.items()}
        return next((lowered[h] for h in LIVE_SESSION_HEADERS if lowered.get(h)), None)

    def current(self, session_id: str) -> _Cached | None:
        now = time.monotonic()
        with self._lock:
            cached = self._cache.get(session_id)
            if cached is not None and now - cached.checked < SNAPSHOT_CHECK_S:
                return cached
            try:
                store = self._open()
                snapshot = store.latest_snapshot(session_id)
            except ContextDeskError:
                snapshot = None
            if snapshot is not None and _is_undo(snapshot):
                snapshot = None
            if snapshot is None:
                cached = _Cached(now, None, [])
            elif cached is not None and cached.snapshot is not None and cached.snapshot.id == snapshot.id:
                cached = _Cached(now, snapshot, cached.keys)
            else:
                stored = [m.message for m in store.load_messages(session_id)][: snapshot.through_seq + 1]
                cached = _Cached(now, snapshot, [message_key(m) for m in stored])
            self._cache[session_id] = cached
            return cached

    def rewrite(self, wire: WireApi, body: dict[str, Any], session_id: str) -> LiveRewrite | None:
        """The request's history with the compacted range replaced, or None (no snapshot, no match;
        a history whose items are not one message each, or with a system head, is left alone)."""
        cached = self.current(session_id)
        if cached is None or cached.snapshot is None or not cached.keys:
            return None
        raw = body.get(wire.history_key)
        if not isinstance(raw, list) or len(raw) < len(cached.keys) or wire.head_length(raw):
            return None
        sent = wire.to_messages(raw)
        if len(sent) != len(raw) or [message_key(m) for m in sent[: len(cached.keys)]] != cached.keys:
            return None
        snapshot = cached.snapshot
        rendered = wire.render(list(snapshot.messages), snapshot.summary, keep_meta=False)
        return LiveRewrite(
            [*rendered, *raw[len(cached.keys) :]], snapshot.id, len(cached.keys), snapshot.through_seq
        )


def _is_undo(snapshot: Any) -> bool:
    """A restore of the whole transcript: nothing to rewrite any more."""
    return (
        snapshot.strategy == "restore"
        and snapshot.message_count == snapshot.through_seq + 1
        and not snapshot.summary
    )
