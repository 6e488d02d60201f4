"""Explain whole sessions: :func:`explain_session` over one session's stored rows (pure), and
:func:`explain_store` reading the sessions of a store (the one function here that reads)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from engine.explain.agents import agent_label, agent_of
from engine.explain.calls import Calls
from engine.explain.compactions import explain_compactions
from engine.explain.ending import explain_ending
from engine.explain.failures import explain_failures
from engine.explain.model import SessionExplanation, WhyReport
from engine.explain.sentences import headline
from engine.store import SessionRecord, SessionStore, Snapshot, StoredEvent, StoredMessage


def explain_session(
    session: SessionRecord,
    messages: Sequence[StoredMessage],
    events: Sequence[StoredEvent],
    snapshots: Mapping[int, Snapshot] | None = None,
) -> SessionExplanation:
    """How one session ended, every compaction and every failed call (pure: rows in, answer out)."""
    messages = sorted(messages, key=lambda m: m.seq)
    events = sorted(events, key=lambda e: e.seq)
    agent = agent_of(session)
    label = agent_label(agent)
    calls = Calls.of(messages, events)
    ended = explain_ending(session, label, messages, events, calls)
    compactions = explain_compactions(session, agent, label, messages, events, calls, snapshots)
    failed = explain_failures(calls, events, label)
    return SessionExplanation(
        session_id=session.id, agent=agent, agent_label=label, title=session.title, ended=ended,
        compactions=compactions, failed_calls=failed, calls=len(calls),
        headline=headline(ended, compactions, failed, label),
    )  # fmt: skip


def explain_store(store: SessionStore, session_ids: Iterable[str] | None = None) -> WhyReport:
    """Explanations of the given sessions of a store (all of them, in the store's order, when None)."""
    ids = list(session_ids) if session_ids is not None else [s.id for s in store.list_sessions()]
    out = []
    for sid in ids:
        session = store.get_session(sid)
        events = store.list_events(sid)
        wanted = {e.details.get("snapshot_id") for e in events if e.kind == "compaction"}
        snapshots = {s.id: s for s in store.list_snapshots(sid) if s.id in wanted} if wanted - {None} else {}
        out.append(explain_session(session, store.load_messages(sid), events, snapshots))
    return WhyReport(sessions=tuple(out))
