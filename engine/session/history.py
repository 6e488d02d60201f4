"""The session's history and every write to its transcript: the one place that state changes.

:class:`SessionHistory` holds what the next request sends (compacted; the whole transcript is in
the store), its running component totals, the summary, the turn and the next transcript seq, and
this turn's user message until the model answers. Messages are written with their events in one
transaction; events are stamped with the turn they happen in. :func:`open_history` creates the
session's row (or checks the stored one a resume continues).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from engine.budget import HistoryTotals
from engine.errors import ValidationError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.prompt import AnthropicHistory
from engine.session.targets import Target
from engine.store import SessionStore
from engine.store.payloads import RequestRecord
from engine.tokens import Tokenizer


def open_history(
    store: SessionStore,
    tokenizer: Tokenizer,
    primary: Target,
    settings_json: dict[str, Any],
    *,
    session_id: str | None,
    resume: bool,
    title: str | None,
    metadata: Mapping[str, Any] | None,
) -> SessionHistory:
    """The history of a new session (its row created with the primary model and the settings in
    force), or of a stored one to resume (loaded by :meth:`SessionHistory.load`)."""
    if resume:
        if session_id is None:
            raise ValidationError("resume needs a session_id", field="session_id")
        store.get_session(session_id)
    else:
        session_id = store.create_session(
            session_id=session_id,
            title=title,
            model=primary.settings.model,
            provider=primary.provider,
            tokenizer=tokenizer.id,
            tokens_exact=tokenizer.exact,
            settings=settings_json,
            metadata=dict(metadata or {}),
        )
    return SessionHistory(store, session_id, tokenizer)


class SessionHistory:
    """The history sent with the next request and the transcript it is written to."""

    def __init__(self, store: SessionStore, session_id: str, tokenizer: Tokenizer) -> None:
        self.store, self.session_id, self.tokenizer = store, session_id, tokenizer
        self.messages: list[Message] = []
        # Running conversation / tool-result tokens of ``messages``: updated per appended message,
        # recounted only when the history is replaced, so a model call costs the same at any length.
        self.totals = HistoryTotals(tokenizer)
        # The history rendered for the provider, each message once (a turn converts only its own).
        self.rendered = AnthropicHistory()
        self.summary: str | None = None
        self.next_seq = 0
        self.turn_index = -1
        # This turn's user message until the model answers: in ``messages`` (it is sent) but written
        # with the first reply, so a turn that fails before any answer leaves the transcript as it was.
        self.pending: tuple[Message, Sequence[ContextEvent]] | None = None

    def load(self) -> int:
        """Continue the stored session from its latest snapshot plus later messages; returns the
        snapshot's ``through_seq`` (-1 without one)."""
        self.messages, self.summary, through_seq = self.store.load_resume_history(self.session_id)
        rows = self.store.load_messages(self.session_id, from_seq=max(through_seq, 0))
        self.totals.reset(self.messages)
        self.next_seq = self.store.message_count(self.session_id)
        self.turn_index = rows[-1].turn_index if rows else -1
        return through_seq

    @property
    def sent_seq(self) -> int | None:
        """The transcript seq of the last message the next request sends."""
        return self.next_seq - 1 if self.next_seq else None

    @property
    def written_seq(self) -> int | None:
        """The seq of the last message written (this turn's input is not, until the model answers)."""
        last = self.next_seq - (2 if self.pending is not None else 1)
        return last if last >= 0 else None

    def stamp(self, event: ContextEvent, **fields: Any) -> ContextEvent:
        update = {k: v for k, v in fields.items() if getattr(event, k) is None}
        if event.turn_index is None and self.turn_index >= 0:
            update["turn_index"] = self.turn_index
        return event.model_copy(update=update) if update else event

    def record(
        self, events: Sequence[ContextEvent], *, exact: RequestRecord | None = None, **fields: Any
    ) -> list[int]:
        """Record events in one transaction, stamped with the turn (and ``fields`` they lack); the
        last one's exact request with them when given."""
        if not events:
            return []
        with self.store.transaction():
            ids = [self.store.record_event(self.session_id, self.stamp(e, **fields)) for e in events]
            self._record_exact(exact, ids[-1])
        return ids

    def _record_exact(self, exact: RequestRecord | None, event_id: int) -> None:
        if exact is not None:
            self.store.record_request(self.session_id, exact.model_copy(update={"event_id": event_id}))

    def start_turn(self, message: Message, events: Sequence[ContextEvent]) -> None:
        """A new turn: its user message joins the history now and is written with the first reply."""
        self.turn_index += 1
        self.pending = (message, events)
        self.messages.append(message)
        self.totals.extend([message])
        self.next_seq += 1  # the seq it will be written at

    def append(
        self,
        messages: Sequence[Message],
        *,
        usage: ProviderUsage | None = None,
        events: Sequence[ContextEvent] = (),
        exact: RequestRecord | None = None,
    ) -> None:
        """Append messages (after this turn's user message, if not written yet) and record events in
        one transaction; the last event's exact request with them when given."""
        pending, pending_events = self.pending or (None, ())
        stored = [pending, *messages] if pending is not None else list(messages)
        usages = [None] * (len(stored) - len(messages)) + [usage] * len(messages)
        with self.store.transaction():
            rows = self.store.append_messages(
                self.session_id, stored, tokenizer=self.tokenizer, usages=usages
            )
            for event in pending_events:
                self.store.record_event(self.session_id, self.stamp(event, message_seq=rows[0].seq))
            ids = [
                self.store.record_event(self.session_id, self.stamp(e, message_seq=rows[-1].seq))
                for e in events
            ]
            if ids:
                self._record_exact(exact, ids[-1])
        self.pending = None
        self.messages.extend(messages)
        self.totals.extend(messages)
        self.next_seq = rows[-1].seq + 1

    def reload(self) -> None:
        """Compaction rebuilt what is stored: the history follows it (with this turn's input)."""
        self.messages, self.summary, _ = self.store.load_resume_history(self.session_id)
        if self.pending is not None:
            self.messages.append(self.pending[0])
        self.totals.reset(self.messages)

    def drop_pending(self) -> None:
        """The turn failed before the model answered: its user message is forgotten, unwritten."""
        self.pending = None
        self.messages.pop()
        self.totals.reset(self.messages)
        self.next_seq -= 1
        self.turn_index -= 1
