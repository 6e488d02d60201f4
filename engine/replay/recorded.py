"""A stored session as the replay's input: per model call, the history the agent sent
(:func:`engine.sent.sent_end`'s rule, less what the agent's own compactions removed), when it was
sent, the provider's usage and the model. Any source: proxied, imported or run by the session
manager. Edits made in flight by the proxy or by the provider are not the agent's: the history
is the one before them, so a replay can apply other edits in their place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.cache_analysis import parse_utc
from engine.errors import ValidationError
from engine.events import ProviderUsage, is_compaction_call
from engine.messages import Message
from engine.sent import compaction_removals, sent_end
from engine.store import SessionStore

#: Compactions made outside the agent (in flight by ctxdesk's proxy, or by the provider's server):
#: the agent still sent the history they edited.
NOT_THE_AGENTS = frozenset({"proxy", "provider"})


@dataclass(frozen=True)
class RecordedCall:
    """One successful model call of a recorded session, as the agent made it."""

    event_seq: int
    history: tuple[Message, ...]  # what the agent sent, system messages of the transcript included
    at_s: float | None  # when it was sent (epoch seconds), None when not recorded
    usage: ProviderUsage | None  # the provider's count, None when not recorded
    model: str | None
    edited_in_flight: bool  # the proxy edited this request: its usage counts the edited prompt


@dataclass(frozen=True)
class RecordedSession:
    session_id: str
    model: str | None
    provider: str | None
    calls: tuple[RecordedCall, ...]
    failed_calls: int  # calls that failed (no answer, nothing billed): not replayed


def load_recorded_session(store: SessionStore, session_id: str) -> RecordedSession:
    """Every successful model call of a stored session with the history it sent."""
    session = store.get_session(session_id)
    rows = store.load_messages(session_id)
    kinds = {row.seq: row.kind for row in rows}
    turn_ends: dict[int, int] = {}
    for row in rows:
        turn_ends[row.turn_index] = max(turn_ends.get(row.turn_index, 0), row.seq + 1)
    compactions = [e for e in store.list_events(session_id, kind="compaction") if e.outcome == "compacted"]
    calls: list[RecordedCall] = []
    failed = 0
    for event in store.list_events(session_id, kind="request"):
        if event.details.get("failure") or (event.outcome not in (None, "ok")):
            failed += 1
            continue
        if is_compaction_call(event.details) or event.trigger == "provider_compaction":
            continue  # an agent's or provider's summarizing call: the variants make their own
        end = sent_end(
            event.details, event.message_seq, event.turn_index,
            kind_of=kinds.get, turn_end=lambda turn: turn_ends.get(turn, 0),
        )  # fmt: skip
        # less what the call itself left out below its bound (a resumed Gemini CLI history's copies)
        removed = _removed_before(compactions, event.seq) | set(event.messages_excluded)
        history = tuple(row.message for row in rows if row.seq < end and row.seq not in removed)
        edited = any(e.details.get("by") == "proxy" and e.seq < event.seq for e in compactions)
        at = parse_utc(event.details.get("call_utc")) or parse_utc(event.created_utc)
        calls.append(
            RecordedCall(
                event_seq=event.seq, history=history, at_s=at.timestamp() if at else None,
                usage=event.usage, model=event.model or session.model, edited_in_flight=edited,
            )
        )  # fmt: skip
    if not calls and not failed:
        raise ValidationError(f"session {session_id!r} recorded no model call to replay")
    return RecordedSession(session_id, session.model, session.provider, tuple(calls), failed)


def _removed_before(compactions: Sequence[Any], seq: int) -> set[int]:
    removed: set[int] = set()
    for event in compactions:
        details: Mapping[str, Any] = event.details
        if event.seq < seq and details.get("by") not in NOT_THE_AGENTS:
            removed |= compaction_removals(details)[0]
    return removed
