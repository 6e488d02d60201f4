"""The session's one guard and its lifecycle.

A :class:`SessionGuard` lives as long as its session manager. Its counters are set from a
measured request (a *rebase*) when a turn starts or compaction replaced the history, grow by
each reply and tool output in between (``add_pending``, ``reserve_tool_output``), and every
request is evaluated against every target. A forced final turn survives an emergency
compaction; a new turn lifts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from engine.guard import ContextGuard, GuardDecision
from engine.messages import Message
from engine.session.assembly import RequestView
from engine.session.targets import Target
from engine.tokens import Tokenizer

#: When the guard's counters are next set from a measured request: a new turn (its user
#: message is this turn's "new" input), or a history replaced by compaction (all committed).
Rebase = Literal["turn", "history"]


class SessionGuard:
    """A session's :class:`ContextGuard` (``guard``) and when its counters are next rebased."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.guard = ContextGuard(tokenizer)
        self.rebase: Rebase | None = "turn"

    @property
    def final_forced(self) -> bool:
        return self.guard.final_forced

    def start_turn(self) -> None:
        self.rebase = "turn"

    def history_replaced(self) -> None:
        self.rebase = self.rebase or "history"

    def rebase_due(self) -> bool:
        """Whether the next request sets the counters: a new turn always; a replaced history only
        outside a final turn (which keeps its restriction through an emergency compaction)."""
        return self.rebase == "turn" or (self.rebase is not None and not self.guard.final_forced)

    def rebase_from(self, view: RequestView, turn_index: int, new_input: Message | None = None) -> None:
        """Set the counters from a measured request; ``new_input`` is a turn's user message (its
        new input), None after compaction (everything committed). Lifts a forced final turn."""
        components = view.components
        new = self.tokenizer.count_message(new_input) if new_input is not None else 0
        self.guard.commit_turn(current=components.total - components.tools - new)
        self.guard.turn_index = turn_index
        if new:
            self.guard.add_new(new)
        self.rebase = None

    def evaluate(
        self, view: RequestView, targets: Sequence[Target], message_seq: int | None
    ) -> GuardDecision:
        """The guard's decision on a request against every target (the tool schema as sent, except
        in a final turn, whose schema is the final_report tool the guard set)."""
        if not self.guard.final_forced:
            self.guard.set_schema(view.components.tools)
        return self.guard.evaluate_request(
            [t.guard_target for t in targets], components=view.components, message_seq=message_seq
        )

    def add_reply(self, tokens: int, message_seq: int) -> None:
        """The reply is part of the next request: tool outputs are reserved on top of it."""
        self.guard.add_pending(tokens, message_seq=message_seq)
