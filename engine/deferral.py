"""Tool deferral: when tool definitions cost more than their budget, MCP then skill tools wait
behind ``tool_search`` (least recently used first); builtin tools are always sent.

``plan_deferral`` is the pure decision; ``search_tools`` ranks deferred tools with BM25F over
name, parameter names and description (:mod:`engine.tool_ranking`); ``ToolRegistry`` holds one session's tools, promotes
search hits for the current turn, and records ``tool_search`` events. ``defer_or_load_all`` is
what the session manager calls: if planning fails, every tool is loaded and a ``degraded``
event says why.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.errors import TokenizerError, ValidationError
from engine.events import ContextEvent, degraded_event
from engine.limit import threshold_tokens
from engine.tokens import Tokenizer, tool_parts
from engine.tool_ranking import (  # noqa: F401  (the ranking's names, re-exported from here as before)
    BM25_B,
    BM25_K1,
    FIELD_WEIGHTS,
    NAME_COVERAGE_BOOST,
    bm25f_scores,
    split_tool_name,
    tokenize,
    tool_fields,
)

ToolCategory = Literal["builtin", "mcp", "skill"]

#: Share of the effective context window tool definitions may take before deferral starts.
DEFAULT_TOOL_SHARE = 0.10
#: Tools tool_search returns when the model does not say, and the most it may ask for.
DEFAULT_SEARCH_K = 5
MAX_SEARCH_K = 20
#: Deferral order: lower first. Builtin tools are never deferred.
_DEFER_ORDER: dict[str, int] = {"mcp": 0, "skill": 1}

TOOL_SEARCH_TOOL: dict[str, Any] = {
    "name": "tool_search",
    "description": (
        "Find tools that are available but not loaded, to save context. Describe what you want "
        'to do in a few words (e.g. "create a pull request", "query the database"); the best '
        "matching tools are returned with their input schemas and become callable for the rest "
        "of this turn."
    ),
    "input_schema": {
        "type": "object",
        "properties": {
            "query": {"type": "string", "description": "What the tool should do, in a few keywords."},
            "k": {
                "type": "integer",
                "minimum": 1,
                "maximum": MAX_SEARCH_K,
                "default": DEFAULT_SEARCH_K,
                "description": "How many tools to return at most.",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    },
}


class ToolSpec(BaseModel):
    """One tool definition offered to the model, with what deferral needs to know about it."""

    model_config = ConfigDict(frozen=True)

    definition: dict[str, Any] = Field(description="The definition as sent (Anthropic or OpenAI shape).")
    category: ToolCategory = Field("builtin", description="builtin tools are never deferred.")
    server: str | None = Field(None, description="MCP server name, for mcp tools.")
    last_used_turn: int | None = Field(None, description="Turn index of the last call; None if never called.")

    @property
    def name(self) -> str:
        return tool_parts(self.definition)[0]

    @classmethod
    def from_definition(cls, definition: dict[str, Any], *, last_used_turn: int | None = None) -> ToolSpec:
        """A spec whose category comes from the name: ``mcp__server__tool`` is an MCP tool of
        ``server``; anything else is builtin (skills are declared, not guessed)."""
        server, _ = split_tool_name(tool_parts(definition)[0])
        if server is not None:
            return cls(definition=definition, category="mcp", server=server, last_used_turn=last_used_turn)
        return cls(definition=definition, last_used_turn=last_used_turn)


TOOL_SEARCH_SPEC = ToolSpec(definition=TOOL_SEARCH_TOOL, category="builtin")


@dataclass(frozen=True)
class DeferralPlan:
    """Which tools are sent and which wait behind tool_search; token counts are of definitions."""

    active: tuple[ToolSpec, ...]
    deferred: tuple[ToolSpec, ...]
    tokens_before: int | None
    tokens_after: int | None
    budget_tokens: int
    reason: str
    note: str | None = None

    @property
    def active_definitions(self) -> list[dict[str, Any]]:
        return [spec.definition for spec in self.active]

    @property
    def deferred_names(self) -> list[str]:
        return [spec.name for spec in self.deferred]

    @property
    def is_over_budget(self) -> bool:
        return self.tokens_after is not None and self.tokens_after > self.budget_tokens


def deferral_budget(effective_window: int, share: float = DEFAULT_TOOL_SHARE) -> int:
    """Tokens tool definitions may take: ``share`` of the effective context window."""
    if effective_window <= 0:
        raise ValidationError(
            f"effective_window must be > 0, got {effective_window}", field="effective_window"
        )
    if not 0 < share <= 1:
        raise ValidationError(f"tool share must be in (0, 1], got {share}", field="share")
    return threshold_tokens(effective_window, share)


def deferral_note(count: int) -> str:
    return (
        f"[{count} tool{'' if count == 1 else 's'} deferred to save context. Use tool_search to find them.]"
    )


def count_tool_tokens(tools: Sequence[ToolSpec], tokenizer: Tokenizer) -> list[int]:
    """Tokens of each definition; a definition that cannot be serialized raises ValidationError."""
    counts = []
    for i, spec in enumerate(tools):
        try:
            counts.append(tokenizer.count_tool(spec.definition))
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"tool definition {i} ({spec.name!r}) cannot be counted: {exc}", field=f"tools[{i}]"
            ) from exc
    return counts


def plan_deferral(
    tools: Sequence[ToolSpec],
    *,
    budget_tokens: int,
    tokenizer: Tokenizer,
    pinned_active: Iterable[str] = (),
) -> DeferralPlan:
    """Defer MCP, then skill tools, least recently used first, until the definitions fit
    ``budget_tokens`` (tool_search itself counted); builtin and pinned tools stay active."""
    if budget_tokens < 0:
        raise ValidationError(f"budget_tokens must be >= 0, got {budget_tokens}", field="budget_tokens")
    names = [spec.name for spec in tools]
    duplicates = sorted(name for name, n in Counter(names).items() if n > 1)
    if duplicates:
        raise ValidationError(f"duplicate tool names {duplicates}", field="tools")
    counts = count_tool_tokens(tools, tokenizer)
    total = sum(counts)
    if total <= budget_tokens:
        return load_all_plan(
            tools,
            budget_tokens=budget_tokens,
            tokens=total,
            reason=f"tool definitions take {total:,} tokens <= budget {budget_tokens:,}",
        )
    pinned = set(pinned_active)
    candidates = sorted(
        (i for i, spec in enumerate(tools) if spec.category in _DEFER_ORDER and spec.name not in pinned),
        key=lambda i: (
            _DEFER_ORDER[tools[i].category],
            -1 if tools[i].last_used_turn is None else tools[i].last_used_turn,
            i,
        ),
    )
    after = total + tokenizer.count_tool(TOOL_SEARCH_TOOL)
    deferred: set[int] = set()
    for i in candidates:
        if after <= budget_tokens:
            break
        deferred.add(i)
        after -= counts[i]
    if not deferred or after >= total:
        return load_all_plan(
            tools,
            budget_tokens=budget_tokens,
            tokens=total,
            reason=f"tool definitions take {total:,} tokens > budget {budget_tokens:,}, "
            "but deferring the deferrable tools would not save any",
        )
    fits = "fits" if after <= budget_tokens else "still exceeds"
    return DeferralPlan(
        active=(*(spec for i, spec in enumerate(tools) if i not in deferred), TOOL_SEARCH_SPEC),
        deferred=tuple(tools[i] for i in sorted(deferred)),
        tokens_before=total,
        tokens_after=after,
        budget_tokens=budget_tokens,
        reason=f"tool definitions take {total:,} tokens > budget {budget_tokens:,}; deferred "
        f"{len(deferred)} tools, now {after:,} tokens ({fits} the budget)",
        note=deferral_note(len(deferred)),
    )


def load_all_plan(
    tools: Sequence[ToolSpec], *, budget_tokens: int, reason: str, tokens: int | None = None
) -> DeferralPlan:
    """Every tool sent, nothing deferred (``tokens`` None when they could not be counted)."""
    return DeferralPlan(
        active=tuple(tools),
        deferred=(),
        tokens_before=tokens,
        tokens_after=tokens,
        budget_tokens=budget_tokens,
        reason=reason,
    )


def defer_or_load_all(
    tools: Sequence[ToolSpec],
    *,
    budget_tokens: int,
    tokenizer: Tokenizer,
    pinned_active: Iterable[str] = (),
) -> tuple[DeferralPlan, list[ContextEvent]]:
    """(plan, events): a ``deferral`` event when tools were deferred; when planning fails, all
    tools loaded and a ``degraded`` event naming the error."""
    try:
        plan = plan_deferral(
            tools, budget_tokens=budget_tokens, tokenizer=tokenizer, pinned_active=pinned_active
        )
    except (ValidationError, TokenizerError) as exc:
        plan = load_all_plan(
            tools, budget_tokens=budget_tokens, reason=f"deferral failed, all tools loaded: {exc}"
        )
        return plan, [degraded_event("deferral", exc, fallback="all_tools_loaded", tool_count=len(tools))]
    if not plan.deferred:
        return plan, []
    event = ContextEvent(
        kind="deferral",
        outcome="deferred",
        reason=plan.reason,
        details={
            "deferred": plan.deferred_names,
            "active": [spec.name for spec in plan.active],
            "tokens_before": plan.tokens_before,
            "tokens_after": plan.tokens_after,
            "budget_tokens": budget_tokens,
        },
    )
    return plan, [event]


# -- search (ranking in engine.tool_ranking) -------------------------------------------------


@dataclass(frozen=True)
class ToolHit:
    name: str
    score: float
    spec: ToolSpec


def search_tools(query: str, tools: Sequence[ToolSpec], *, k: int = DEFAULT_SEARCH_K) -> list[ToolHit]:
    """The ``k`` best-matching tools for ``query`` (score > 0 only), best first."""
    if k < 1:
        raise ValidationError(f"k must be >= 1, got {k}", field="k")
    scores = bm25f_scores(query, [tool_fields(spec.definition) for spec in tools])
    ranked = sorted(
        (
            ToolHit(spec.name, round(score, 4), spec)
            for spec, score in zip(tools, scores, strict=True)
            if score > 0
        ),
        key=lambda hit: -hit.score,
    )
    return ranked[:k]


def format_search_result(query: str, hits: Sequence[ToolHit]) -> str:
    """What the model reads back from tool_search: each tool's name, description and schema."""
    if not hits:
        return f"No deferred tools match {query!r}. Try other words, or do without."
    parts = [f"{len(hits)} tool{'' if len(hits) == 1 else 's'} found for {query!r}; you can call them now:"]
    for hit in hits:
        name, description, schema = tool_parts(hit.spec.definition)
        parts.append(
            f"\n## {name}\n{description}\ninput_schema: {json.dumps(schema, ensure_ascii=False, sort_keys=True)}"
        )
    return "\n".join(parts)


@dataclass(frozen=True)
class ToolSearchResult:
    text: str
    hits: tuple[ToolHit, ...]
    event: ContextEvent


@dataclass
class ToolRegistry:
    """One session's tools: the current deferral plan, plus tools promoted by tool_search for
    the current turn only (``start_turn`` drops them and re-plans with updated last use)."""

    tools: list[ToolSpec]
    tokenizer: Tokenizer
    budget_tokens: int
    pinned_active: tuple[str, ...] = ()
    turn_index: int | None = None
    plan: DeferralPlan = field(init=False)
    plan_events: list[ContextEvent] = field(init=False)
    _promoted: dict[str, ToolSpec] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.tools = list(self.tools)
        self._replan()

    def _replan(self) -> None:
        self.plan, self.plan_events = defer_or_load_all(
            self.tools,
            budget_tokens=self.budget_tokens,
            tokenizer=self.tokenizer,
            pinned_active=self.pinned_active,
        )

    def start_turn(self, turn_index: int) -> list[ContextEvent]:
        """Begin a turn: promoted tools go back behind tool_search; returns the plan's events."""
        self.turn_index = turn_index
        self._promoted.clear()
        self._replan()
        return list(self.plan_events)

    def record_use(self, name: str, turn_index: int) -> None:
        """Note that ``name`` was called in ``turn_index`` (recently used tools are deferred last)."""
        self.tools = [
            spec.model_copy(update={"last_used_turn": turn_index}) if spec.name == name else spec
            for spec in self.tools
        ]

    @property
    def active(self) -> list[ToolSpec]:
        return [*self.plan.active, *self._promoted.values()]

    @property
    def deferred(self) -> list[ToolSpec]:
        return [spec for spec in self.plan.deferred if spec.name not in self._promoted]

    @property
    def active_definitions(self) -> list[dict[str, Any]]:
        return [spec.definition for spec in self.active]

    def search(self, query: str, *, k: int = DEFAULT_SEARCH_K) -> ToolSearchResult:
        """Rank the deferred tools for ``query``, promote the hits for this turn, and describe them."""
        if not isinstance(query, str) or not query.strip():
            raise ValidationError(
                f"tool_search query must be a non-empty string, got {query!r}", field="query"
            )
        hits = search_tools(query, self.plan.deferred, k=min(k, MAX_SEARCH_K))
        for hit in hits:
            self._promoted[hit.name] = hit.spec
        event = ContextEvent(
            kind="tool_search",
            outcome="hit" if hits else "miss",
            turn_index=self.turn_index,
            details={
                "query": query,
                "hits": [{"name": hit.name, "score": hit.score} for hit in hits],
                "misses": not hits,
                "deferred_count": len(self.plan.deferred),
            },
        )
        return ToolSearchResult(text=format_search_result(query, hits), hits=tuple(hits), event=event)


def run_tool_search_tool(
    registry: ToolRegistry, tool_input: dict[str, Any]
) -> tuple[str, list[ContextEvent]]:
    """Handle a ``tool_search`` call: (text for the model, events); bad input as ``Error: ...``."""
    if not isinstance(tool_input, dict):
        return f"Error: tool_search input must be an object, got {type(tool_input).__name__}", []
    k = tool_input.get("k", DEFAULT_SEARCH_K)
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        return f"Error: k must be a positive integer, got {k!r}", []
    try:
        result = registry.search(tool_input.get("query"), k=k)  # type: ignore[arg-type]  # search checks it
    except ValidationError as exc:
        return f"Error: {exc}", []
    return result.text, [result.event]
