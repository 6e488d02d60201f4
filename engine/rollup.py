"""Cost roll-ups: per-call rows, per session, and the whole project (sub-agents in their parents,
per day, per model).

Pure: ``cost_rows(calls, analysis)`` gives one row per call (the ``request_costs`` columns);
``rollup_project(sessions)`` sums :class:`SessionCosts` into a frozen :class:`ProjectCosts`.
Reading a database into these inputs is ``engine.store.costs``'s job.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.cache_analysis import EXPECTED_CAUSES, CacheAnalysis, CallRecord, analyze_cache

#: Summed columns of a cost row (tokens and USD).
SUM_KEYS = (
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cache_read_tokens",
    "cache_write_5m_tokens",
    "cache_write_1h_tokens",
    "input_usd",
    "output_usd",
    "cache_read_usd",
    "cache_write_5m_usd",
    "cache_write_1h_usd",
    "total_usd",
    "uncached_usd",
    "lost_usd",
    "rebuilt_tokens",
)
#: Largest rebuilds listed in a project roll-up.
TOP_REBUILDS = 10


#: The keys of a :func:`cost_rows` row, in order (the ``request_costs`` columns it fills, and ``fix``).
COST_ROW_KEYS = (
    "event_id", "call_index", "turn_index", "call_utc", "day", "model", "priced_as", "price_source",
    "input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens", "cache_write_5m_tokens",
    "cache_write_1h_tokens", "ttl_split_known", "input_usd", "output_usd", "cache_read_usd",
    "cache_write_5m_usd", "cache_write_1h_usd", "total_usd", "uncached_usd", "cache_cause", "rebuilt_tokens",
    "lost_usd", "gap_s", "cache_explanation", "fix",
)  # fmt: skip


def cost_rows(calls: Sequence[CallRecord], analysis: CacheAnalysis | None = None) -> list[dict[str, Any]]:
    """One row per call: cost by part and the cache analysis (``request_costs`` columns)."""
    return [dict(zip(COST_ROW_KEYS, row, strict=True)) for row in cost_row_tuples(calls, analysis)]


def cost_row_tuples(
    calls: Sequence[CallRecord], analysis: CacheAnalysis | None = None
) -> list[tuple[Any, ...]]:
    """:func:`cost_rows` as tuples (:data:`COST_ROW_KEYS` order): what the cost writer inserts, without
    a dict of 28 keys per call of an import (about 2 µs each)."""
    analysis = analysis or analyze_cache(calls)
    rows = []
    for c, a in zip(calls, analysis.calls, strict=True):
        cost, at = c.cost, c.at
        rows.append((
            c.event_id, c.index, c.turn_index,
            at.isoformat().replace("+00:00", "Z") if at else None, at.date().isoformat() if at else None,
            c.model, cost.priced_as, cost.price_source,
            cost.input_tokens, cost.output_tokens, cost.reasoning_tokens, cost.cache_read_tokens,
            cost.cache_write_5m_tokens, cost.cache_write_1h_tokens, cost.ttl_split_known,
            cost.input_usd, cost.output_usd, cost.cache_read_usd, cost.cache_write_5m_usd, cost.cache_write_1h_usd,
            cost.total_usd, cost.uncached_usd,
            a.cause, a.rebuilt_tokens, a.lost_usd if a.is_loss else 0.0, a.gap_s,
            a.explanation if a.cause else None, a.fix,
        ))  # fmt: skip
    return rows


def sum_rows(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Token and USD totals of cost rows, with the call count and unpriced calls."""
    out: dict[str, Any] = dict.fromkeys(SUM_KEYS, 0)
    calls = unpriced = 0
    for r in rows:
        calls += 1
        unpriced += r.get("priced_as") is None
        for k in SUM_KEYS:
            out[k] += r.get(k) or 0
    out["calls"] = calls
    out["unpriced_calls"] = unpriced
    out["cache_write_usd"] = out["cache_write_5m_usd"] + out["cache_write_1h_usd"]
    out["lost_share"] = out["lost_usd"] / out["total_usd"] if out["total_usd"] else 0.0
    return out


@dataclass(frozen=True)
class SessionCosts:
    """One stored session's calls as cost rows, with what the roll-up needs to place it."""

    session_id: str
    title: str | None
    parent_session_id: str | None
    source: str
    model: str | None
    rows: tuple[dict[str, Any], ...]
    created_utc: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Group(BaseModel):
    """Totals of one roll-up group (a project root, a day, a model, a cause)."""

    model_config = ConfigDict(frozen=True)

    key: str
    label: str | None = None
    sessions: int = 0
    totals: dict[str, Any]


class Rebuild(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    call_index: int
    turn_index: int | None
    cause: str
    rebuilt_tokens: int
    lost_usd: float
    explanation: str
    fix: str | None


class ProjectCosts(BaseModel):
    """A whole database's cost: totals, per root session (sub-agents included), per day, per model."""

    model_config = ConfigDict(frozen=True)

    totals: dict[str, Any]
    sessions: int = Field(description="Stored sessions (sub-agent threads included).")
    by_root: tuple[Group, ...] = Field(description="Top-level sessions with their sub-agents rolled in.")
    by_day: tuple[Group, ...]
    by_model: tuple[Group, ...]
    by_cause: tuple[Group, ...]
    top_rebuilds: tuple[Rebuild, ...]
    first_call_utc: str | None
    last_call_utc: str | None


def root_of(session_id: str, parents: Mapping[str, str | None]) -> str:
    """The top-level session ``session_id`` belongs to (following parent_session_id, cycle-safe)."""
    seen = {session_id}
    current = session_id
    while (parent := parents.get(current)) and parent in parents and parent not in seen:
        seen.add(parent)
        current = parent
    return current


def rollup_project(sessions: Sequence[SessionCosts]) -> ProjectCosts:
    """Sum every session's rows: overall, per root session, per UTC day, per model, per cache cause."""
    parents = {s.session_id: s.parent_session_id for s in sessions}
    titles = {s.session_id: s.title for s in sessions}
    all_rows = [r for s in sessions for r in s.rows]
    by_root: dict[str, list[Mapping[str, Any]]] = {}
    members: dict[str, set[str]] = {}
    for s in sessions:
        root = root_of(s.session_id, parents)
        by_root.setdefault(root, []).extend(s.rows)
        members.setdefault(root, set()).add(s.session_id)
    by_day: dict[str, list[Mapping[str, Any]]] = {}
    by_model: dict[str, list[Mapping[str, Any]]] = {}
    by_cause: dict[str, list[Mapping[str, Any]]] = {}
    day_sessions: dict[str, set[str]] = {}
    model_sessions: dict[str, set[str]] = {}
    for s in sessions:
        for r in s.rows:
            day = r.get("day") or "unknown"
            model = r.get("model") or "unknown"
            by_day.setdefault(day, []).append(r)
            by_model.setdefault(model, []).append(r)
            day_sessions.setdefault(day, set()).add(s.session_id)
            model_sessions.setdefault(model, set()).add(s.session_id)
            if r.get("cache_cause"):
                by_cause.setdefault(r["cache_cause"], []).append(r)
    rebuilds = [
        Rebuild(
            session_id=s.session_id, call_index=r["call_index"], turn_index=r.get("turn_index"),
            cause=r["cache_cause"], rebuilt_tokens=r["rebuilt_tokens"], lost_usd=r["lost_usd"],
            explanation=r.get("cache_explanation") or "", fix=r.get("fix"),
        )
        for s in sessions
        for r in s.rows
        if r.get("cache_cause") and r["cache_cause"] not in EXPECTED_CAUSES and r.get("lost_usd")
    ]  # fmt: skip
    rebuilds.sort(key=lambda b: (-b.lost_usd, b.session_id, b.call_index))
    times = sorted(r["call_utc"] for r in all_rows if r.get("call_utc"))

    def groups(
        items: Mapping[str, list[Mapping[str, Any]]], count: Mapping[str, set[str]], order: str
    ) -> tuple[Group, ...]:
        out = [
            Group(key=k, label=titles.get(k), sessions=len(count.get(k, ())), totals=sum_rows(v))
            for k, v in items.items()
        ]
        if order == "key":
            return tuple(sorted(out, key=lambda g: g.key))
        return tuple(sorted(out, key=lambda g: (-g.totals["total_usd"], g.key)))

    cause_sessions = {
        c: {s.session_id for s in sessions for r in s.rows if r.get("cache_cause") == c} for c in by_cause
    }
    return ProjectCosts(
        totals=sum_rows(all_rows),
        sessions=len(sessions),
        by_root=groups(by_root, members, "cost"),
        by_day=groups(by_day, day_sessions, "key"),
        by_model=groups(by_model, model_sessions, "cost"),
        by_cause=tuple(
            sorted(
                groups(by_cause, cause_sessions, "cost"),
                key=lambda g: (-g.totals["lost_usd"], -g.totals["rebuilt_tokens"], g.key),
            )
        ),
        top_rebuilds=tuple(rebuilds[:TOP_REBUILDS]),
        first_call_utc=times[0] if times else None,
        last_call_utc=times[-1] if times else None,
    )
