"""The context guard: before each request and each tool output, will the prompt still fit?

Decisions are pure functions over counters and targets (:func:`evaluate_target`,
:func:`decide_request`, :func:`decide_tool_output`); :class:`ContextGuard` only holds a turn's
counters and applies decisions. Each decision is frozen and carries its ``guard`` events; the
guard does no I/O beyond logging, the session manager persists the events.

One concept over ~400 lines: the guard's arithmetic, its decisions and the object that applies
them to a turn's counters belong together (each decision's event is built from the same values).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from engine.budget import (
    LEVELS,
    BudgetSettings,
    Level,
    Thresholds,
    classify_level,
    format_note,
)
from engine.debug import LOGGER_NAME, debug
from engine.errors import ValidationError
from engine.events import ComponentTokens, ContextEvent
from engine.limit import Limit
from engine.tokens import Tokenizer, tool_parts

logger = logging.getLogger(LOGGER_NAME)

Trigger = Literal["turn_preflight", "tool_preflight"]
Outcome = Literal["ok", "note", "forced_final", "skipped_provider", "rejected"]

#: Why a turn was forced to end: the request would not fit a target's limit.
REASON_CONTEXT = "context"
#: Why a tool output was rejected: committing it would pass the limit.
REASON_TOKEN_BUDGET = "token_budget_exceeded"
#: Why a tool output was refused: an earlier one was rejected, or the turn is already final.
REASON_TOOLS_REFUSED = "tools_refused"
#: Why a target was skipped: even its floor (see :func:`compute_floor`) passes its limit.
REASON_BELOW_FLOOR = "floor_exceeds_limit"
#: Why the outcome is a note: usage reached the note threshold.
REASON_NOTE = "note_threshold"

FINAL_REPORT_TOOL_NAME = "final_report"
#: The only tool a forced final turn offers: the model reports and the turn ends.
FINAL_REPORT_TOOL: dict[str, Any] = {
    "name": FINAL_REPORT_TOOL_NAME,
    "description": (
        "The context window is nearly full: no other tool can run in this turn. Give the user "
        "your final report: what was done, what was found, and what remains to do."
    ),
    "input_schema": {
        "type": "object",
        "properties": {"report": {"type": "string", "description": "The final report for the user."}},
        "required": ["report"],
    },
}


class GuardSettings(BudgetSettings, Protocol):
    """Resolved settings of one target: the budget fields plus where each came from."""

    @property
    def sources(self) -> Mapping[str, str]: ...


# -- values --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GuardCounters:
    """Tokens of the next request: committed history, this turn's pending and new input, tools."""

    current: int = 0
    pending: int = 0
    new: int = 0
    schema: int = 0

    def __post_init__(self) -> None:
        for name in ("current", "pending", "new", "schema"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValidationError(
                    f"counter {name} must be an int >= 0, got {value!r}", field=name, value=value
                )

    @property
    def projected(self) -> int:
        return self.current + self.pending + self.new + self.schema

    def as_dict(self) -> dict[str, int]:
        return {"current": self.current, "pending": self.pending, "new": self.new, "schema": self.schema}


@dataclass(frozen=True, slots=True)
class GuardTarget:
    """A provider/model the session may send the next request to, with its resolved settings."""

    model: str
    settings: GuardSettings
    provider: str | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> GuardTarget:
        """From ``ResolvedModelSettings``, which names its model and provider."""
        return cls(model=settings.model, settings=settings, provider=settings.provider)

    @property
    def limit(self) -> int:
        """The target's prompt limit in tokens (``engine.limit.Limit.of_settings(...).tokens``)."""
        return Limit.of_settings(self.settings).tokens

    @property
    def thresholds(self) -> Thresholds:
        return Thresholds.from_settings(self.settings)


@dataclass(frozen=True, slots=True)
class TargetEvaluation:
    """One target measured against the counters.

    ``outcome`` is ``skipped_provider`` when even the floor passes the limit, ``forced_final``
    when the projection does, else ``note`` at the note level and ``ok`` otherwise.
    """

    limit: int
    projected: int
    floor: int
    level: Level
    outcome: Literal["ok", "note", "forced_final", "skipped_provider"]

    @property
    def remaining(self) -> int:
        return self.limit - self.projected

    @property
    def fits(self) -> bool:
        return self.projected <= self.limit


@dataclass(frozen=True, slots=True)
class TargetDecision:
    """What the decision means for one target (its event's outcome), with its evaluation."""

    target: GuardTarget
    evaluation: TargetEvaluation
    outcome: Outcome
    reason: str | None
    best_effort: bool = False


@dataclass(frozen=True, slots=True)
class GuardDecision:
    """The guard's answer before a request (``turn_preflight``) or a tool output (``tool_preflight``)."""

    trigger: Trigger
    outcome: Outcome
    reason: str | None
    turn_index: int
    counters: GuardCounters
    targets: tuple[TargetDecision, ...]
    final_forced: bool
    tools_restricted_to: tuple[str, ...] | None
    may_run_tools: bool
    best_effort: bool
    note_text: str | None
    events: tuple[ContextEvent, ...]
    accepted: bool | None = None
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def level(self) -> Level:
        """The highest budget level among usable targets: ``compact`` or ``hard_block`` means the
        session should compact before sending (the guard itself never compacts)."""
        levels = [t.evaluation.level for t in self.targets if t.outcome != "skipped_provider"]
        return max(levels, key=LEVELS.index) if levels else "ok"

    @property
    def usable_targets(self) -> tuple[GuardTarget, ...]:
        return tuple(t.target for t in self.targets if t.outcome != "skipped_provider")

    @property
    def skipped_targets(self) -> tuple[GuardTarget, ...]:
        return tuple(t.target for t in self.targets if t.outcome == "skipped_provider")


# -- pure decisions ------------------------------------------------------------------------------


def compute_floor(counters: GuardCounters, *, fixed_tokens: int, final_schema: int) -> int:
    """The smallest the next request can get: what neither compaction nor restricting tools removes.

    That is the fixed part of the committed history (system prompt, skills: ``fixed_tokens``,
    at most ``current``), this turn's pending and new tokens, and the final_report tool alone.
    """
    return min(fixed_tokens, counters.current) + counters.pending + counters.new + final_schema


def evaluate_target(
    counters: GuardCounters,
    limit: int,
    *,
    thresholds: Thresholds | None = None,
    floor: int = 0,
    extra_tokens: int = 0,
) -> TargetEvaluation:
    """Measure ``counters.projected + extra_tokens`` against ``limit`` (see :class:`TargetEvaluation`)."""
    if limit <= 0:
        raise ValidationError(f"limit must be > 0, got {limit}", field="limit", value=limit)
    if extra_tokens < 0:
        raise ValidationError(
            f"extra_tokens must be >= 0, got {extra_tokens}", field="tokens", value=extra_tokens
        )
    projected = counters.projected + extra_tokens
    level = classify_level(projected, limit, thresholds) if thresholds else "ok"
    outcome: Literal["ok", "note", "forced_final", "skipped_provider"]
    if projected > limit:
        outcome = "skipped_provider" if floor + extra_tokens > limit else "forced_final"
    elif level == "note":
        outcome = "note"
    else:
        outcome = "ok"
    return TargetEvaluation(
        limit=limit, projected=projected, floor=floor + extra_tokens, level=level, outcome=outcome
    )


@dataclass(frozen=True, slots=True)
class RequestPlan:
    """Result of :func:`decide_request`: per-target outcomes and whether the turn becomes final."""

    outcome: Outcome
    reason: str | None
    counters: GuardCounters
    targets: tuple[TargetDecision, ...]
    final_forced: bool
    newly_forced: bool
    best_effort: bool


def decide_request(
    counters: GuardCounters,
    targets: Sequence[GuardTarget],
    *,
    fixed_tokens: int = 0,
    final_schema: int,
    final_reason: str | None = None,
) -> RequestPlan:
    """Decide the next request for every target the session may use.

    A target whose floor passes its limit is skipped, unless every target is: then none is
    skipped and the request proceeds as a best-effort final turn. If any usable target is over
    its limit (or ``final_reason`` says the turn is already final), the turn is final: tools are
    restricted to final_report, the schema counter becomes that tool's cost, and every usable
    target is re-evaluated; those still over are ``best_effort``.
    """
    if not targets:
        raise ValidationError("evaluate_request needs at least one target", field="targets")
    floor = compute_floor(counters, fixed_tokens=fixed_tokens, final_schema=final_schema)
    first = [evaluate_target(counters, t.limit, thresholds=t.thresholds, floor=floor) for t in targets]
    skipped = {i for i, e in enumerate(first) if e.outcome == "skipped_provider"}
    if len(skipped) == len(targets):
        skipped = set()
    over = any(
        e.outcome in ("forced_final", "skipped_provider") for i, e in enumerate(first) if i not in skipped
    )
    final = final_reason is not None or over
    if not final:
        decisions = tuple(
            TargetDecision(t, e, "skipped_provider", REASON_BELOW_FLOOR) if i in skipped else _fitting(t, e)
            for i, (t, e) in enumerate(zip(targets, first, strict=True))
        )
        outcome: Outcome = "note" if any(d.outcome == "note" for d in decisions) else "ok"
        reason = REASON_NOTE if outcome == "note" else None
        return RequestPlan(outcome, reason, counters, decisions, False, False, False)

    reason = final_reason or REASON_CONTEXT
    restricted = replace(counters, schema=final_schema)
    out: list[TargetDecision] = []
    for i, target in enumerate(targets):
        if i in skipped:
            out.append(TargetDecision(target, first[i], "skipped_provider", REASON_BELOW_FLOOR))
            continue
        again = evaluate_target(restricted, target.limit, thresholds=target.thresholds, floor=floor)
        out.append(TargetDecision(target, again, "forced_final", reason, best_effort=not again.fits))
    return RequestPlan(
        outcome="forced_final",
        reason=reason,
        counters=restricted,
        targets=tuple(out),
        final_forced=True,
        newly_forced=final_reason is None,
        best_effort=any(d.best_effort for d in out),
    )


def _fitting(target: GuardTarget, evaluation: TargetEvaluation) -> TargetDecision:
    """The decision for a target the request fits: a note at the note level, else ok."""
    if evaluation.outcome == "note":
        return TargetDecision(target, evaluation, "note", REASON_NOTE)
    return TargetDecision(target, evaluation, "ok", None)


def decide_tool_output(counters: GuardCounters, tokens: int, limits: Sequence[int]) -> bool:
    """True when committing ``tokens`` more keeps the projection within every limit."""
    if tokens < 0:
        raise ValidationError(f"tool output tokens must be >= 0, got {tokens}", field="tokens", value=tokens)
    if not limits:
        raise ValidationError("no target to check the tool output against", field="targets")
    return counters.projected + tokens <= min(limits)


def build_guard_event(
    trigger: Trigger,
    decision: TargetDecision,
    *,
    counters: GuardCounters,
    turn_index: int,
    components: ComponentTokens | None,
    message_seq: int | None,
    details: Mapping[str, Any],
) -> ContextEvent:
    """The ``guard`` event of one target's decision."""
    target, evaluation = decision.target, decision.evaluation
    settings = target.settings
    thresholds = target.thresholds
    event_details: dict[str, Any] = {
        "counters": counters.as_dict(),
        "sources": dict(getattr(settings, "sources", {}) or {}),
        "thresholds": thresholds.as_dict(),
        "level": evaluation.level,
        "floor_tokens": evaluation.floor,
        "best_effort": decision.best_effort,
        **details,
    }
    if settings.context_budget is not None:
        event_details["context_budget"] = settings.context_budget
    if decision.outcome == "note":
        event_details["note"] = format_note(evaluation.projected, evaluation.limit)
    return ContextEvent(
        kind="guard",
        trigger=trigger,
        outcome=decision.outcome,
        reason=decision.reason,
        provider=target.provider,
        model=target.model,
        turn_index=turn_index,
        **Limit.of_settings(settings).columns(),  # the same limit the evaluation used
        projected_tokens=evaluation.projected,
        remaining_tokens=evaluation.remaining,
        components=components,
        message_seq=message_seq,
        details=event_details,
    )


# -- state ---------------------------------------------------------------------------------------


class ContextGuard:
    """A session's counters for the turn in progress, and the guard decisions applied to them.

    ``current`` (committed), ``pending`` (tool outputs and replies of this turn) and ``new``
    (this turn's input) only grow until :meth:`commit_turn`; ``schema`` (tool definitions) is a
    level, replaced by :meth:`set_schema`. Once a turn is final, tools are restricted to
    final_report and no tool output is accepted until the turn commits.

    One concept over ~300 lines: the counters of the turn in progress and every transition of
    them (add, reserve, force final, commit) with the events each records.
    """

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        current: int = 0,
        schema: int = 0,
        turn_index: int = 0,
        final_report_tool: Mapping[str, Any] = FINAL_REPORT_TOOL,
    ) -> None:
        self._counters = GuardCounters(current=current, schema=schema)
        self._final_tool_name = tool_parts(dict(final_report_tool))[0]
        self._final_schema = tokenizer.count_tool(dict(final_report_tool))
        self._final_reason: str | None = None
        self._schema_before_final: int | None = None
        self._targets: tuple[GuardTarget, ...] = ()
        self._last_addition: dict[str, Any] = {}
        self.turn_index = turn_index
        debug(
            "init-counters",
            turn=turn_index,
            **self._counters.as_dict(),
            final_schema=self._final_schema,
            tokenizer=tokenizer.id,
        )

    # -- state views -----------------------------------------------------------------------
    @property
    def counters(self) -> GuardCounters:
        return self._counters

    @property
    def final_schema_tokens(self) -> int:
        """Tokens of the final_report tool definition alone."""
        return self._final_schema

    @property
    def final_forced(self) -> bool:
        return self._final_reason is not None

    @property
    def final_reason(self) -> str | None:
        return self._final_reason

    @property
    def may_run_tools(self) -> bool:
        return self._final_reason is None

    @property
    def tools_restricted_to(self) -> tuple[str, ...] | None:
        return (self._final_tool_name,) if self.final_forced else None

    # -- counters ----------------------------------------------------------------------------
    def add_new(self, tokens: int, *, message_seq: int | None = None) -> GuardCounters:
        """Count this turn's new input (the user's message)."""
        return self._add("new", tokens, message_seq)

    def add_pending(self, tokens: int, *, message_seq: int | None = None) -> GuardCounters:
        """Count tokens produced in this turn and not yet committed (replies, accepted tool outputs)."""
        return self._add("pending", tokens, message_seq)

    def set_schema(self, tokens: int) -> GuardCounters:
        """Set the tokens of the tool definitions sent with the next request."""
        _positive(tokens, "schema")
        if self.final_forced and tokens != self._final_schema:
            raise ValidationError(
                f"tools are restricted to {self._final_tool_name} until the turn commits; "
                f"its schema costs {self._final_schema} tokens, got {tokens}",
                field="schema",
                value=tokens,
            )
        self._counters = replace(self._counters, schema=tokens)
        debug("schema-estimate", turn=self.turn_index, schema=tokens, source="set_schema")
        return self._counters

    def commit_turn(self, *, current: int | None = None) -> GuardCounters:
        """End the turn: pending and new join ``current`` (or ``current`` is set to a measured
        total, e.g. after compaction); the tool restriction and refusals are lifted."""
        committed = self._counters.current + self._counters.pending + self._counters.new
        if current is not None:
            committed = _positive(current, "current")
        schema = self._schema_before_final if self._schema_before_final is not None else self._counters.schema
        self._counters = GuardCounters(current=committed, schema=schema)
        self._final_reason = None
        self._schema_before_final = None
        self._last_addition = {}
        self.turn_index += 1
        debug("init-counters", turn=self.turn_index, **self._counters.as_dict(), source="commit_turn")
        return self._counters

    # -- decisions ---------------------------------------------------------------------------
    def evaluate_request(
        self,
        targets: Sequence[GuardTarget],
        *,
        components: ComponentTokens | None = None,
        fixed_tokens: int | None = None,
        message_seq: int | None = None,
    ) -> GuardDecision:
        """Evaluate the next request against every target; force the final turn if one is over.

        ``fixed_tokens`` is the part of ``current`` no compaction removes; by default the system
        and skills tokens of ``components``. ``components`` is copied onto the events.
        """
        targets = tuple(targets)
        debug(
            "loop-init",
            turn=self.turn_index,
            **self._counters.as_dict(),
            projected=self._counters.projected,
            targets=[t.model for t in targets],
            final_forced=self.final_forced,
        )
        if fixed_tokens is None:
            fixed_tokens = components.system + components.skills if components is not None else 0
        plan = decide_request(
            self._counters,
            targets,
            fixed_tokens=_positive(fixed_tokens, "fixed_tokens"),
            final_schema=self._final_schema,
            final_reason=self._final_reason,
        )
        for d in plan.targets:
            debug(
                "provider-eval",
                provider=d.target.provider,
                model=d.target.model,
                limit=d.evaluation.limit,
                projected=d.evaluation.projected,
                floor=d.evaluation.floor,
                level=d.evaluation.level,
                outcome=d.outcome,
            )
        if plan.newly_forced:
            self._force_final(plan.reason or REASON_CONTEXT)
        self._targets = tuple(d.target for d in plan.targets if d.outcome != "skipped_provider")
        if plan.best_effort:
            over = [d for d in plan.targets if d.best_effort]
            logger.warning(
                "context guard: final turn still over the limit with tools restricted to %s; "
                "proceeding best effort (%s)",
                self._final_tool_name,
                ", ".join(
                    f"{d.target.model}: {d.evaluation.projected:,} > {d.evaluation.limit:,}" for d in over
                ),
            )
        details: dict[str, Any] = {
            "final_forced": plan.final_forced,
            "tools_restricted_to": list(self.tools_restricted_to) if self.tools_restricted_to else None,
            "may_run_tools": self.may_run_tools,
        }
        if plan.outcome == "forced_final" and self._last_addition:
            details["tipping"] = {**self._last_addition}
            if message_seq is not None:
                details["tipping"]["message_seq"] = message_seq
        decision = self._decision(
            "turn_preflight",
            plan.outcome,
            plan.reason,
            plan.targets,
            components=components,
            message_seq=message_seq,
            details=details,
            best_effort=plan.best_effort,
        )
        tightest = min(
            (d.evaluation for d in plan.targets if d.outcome != "skipped_provider"), key=lambda e: e.remaining
        )
        debug(
            "request-metrics",
            turn=self.turn_index,
            outcome=decision.outcome,
            projected=tightest.projected,
            limit=tightest.limit,
            remaining=tightest.remaining,
            components=components.as_dict() if components is not None else None,
        )
        return decision

    def reserve_tool_output(
        self,
        tokens: int,
        *,
        tool_name: str,
        targets: Sequence[GuardTarget] | None = None,
        components: ComponentTokens | None = None,
        message_seq: int | None = None,
    ) -> GuardDecision:
        """Before committing a tool's output: accept it into ``pending``, or reject it.

        Rejected when ``projected + tokens`` passes the smallest limit of the targets (by
        default those the last :meth:`evaluate_request` kept); a rejection forces the final turn
        and every later call in the turn is refused.
        """
        _positive(tokens, "tokens")
        checked = tuple(targets) if targets is not None else self._targets
        if not checked:
            raise ValidationError(
                "reserve_tool_output needs targets: call evaluate_request first or pass targets",
                field="targets",
            )
        counters = self._counters
        evaluations = [
            evaluate_target(counters, t.limit, thresholds=t.thresholds, extra_tokens=tokens) for t in checked
        ]
        refused = not self.may_run_tools
        accepted = not refused and decide_tool_output(counters, tokens, [t.limit for t in checked])
        debug(
            "tool-eval",
            turn=self.turn_index,
            tool_name=tool_name,
            tokens=tokens,
            projected=counters.projected + tokens,
            limit=min(t.limit for t in checked),
            accepted=accepted,
            refused=refused,
        )
        details: dict[str, Any] = {"tool_name": tool_name, "tool_tokens": tokens}
        if accepted:
            self.add_pending(tokens)
            self._last_addition = {"tokens": tokens, "tool_name": tool_name}
            decisions = tuple(_fitting(t, e) for t, e in zip(checked, evaluations, strict=True))
            outcome: Outcome = "note" if any(d.outcome == "note" for d in decisions) else "ok"
            reason = REASON_NOTE if outcome == "note" else None
        else:
            reason = REASON_TOOLS_REFUSED if refused else REASON_TOKEN_BUDGET
            if not refused:
                self._force_final(REASON_TOKEN_BUDGET)
                details["tipping"] = {
                    "tool_name": tool_name,
                    "tokens": tokens,
                    **({"message_seq": message_seq} if message_seq is not None else {}),
                }
            details["rejected_by"] = [
                t.model for t, e in zip(checked, evaluations, strict=True) if not e.fits
            ]
            decisions = tuple(
                TargetDecision(t, e, "rejected", reason) for t, e in zip(checked, evaluations, strict=True)
            )
            outcome = "rejected"
        details.update(
            final_forced=self.final_forced,
            tools_restricted_to=list(self.tools_restricted_to) if self.tools_restricted_to else None,
            may_run_tools=self.may_run_tools,
        )
        return self._decision(
            "tool_preflight",
            outcome,
            reason,
            decisions,
            components=components,
            message_seq=message_seq,
            details=details,
            best_effort=False,
            accepted=accepted,
            evaluated=counters,
        )

    # -- internals ---------------------------------------------------------------------------
    def _add(self, counter: Literal["new", "pending"], tokens: int, message_seq: int | None) -> GuardCounters:
        grown = getattr(self._counters, counter) + _positive(tokens, counter)
        self._counters = replace(self._counters, **{counter: grown})
        self._last_addition = {"tokens": tokens}
        if message_seq is not None:
            self._last_addition["message_seq"] = message_seq
        return self._counters

    def _force_final(self, reason: str) -> None:
        if self._final_reason is not None:
            return
        self._final_reason = reason
        self._schema_before_final = self._counters.schema
        self._counters = replace(self._counters, schema=self._final_schema)
        debug(
            "schema-estimate",
            turn=self.turn_index,
            schema=self._final_schema,
            previous=self._schema_before_final,
            source=self._final_tool_name,
        )
        debug(
            "enforce",
            turn=self.turn_index,
            reason=reason,
            tools_restricted_to=[self._final_tool_name],
            **self._counters.as_dict(),
        )

    def _decision(
        self,
        trigger: Trigger,
        outcome: Outcome,
        reason: str | None,
        decisions: Sequence[TargetDecision],
        *,
        components: ComponentTokens | None,
        message_seq: int | None,
        details: dict[str, Any],
        best_effort: bool,
        accepted: bool | None = None,
        evaluated: GuardCounters | None = None,
    ) -> GuardDecision:
        # Events show the counters their projection was computed from (before a rejection
        # restricted the tools); the decision carries the counters in force afterwards.
        counters = self._counters
        events = tuple(
            build_guard_event(
                trigger,
                d,
                counters=evaluated if evaluated is not None else counters,
                turn_index=self.turn_index,
                components=components,
                message_seq=message_seq,
                details=details,
            )
            for d in decisions
        )
        notes = [d.evaluation for d in decisions if d.outcome == "note"]
        note_text = None
        if notes:
            tightest = max(notes, key=lambda e: e.projected / e.limit)
            note_text = format_note(tightest.projected, tightest.limit)
        return GuardDecision(
            trigger=trigger,
            outcome=outcome,
            reason=reason,
            turn_index=self.turn_index,
            counters=counters,
            targets=tuple(decisions),
            final_forced=self.final_forced,
            tools_restricted_to=self.tools_restricted_to,
            may_run_tools=self.may_run_tools,
            best_effort=best_effort,
            note_text=note_text,
            events=events,
            accepted=accepted,
            details=details,
        )


def _positive(value: int, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValidationError(f"{name} must be an int >= 0, got {value!r}", field=name, value=value)
    return value
