"""What ``ctxdesk why`` and the "Why did it stop?" page say about a session, as frozen models.

The words of :data:`END_CAUSES`, :data:`COMPACTION_BY` and :data:`COMPACTION_TRIGGERS` are a
commitment (issue #30): scripts match on them. :meth:`WhyReport.to_json` writes exactly the
documented shape (docs/why.schema.json); the other fields feed the sentences and the page.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

EndCause = Literal[
    "finished",
    "max_tokens",
    "refusal",
    "interrupted",
    "provider_error",
    "prompt_too_long",
    "forced_final",
    "policy_refused",
    "unknown",
]
END_CAUSES: tuple[str, ...] = get_args(EndCause)
CompactionBy = Literal["agent", "ctxdesk", "proxy", "user"]
COMPACTION_BY: tuple[str, ...] = get_args(CompactionBy)
CompactionTrigger = Literal["auto", "manual", "reactive", "policy", "threshold"]
COMPACTION_TRIGGERS: tuple[str, ...] = get_args(CompactionTrigger)
ItemKind = Literal["instruction", "file", "error", "command"]
ITEM_KINDS: tuple[str, ...] = get_args(ItemKind)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class Ending(_Frozen):
    """How the session ended: a cause from :data:`END_CAUSES`, the call it happened at, and why."""

    cause: EndCause
    call: int | None = Field(description="The model call (counted from 1, as the timeline) it ended at.")
    detail: str = Field(description="The evidence, in one sentence.")


class ContextItem(_Frozen):
    """One thing a compaction had to carry over: an instruction, a file, an error, a command."""

    kind: ItemKind
    text: str = Field(description="The instruction's words, the file's path, the error's line, the command.")
    seq: int | None = Field(None, description="Transcript seq of the message it came from.")
    detail: str | None = Field(None, description="Why it counts as kept or dropped.")


class CompactionExplanation(_Frozen):
    """One compaction: who, why, how big before and after, against which limit and threshold."""

    event_seq: int
    call: int | None = Field(description="The last model call before it (the one whose size it answered).")
    by: CompactionBy
    trigger: CompactionTrigger
    tokens_before: int | None
    tokens_after: int | None
    reached_tokens: int | None = Field(
        None,
        description="The estimate that set it off (ctxdesk: the guard's projection of the request; agents: tokens before).",
    )
    last_call_tokens: int | None = Field(
        None,
        description="What the provider counted for the call before it (prompt and output): what an agent compares.",
    )
    next_call_tokens: int | None = Field(
        None,
        description="What the provider counted for the first call after it (its prompt): the context the "
        "session went on with, on the same footing as the call before (system prompt and tools included).",
    )
    limit_tokens: int | None = Field(
        description="The limit in force for the call before it, as every page shows it (engine.limit)."
    )
    window_tokens: int | None = Field(None, description="The model's context window recorded for that call.")
    threshold_tokens: int | None
    threshold_rule: str | None = Field(None, description="How the threshold was known, in words.")
    agent_setting: dict[str, Any] = Field(default_factory=dict)
    instructions: str | None = None
    after_failed_call: int | None = Field(None, description="The failed call a reactive compaction followed.")
    kept: tuple[ContextItem, ...] = ()
    dropped: tuple[ContextItem, ...] = ()
    sentence: str = ""

    @property
    def share(self) -> float | None:
        """How close the call came: the estimate that set it off as a share of the limit."""
        reached = self.reached_tokens if self.reached_tokens is not None else self.tokens_before
        if reached is None or not self.limit_tokens:
            return None
        return reached / self.limit_tokens


class FailedCall(_Frozen):
    """A model call that got no answer: its cause, the provider's words (redacted), what came next."""

    event_seq: int
    call: int
    cause: str
    status: int | None
    message: str | None
    next: str
    prompt_tokens: int | None = None
    maximum_tokens: int | None = None
    sentence: str = ""


class SessionExplanation(_Frozen):
    """Everything ``ctxdesk why`` says about one session."""

    session_id: str
    agent: str = Field(
        description="Who ran it: claude-code, codex, gemini, ..., ctxdesk (the session manager), proxy."
    )
    agent_label: str = Field(description="The agent's name for people (Claude Code, Codex, ...).")
    title: str | None
    ended: Ending
    compactions: tuple[CompactionExplanation, ...] = ()
    failed_calls: tuple[FailedCall, ...] = ()
    calls: int = 0
    headline: str = Field("", description="The one sentence the page shows first.")

    @property
    def ended_how(self) -> tuple[str, ...]:
        """The Sessions filter's words that fit: finished, forced, failed, interrupted, compacted."""
        return ended_how(self.ended.cause, compacted=bool(self.compactions))

    def to_json(self) -> dict[str, Any]:
        """This session in the documented JSON shape (exactly its keys)."""
        return {
            "session_id": self.session_id,
            "agent": self.agent,
            "title": self.title,
            "ended": self.ended.model_dump(mode="json"),
            "compactions": [
                {
                    **c.model_dump(mode="json", include=set(_COMPACTION_KEYS)),
                    "kept": [i.model_dump(mode="json") for i in c.kept],
                    "dropped": [i.model_dump(mode="json") for i in c.dropped],
                }
                for c in self.compactions
            ],
            "failed_calls": [f.model_dump(mode="json", include=set(_FAILED_KEYS)) for f in self.failed_calls],
        }


_COMPACTION_KEYS = (
    "call", "by", "trigger", "tokens_before", "tokens_after", "limit_tokens", "window_tokens", "threshold_tokens",
    "instructions",
)  # fmt: skip
_FAILED_KEYS = ("call", "cause", "status", "message", "next")

#: The Sessions page's "ended how" words, and the end causes each one gathers.
ENDED_HOW: dict[str, frozenset[str]] = {
    "finished": frozenset({"finished"}),
    "forced": frozenset({"forced_final", "policy_refused"}),
    "failed": frozenset({"provider_error", "prompt_too_long", "max_tokens", "refusal"}),
    "interrupted": frozenset({"interrupted"}),
}
ENDED_HOW_WORDS: tuple[str, ...] = (*ENDED_HOW, "compacted", "unknown")


def ended_how(cause: str, *, compacted: bool) -> tuple[str, ...]:
    """The "ended how" words a session with this end cause (and compactions or not) belongs to."""
    words = [word for word, causes in ENDED_HOW.items() if cause in causes] or ["unknown"]
    return (*words, "compacted") if compacted else tuple(words)


class WhyReport(_Frozen):
    """``ctxdesk why``'s answer: one explanation per session asked for."""

    sessions: tuple[SessionExplanation, ...]

    def to_json(self) -> dict[str, Any]:
        return {"sessions": [s.to_json() for s in self.sessions]}
