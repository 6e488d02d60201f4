"""When and how the session manager compacts: the target a threshold compaction aims at, and a
run of ``force_compact`` that an automatic compaction keeps alive when the summarizer fails
(truncate needs none; the fallback is recorded as a ``degraded`` event)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from engine.compaction import CompactionReport, Summarizer, force_compact
from engine.errors import SummarizerUnavailableError
from engine.events import ContextEvent, degraded_event
from engine.session.assembly import RequestView
from engine.session.targets import Target
from engine.store import SessionStore

logger = logging.getLogger(__name__)

#: Compaction aims the prompt at this share of the limit (the history gets what the fixed
#: parts, system prompt, skills and tools, leave of it).
COMPACTION_TARGET_SHARE = 0.5
#: Strategy run when the provider rejects a prompt as too long.
EMERGENCY_STRATEGY = "emergency"
#: Strategy an automatic compaction falls back to when the summarizer fails.
SUMMARIZER_FALLBACK_STRATEGY = "truncate"
#: Triggers a person or the model asked for: a summarizer failure is theirs to see, not worked around.
REQUESTED_TRIGGERS = ("manual", "tool")


def compaction_target(view: RequestView) -> int:
    """History tokens a compaction aims at: the target share of the limit, less the fixed parts."""
    fixed = view.components.system + view.components.skills + view.components.tools
    return max(1, int(view.budget.limit.tokens * COMPACTION_TARGET_SHARE) - fixed)


def compaction_event_fields(target: Target, turn_index: int) -> dict[str, Any]:
    """The turn and window a compaction happens in, for force_compact to write with its event."""
    s = target.settings
    return {
        "turn_index": turn_index if turn_index >= 0 else None,
        "provider": target.provider,
        "model": s.model,
        **s.limit.columns(),  # the limit in force (the compaction's own target is details.target_tokens)
    }


class Compactor:
    """Runs ``force_compact`` on one session with its summarizer and the event fields of the
    moment (turn, model, window); ``record`` persists a fallback's ``degraded`` event first;
    ``compacted`` is told of each compaction that ran (the session's history follows the store)."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        *,
        summarizer: Summarizer,
        event_fields: Callable[[], dict[str, Any]],
        record: Callable[[Sequence[ContextEvent]], Any],
        compacted: Callable[[CompactionReport], Any] | None = None,
    ) -> None:
        self.store, self.session_id = store, session_id
        self.summarizer, self.event_fields, self.record = summarizer, event_fields, record
        self.compacted = compacted

    def run(
        self, strategy: Any, *, trigger: str, target_tokens: int | None, instructions: str | None = None
    ) -> CompactionReport:
        try:
            report = self._run(strategy, trigger, target_tokens, instructions)
        except SummarizerUnavailableError as exc:
            if trigger in REQUESTED_TRIGGERS:
                raise
            # An automatic compaction must still make room: truncate needs no summarizer.
            logger.warning("summarizer failed during %s compaction, truncating instead: %s", trigger, exc)
            self.record(
                [degraded_event("compaction", exc, fallback=SUMMARIZER_FALLBACK_STRATEGY, trigger=trigger)]
            )
            report = self._run(SUMMARIZER_FALLBACK_STRATEGY, trigger, target_tokens, instructions)
        if self.compacted is not None:
            self.compacted(report)
        return report

    def at_threshold(self, strategy: Any, level: str, view: RequestView) -> CompactionReport:
        """The compaction the guard's ``level`` (compact or hard_block) calls for before ``view`` is
        sent; at the hard block, when ``strategy`` made no room enough, the default chain too
        (blocking is worse than losing detail: it ends in truncate). Returns the last report."""
        trigger = "hard_block" if level == "hard_block" else "compact_threshold"
        target = compaction_target(view)
        report = self.run(strategy, trigger=trigger, target_tokens=target)
        if level == "hard_block" and not report.noop and not report.fits:
            report = self.run("chain", trigger=trigger, target_tokens=target)
        return report

    def _run(
        self, strategy: Any, trigger: str, target_tokens: int | None, instructions: str | None
    ) -> CompactionReport:
        return force_compact(
            self.store,
            self.session_id,
            strategy=strategy,
            instructions=instructions,
            summarizer=self.summarizer,
            target_tokens=target_tokens,
            trigger=trigger,
            event_fields=self.event_fields(),
        )
