"""Typed records of what the engine decided: component token breakdowns, provider usage, events.

These are plain values built by the pure layers (budget, guard, compaction, offload) and
persisted by the session manager into ``context_events``; nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.limit import LimitColumns, recorded_limit

__all__ = [
    "COMPONENTS",
    "COMPONENT_COLORS",
    "COMPONENT_LABELS",
    "OUTCOME_MARKERS",
    "ComponentTokens",
    "ComponentsBasis",
    "ContextEvent",
    "EventKind",
    "ProviderUsage",
    "degraded_event",
    "outcome_marker",
]

EventKind = Literal[
    "guard",
    "request",
    "compaction",
    "offload",
    "deferral",
    "tool_search",
    "note",
    "degraded",
    "resume",
    "restore",
]
COMPONENTS = ("system", "skills", "tools", "summary", "conversation", "tool_results", "unattributed")
#: How a call's components were known: ``exact`` (counted with the provider's own tokenizer and adding
#: up to the provider's count), ``reconciled`` (our measure made to add up to the provider's count,
#: ``engine.components.reconcile``), ``estimate`` (our measure alone: the call has no provider count).
ComponentsBasis = Literal["exact", "reconciled", "estimate"]
#: How the dashboard and the HTML report name each component (one place, so they never disagree).
COMPONENT_LABELS: dict[str, str] = {
    "system": "System prompt",
    "skills": "Skills",
    "tools": "Tool descriptions",
    "summary": "Summary",
    "conversation": "Conversation",
    "tool_results": "Tool results",
    "unattributed": "Harness, unattributed",
}
#: The colour each component is drawn in, on the dashboard and in the HTML report.
COMPONENT_COLORS: dict[str, str] = {
    "system": "#4c78a8",
    "skills": "#72b7b2",
    "tools": "#f58518",
    "summary": "#b279a2",
    "conversation": "#54a24b",
    "tool_results": "#e45756",
    "unattributed": "#bab0ac",
}

#: Context events drawn as a marker on a timeline (the dashboard's and the HTML report's):
#: (kind, outcome) -> (label, colour). A restore is marked whatever its outcome (outcome None).
OUTCOME_MARKERS: dict[tuple[str, str | None], tuple[str, str]] = {
    ("compaction", "compacted"): ("Compaction", "#7f3c8d"),
    ("guard", "forced_final"): ("Forced final turn", "#d62728"),
    ("guard", "rejected"): ("Tool result refused", "#d62728"),
    ("guard", "skipped_provider"): ("Skipped provider", "#ff7f0e"),
    ("restore", None): ("Restore", "#17becf"),
}


def outcome_marker(kind: str, outcome: str | None) -> tuple[str, str] | None:
    """(label, colour) of an event drawn as a timeline marker, or None for an event that is not."""
    return OUTCOME_MARKERS.get((kind, outcome)) or OUTCOME_MARKERS.get((kind, None))


class ComponentTokens(BaseModel):
    """Tokens of one request by component; ``offloaded_bytes`` is reported, not counted."""

    model_config = ConfigDict(frozen=True)

    system: int = Field(0, ge=0, description="Assembled system prompt.")
    skills: int = Field(0, ge=0, description="Skill prompts.")
    tools: int = Field(0, ge=0, description="Tool definitions sent.")
    summary: int = Field(0, ge=0, description="Injected compaction summary.")
    conversation: int = Field(0, ge=0, description="History messages, tool-result content excluded.")
    tool_results: int = Field(0, ge=0, description="Tool-result content in the history.")
    unattributed: int = Field(
        0,
        ge=0,
        description="Prompt tokens the provider counted that no measured component accounts for (harness"
        " text, framing): set only by engine.components.reconcile.",
    )
    offloaded_bytes: int = Field(
        0, ge=0, description="Bytes held in the result store instead of the context."
    )

    @property
    def total(self) -> int:
        return (
            self.system
            + self.skills
            + self.tools
            + self.summary
            + self.conversation
            + self.tool_results
            + self.unattributed
        )

    @property
    def measured(self) -> int:
        """What our own measure accounts for: the total less ``unattributed``."""
        return self.total - self.unattributed

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in (*COMPONENTS, "offloaded_bytes")}


class ProviderUsage(BaseModel):
    """The provider's own count for one call: input + cache writes + cache reads is the whole prompt."""

    model_config = ConfigDict(frozen=True)

    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cache_read_input_tokens: int = Field(0, ge=0)
    cache_creation_input_tokens: int = Field(0, ge=0)

    @property
    def prompt_tokens(self) -> int:
        return self.input_tokens + self.cache_read_input_tokens + self.cache_creation_input_tokens

    @classmethod
    def from_prompt_total(
        cls, prompt: int, output: int = 0, *, cache_read: int = 0, cache_write: int = 0
    ) -> ProviderUsage:
        """From a count of the whole prompt, cache reads and writes included (OpenAI's
        ``prompt_tokens``): the input is what is left uncached, never below zero."""
        return cls(
            input_tokens=max(0, prompt - cache_read - cache_write),
            output_tokens=output,
            cache_read_input_tokens=cache_read,
            cache_creation_input_tokens=cache_write,
        )


class ContextEvent(BaseModel):
    """One decision or observation, as stored in ``context_events``."""

    model_config = ConfigDict(frozen=True)

    kind: EventKind
    trigger: str | None = None
    outcome: str | None = None
    reason: str | None = None
    provider: str | None = None
    model: str | None = None
    turn_index: int | None = None
    context_window: int | None = None
    max_output_tokens: int | None = None
    buffer_tokens: int | None = None
    limit_tokens: int | None = None
    projected_tokens: int | None = None
    remaining_tokens: int | None = None
    components: ComponentTokens | None = None
    components_basis: ComponentsBasis | None = None
    usage: ProviderUsage | None = None
    message_seq: int | None = None
    details: dict[str, Any] = Field(default_factory=dict)
    #: Transcript seqs below ``details["messages_sent"]`` the request did not send (a compaction's
    #: summarizer leaves out what it keeps): what it sent is not always a prefix (engine.sent).
    messages_excluded: tuple[int, ...] = ()

    @property
    def effective_limit(self) -> int | None:
        """The limit this call is measured against (:func:`engine.limit.recorded_limit`)."""
        return recorded_limit(self)


#: What a request event says about its limit (``engine.limit.LimitColumns``).
LimitFields = LimitColumns


def is_compaction_call(details: Mapping[str, Any]) -> bool:
    """A request event that is the agent's own summarizing call (``details.compaction_call``; files
    imported before that was the one name for it said ``compaction_summary``)."""
    return bool(details.get("compaction_call") or details.get("compaction_summary"))


def effective_limit(event: LimitColumns) -> int | None:
    """Alias of :func:`engine.limit.recorded_limit`: the limit a recorded call is measured against."""
    return recorded_limit(event)


def degraded_event(subsystem: str, error: BaseException, *, fallback: str, **details: Any) -> ContextEvent:
    """The event a subsystem records when it fell back to the plain behaviour."""
    return ContextEvent(
        kind="degraded",
        trigger=subsystem,
        outcome=fallback,
        reason=f"{subsystem} failed, fell back to {fallback}: {error}",
        details={"subsystem": subsystem, "error": f"{type(error).__name__}: {error}", **details},
    )
