"""The session as the detectors see it: :class:`Finding` (what a detector returns) and
:class:`SessionView` (one stored session, read once), with each request's view of what it sent
(:func:`request_views`, on :mod:`engine.sent`'s rule) and the prices that turn tokens into money."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.events import ComponentTokens, ProviderUsage
from engine.model_table import ModelInfo, ModelTable
from engine.sent import compaction_removals
from engine.sent import sent_end as sent_end_of
from engine.settings import (
    DEFAULT_RESULT_OFFLOAD_THRESHOLD,
    ResolvedModelSettings,
    Settings,
    resolve_model_settings,
)
from engine.store import SessionRecord, SessionStore, Snapshot, StoredEvent, StoredMessage, ToolRecord
from engine.tokens import Tokenizer, get_tokenizer

FindingKind = Literal[
    "repeated_read",
    "stale_result",
    "unused_result",
    "unused_tools",
    "uncached_prefix",
    "stale_thinking",
    "ineffective_compaction",
    "lost_constraint",
    "cache_rebuild",
]
FINDING_KINDS: tuple[str, ...] = FindingKind.__args__

#: Tool outputs smaller than this are not worth a repeated-read or stale-output finding.
MIN_FINDING_TOKENS = 100
#: A result needs this many identifiers of its own before "never referred to again" means anything.
MIN_DISTINCTIVE_TERMS = 3
#: Requests with provider usage needed before "never cached" is a pattern, not an accident.
MIN_CACHE_REQUESTS = 3
#: Anthropic caches nothing shorter than 1,024 tokens (2,048 for Haiku), so smaller prefixes don't count.
MIN_CACHEABLE_PREFIX = 1_024
#: A compaction that keeps more than this share of its input saved (almost) nothing.
INEFFECTIVE_COMPACTION_RATIO = 0.9
#: Anthropic's prompt-cache multiples of the input price: reads, 5-minute writes, 1-hour writes.
ANTHROPIC_CACHE_READ = 0.1
ANTHROPIC_CACHE_WRITE_5M = 1.25
ANTHROPIC_CACHE_WRITE_1H = 2.0
#: A constraint is lost when fewer than this share of its key terms survive compaction.
CONSTRAINT_KEPT_SHARE = 0.5


class Finding(BaseModel):
    """One way a session wasted context, with what the fix would save and the setting that fixes it."""

    model_config = ConfigDict(frozen=True)

    kind: FindingKind = Field(description="What was wasted (see engine.findings.FINDING_KINDS).")
    session_id: str = Field(description="Session (or sub-agent thread) the finding is about.")
    title: str = Field(description="One line saying what happened.")
    detail: str = Field(description="The evidence, in words.")
    message_seqs: tuple[int, ...] = Field(description="Transcript seqs of the messages involved.")
    turn_index: int = Field(description="Turn where the waste starts (the dashboard shows it there).")
    tokens: int = Field(
        ge=0,
        description="Input tokens the fix would not have sent, summed over the requests that carried "
        "the waste (uncached_prefix: tokens that would have been cache reads instead of full-price "
        "input). 0 for findings about what a summary lost: fixing those costs tokens.",
    )
    context_tokens: int = Field(
        ge=0,
        description="Tokens of the largest affected request the fix acts on: how much smaller it would "
        "have been (uncached_prefix: its cacheable prefix; lost_constraint: the constraint's tokens).",
    )
    requests: int = Field(ge=0, description="Model requests that carried the waste.")
    money: float | None = Field(
        description="USD the fix would save at the model's prices; None when they are unknown."
    )
    fix: str = Field(description="The setting or strategy that would fix it.")
    exact: bool = Field(description="True when the token numbers are exact, False when estimated.")
    tokenizer: str = Field(description="Tokenizer that produced the token numbers ('provider' for usage).")


# -- the session as the detectors see it ----------------------------------------------------------


@dataclass(frozen=True)
class TokenPrices:
    """USD per token for one model: uncached input, cache reads and cache writes (None: no caching)."""

    input: float
    cache_read: float | None
    cache_write: float | None
    cache_write_1h: float | None
    source: str

    @classmethod
    def from_model_info(cls, info: ModelInfo | None, provider: str | None) -> TokenPrices | None:
        if info is None or info.input_cost_per_token is None:
            return None
        base = info.input_cost_per_token
        anthropic = (provider or info.provider or "") == "anthropic"
        read = info.cache_read_cost_per_token
        write = info.cache_write_cost_per_token
        if anthropic:
            read = read if read is not None else base * ANTHROPIC_CACHE_READ
            write = write if write is not None else base * ANTHROPIC_CACHE_WRITE_5M
        elif read is not None and write is None:
            write = base  # automatic prefix caching (OpenAI, DeepSeek): writes cost what input costs
        return cls(
            input=base,
            cache_read=read,
            cache_write=write,
            cache_write_1h=base * ANTHROPIC_CACHE_WRITE_1H if anthropic else write,
            source=info.cost_source or info.source,
        )

    def prompt_cost(self, usage: ProviderUsage) -> float:
        """What a request's prompt cost under these prices, as the provider billed it."""
        return (
            usage.input_tokens * self.input
            + usage.cache_read_input_tokens * (self.cache_read if self.cache_read is not None else self.input)
            + usage.cache_creation_input_tokens
            * (self.cache_write if self.cache_write is not None else self.input)
        )

    def blended(self, usage: ProviderUsage | None) -> float:
        """USD per prompt token of one request: dropping a token from it saves about this much."""
        if usage is None or usage.prompt_tokens == 0:
            return self.input
        return self.prompt_cost(usage) / usage.prompt_tokens


@dataclass(frozen=True, slots=True)
class RequestView:
    """One model request: which transcript messages it sent, and what the provider counted."""

    event_seq: int
    turn_index: int
    sent_end: int
    removed: frozenset[int]
    cleared: frozenset[int]
    usage: ProviderUsage | None
    components: ComponentTokens | None
    tools_sent: frozenset[str] | None = None
    #: False when the provider strips earlier turns' thinking from this request (the request
    #: event's details say ``previous_thinking: "stripped"``): it was never billed.
    thinking_billed: bool = True

    def sends(self, seq: int, *, result: bool = False) -> bool:
        """True when the request sent message ``seq`` (its tool-result content, with ``result``)."""
        if seq >= self.sent_end or seq in self.removed:
            return False
        return not (result and seq in self.cleared)


@dataclass(frozen=True)
class SessionView:
    """Everything the detectors read about one session (loaded once, never written back)."""

    session: SessionRecord
    messages: tuple[StoredMessage, ...]
    events: tuple[StoredEvent, ...]
    requests: tuple[RequestView, ...]
    tools: tuple[ToolRecord, ...]
    snapshots: dict[int, Snapshot]
    tokenizer: Tokenizer
    prices: TokenPrices | None
    settings: ResolvedModelSettings | None

    @property
    def session_id(self) -> str:
        return self.session.id

    @property
    def offload_threshold_bytes(self) -> int:
        return self.settings.result_offload_threshold if self.settings else DEFAULT_RESULT_OFFLOAD_THRESHOLD

    def carriers(self, seq: int, *, result: bool = False) -> list[RequestView]:
        return [r for r in self.requests if r.sends(seq, result=result)]

    def money(self, per_request: Iterable[tuple[RequestView, int]]) -> float | None:
        """USD of ``tokens`` dropped from each of those requests, or None without prices."""
        if self.prices is None:
            return None
        return round(sum(tokens * self.prices.blended(r.usage) for r, tokens in per_request), 6)

    def finding(
        self,
        kind: FindingKind,
        *,
        title: str,
        detail: str,
        seqs: Iterable[int],
        turn_index: int,
        per_request: Sequence[tuple[RequestView, int]],
        fix: str,
        exact: bool | None = None,
        tokenizer: str | None = None,
        money: float | Literal["priced"] | None = "priced",
    ) -> Finding:
        """A finding whose tokens are ``tokens`` dropped from each request in ``per_request``."""
        return Finding(
            kind=kind,
            session_id=self.session_id,
            title=title,
            detail=detail,
            message_seqs=tuple(sorted(set(seqs))),
            turn_index=turn_index,
            tokens=sum(t for _, t in per_request),
            context_tokens=max((t for _, t in per_request), default=0),
            requests=sum(1 for _, t in per_request if t),
            money=self.money(per_request) if money == "priced" else money,
            fix=fix,
            exact=self.tokenizer.exact if exact is None else exact,
            tokenizer=tokenizer or self.tokenizer.id,
        )


def load_session_view(
    store: SessionStore,
    session_id: str,
    *,
    settings: Settings | None = None,
    table: ModelTable | None = None,
) -> SessionView:
    """Read one session for the detectors: transcript, events, tools, snapshots, prices."""
    session = store.get_session(session_id)
    messages = tuple(store.load_messages(session_id))
    events = tuple(store.list_events(session_id))
    tokenizer = get_tokenizer(session.tokenizer or session.model or "chars/4")
    resolved = (
        resolve_model_settings(session.model, session.provider, settings=settings, table=table)
        if session.model
        else None
    )
    snapshot_ids = {e.details.get("snapshot_id") for e in events if e.kind == "compaction"}
    snapshots = {s.id: s for s in store.list_snapshots(session_id) if s.id in snapshot_ids}
    return SessionView(
        session=session,
        messages=messages,
        events=events,
        requests=tuple(request_views(messages, events)),
        tools=tuple(store.list_tools(session_id)),
        snapshots=snapshots,
        tokenizer=tokenizer,
        prices=TokenPrices.from_model_info(resolved.model_info if resolved else None, session.provider),
        settings=resolved,
    )


def request_views(messages: Sequence[StoredMessage], events: Sequence[StoredEvent]) -> list[RequestView]:
    """One view per ``request`` event, with what compactions before it removed or cleared.

    What a request sent is :func:`engine.sent.sent_end`'s rule (``details.messages_sent``, else
    the reply it produced, else its turn). Without request events, every assistant message
    stands for the request that produced it.
    """
    kinds = {m.seq: m.kind for m in messages}
    turn_ends: dict[int, int] = {}
    for m in messages:
        turn_ends[m.turn_index] = m.seq + 1
    views: list[RequestView] = []
    # one frozenset per compaction, shared by the requests after it (not a copy per request:
    # that grew as requests x removed messages on long compacted sessions)
    removed: frozenset[int] = frozenset()
    cleared: frozenset[int] = frozenset()
    for event in sorted(events, key=lambda e: e.seq):
        if event.kind == "compaction" and event.outcome == "compacted":
            gone, emptied = compaction_removals(event.details)
            removed, cleared = removed.union(gone), cleared.union(emptied)
        if event.kind != "request":
            continue
        sent_end = sent_end_of(
            event.details, event.message_seq, event.turn_index,
            kind_of=kinds.get, turn_end=lambda turn: turn_ends.get(turn, len(messages)),
        )  # fmt: skip
        views.append(
            RequestView(
                event_seq=event.seq, turn_index=event.turn_index or 0, sent_end=sent_end,
                # what the call itself left out below its bound (a compaction's summarizer)
                removed=removed.union(event.messages_excluded) if event.messages_excluded else removed,
                cleared=cleared, usage=event.usage,
                components=event.components, tools_sent=_names(event.details.get("tools_sent")),
                thinking_billed=event.details.get("previous_thinking") != "stripped",
            )
        )  # fmt: skip
    if views or any(e.kind == "request" for e in events):
        return views
    return [
        RequestView(
            event_seq=-1, turn_index=m.turn_index, sent_end=m.seq, removed=frozenset(), cleared=frozenset(),
            usage=m.usage, components=None,
        )
        for m in messages
        if m.message.role == "assistant"
    ]  # fmt: skip


def _names(value: Any) -> frozenset[str] | None:
    return frozenset(str(v) for v in value) if isinstance(value, list) else None
