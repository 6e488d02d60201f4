"""Typed settings of each compaction strategy, identified by a ``type`` literal.

They read like Anthropic's context-editing config (``clear_tool_uses_20250919`` with
``trigger``, ``keep``, ``clear_at_least``, ``exclude_tools``, ``clear_tool_inputs``); token
thresholds accept a plain int or Anthropic's ``{"type": "input_tokens", "value": N}`` form.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator, model_validator
from pydantic import ValidationError as PydanticValidationError

from engine.errors import ValidationError

DEFAULT_KEEP_TOOL_USES = 3
DEFAULT_SUMMARY_MAX_TOKENS = 2_000
DEFAULT_KEEP_RECENT_TURNS = 1
DEFAULT_PRESERVE_TOP = 5
DEFAULT_PRESERVE_BOTTOM = 5
DEFAULT_SANDWICH_TRIGGER_RATIO = 0.70
DEFAULT_WINDOW_MESSAGES = 20
DEFAULT_KEEP_ITERATIONS = 4
DEFAULT_RESUMMARIZE_EVERY = 4
DEFAULT_PROMPT_MAX_TOKENS = 24_000
DEFAULT_TOOL_RESULT_MAX_CHARS = 2_000
DEFAULT_LEAF_TURNS = 4
DEFAULT_FANOUT = 4
DEFAULT_LEAF_MAX_TOKENS = 600
DEFAULT_TREE_KEEP_TURNS = 2
DEFAULT_EMERGENCY_DROP_RATIO = 0.5


def _unwrap(value: Any, kind: str) -> Any:
    """Accept Anthropic's ``{"type": kind, "value": N}`` wherever a plain N is expected."""
    if isinstance(value, dict) and set(value) == {"type", "value"}:
        if value["type"] != kind:
            raise ValueError(f"expected type {kind!r}, got {value['type']!r}")
        return value["value"]
    return value


class _Strategy(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ClearToolResults(_Strategy):
    """Replace older tool results with a short placeholder; the original stays in the transcript."""

    type: Literal["clear_tool_results"] = "clear_tool_results"
    trigger: int | None = Field(
        None,
        ge=0,
        description="Act only when the history has more than this many tokens (Anthropic's default "
        "is 100,000); None: whenever it is over the target.",
    )
    keep: int = Field(
        DEFAULT_KEEP_TOOL_USES, ge=0, description="Most recent tool uses whose results are never cleared."
    )
    clear_at_least: int = Field(
        0,
        ge=0,
        description="Clear nothing unless at least this many tokens can be freed (a cleared prefix "
        "invalidates the prompt cache, so small savings may not be worth it).",
    )
    exclude_tools: tuple[str, ...] = Field((), description="Tools whose results are never cleared.")
    clear_tool_inputs: bool | tuple[str, ...] = Field(
        False,
        description="Also clear the inputs of the cleared tool uses: True for all, or a list of tool names.",
    )

    @field_validator("trigger", "clear_at_least", mode="before")
    @classmethod
    def _input_tokens(cls, value: Any) -> Any:
        return _unwrap(value, "input_tokens")

    @field_validator("keep", mode="before")
    @classmethod
    def _tool_uses(cls, value: Any) -> Any:
        return _unwrap(value, "tool_uses")


class _Summarizing(_Strategy):
    type: str  # each strategy narrows it to its literal; declared here so it stays the first field
    summary_max_tokens: int = Field(
        DEFAULT_SUMMARY_MAX_TOKENS,
        ge=1,
        description="Most tokens a summary may have; a plan reserves up to half the target for it "
        "and gives it whatever the kept messages leave of the target, up to this cap.",
    )


_CUT_INSIDE_TURN = (
    "When even the last turn alone is over the target, cut at a point inside it that separates no "
    "tool_use from its tool_result (the turn's opening user message is kept)."
)


class Summarize(_Summarizing):
    """Summarize the oldest turns up to a safe boundary; the summary is kept apart from the history."""

    type: Literal["summarize"] = "summarize"
    keep_recent_turns: int = Field(
        DEFAULT_KEEP_RECENT_TURNS, ge=1, description="Turns at the end that are never summarized."
    )
    cut_inside_turn: bool = Field(False, description=_CUT_INSIDE_TURN)


class Sandwich(_Summarizing):
    """Keep the first and last messages verbatim and summarize the middle (cached by range).

    ``preserve_bottom`` is the least kept at the end: the kept tail grows back to fill the target
    beside the top and the summary's share, so a generous target is used, not left empty.
    """

    type: Literal["sandwich"] = "sandwich"
    preserve_top: int = Field(DEFAULT_PRESERVE_TOP, ge=0, description="Messages at the start kept verbatim.")
    preserve_bottom: int = Field(
        DEFAULT_PRESERVE_BOTTOM, ge=1, description="Messages at the end kept verbatim."
    )
    trigger_ratio: float = Field(
        DEFAULT_SANDWICH_TRIGGER_RATIO,
        gt=0,
        le=1,
        description="When the caller gives the model's window, act only above this share of it.",
    )


class SlidingWindow(_Strategy):
    """Keep the last N messages (snapped to a turn boundary); older ones are dropped."""

    type: Literal["sliding_window"] = "sliding_window"
    keep_messages: int = Field(
        DEFAULT_WINDOW_MESSAGES, ge=1, description="Messages to keep before snapping to a turn."
    )


class Truncate(_Strategy):
    """Drop the oldest turns until the history fits the target; no summary is written."""

    type: Literal["truncate"] = "truncate"
    keep_recent_turns: int = Field(
        DEFAULT_KEEP_RECENT_TURNS, ge=1, description="Turns at the end that are never dropped."
    )
    cut_inside_turn: bool = Field(False, description=_CUT_INSIDE_TURN)


class RollingIterations(_Summarizing):
    """Keep the last N iterations (turns) raw; fold older ones into a summary refreshed every K."""

    type: Literal["rolling_iterations"] = "rolling_iterations"
    keep_iterations: int = Field(DEFAULT_KEEP_ITERATIONS, ge=1, description="Iterations kept raw.")
    resummarize_every: int = Field(
        DEFAULT_RESUMMARIZE_EVERY,
        ge=1,
        description="Reuse the cached summary until this many more iterations have piled up past "
        "keep_iterations, then fold them in.",
    )
    prompt_max_tokens: int = Field(
        DEFAULT_PROMPT_MAX_TOKENS,
        ge=1,
        description="Most tokens of conversation sent to the summarizer in one call; more is folded in "
        "pieces, each with the summary so far (nothing is dropped).",
    )
    tool_result_max_chars: int = Field(
        DEFAULT_TOOL_RESULT_MAX_CHARS,
        ge=0,
        description="Tool results longer than this are cut (head and tail kept) before summarizing.",
    )


class TreeSummary(_Summarizing):
    """Hierarchical summaries for very long sessions: leaves of turns, then summaries of summaries."""

    type: Literal["tree_summary"] = "tree_summary"
    leaf_turns: int = Field(DEFAULT_LEAF_TURNS, ge=1, description="Turns summarized together in one leaf.")
    fanout: int = Field(DEFAULT_FANOUT, ge=2, description="Summaries merged into one node of the next level.")
    keep_recent_turns: int = Field(DEFAULT_TREE_KEEP_TURNS, ge=1, description="Turns at the end kept raw.")
    leaf_max_tokens: int = Field(
        DEFAULT_LEAF_MAX_TOKENS, ge=1, description="Most tokens of one leaf summary."
    )


class Emergency(_Strategy):
    """After a provider context-length error: drop the oldest turns, note it in the summary."""

    type: Literal["emergency"] = "emergency"
    drop_ratio: float = Field(
        DEFAULT_EMERGENCY_DROP_RATIO, gt=0, lt=1, description="Share of the turns to drop (oldest first)."
    )


StepConfig = Annotated[
    ClearToolResults
    | Summarize
    | Sandwich
    | SlidingWindow
    | Truncate
    | RollingIterations
    | TreeSummary
    | Emergency,
    Field(discriminator="type"),
]


def _default_steps() -> tuple[Any, ...]:
    return (ClearToolResults(), Summarize(), Truncate())


class Chain(_Strategy):
    """Run strategies in order until the history fits the target; reports which ones changed it."""

    type: Literal["chain"] = "chain"
    steps: tuple[StepConfig, ...] = Field(
        default_factory=_default_steps,
        description="Strategies to try in order (default: clear_tool_results, summarize, truncate).",
    )
    cut_inside_turns: bool = Field(
        True,
        description="When the steps leave the history over the target (its last turn alone is over it), "
        "clear every tool result but the latest, then summarize (or, without a summarizer, drop) up to a "
        "point inside the turn that separates no tool_use from its tool_result.",
    )

    @model_validator(mode="after")
    def _non_empty(self) -> Chain:
        if not self.steps:
            raise ValueError("a chain needs at least one step")
        return self


StrategyConfig = Annotated[
    ClearToolResults
    | Summarize
    | Sandwich
    | SlidingWindow
    | Truncate
    | RollingIterations
    | TreeSummary
    | Emergency
    | Chain,
    Field(discriminator="type"),
]
StrategyName = Literal[
    "clear_tool_results",
    "summarize",
    "sandwich",
    "sliding_window",
    "truncate",
    "rolling_iterations",
    "tree_summary",
    "emergency",
    "chain",
]
STRATEGY_NAMES: tuple[str, ...] = StrategyName.__args__
#: Strategies whose summaries are cached with the range they cover.
CACHING_STRATEGIES = ("summarize", "sandwich", "rolling_iterations", "tree_summary")

_adapter: TypeAdapter[Any] = TypeAdapter(StrategyConfig)


def parse_strategy(strategy: str | dict[str, Any] | BaseModel, **settings: Any) -> Any:
    """A strategy config from a name plus settings, a ``{"type": ...}`` dict, or a config object."""
    if isinstance(strategy, _Strategy):
        if settings:
            data = strategy.model_dump() | settings
        else:
            return strategy
    elif isinstance(strategy, dict):
        data = dict(strategy) | settings
    elif isinstance(strategy, str):
        if strategy not in STRATEGY_NAMES:
            raise ValidationError(
                f"unknown compaction strategy {strategy!r}; known: {', '.join(STRATEGY_NAMES)}",
                field="strategy",
                value=strategy,
            )
        data = {"type": strategy, **settings}
    else:
        raise ValidationError(
            f"strategy must be a name, a dict or a config, got {type(strategy).__name__}",
            field="strategy",
            value=strategy,
        )
    try:
        return _adapter.validate_python(data)
    except PydanticValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        if loc and loc[0] == data.get("type"):  # the union's tag, not a field
            loc = loc[1:]
        where = ".".join(str(p) for p in loc) or "type"
        raise ValidationError(
            f"invalid {data.get('type', 'strategy')} settings at {where}: {err['msg']}",
            field=where,
            value=err.get("input"),
        ) from exc
