"""Prompt-cache analysis: per call, what was read and written, and why a cached prefix was rebuilt.

Pure: ``analyze_cache(calls)`` takes a session's model calls in order (:class:`CallRecord`, built
from stored events by ``call_records``) and returns a frozen :class:`CacheAnalysis`. A call
*rebuilt* the cache when it wrote again tokens the previous call had already sent
(``min(previous prompt - read, written)``, at least ``MIN_REWRITTEN``); the money lost is what
those writes cost over reading them. The cause is, first match wins: a compaction (expected, not
counted as lost), a model switch, TTL expiry (gap since the previous call >= its cache's TTL), a
prefix change (which part changed first: system prompt, tool definitions, an earlier message or
tool result), else breakpoint placement. A call that re-sent the previous prompt as uncached
input instead is an ``uncached_prefix`` (no breakpoint covered it).

One concept over ~400 lines: why each call did or did not read the cache. The call record, the
classification rules and their explanations, and the reading of call records from events are
kept together because each cause is defined by the fields the record carries.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.components import trusted
from engine.cost import (
    DETAIL_REASONING,
    DETAIL_WRITE_1H,
    DETAIL_WRITE_5M,
    CallCost,
    Prices,
    price_call,
    prices_for,
)
from engine.events import ComponentTokens, ProviderUsage, is_compaction_call
from engine.model_table import ModelTable

CacheCause = Literal[
    "cold_start",
    "compaction",
    "model_switch",
    "ttl_expired",
    "system_changed",
    "tools_changed",
    "tools_reordered",
    "history_edited",
    "tool_results_cleared",
    "prefix_changed",
    "breakpoint",
    "uncached_prefix",
]
CACHE_CAUSES: tuple[str, ...] = CacheCause.__args__
#: Causes that are expected and not counted as money lost (the first write, a compaction's new prefix).
EXPECTED_CAUSES = frozenset({"cold_start", "compaction"})
#: Rewrites smaller than this are cache-boundary noise (claude-cache-audit uses the same floor).
MIN_REWRITTEN = 1_000
TTL_5M_S = 300
TTL_1H_S = 3_600
#: A prompt this much smaller than the previous one was compacted (or cleared) in between.
COMPACTED_SHARE = 0.7
#: Compaction-like events between two calls that give the next call a new prefix.
PREFIX_RESET_EVENTS = frozenset({"compaction", "restore", "resume"})

FIXES: dict[str, str] = {
    "compaction": "expected after a compaction; compact less often (higher compact_trigger) to rebuild less",
    "model_switch": "keep one model per conversation; run side tasks (titles, summaries) in a sub-agent "
    "with its own cache",
    "ttl_expired": "the cache expired while the agent waited: use the 1-hour cache TTL for long tool runs "
    "or idle gaps, or keep the session warm",
    "system_changed": "keep the system prompt byte-identical: move dates, git status and other dynamic "
    "text after the last cache breakpoint",
    "tools_changed": "keep the tool list fixed for the session; defer rarely used tools behind tool_search "
    "instead of adding or removing them",
    "tools_reordered": "send tools in a stable order (sort by name) and move dynamic tools after the "
    "cached prefix",
    "history_edited": "never edit or drop earlier messages between calls; compact once instead of trimming "
    "a little every call",
    "tool_results_cleared": "clear tool results in batches (clear_at_least) so the cached prefix is "
    "rebuilt rarely",
    "prefix_changed": "keep the prefix byte-identical between calls (system prompt, tools, history)",
    "breakpoint": "put a cache breakpoint on the last message of every request so the next call reads "
    "the whole previous prompt",
    "uncached_prefix": "put a cache breakpoint after the stable prefix (system prompt, tools) and on the "
    "last message (cache_control: ephemeral)",
}


@dataclass(frozen=True)
class CallRecord:
    """One model call as the analysis sees it (built from a ``request`` event)."""

    index: int
    model: str | None
    usage: ProviderUsage
    cost: CallCost
    prices: Prices | None
    at: dt.datetime | None = None
    event_id: int | None = None
    event_seq: int | None = None
    turn_index: int | None = None
    message_seq: int | None = None
    components: ComponentTokens | None = None
    system_sha256: str | None = None
    tools_sha256: str | None = None
    tool_names: tuple[str, ...] | None = None
    reset_before: str | None = None  # a compaction/restore recorded since the previous call


class CallCache(BaseModel):
    """What one call read from and wrote to the prompt cache, and why it rebuilt (if it did)."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(description="0-based position among the session's calls.")
    event_id: int | None = None
    turn_index: int | None = None
    message_seq: int | None = None
    read_tokens: int = Field(ge=0)
    written_tokens: int = Field(ge=0)
    uncached_tokens: int = Field(ge=0, description="Input sent at full price.")
    rebuilt_tokens: int = Field(
        ge=0, description="Tokens the previous call had sent that this one wrote again or sent uncached."
    )
    cause: CacheCause | None = Field(description="Why it rebuilt; None for a normal, growing prefix.")
    gap_s: float | None = Field(description="Seconds since the previous call.")
    ttl_s: int | None = Field(description="TTL of the cache the previous call left.")
    lost_usd: float = Field(ge=0, description="What the rebuild cost over reading those tokens from cache.")
    explanation: str = Field(description="The evidence, in words.")
    fix: str | None = None

    @property
    def is_loss(self) -> bool:
        return self.cause is not None and self.cause not in EXPECTED_CAUSES


class CauseTotal(BaseModel):
    model_config = ConfigDict(frozen=True)

    cause: CacheCause
    calls: int
    rebuilt_tokens: int
    lost_usd: float
    fix: str


class CacheAnalysis(BaseModel):
    """The cache story of one session: per call, totals by cause, and the share of cost lost."""

    model_config = ConfigDict(frozen=True)

    calls: tuple[CallCache, ...]
    by_cause: tuple[CauseTotal, ...]
    total_usd: float = Field(ge=0, description="Cost of every call.")
    lost_usd: float = Field(ge=0, description="Money lost to avoidable rebuilds (expected causes excluded).")
    read_tokens: int = Field(ge=0)
    written_tokens: int = Field(ge=0)

    @property
    def lost_share(self) -> float:
        """Share of the whole cost that avoidable rebuilds cost (0..1)."""
        return self.lost_usd / self.total_usd if self.total_usd else 0.0

    @property
    def rebuilds(self) -> list[CallCache]:
        return [c for c in self.calls if c.cause is not None and c.cause != "cold_start"]


def analyze_cache(calls: Sequence[CallRecord]) -> CacheAnalysis:
    """Every call's cache reads, writes and rebuild cause, in order."""
    out: list[CallCache] = []
    ttl = TTL_5M_S
    for i, cur in enumerate(calls):
        out.append(classify_call(calls[i - 1] if i else None, cur, ttl=ttl))
        ttl = ttl_after(cur, ttl)
    return summarize(out, sum(c.cost.total_usd for c in calls))


def summarize(out: Sequence[CallCache], total_usd: float) -> CacheAnalysis:
    """Totals by cause over classified calls."""
    by: dict[str, list[CallCache]] = {}
    for c in out:
        if c.cause is not None:
            by.setdefault(c.cause, []).append(c)
    by_cause = tuple(
        CauseTotal(
            cause=cause,  # type: ignore[arg-type]
            calls=len(items),
            rebuilt_tokens=sum(c.rebuilt_tokens for c in items),
            lost_usd=sum(c.lost_usd for c in items),
            fix=FIXES.get(cause, ""),
        )
        for cause, items in sorted(by.items(), key=lambda kv: (-sum(c.lost_usd for c in kv[1]), kv[0]))
    )
    return CacheAnalysis(
        calls=tuple(out),
        by_cause=by_cause,
        total_usd=total_usd,
        lost_usd=sum(c.lost_usd for c in out if c.is_loss),
        read_tokens=sum(c.read_tokens for c in out),
        written_tokens=sum(c.written_tokens for c in out),
    )


def ttl_after(call: CallRecord, ttl: int) -> int:
    """TTL of the cache entry left after ``call``: its own writes' TTL, else the one before."""
    if not call.usage.cache_creation_input_tokens:
        return ttl
    return TTL_1H_S if call.cost.cache_write_1h_tokens else TTL_5M_S


def classify_call(prev: CallRecord | None, cur: CallRecord, *, ttl: int = TTL_5M_S) -> CallCache:
    """What ``cur`` read and wrote and why it rebuilt, given the call before it and the TTL that
    call's cache had (``ttl_after`` over the earlier calls)."""
    u = cur.usage
    base: dict[str, Any] = {
        "index": cur.index,
        "event_id": cur.event_id,
        "turn_index": cur.turn_index,
        "message_seq": cur.message_seq,
        "read_tokens": u.cache_read_input_tokens,
        "written_tokens": u.cache_creation_input_tokens,
        "uncached_tokens": u.input_tokens,
    }
    if prev is None:
        if u.cache_creation_input_tokens:
            return _verdict(
                base, rebuilt_tokens=0, cause="cold_start", gap_s=None, ttl_s=None, lost_usd=0.0,
                explanation=f"The first call wrote {u.cache_creation_input_tokens:,} tokens to the cache.",
            )  # fmt: skip
        return _normal(base, None, None)
    gap = (cur.at - prev.at).total_seconds() if cur.at and prev.at else None
    already_sent = prev.usage.prompt_tokens
    rewritten = max(0, min(already_sent - u.cache_read_input_tokens, u.cache_creation_input_tokens))
    resent_uncached = max(0, min(already_sent - u.cache_read_input_tokens - rewritten, u.input_tokens))
    p = cur.prices.for_prompt(u.prompt_tokens) if cur.prices else None
    if rewritten >= MIN_REWRITTEN:
        cause, explanation = _rebuild_cause(prev, cur, gap, ttl, rewritten)
        lost = rewritten * max(0.0, _write_price(cur) - p.cache_read) if p else 0.0
        if cause in EXPECTED_CAUSES:
            lost = 0.0
        return _verdict(
            base, rebuilt_tokens=rewritten, cause=cause, gap_s=gap, ttl_s=ttl, lost_usd=lost,
            explanation=explanation, fix=FIXES.get(cause),
        )  # fmt: skip
    if resent_uncached >= MIN_REWRITTEN and p is not None and p.caches and not cur.reset_before:
        lost = resent_uncached * (p.input - p.cache_read)
        explanation = (
            f"No cache breakpoint covered {resent_uncached:,} tokens of call {prev.index + 1}'s prompt, so "
            f"call {cur.index + 1} sent them again as uncached input (it read {u.cache_read_input_tokens:,} "
            "from the cache)."
        )
        return _verdict(
            base, rebuilt_tokens=resent_uncached, cause="uncached_prefix", gap_s=gap, ttl_s=ttl,
            lost_usd=lost, explanation=explanation, fix=FIXES["uncached_prefix"],
        )  # fmt: skip
    return _normal(base, gap, ttl)


def _normal(base: dict[str, Any], gap: float | None, ttl: int | None) -> CallCache:
    return _verdict(
        base, rebuilt_tokens=0, cause=None, gap_s=gap, ttl_s=ttl, lost_usd=0.0,
        explanation="Read the cached prefix and wrote only what was new.",
    )  # fmt: skip


def _verdict(base: dict[str, Any], **rest: Any) -> CallCache:
    """``CallCache(**base, **rest)``, not validated again (0.7 µs, not 2, per call of an import's cost
    pass): the fields in order, each of its type and not negative, made by :func:`classify_call` from
    valid calls (a ``fix`` not given is None, as its default)."""
    values = base | rest
    if "fix" in rest:
        return trusted(CallCache, values, _EVERY_VERDICT_FIELD)
    values["fix"] = None
    return trusted(CallCache, values, _VERDICT_FIELDS_BUT_FIX)


#: The sets of given fields of :func:`_verdict`'s CallCaches (shared: nothing adds to them).
_EVERY_VERDICT_FIELD = set(CallCache.model_fields)
_VERDICT_FIELDS_BUT_FIX = _EVERY_VERDICT_FIELD - {"fix"}


def _write_price(call: CallRecord) -> float:
    """Blended USD per cache-write token of this call (its 5m/1h mix)."""
    p = call.prices.for_prompt(call.usage.prompt_tokens) if call.prices else None
    if p is None:
        return 0.0
    written = call.cost.cache_write_tokens
    return call.cost.cache_write_usd / written if written else p.cache_write_5m


def _rebuild_cause(
    prev: CallRecord, cur: CallRecord, gap: float | None, ttl: int, rewritten: int
) -> tuple[CacheCause, str]:
    """The cause of a rebuild and the sentence saying it: the cause first, then what it cost."""
    n, m = cur.index + 1, prev.index + 1  # 1-based call numbers, as people count them
    what = f"so call {n} wrote {rewritten:,} tokens to the cache again that call {m} had already cached"

    def said(cause: str) -> str:
        return f"{cause[0].upper()}{cause[1:]}, {what}."

    if gap is not None and gap >= ttl:  # nothing was left to read, whatever else changed
        also = (
            f" (the {cur.reset_before} in between found nothing cached to lose)" if cur.reset_before else ""
        )
        return "ttl_expired", said(
            f"the cache had expired: {_duration(gap)} passed since call {m}, past the {_duration(ttl)} "
            f"cache lifetime{also}"
        )
    if cur.reset_before:
        return "compaction", said(
            f"{'an' if cur.reset_before[0] in 'aeiou' else 'a'} {cur.reset_before} between calls {m} and {n} "
            "gave the prompt a new start"
        )
    if (cur.model or "") != (prev.model or ""):
        return "model_switch", said(
            f"the model changed from {prev.model} to {cur.model} between calls {m} and {n} (each model has "
            "its own cache)"
        )
    if cur.usage.prompt_tokens < COMPACTED_SHARE * prev.usage.prompt_tokens:
        return "compaction", said(
            f"the prompt shrank from {prev.usage.prompt_tokens:,} to {cur.usage.prompt_tokens:,} tokens "
            f"between calls {m} and {n} (compacted or cleared)"
        )
    changed = _first_change(prev, cur)
    if changed is not None:
        cause, words = changed
        return cause, said(f"{words} between calls {m} and {n}")
    read = cur.usage.cache_read_input_tokens
    if read == 0:
        return "prefix_changed", said(
            "the very start of the prompt changed (tool definitions and the system prompt come first): "
            "nothing was read from the cache"
        )
    return "breakpoint", said(
        f"only the first {read:,} tokens were read from the cache: the rest of call {m}'s prompt was not "
        "at a cache breakpoint, or an earlier message changed"
    )


def _first_change(prev: CallRecord, cur: CallRecord) -> tuple[CacheCause, str] | None:
    """Which part of the prompt changed first, in prompt order (tools, system, history)."""
    hashed = bool(prev.tools_sha256 and cur.tools_sha256)
    names_differ = (
        prev.tool_names is not None and cur.tool_names is not None and prev.tool_names != cur.tool_names
    )
    if (hashed and prev.tools_sha256 != cur.tools_sha256) or (not hashed and names_differ):
        if prev.tool_names and cur.tool_names and sorted(prev.tool_names) == sorted(cur.tool_names):
            if prev.tool_names != cur.tool_names:
                return "tools_reordered", "the tool list was reordered"
            return "tools_changed", "a tool definition changed (same names, same order)"
        return "tools_changed", "the tool definitions changed" + _names_delta(prev.tool_names, cur.tool_names)
    if prev.system_sha256 and cur.system_sha256 and prev.system_sha256 != cur.system_sha256:
        return "system_changed", "the system prompt changed"
    a, b = prev.components, cur.components
    if a is None or b is None:
        return None
    if not (prev.tools_sha256 and cur.tools_sha256) and a.tools != b.tools:
        return "tools_changed", f"the tool definitions changed ({a.tools:,} -> {b.tools:,} tokens)"
    if not (prev.system_sha256 and cur.system_sha256) and (a.system + a.skills) != (b.system + b.skills):
        return "system_changed", f"the system prompt changed ({a.system:,} -> {b.system:,} tokens)"
    if b.tool_results < a.tool_results:
        return (
            "tool_results_cleared",
            f"earlier tool results were cleared ({a.tool_results:,} -> {b.tool_results:,} tokens)",
        )
    if b.conversation < a.conversation or b.summary != a.summary:
        return "history_edited", "an earlier message was edited or removed"
    return None


def _names_delta(before: tuple[str, ...] | None, after: tuple[str, ...] | None) -> str:
    if before is None or after is None:
        return ""
    added, removed = sorted(set(after) - set(before)), sorted(set(before) - set(after))
    parts = [
        f"added {', '.join(added[:5])}" if added else "",
        f"removed {', '.join(removed[:5])}" if removed else "",
    ]
    return f" ({'; '.join(p for p in parts if p)})" if added or removed else ""


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- building the calls from stored events ------------------------------------------------------------


def parse_utc(value: Any) -> dt.datetime | None:
    """An ISO-8601 time (``Z`` or offset; naive means UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def event_time_is_call_time(source: str | None) -> bool:
    """Whether a session's events were written as its calls were made (ctxdesk's own sessions, the
    proxy's, an OpenTelemetry capture's), not when a transcript was imported (``import:<format>``)."""
    return not (source or "").startswith("import:")


def call_records(
    events: Iterable[Any],
    *,
    message_times: Mapping[int, str] | None = None,
    default_model: str | None = None,
    exact_requests: Mapping[int, Mapping[str, Any]] | None = None,
    table: ModelTable | None = None,
    event_time_is_call_time: bool = True,
) -> list[CallRecord]:
    """The calls of one session from its stored events (``StoredEvent``-like, in any order).

    Only ``request`` events with provider usage are calls. A call's time is ``details.call_utc``,
    else the ``timestamp`` of the message at ``message_seq`` (``message_times``), else the
    event's ``created_utc`` when ``event_time_is_call_time`` (a live session's events are written
    as its calls are made; an imported session's when it was imported: see
    :func:`event_time_is_call_time`), else unknown. A compaction, restore or resume between two calls marks the second; a
    summarizer call (``details.compaction_call``) marks itself and the call after it.
    ``exact_requests`` (event id -> ``model_requests`` row, when the exact request was recorded)
    supplies what the event's details lack: prompt hashes, the 5m/1h write split, reasoning, time.
    """
    times = message_times or {}
    price_cache: dict[str | None, Prices | None] = {}
    out: list[CallRecord] = []
    reset: str | None = None
    for e in sorted(events, key=lambda e: e.seq):
        # a proxy edit only sent again ("kept") leaves the prefix as the previous call sent it
        if e.kind in PREFIX_RESET_EVENTS and e.outcome not in ("noop", "failed", "rejected", "kept"):
            reset = e.kind if e.kind != "compaction" else _compaction_words(e.trigger, e.details or {})
            continue
        if e.kind != "request" or e.usage is None:
            continue
        model = e.model or default_model
        if model not in price_cache:
            price_cache[model] = prices_for(model, table)
        prices = price_cache[model]
        details = {**_exact_details((exact_requests or {}).get(getattr(e, "id", -1))), **(e.details or {})}
        at = parse_utc(details.get("call_utc"))
        if at is None and e.message_seq is not None:
            at = parse_utc(times.get(e.message_seq))
        if at is None and event_time_is_call_time:
            at = parse_utc(getattr(e, "created_utc", None))
        # a harness's summarizer call (Claude Code's compaction) has a prefix of its own, and the call
        # after it starts from the compacted history
        summarizer = is_compaction_call(details)
        names = details.get("tool_names", details.get("tools_sent"))  # the session manager's tools_sent
        out.append(
            _record(
                index=len(out), model=model, usage=e.usage,
                cost=price_call(e.usage, prices, model=model, details=details), prices=prices, at=at,
                event_id=getattr(e, "id", None), event_seq=e.seq, turn_index=e.turn_index,
                message_seq=e.message_seq, components=e.components,
                system_sha256=_str(details.get("system_sha256")), tools_sha256=_str(details.get("tools_sha256")),
                tool_names=tuple(str(n) for n in names) if isinstance(names, list) else None,
                reset_before=reset or ("compaction call" if summarizer else None),
            )
        )  # fmt: skip
        reset = "compaction" if summarizer else None
    return out


def _record(**fields: Any) -> CallRecord:
    """``CallRecord(**fields)`` given every field in order: the frozen dataclass's ``__init__`` sets
    them one ``object.__setattr__`` at a time (2.1 µs a call of an import's cost pass), here at once
    (0.3 µs); it has no ``__post_init__`` to run."""
    record = object.__new__(CallRecord)
    record.__dict__.update(fields)
    return record


#: An agent's compaction, by the trigger its importer recorded (docs/HELPERS.md "Compaction events").
_AGENT_TRIGGER_WORDS = {"auto": "automatic", "reactive": "reactive", "manual": "manual"}


def _compaction_words(trigger: str | None, details: dict[str, Any]) -> str:
    """``compaction (compact_threshold)`` for ctxdesk's, ``reactive compaction by the agent`` for an agent's."""
    if details.get("by") == "agent":
        kind = _AGENT_TRIGGER_WORDS.get(str(details.get("trigger_kind") or ""))
        return f"{kind} compaction by the agent" if kind else "compaction by the agent"
    return f"compaction ({trigger or 'manual'})"


def _exact_details(row: Mapping[str, Any] | None) -> dict[str, Any]:
    """Detail keys from a ``model_requests`` row (m002), for what the event does not carry."""
    if not row:
        return {}
    pairs = {
        "system_sha256": row.get("system_hash"),
        "tools_sha256": row.get("tools_hash"),
        "call_utc": row.get("started_utc"),
        DETAIL_WRITE_5M: row.get("cache_creation_5m_tokens"),
        DETAIL_WRITE_1H: row.get("cache_creation_1h_tokens"),
        DETAIL_REASONING: row.get("reasoning_tokens"),
    }
    return {k: v for k, v in pairs.items() if v is not None}


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
