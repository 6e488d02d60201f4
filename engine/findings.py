"""Findings: where a stored session wasted its context window, each with what a fix would save.

``find_waste(store, session_id)`` reads one session into a :class:`SessionView` and runs every
detector; each detector is a pure function of the view returning frozen :class:`Finding`s.
A finding's ``tokens`` are input tokens the fix would not have sent, summed over the requests
that carried the waste (``context_tokens`` is how much smaller one request would have been);
``money`` prices them at each request's blended input rate (what its prompt cost per token,
cache reads and writes included), or is None when the model's prices are unknown.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.compaction.constraints import constraint_sentences, key_terms
from engine.compaction.constraints import words as _words
from engine.events import ComponentTokens, ProviderUsage
from engine.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_user_input,
)
from engine.model_table import ModelInfo, ModelTable
from engine.sent import compaction_removals
from engine.sent import sent_end as sent_end_of
from engine.session.tools import BUILTIN_TOOL_NAMES
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

#: ctxdesk's own tools (the session manager's built-ins): sent only when needed, never "unused" offers.
ENGINE_TOOL_NAMES = BUILTIN_TOOL_NAMES
#: Tools whose calls change things; a second call is not a re-read and an earlier output is not stale.
MUTATING_TOOLS = frozenset(
    {"Write", "Edit", "MultiEdit", "NotebookEdit", "TodoWrite", "KillBash", "KillShell", "Task", "Agent",
     "finish", "think", "write_file", "edit_file", "create_file"}
)  # fmt: skip
_READ_TOOLS = {"read": "file_path", "read_file": "path", "view_file": "path", "open_file": "path"}
_EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool", "text_editor"})
_SHELL_TOOLS = frozenset({"bash", "execute_bash", "shell", "run", "run_command", "terminal"})
_TERM = re.compile(r"[A-Za-z0-9_$][A-Za-z0-9_$.\-/@+]*[A-Za-z0-9_]")


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


@dataclass(frozen=True)
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
class ToolCall:
    """A tool_use and the result that answered it."""

    use_seq: int
    result_seq: int
    turn_index: int
    name: str
    input: dict[str, Any]
    key: str
    label: str
    text: str
    digest: str
    tokens: int
    size_bytes: int
    is_error: bool

    @property
    def is_mutating(self) -> bool:
        if self.name in MUTATING_TOOLS:
            return True
        return self.name in _EDITOR_TOOLS and self.input.get("command") not in (None, "view")


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
    removed: set[int] = set()
    cleared: set[int] = set()
    for event in sorted(events, key=lambda e: e.seq):
        if event.kind == "compaction" and event.outcome == "compacted":
            gone, emptied = compaction_removals(event.details)
            removed.update(gone)
            cleared.update(emptied)
        if event.kind != "request":
            continue
        sent_end = sent_end_of(
            event.details, event.message_seq, event.turn_index,
            kind_of=kinds.get, turn_end=lambda turn: turn_ends.get(turn, len(messages)),
        )  # fmt: skip
        views.append(
            RequestView(
                event_seq=event.seq, turn_index=event.turn_index or 0, sent_end=sent_end,
                removed=frozenset(removed), cleared=frozenset(cleared), usage=event.usage,
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


# -- tool calls -------------------------------------------------------------------------------------


def tool_calls(view: SessionView) -> list[ToolCall]:
    """Every answered tool call of the transcript, in order of its result."""
    uses: dict[str, tuple[StoredMessage, ToolUseBlock]] = {}
    calls: list[ToolCall] = []
    for row in view.messages:
        for block in row.message.blocks:
            if isinstance(block, ToolUseBlock):
                uses[block.id] = (row, block)
            elif isinstance(block, ToolResultBlock) and block.tool_use_id in uses:
                use_row, use = uses[block.tool_use_id]
                key, label = call_target(use.name, use.input)
                text = block.text
                calls.append(
                    ToolCall(
                        use_seq=use_row.seq, result_seq=row.seq, turn_index=row.turn_index, name=use.name,
                        input=use.input, key=key, label=label, text=text,
                        digest=hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest(),
                        tokens=view.tokenizer.count_block(block),
                        size_bytes=len(text.encode("utf-8", "surrogatepass")), is_error=block.is_error,
                    )
                )  # fmt: skip
    return calls


def call_target(name: str, arguments: dict[str, Any]) -> tuple[str, str]:
    """(key, label) of what a tool call reads: ``file:PATH`` for a whole-file read (Read, an
    editor's view, ``cat PATH``), else the tool name and its canonical arguments."""
    path = _whole_file_path(name, arguments)
    if path:
        return f"file:{path}", path
    canonical = json.dumps(arguments, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    shown = arguments.get("command") or arguments.get("pattern") or arguments.get("path") or canonical
    shown = " ".join(str(shown).split())
    return f"call:{name}:{canonical}", f"{name} {shown[:80]}{'…' if len(shown) > 80 else ''}"


def _whole_file_path(name: str, arguments: dict[str, Any]) -> str | None:
    lowered = name.lower()
    if lowered in _READ_TOOLS:
        path = arguments.get(_READ_TOOLS[lowered]) or arguments.get("file_path") or arguments.get("path")
        partial = any(arguments.get(k) for k in ("offset", "limit", "view_range", "start_line", "end_line"))
        return str(path) if isinstance(path, str) and path and not partial else None
    if lowered in _EDITOR_TOOLS and arguments.get("command") == "view":
        path = arguments.get("path")
        whole = arguments.get("view_range") in (None, [], [1, -1])
        return str(path) if isinstance(path, str) and path and whole else None
    if lowered in _SHELL_TOOLS and isinstance(arguments.get("command"), str):
        try:
            words = shlex.split(arguments["command"])
        except ValueError:
            return None
        if len(words) == 2 and words[0] == "cat" and not words[1].startswith("-"):
            return words[1]
    return None


# -- detectors ----------------------------------------------------------------------------------------


def find_repeated_reads(view: SessionView, calls: Sequence[ToolCall] | None = None) -> list[Finding]:
    """The same output read again: every copy after the first is re-sent for nothing."""
    calls = tool_calls(view) if calls is None else calls
    groups: dict[str, list[ToolCall]] = {}
    for call in calls:
        if call.tokens >= MIN_FINDING_TOKENS and not call.is_mutating and call.text.strip():
            groups.setdefault(call.digest, []).append(call)
    findings = []
    for group in groups.values():
        if len(group) < 2:
            continue
        first, repeats = group[0], group[1:]
        per_request = [(r, sum(c.tokens for c in repeats if r.sends(c.result_seq, result=True)))
                       for r in view.requests]  # fmt: skip
        per_request = [(r, t) for r, t in per_request if t]
        if not per_request:
            continue
        same = "same call" if len({c.key for c in group}) == 1 else "different calls"
        findings.append(
            view.finding(
                "repeated_read",
                title=f"{first.label} read {len(group)} times with identical output",
                detail=(
                    f"{len(group)} results with the same content ({same}; {first.tokens:,} tokens each) "
                    f"at seqs {', '.join(str(c.result_seq) for c in group)}; the copies after the first "
                    f"were re-sent with {len(per_request)} request(s)."
                ),
                seqs=[s for c in group for s in (c.use_seq, c.result_seq)],
                turn_index=repeats[0].turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (older copies become placeholders; the latest read stays)",
            )
        )
    return findings


def find_stale_results(view: SessionView, calls: Sequence[ToolCall] | None = None) -> list[Finding]:
    """An output superseded by a later read of the same thing that returned something else."""
    calls = tool_calls(view) if calls is None else calls
    first_of_digest: dict[str, ToolCall] = {}
    by_key: dict[str, list[ToolCall]] = {}
    for call in calls:
        first_of_digest.setdefault(call.digest, call)
        if not call.is_mutating:
            by_key.setdefault(call.key, []).append(call)
    findings = []
    for group in by_key.values():
        # Only first copies: later identical copies are already repeated_read findings.
        stale = [
            (old, new)
            for old, new in itertools.pairwise(group)
            if old.digest != new.digest
            and first_of_digest[old.digest] is old
            and old.tokens >= MIN_FINDING_TOKENS
        ]
        if not stale:
            continue
        per_request = []
        for r in view.requests:
            tokens = sum(
                old.tokens
                for old, new in stale
                if r.sends(old.result_seq, result=True) and r.sends(new.result_seq, result=True)
            )
            if tokens:
                per_request.append((r, tokens))
        if not per_request:
            continue
        label = group[0].label
        findings.append(
            view.finding(
                "stale_result",
                title=f"{label}: {len(stale)} earlier output(s) superseded by a later read",
                detail=(
                    "Outputs at seqs "
                    + ", ".join(f"{old.result_seq} ({old.tokens:,} tokens)" for old, _ in stale)
                    + f" stayed in the context after a later call of the same {'file read' if group[0].key.startswith('file:') else 'command'} "
                    f"returned different content (seqs {', '.join(str(new.result_seq) for _, new in stale)})."
                ),
                seqs=[s for old, new in stale for s in (old.use_seq, old.result_seq, new.result_seq)],
                turn_index=stale[0][1].turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (superseded outputs become placeholders)",
            )
        )
    return findings


def find_unused_results(
    view: SessionView, calls: Sequence[ToolCall] | None = None, *, threshold_bytes: int | None = None
) -> list[Finding]:
    """Oversized results none of whose own identifiers ever appear in a later assistant message.

    A result's identifiers are words that look like code or paths (underscores, digits, dots,
    slashes, inner capitals) and that no earlier message held. The first request after the
    result had to send it; every request after that re-sent it for nothing.
    """
    calls = tool_calls(view) if calls is None else calls
    threshold = view.offload_threshold_bytes if threshold_bytes is None else threshold_bytes
    first_seen: dict[str, int] = {}
    last_assistant: dict[str, int] = {}
    for row in view.messages:
        terms = message_terms(row.message)
        for term in terms:
            first_seen.setdefault(term, row.seq)
            if row.message.role == "assistant":
                last_assistant[term] = row.seq
    copies: dict[str, int] = {}
    for call in calls:
        copies[call.digest] = copies.get(call.digest, 0) + 1
    findings = []
    for call in calls:
        # A result read more than once is a repeated_read finding; counting it here too would double it.
        if call.size_bytes <= threshold or call.is_error or copies[call.digest] > 1:
            continue
        own = {t for t in text_terms(call.text) if first_seen.get(t) == call.result_seq}
        if len(own) < MIN_DISTINCTIVE_TERMS or any(last_assistant.get(t, -1) > call.result_seq for t in own):
            continue
        carriers = view.carriers(call.result_seq, result=True)
        per_request = [(r, call.tokens) for r in carriers[1:]]
        if not per_request:
            continue
        findings.append(
            view.finding(
                "unused_result",
                title=f"{call.tokens:,}-token result of {call.label} never referred to again",
                detail=(
                    f"{call.size_bytes:,} bytes of output; none of its {len(own):,} identifiers of its own "
                    f"(e.g. {', '.join(_examples(own))}) appear in a later "
                    f"assistant message or tool input, yet {len(per_request)} later request(s) re-sent it."
                ),
                seqs=(call.use_seq, call.result_seq),
                turn_index=call.turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (a read_result output is not offloaded again)"
                if call.name in ENGINE_TOOL_NAMES
                else f"result_offload_threshold = {_power_of_two_below(call.size_bytes)} "
                "(bytes: the output is stored, the context gets a preview and a read_result reference)",
            )
        )
    return findings


def find_unused_tools(view: SessionView) -> list[Finding]:
    """Tool definitions sent with requests and never called (ctxdesk's own tools left out:
    read_result, tool_search, compact_context and final_report are sent only when needed)."""
    called = {b.name for m in view.messages for b in m.message.blocks if isinstance(b, ToolUseBlock)}
    unused = [
        t for t in view.tools if t.tokens > 0 and t.name not in called and t.name not in ENGINE_TOOL_NAMES
    ]
    per_request = []
    for r in view.requests:
        if r.components is not None and r.components.tools == 0:
            continue
        # The session manager records which tools each request sent (deferred ones were not).
        sent = [t for t in unused if r.tools_sent is None or t.name in r.tools_sent]
        if sent:
            per_request.append((r, sum(t.tokens for t in sent)))
    if not per_request:
        return []
    unused = [
        t for t in unused if any(r.tools_sent is None or t.name in r.tools_sent for r, _ in per_request)
    ]
    tokens = sum(t.tokens for t in unused)
    names = ", ".join(t.name for t in sorted(unused, key=lambda t: (-t.tokens, t.name)))
    if all(t.category == "builtin" for t in unused):
        fix = "stop offering them (builtin tools are never deferred): remove them from the agent's tool list"
    elif view.settings is not None:
        # Deferral keeps definitions under this share of the budget, least recently used (never
        # called) first: the share of what was sent without the unused ones defers exactly those.
        sent_tokens = max((r.components.tools for r, _ in per_request if r.components), default=0)
        sent_tokens = sent_tokens or sum(t.tokens for t in view.tools)
        share = max(0, sent_tokens - tokens) / view.settings.budget_tokens
        fix = (
            f"tool_deferral_threshold = {max(0.001, math.floor(share * 1000) / 1000):g} "
            "(MCP and skill tools wait behind tool_search until asked for)"
        )
    else:
        fix = "defer them behind tool_search (lower tool_deferral_threshold), or stop offering them"
    return [
        view.finding(
            "unused_tools",
            title=f"{len(unused)} tool definition(s) sent with {len(per_request)} request(s) and never called",
            detail=f"{names}: {tokens:,} tokens of definitions, sent with {len(per_request)} request(s).",
            seqs=(),
            turn_index=per_request[0][0].turn_index,
            per_request=per_request,
            fix=fix,
        )
    ]


def find_uncached_prefix(view: SessionView) -> list[Finding]:
    """A large prompt prefix re-sent at full price on every request because nothing was cached.

    Between compactions a request's prompt starts with the previous request's whole prompt, so
    ``min(previous, this)`` of it could have been a cache read. Under the provider's cache
    pricing, each request would read that prefix and write the rest for the next one.
    """
    used = [r for r in view.requests if r.usage is not None and r.usage.prompt_tokens > 0]
    if len(used) < MIN_CACHE_REQUESTS or any(r.usage and r.usage.cache_read_input_tokens for r in used):
        return []
    stable = [0] + [
        min(a.usage.prompt_tokens, b.usage.prompt_tokens)  # type: ignore[union-attr]
        for a, b in itertools.pairwise(used)
    ]
    reusable = sum(stable)
    if reusable < MIN_CACHEABLE_PREFIX * (len(used) - 1):
        return []
    average = reusable // (len(used) - 1)
    money: float | None = None
    detail = f"{len(used)} requests, none read from the prompt cache; {reusable:,} prompt tokens repeated a prefix the previous request had sent."
    prices = view.prices
    if prices is not None and prices.cache_read is not None and prices.cache_write is not None:
        actual = sum(prices.prompt_cost(r.usage) for r in used)  # type: ignore[arg-type]

        def cached_cost(write: float) -> float:
            return sum(
                s * prices.cache_read + (r.usage.prompt_tokens - s) * write  # type: ignore[union-attr,operator]
                for r, s in zip(used, stable, strict=True)
            )

        money = round(max(0.0, actual - cached_cost(prices.cache_write)), 6)
        saved_1h = max(0.0, actual - cached_cost(prices.cache_write_1h or prices.cache_write))
        detail += f" Caching would have cost ${actual - money:,.4f} instead of ${actual:,.4f} (1-hour writes: saves ${saved_1h:,.4f})."
    anthropic = (view.session.provider or "") == "anthropic" or "claude" in (view.session.model or "")
    return [
        view.finding(
            "uncached_prefix",
            title=f"No prompt caching over {len(used)} requests with a ~{average:,}-token stable prefix",
            detail=detail,
            seqs=(),
            turn_index=used[1].turn_index,
            per_request=[(r, s) for r, s in zip(used, stable, strict=True) if s],
            fix=(
                "add a cache breakpoint after the system prompt and tools, and one on the last message "
                '(cache_control: {"type": "ephemeral"})'
                if anthropic
                else "enable prompt caching (keep the prefix byte-identical between requests)"
            ),
            exact=True,
            tokenizer="provider",
            money=money,
        )
    ]


def find_stale_thinking(view: SessionView) -> list[Finding]:
    """Thinking blocks of earlier turns still re-sent with later requests."""
    thinking = {
        m.seq: (m.turn_index, sum(view.tokenizer.count_block(b) for b in m.message.blocks if isinstance(b, ThinkingBlock)))
        for m in view.messages
        if m.message.role == "assistant" and any(isinstance(b, ThinkingBlock) for b in m.message.blocks)
    }  # fmt: skip
    per_request = []
    seqs: set[int] = set()
    for r in view.requests:
        if not r.thinking_billed:
            continue
        stale = [seq for seq, (turn, _) in thinking.items() if turn < r.turn_index and r.sends(seq)]
        if stale:
            per_request.append((r, sum(thinking[s][1] for s in stale)))
            seqs.update(stale)
    if not per_request:
        return []
    return [
        view.finding(
            "stale_thinking",
            title=f"Thinking blocks of earlier turns re-sent ({max(t for _, t in per_request):,} tokens at most)",
            detail=f"{len(seqs)} assistant message(s) kept their thinking after their turn ended; "
            f"{len(per_request)} later request(s) re-sent it.",
            seqs=seqs,
            turn_index=per_request[0][0].turn_index,
            per_request=per_request,
            fix="drop thinking blocks of finished turns before sending (Anthropic: clear_thinking_20251015, "
            'keep={"type": "thinking_turns", "value": 1})',
        )
    ]


def find_ineffective_compactions(view: SessionView) -> list[Finding]:
    """Compactions that ran and kept more than 90% of what they were given."""
    findings = []
    for event in view.events:
        d = event.details
        before, after = d.get("before_tokens"), d.get("after_tokens")
        if event.kind != "compaction" or event.outcome != "compacted":
            continue
        if not isinstance(before, int) or not isinstance(after, int) or before <= 0:
            continue
        if after / before <= INEFFECTIVE_COMPACTION_RATIO:
            continue
        target = d.get("target_tokens") if isinstance(d.get("target_tokens"), int) else event.limit_tokens
        shortfall = max(0, after - target) if isinstance(target, int) else 0
        later = [r for r in view.requests if r.event_seq > event.seq]
        per_request = [(r, shortfall) for r in later] if shortfall else []
        ran = [str(s) for s in d.get("strategies_run") or []]
        fix = (
            'strategy = "chain" (clear_tool_results, then summarize, then truncate until the target is met)'
            if "summarize" not in ran
            else "summarize keep_recent_turns=1 (fold more turns into the summary)"
        )
        turn = event.turn_index if event.turn_index is not None else 0
        findings.append(
            view.finding(
                "ineffective_compaction",
                title=f"Compaction at turn {turn} freed only {100 * (before - after) / before:.1f}% "
                f"({before:,} → {after:,} tokens)",
                detail=f"Strategies run: {', '.join(ran) or 'unknown'}; target {target if target is not None else 'unknown'}"
                f"{f' tokens, missed by {shortfall:,}' if shortfall else ''}. A compaction that frees little "
                "still rewrites the prompt prefix (the cache is invalidated) and will trigger again soon.",
                seqs=compaction_removals(d)[0],
                turn_index=turn,
                per_request=per_request,
                fix=fix,
            )
        )
    return findings


def find_lost_constraints(view: SessionView) -> list[Finding]:
    """Constraints a user stated (or a pinned message held) that a compaction's summary dropped.

    A constraint is a sentence with one of ``engine.compaction.constraints.CONSTRAINT_PHRASES``
    (the phrases the offline summarizer keeps too); it is lost when
    fewer than half of its key terms appear in the summary plus the messages the compaction kept.
    """
    by_seq = {m.seq: m for m in view.messages}
    reported: set[tuple[int, str]] = set()
    findings = []
    for event in view.events:
        if event.kind != "compaction" or event.outcome != "compacted":
            continue
        d = event.details
        removed = compaction_removals(d)[0]
        if not removed:
            continue
        snapshot = view.snapshots.get(d.get("snapshot_id")) if isinstance(d.get("snapshot_id"), int) else None
        summary = (snapshot.summary if snapshot else None) or d.get("summary") or ""
        kept = (
            [m.text for m in snapshot.messages]
            if snapshot
            else [m.message.text for m in view.messages if m.seq not in removed and m.seq <= max(removed)]
        )
        surviving = _words("\n".join([str(summary), *kept]))
        for seq in sorted(removed):
            row = by_seq.get(seq)
            if row is None or not (row.message.pinned or is_user_input(row.message)):
                continue
            lost = []
            for sentence in constraint_sentences(row.message.text):
                terms = key_terms(sentence)
                if (
                    len(terms) >= 2
                    and len(terms & surviving) < CONSTRAINT_KEPT_SHARE * len(terms)
                    and (seq, sentence) not in reported
                ):
                    reported.add((seq, sentence))
                    lost.append((sentence, sorted(terms - surviving)))
            if not lost:
                continue
            quoted = lost[0][0] if len(lost[0][0]) <= 90 else lost[0][0][:89] + "…"
            tokens = sum(view.tokenizer.count(s) for s, _ in lost)
            findings.append(
                Finding(
                    kind="lost_constraint", session_id=view.session_id,
                    title=f"Compaction at turn {event.turn_index or 0} lost a constraint: “{quoted}”",
                    detail="; ".join(f"“{s}” (missing: {', '.join(m)})" for s, m in lost)
                    + f" — from {'pinned' if row.message.pinned else 'user'} message {seq}, absent from the "
                    "summary and the kept messages.",
                    message_seqs=(seq,), turn_index=event.turn_index or row.turn_index, tokens=0,
                    context_tokens=tokens, requests=0, money=None,
                    fix=f"pin message {seq} (pinned=True) so every compaction keeps it, or name the constraint "
                    "in the compaction instructions",
                    exact=view.tokenizer.exact, tokenizer=view.tokenizer.id,
                )
            )  # fmt: skip
    return findings


# -- text helpers ----------------------------------------------------------------------------------


def text_terms(text: str) -> set[str]:
    """Identifier-like terms of a text, and the path segments of path-like ones."""
    terms = set()
    for match in _TERM.findall(text):
        for term in (match, *match.split("/")):
            if _is_distinctive(term):
                terms.add(term)
    return terms


def message_terms(message: Message) -> set[str]:
    """Terms of every text, thinking, tool input and tool result of a message."""
    terms: set[str] = set()
    for block in message.blocks:
        if isinstance(block, TextBlock | ToolResultBlock):
            terms |= text_terms(block.text)
        elif isinstance(block, ThinkingBlock):
            terms |= text_terms(block.thinking)
        elif isinstance(block, ToolUseBlock):
            terms |= text_terms(json.dumps(block.input, ensure_ascii=False))
    return terms


def _is_distinctive(term: str) -> bool:
    if len(term) < 4:
        return False
    if any(c in term for c in "_./$@") or (any(c.isdigit() for c in term) and any(c.isalpha() for c in term)):
        return True
    return any(a.islower() and b.isupper() for a, b in itertools.pairwise(term))


def _examples(terms: Iterable[str], n: int = 3) -> list[str]:
    """A few readable terms: the longest that are still short enough to quote."""
    short = [t for t in terms if len(t) <= 40] or [t[:40] + "…" for t in terms]
    return sorted(short, key=lambda t: (-len(t), t))[:n]


def _power_of_two_below(size: int) -> int:
    value = 1_024
    while value * 2 <= size:
        value *= 2
    return value


# -- entry point -------------------------------------------------------------------------------------


def analyze(view: SessionView) -> list[Finding]:
    """Every detector over one session view, largest savings first."""
    from engine.cache_findings import find_cache_rebuilds  # it builds on this module's Finding

    calls = tool_calls(view)
    findings = [
        *find_repeated_reads(view, calls),
        *find_stale_results(view, calls),
        *find_unused_results(view, calls),
        *find_unused_tools(view),
        *find_uncached_prefix(view),
        *find_stale_thinking(view),
        *find_ineffective_compactions(view),
        *find_lost_constraints(view),
        *find_cache_rebuilds(view),
    ]
    return sorted(findings, key=lambda f: (-f.tokens, f.turn_index, f.kind, f.message_seqs))


def find_waste(
    store: SessionStore,
    session_id: str,
    *,
    settings: Settings | None = None,
    table: ModelTable | None = None,
) -> list[Finding]:
    """Findings of one stored session (a sub-agent thread is a session of its own); reads only."""
    return analyze(load_session_view(store, session_id, settings=settings, table=table))
