"""Replay a recorded session under other context management, side by side: per call the prompt
tokens each variant would send, its cache reads and writes (:mod:`engine.replay.cache`), its cost
at the model table's prices (:func:`engine.cost.price_call`) and the edits and compactions it made.

Variants: the history as the agent sent it; the provider's own edits (:mod:`engine.replay.provider`);
ctxdesk's proxy policies, run by the proxy's own planner (:func:`engine.proxy.policy.policies.plan_edits`,
its clearing and compaction the engine's). Every variant is measured by one rule: the tokenizer's
count of its messages plus the call's *head*, what the provider counted that the transcript does
not hold (system prompt, tool definitions: the recorded prompt less the measured history, carried
from the last call whose usage measured the agent's own request). The answers are the recorded
ones: each call's output tokens are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.compaction import OfflineSummarizer
from engine.cost import Prices, price_call, prices_for
from engine.events import ProviderUsage
from engine.messages import Message
from engine.policy_settings import Policies
from engine.replay.cache import CacheUse, PromptCache, cache_rules_for
from engine.replay.provider import (
    CLEAR_TOOL_USES,
    AnthropicCompact,
    ClearToolUses,
    OpenAICompaction,
    ServerCompaction,
    clear_tool_uses,
    plan_server_compaction,
)
from engine.replay.recorded import RecordedCall, RecordedSession
from engine.settings import ResolvedModelSettings
from engine.tokens import Tokenizer

HEAD_KEY = "head"  # the system prompt and tools: the same every call of a session


class AsSent(BaseModel):
    """The history as the agent sent it, no edit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["as_sent"] = "as_sent"


class CtxdeskPolicies(BaseModel):
    """ctxdesk's proxy policies (``[policies]`` of the settings file)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["ctxdesk"] = "ctxdesk"
    policies: Policies


Variant = Annotated[
    AsSent | ClearToolUses | AnthropicCompact | OpenAICompaction | CtxdeskPolicies,
    Field(discriminator="type"),
]


class ReplayedCall(BaseModel):
    """One call under one variant; a server-side compaction's own iteration is counted in it."""

    model_config = ConfigDict(frozen=True)

    event_seq: int
    prompt_tokens: int = Field(description="Input tokens of the answer's prompt.")
    cache_read_tokens: int = Field(description="Input tokens read from the cache (all iterations).")
    cache_write_tokens: int = Field(description="Input tokens written to the cache (all iterations).")
    billed_input_tokens: int = Field(description="Input tokens of all iterations, cached or not.")
    output_tokens: int
    cost_usd: float
    compactions: int = 0
    edits: tuple[str, ...] = ()
    refused: bool = False  # ctxdesk's guard refused the call: nothing sent


class VariantReplay(BaseModel):
    model_config = ConfigDict(frozen=True)

    label: str
    calls: tuple[ReplayedCall, ...]

    def total(self, name: str) -> float:
        return sum(getattr(c, name) for c in self.calls)

    @property
    def peak_prompt_tokens(self) -> int:
        return max((c.prompt_tokens for c in self.calls), default=0)

    def totals(self) -> dict[str, Any]:
        """The variant's sums: the row of the side-by-side table."""
        return {
            "variant": self.label,
            "calls": len(self.calls),
            "prompt_tokens": int(self.total("prompt_tokens")),
            "peak_prompt_tokens": self.peak_prompt_tokens,
            "billed_input_tokens": int(self.total("billed_input_tokens")),
            "cache_read_tokens": int(self.total("cache_read_tokens")),
            "cache_write_tokens": int(self.total("cache_write_tokens")),
            "output_tokens": int(self.total("output_tokens")),
            "cost_usd": self.total("cost_usd"),
            "compactions": int(self.total("compactions")),
            "edited_calls": sum(bool(c.edits) for c in self.calls),
            "refused_calls": sum(c.refused for c in self.calls),
        }


class SessionReplay(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    model: str | None
    priced: bool
    cache_provider: str
    recorded: VariantReplay | None = Field(description="The provider's own usage, where every call has it.")
    variants: tuple[VariantReplay, ...]
    failed_calls: int = 0


def variant_label(variant: Variant) -> str:
    """A variant in words, its parameters included."""
    if isinstance(variant, AsSent):
        return "As the agent sent it"
    if isinstance(variant, ClearToolUses):
        extra = f", clear_at_least {variant.clear_at_least:,}" if variant.clear_at_least else ""
        return f"Provider {CLEAR_TOOL_USES} (trigger {variant.trigger:,}, keep {variant.keep}{extra})"
    if isinstance(variant, AnthropicCompact | OpenAICompaction):
        return f"Provider {variant.type} (trigger {variant.trigger:,})"
    names = [
        n for n in ("clear_tool_results", "offload", "compaction", "guard") if getattr(variant.policies, n)
    ]
    return "ctxdesk " + (", ".join(names) or "(no policy)")


def replay_session(
    session: RecordedSession,
    variants: Sequence[Variant],
    *,
    tokenizer: Tokenizer,
    resolved: ResolvedModelSettings | None = None,
    prices: Prices | None = None,
) -> SessionReplay:
    """Each variant over every call of ``session`` (pure: the store was read by the caller)."""
    prices = prices if prices is not None else prices_for(session.model)
    rules = cache_rules_for(session.provider, session.model)
    measure = _Measure(tokenizer)
    heads = _heads(session.calls, measure)
    replays = []
    for variant in variants:
        runner = _Runner(variant, measure, PromptCache(rules), prices, resolved, rules.provider)
        calls = tuple(runner.call(call, head) for call, head in zip(session.calls, heads, strict=True))
        replays.append(VariantReplay(label=variant_label(variant), calls=calls))
    return SessionReplay(
        session_id=session.session_id, model=session.model, priced=prices is not None,
        cache_provider=rules.provider, recorded=_recorded(session, prices), variants=tuple(replays),
        failed_calls=session.failed_calls,
    )  # fmt: skip


def _heads(calls: Sequence[RecordedCall], measure: _Measure) -> list[int]:
    """Per call, the prompt tokens the transcript does not hold (system prompt, tools)."""
    heads: list[int] = []
    last = 0
    for call in calls:
        if call.usage is not None and call.usage.prompt_tokens and not call.edited_in_flight:
            last = max(0, call.usage.prompt_tokens - measure.messages(call.history))
        heads.append(last)
    return heads


def _recorded(session: RecordedSession, prices: Prices | None) -> VariantReplay | None:
    if not session.calls or any(c.usage is None for c in session.calls):
        return None
    rows = []
    for call in session.calls:
        usage = call.usage or ProviderUsage()
        cost = price_call(usage, prices, model=call.model)
        rows.append(
            ReplayedCall(
                event_seq=call.event_seq, prompt_tokens=usage.prompt_tokens,
                cache_read_tokens=usage.cache_read_input_tokens,
                cache_write_tokens=usage.cache_creation_input_tokens, billed_input_tokens=usage.prompt_tokens,
                output_tokens=usage.output_tokens, cost_usd=cost.total_usd,
            )
        )  # fmt: skip
    return VariantReplay(label="Recorded (the provider's usage)", calls=tuple(rows))


class _Measure:
    """The one measure of every variant: a message's tokens, counted once per distinct content."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._counts: dict[str, int] = {}

    def message(self, message: Message) -> int:
        key = message.content_hash
        if key not in self._counts:
            self._counts[key] = self.tokenizer.count_message(message)
        return self._counts[key]

    def messages(self, messages: Sequence[Message]) -> int:
        return sum(self.message(m) for m in messages)

    def parts(self, head: int, messages: Sequence[Message]) -> list[tuple[str, int]]:
        return [(HEAD_KEY, head), *((m.content_hash, self.message(m)) for m in messages)]


@dataclass
class _Runner:
    """One variant's pass over a session: its cache and its edits' state between calls."""

    variant: Variant
    measure: _Measure
    cache: PromptCache
    prices: Prices | None
    resolved: ResolvedModelSettings | None
    provider: str
    summary: Message | None = None  # a server-side compaction's block, sent in place of ...
    replaced: list[str] = field(default_factory=list)  # ... the history it summarized (content keys)
    policy_state: Any = None

    def call(self, call: RecordedCall, head: int) -> ReplayedCall:
        output = call.usage.output_tokens if call.usage is not None else 0
        sent = list(call.history)
        edits: list[str] = []
        compactions = 0
        iterations: list[tuple[int, CacheUse]] = []
        if isinstance(self.variant, ClearToolUses):
            sent, edits = self._provider_clearing(self.variant, sent, head)
        elif isinstance(self.variant, AnthropicCompact | OpenAICompaction):
            sent, compaction = self._server_compaction(self.variant, sent, head, call.at_s)
            if compaction is not None:
                iterations.append(compaction[0])
                edits.append(compaction[1])
                compactions = 1
        elif isinstance(self.variant, CtxdeskPolicies):
            planned = self._ctxdesk(self.variant.policies, sent, head, call.at_s)
            if planned is None:
                return ReplayedCall(
                    event_seq=call.event_seq, prompt_tokens=0, cache_read_tokens=0, cache_write_tokens=0,
                    billed_input_tokens=0, output_tokens=0, cost_usd=0.0, edits=("guard refused the call",),
                    refused=True,
                )  # fmt: skip
            sent, edits, compactions = planned
        parts = self.measure.parts(head, sent)
        prompt = sum(t for _, t in parts)
        iterations.append((prompt, self.cache.send(parts, call.at_s)))
        cost = sum(
            self._price(tokens, use, output if i == len(iterations) - 1 else self._summary_tokens())
            for i, (tokens, use) in enumerate(iterations)
        )
        return ReplayedCall(
            event_seq=call.event_seq, prompt_tokens=prompt,
            cache_read_tokens=sum(u.read for _, u in iterations), cache_write_tokens=sum(u.written for _, u in iterations),
            billed_input_tokens=sum(t for t, _ in iterations),
            output_tokens=output + sum(self._summary_tokens() for _ in iterations[:-1]),
            cost_usd=cost, compactions=compactions, edits=tuple(edits),
        )  # fmt: skip

    def _price(self, prompt: int, use: CacheUse, output: int) -> float:
        usage = ProviderUsage(
            input_tokens=max(0, prompt - use.read - use.written), output_tokens=output,
            cache_read_input_tokens=use.read, cache_creation_input_tokens=use.written,
        )  # fmt: skip
        return price_call(usage, self.prices).total_usd

    def _summary_tokens(self) -> int:
        return self.measure.message(self.summary) if self.summary is not None else 0

    def _provider_clearing(
        self, edit: ClearToolUses, sent: list[Message], head: int
    ) -> tuple[list[Message], list[str]]:
        prompt = head + self.measure.messages(sent)
        cleared = clear_tool_uses(sent, edit, prompt, self.measure.message)
        return list(cleared.messages), [cleared.reason] if cleared.cleared_uses else []

    def _server_compaction(
        self, edit: ServerCompaction, history: list[Message], head: int, at_s: float | None
    ) -> tuple[list[Message], tuple[tuple[int, CacheUse], str] | None]:
        keys = [m.content_hash for m in history]
        sent = history
        n = len(self.replaced)
        if self.summary is not None and keys[:n] == self.replaced:
            sent = [self.summary, *history[n:]]  # the client sends the block and what followed it
        elif self.summary is not None:  # the agent rewrote the history itself (its own compaction)
            self.summary, self.replaced = None, []
        prompt = head + self.measure.messages(sent)
        plan = plan_server_compaction(sent, edit, prompt)
        if plan is None:
            return sent, None
        # the compaction iteration reads the whole context, as cached, and writes the summary
        compaction_use = self.cache.send(self.measure.parts(head, sent), at_s)
        text = OfflineSummarizer(self.measure.tokenizer).summarize(
            sent[: plan.through], instructions=edit.instructions
        )
        self.summary = Message(role="user", content=text)
        covered = len(history) - (len(sent) - plan.through)
        self.replaced = keys[:covered]
        return [self.summary, *history[covered:]], ((prompt, compaction_use), plan.reason)

    def _ctxdesk(
        self, policies: Policies, history: list[Message], head: int, at_s: float | None
    ) -> tuple[list[Message], list[str], int] | None:
        from engine.convert import to_anthropic, to_openai
        from engine.proxy.policy.edits import SessionPolicyState
        from engine.proxy.policy.policies import plan_edits
        from engine.proxy.wire import wire_for
        from engine.proxy.wire.api_names import ANTHROPIC_MESSAGES, OPENAI_CHAT

        if self.policy_state is None:
            self.policy_state = SessionPolicyState()
        anthropic = self.provider == "anthropic"
        api = ANTHROPIC_MESSAGES if anthropic else OPENAI_CHAT
        wire = wire_for(api)
        talk = [m for m in history if m.role != "system"]
        system = "\n".join(m.text for m in history if m.role == "system")
        # The system prompt and tools the transcript does not hold stand in as text of their size, so
        # the policies' triggers and the guard see the whole prompt, as the proxy would.
        system = (system + " x" * max(0, head)).strip()
        if anthropic:
            body: dict[str, Any] = {"model": "replay", "system": system, "messages": to_anthropic(talk)}
        else:
            body = {"model": "replay", "messages": [{"role": "system", "content": system}, *to_openai(talk)]}
        outcome = plan_edits(
            api, body, policies, tokenizer=self.measure.tokenizer, resolved=self.resolved, state=self.policy_state,
            now=at_s,
        )  # fmt: skip
        if outcome.refusal is not None:
            return None
        edits = [f"{e.policy}: {e.reason}" for e in outcome.edits if _made_now(e)]
        compactions = sum(e.policy == "compaction" and _made_now(e) for e in outcome.edits)
        if outcome.body is None:
            sent = history
        else:
            items = outcome.body.get(wire.history_key) or []
            items = items[wire.head_length(items) :]
            sent = [*(m for m in history if m.role == "system"), *wire.to_messages(items)]
        management = (outcome.body or {}).get("context_management") or {}
        for asked in management.get("edits") or ():
            if asked.get("type") == CLEAR_TOOL_USES:  # native = true: the provider clears
                sent, done = self._provider_clearing(ClearToolUses.from_wire(asked), sent, head)
                edits += done
        return sent, edits, compactions


def _made_now(edit: Any) -> bool:
    """An edit made on this request: not one only sent again (results cleared or a prefix compacted
    earlier) nor a request for the provider to edit (counted from the provider's clearing)."""
    changes = edit.changes or ()
    if any(c.get("reused") or c.get("native") for c in changes):
        return False
    if any("new" in c for c in changes):
        return any(c["new"] for c in changes)
    return True
