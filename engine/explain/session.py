"""Explain whole sessions: :func:`explain_session` over one session's stored rows (pure), and
:func:`explain_store` reading the sessions of a store (the one function here that reads)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from engine.explain.agents import agent_label, agent_of
from engine.explain.calls import Calls
from engine.explain.compactions import explain_compactions
from engine.explain.ending import explain_ending
from engine.explain.explanations import SessionExplanation, WhyReport
from engine.explain.failures import explain_failures
from engine.explain.sentences import headline
from engine.store import SessionRecord, SessionStore, Snapshot, StoredEvent, StoredMessage

#: Messages read from the end of a transcript when only its ending is asked for.
TAIL = 8


def explain_session(
    session: SessionRecord,
    messages: Sequence[StoredMessage],
    events: Sequence[StoredEvent],
    snapshots: Mapping[int, Snapshot] | None = None,
    *,
    detail: bool = True,
) -> SessionExplanation:
    """How one session ended, every compaction and every failed call (pure: rows in, answer out).
    Without ``detail`` the compactions leave out what they kept and dropped (a list of many sessions)."""
    messages = sorted(messages, key=lambda m: m.seq)
    events = sorted(events, key=lambda e: e.seq)
    agent = agent_of(session)
    label = agent_label(agent)
    calls = Calls.of(messages, events)
    ended = explain_ending(session, label, messages, events, calls)
    compactions = explain_compactions(
        session, agent, label, messages, events, calls, snapshots, detail=detail
    )
    failed = explain_failures(calls, events, label)
    return SessionExplanation(
        session_id=session.id, agent=agent, agent_label=label, title=session.title, ended=ended,
        compactions=compactions, failed_calls=failed, calls=len(calls),
        headline=headline(ended, compactions, failed, label),
    )  # fmt: skip


def explain_store(
    store: SessionStore, session_ids: Iterable[str] | None = None, *, detail: bool = True
) -> WhyReport:
    """Explanations of the given sessions of a store (all of them, in the store's order, when None)."""
    ids = list(session_ids) if session_ids is not None else [s.id for s in store.list_sessions()]
    out = []
    for sid in ids:
        session = store.get_session(sid)
        events = store.list_events(sid)
        wanted = {e.details.get("snapshot_id") for e in events if e.kind == "compaction"}
        snapshots = (
            {s.id: s for s in store.list_snapshots(sid) if s.id in wanted}
            if detail and wanted - {None}
            else {}
        )
        # Without detail only the end of the transcript matters (how it ended), when calls are events.
        start = (
            0 if detail or not any(e.kind == "request" for e in events) else store.message_count(sid) - TAIL
        )
        out.append(
            explain_session(
                session, store.load_messages(sid, from_seq=max(start, 0)), events, snapshots, detail=detail
            )
        )
    return WhyReport(sessions=tuple(out))
