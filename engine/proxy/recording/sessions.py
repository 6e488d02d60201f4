"""Which session a proxied request belongs to, and which of its messages are new.

An agent's own id (header or body) groups its requests; inside a group, and for agents that
send no id, a request whose messages extend an earlier request's continues that thread.
Within one agent id, a request that continues no thread is the main thread rewritten (same
system prompt and tools: the agent compacted) or a sub-agent (different system prompt or
tools: Claude Code's sub-agents share the parent's id), recorded as a child session.
Message identity ignores ``cache_control`` markers, which agents move from call to call
(and a string content given as one text block only to carry such a marker).
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from dataclasses import dataclass, field

#: Threads remembered per proxy run (least recently used forgotten first).
MAX_THREADS = 2_000


@dataclass
class Thread:
    session_id: str
    agent_id: str | None
    fingerprint: str
    hashes: list[str]
    parent_session_id: str | None = None


@dataclass(frozen=True)
class Assignment:
    """Where a request goes: its session, whether to create it, and the first new message."""

    session_id: str
    parent_session_id: str | None
    created: bool
    new_from: int
    continued: bool
    rewritten: bool = False


@dataclass
class SessionResolver:
    """Per-run memory of threads; single-threaded (the recorder's writer thread owns it)."""

    max_threads: int = MAX_THREADS
    _threads: OrderedDict[str, Thread] = field(default_factory=OrderedDict)
    _mains: dict[str, str] = field(default_factory=dict)  # agent id -> main session id
    _sub_counts: dict[str, int] = field(default_factory=dict)

    def main_session(self, agent_id: str | None) -> str | None:
        return self._mains.get(agent_id) if agent_id else None

    def resolve(self, *, agent_id: str | None, fingerprint: str, hashes: list[str]) -> Assignment:
        best: Thread | None = None
        for thread in reversed(self._threads.values()):
            if thread.agent_id != agent_id or len(thread.hashes) > len(hashes):
                continue
            if hashes[: len(thread.hashes)] == thread.hashes and (
                best is None or len(thread.hashes) > len(best.hashes)
            ):
                best = thread
        if best is not None and best.hashes:
            new_from = len(best.hashes)
            return self._keep(
                best, hashes, Assignment(best.session_id, best.parent_session_id, False, new_from, True)
            )
        if agent_id is not None and agent_id in self._mains:
            main = self._threads.get(self._mains[agent_id])
            if main is not None and main.fingerprint == fingerprint:
                common = next(
                    (i for i, (x, y) in enumerate(zip(main.hashes, hashes, strict=False)) if x != y),
                    min(len(main.hashes), len(hashes)),
                )
                return self._keep(
                    main, hashes, Assignment(main.session_id, None, False, common, False, rewritten=True)
                )
            count = self._sub_counts.get(agent_id, 0) + 1
            self._sub_counts[agent_id] = count
            parent = self._mains[agent_id]
            thread = Thread(f"{parent}.sub{count}", agent_id, fingerprint, [], parent_session_id=parent)
            return self._keep(thread, hashes, Assignment(thread.session_id, parent, True, 0, False))
        if best is not None:  # an empty thread (a first request without messages) continues
            return self._keep(
                best, hashes, Assignment(best.session_id, best.parent_session_id, False, 0, True)
            )
        session_id = agent_id or f"proxy-{uuid.uuid4().hex[:16]}"
        if agent_id is not None:
            self._mains[agent_id] = session_id
        thread = Thread(session_id, agent_id, fingerprint, [])
        return self._keep(thread, hashes, Assignment(session_id, None, True, 0, False))

    def _keep(self, thread: Thread, hashes: list[str], assignment: Assignment) -> Assignment:
        thread.hashes = list(hashes)
        self._threads[thread.session_id] = thread
        self._threads.move_to_end(thread.session_id)
        while len(self._threads) > self.max_threads:
            old_id, old = self._threads.popitem(last=False)
            if old.agent_id and self._mains.get(old.agent_id) == old_id:
                del self._mains[old.agent_id]
        return assignment
