"""Which stored sessions descend from which conversation: a fork linked to its origin in either order."""

from __future__ import annotations

from engine.importers.parsing.parsed import ParsedSession
from engine.store import SessionStore


class Lineages:
    """Which stored sessions descend from which conversation (``metadata["lineage_key"]``), read
    once per import batch, so that a fork is linked to its origin (``metadata["forked_from"]``)
    whichever of the two is imported first."""

    def __init__(self, store: SessionStore) -> None:
        self.store = store
        self._by_key: dict[str, list[tuple[str, bool]]] | None = None

    def link(self, parsed: ParsedSession, session_id: str) -> str | None:
        """Record the session; link it to its origin, or its forks to it. Returns its origin's id."""
        if parsed.lineage_key is None:
            return None
        if self._by_key is None:
            self._by_key = {}
            for s in self.store.import_sources():
                if isinstance(s.lineage_key, str):
                    self._by_key.setdefault(s.lineage_key, []).append((s.session_id, bool(s.forked)))
        family = [
            (sid, forked) for sid, forked in self._by_key.get(parsed.lineage_key, []) if sid != session_id
        ]
        self._by_key.setdefault(parsed.lineage_key, []).append((session_id, parsed.forked))
        if parsed.forked:
            origin = next((sid for sid, forked in family if not forked), None)
            if origin is not None:
                self._set_origin(session_id, origin)
            return origin
        for sid, forked in family:
            if forked:
                self._set_origin(sid, session_id)
        return None

    def _set_origin(self, fork_id: str, origin_id: str) -> None:
        fork = self.store.get_session(fork_id)
        if fork.metadata.get("forked_from") != origin_id:
            self.store.update_session(fork_id, metadata={**fork.metadata, "forked_from": origin_id})
