"""The model calls of a session, numbered from 1 as the timeline numbers them.

A call is a ``request`` event (failed ones included: the agent sent them). A source that records
no request events (an old import) has one call per assistant message instead.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Sequence
from dataclasses import dataclass

from engine.call_failures import failure_of
from engine.events import is_compaction_call
from engine.store import StoredEvent, StoredMessage

#: Request outcomes that are answers (None: a source that records no outcome).
OK_OUTCOMES = frozenset({None, "ok"})


@dataclass(frozen=True, slots=True)
class Call:
    number: int
    event: StoredEvent | None
    message_seq: int | None

    @property
    def position(self) -> int:
        """Where the call sits among the session's events (its event seq; else its reply's message)."""
        return self.event.seq if self.event is not None else (self.message_seq or 0)

    @property
    def failed(self) -> bool:
        return self.event is not None and is_failed_request(self.event)

    @property
    def is_compaction_call(self) -> bool:
        """The agent's own summarising call (Claude Code's compaction request)."""
        return self.event is not None and is_compaction_call(self.event.details)


def is_failed_request(event: StoredEvent) -> bool:
    """A request event that got no answer: a failure record, or an outcome other than ok."""
    return failure_of(event.details) is not None or event.outcome not in OK_OUTCOMES


@dataclass(frozen=True)
class Calls:
    """The calls in order, and lookups by position among the events."""

    calls: tuple[Call, ...]
    by_events: bool

    @classmethod
    def of(cls, messages: Sequence[StoredMessage], events: Sequence[StoredEvent]) -> Calls:
        requests = sorted((e for e in events if e.kind == "request"), key=lambda e: e.seq)
        if requests:
            return cls(tuple(Call(i, e, e.message_seq) for i, e in enumerate(requests, 1)), True)
        replies = [m for m in messages if m.message.role == "assistant"]
        return cls(tuple(Call(i, None, m.seq) for i, m in enumerate(replies, 1)), False)

    def __len__(self) -> int:
        return len(self.calls)

    @property
    def last(self) -> Call | None:
        return self.calls[-1] if self.calls else None

    def of_event(self, event_seq: int) -> Call | None:
        for call in self.calls:
            if call.event is not None and call.event.seq == event_seq:
                return call
        return None

    def before(self, event: StoredEvent) -> list[Call]:
        """Calls made before ``event`` (by event order; by message when calls are replies)."""
        if self.by_events:
            at = bisect.bisect_left([c.position for c in self.calls], event.seq)
            return list(self.calls[:at])
        limit = event.message_seq if event.message_seq is not None else -1
        return [c for c in self.calls if (c.message_seq or 0) <= limit]

    @functools.cached_property
    def _reply_seqs(self) -> list[int]:
        return [c.message_seq if c.message_seq is not None else -1 for c in self.calls]

    def at_message(self, message_seq: int) -> int | None:
        """The number of the call whose reply is the message at ``message_seq``, or the first after it."""
        at = bisect.bisect_left(self._reply_seqs, message_seq)
        return self.calls[at].number if at < len(self.calls) else None

    def after(self, event: StoredEvent) -> list[Call]:
        earlier = {c.number for c in self.before(event)}
        return [c for c in self.calls if c.number not in earlier and c.position != event.seq]
