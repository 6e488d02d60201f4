"""Cost data for the dashboard, read through DuckDB (no streamlit, no sqlite3 here).

The request events (and the call times imports keep in message meta) are read from the union
views :func:`dashboard.data.connect` defines; each call is priced and its cache behaviour
explained by the pure engine modules (``engine.cost``, ``engine.cache_analysis``), so every
database works, whether or not its ``request_costs`` table was filled. A session's *project*
is its top-level session's working directory (``metadata.cwd``), else ``NO_PROJECT``. A call whose
model has no list price is counted at $0 and marked (``priced_as`` missing, ``unpriced_calls``).
Where an agent recorded its own cost (``metadata.agent_cost_usd``) it is shown beside ours.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

import duckdb
import pandas as pd

from engine.cache_analysis import PREFIX_RESET_EVENTS, analyze_cache, call_records, event_time_is_call_time
from engine.events import ComponentTokens, ProviderUsage
from engine.rollup import cost_rows, root_of

#: Columns of :func:`call_costs`, in order.
CALL_COLUMNS = (
    "db", "session_id", "root_session_id", "project", "call_index", "event_seq", "turn_index", "call_utc", "day",
    "model", "priced_as", "input_tokens", "output_tokens", "reasoning_tokens", "cache_read_tokens",
    "cache_write_5m_tokens", "cache_write_1h_tokens", "input_usd", "output_usd", "cache_read_usd",
    "cache_write_5m_usd", "cache_write_1h_usd", "total_usd", "uncached_usd", "cache_cause", "rebuilt_tokens",
    "lost_usd", "gap_s", "cache_explanation", "fix",
)  # fmt: skip
#: Summed columns of :func:`session_costs` and :func:`cost_totals`.
SUM_COLUMNS = (
    "calls", "input_usd", "output_usd", "cache_read_usd", "cache_write_usd", "total_usd", "uncached_usd",
    "lost_usd", "cache_read_tokens", "cache_write_tokens", "output_tokens", "unpriced_calls",
)  # fmt: skip
#: The project of a session whose metadata names no working directory or project.
NO_PROJECT = "no project recorded"
#: Two costs agree when they differ by at most this share of the larger, or by less than half a cent
#: (they round to the same cent: a whole cent apart, $0.0352 and $0.0256 are 27% apart).
AGREE_SHARE = 0.02
AGREE_USD = 0.005
_COMPONENTS = ("system", "skills", "tools", "summary", "conversation", "tool_results")


@dataclass(frozen=True)
class _Event:
    """The StoredEvent fields engine.cache_analysis.call_records reads."""

    id: int
    seq: int
    kind: str
    trigger: str | None
    outcome: str | None
    model: str | None
    turn_index: int | None
    message_seq: int | None
    usage: ProviderUsage | None
    components: ComponentTokens | None
    details: dict[str, Any]
    created_utc: str | None


def _int(value: Any) -> int:
    return 0 if value is None or value != value else int(value)


def _events(cursor: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], list[_Event]]:
    kinds = ("request", *sorted(PREFIX_RESET_EVENTS))
    rows = cursor.execute(
        "SELECT db, session_id, id, seq, kind, trigger, outcome, model, turn_index, message_seq, details_json,"
        " created_utc, provider_input_tokens, provider_output_tokens, provider_cache_read_tokens,"
        " provider_cache_creation_tokens, system_tokens, skills_tokens, tools_tokens, summary_tokens,"
        " conversation_tokens, tool_results_tokens"
        f" FROM context_events WHERE kind IN ({', '.join('?' for _ in kinds)}) ORDER BY db, session_id, seq",
        list(kinds),
    ).fetchall()
    out: dict[tuple[str, str], list[_Event]] = {}
    for r in rows:
        has_usage = any(v is not None for v in r[12:16])
        has_components = any(v is not None for v in r[16:22])
        try:
            details = json.loads(r[10]) if r[10] else {}
        except ValueError:
            details = {}
        out.setdefault((r[0], r[1]), []).append(
            _Event(
                id=r[2], seq=r[3], kind=r[4], trigger=r[5], outcome=r[6], model=r[7], turn_index=r[8],
                message_seq=r[9], details=details if isinstance(details, dict) else {}, created_utc=r[11],
                usage=ProviderUsage(
                    input_tokens=_int(r[12]), output_tokens=_int(r[13]), cache_read_input_tokens=_int(r[14]),
                    cache_creation_input_tokens=_int(r[15]),
                ) if has_usage else None,
                components=ComponentTokens(**{c: _int(v) for c, v in zip(_COMPONENTS, r[16:22], strict=True)})
                if has_components else None,
            )
        )  # fmt: skip
    return out


def _message_times(cursor: duckdb.DuckDBPyConnection) -> dict[tuple[str, str], dict[int, str]]:
    """(db, session) -> message seq -> the timestamp a source kept in the message's meta."""
    rows = cursor.execute(
        "SELECT m.db, m.session_id, m.seq, m.meta_json FROM messages m JOIN context_events e"
        " ON e.db = m.db AND e.session_id = m.session_id AND e.message_seq = m.seq"
        " WHERE e.kind = 'request' AND m.meta_json LIKE '%timestamp%'"
    ).fetchall()
    out: dict[tuple[str, str], dict[int, str]] = {}
    for db, sid, seq, meta_json in rows:
        try:
            meta = json.loads(meta_json)
        except ValueError:
            continue
        if isinstance(meta, dict) and isinstance(meta.get("timestamp"), str):
            out.setdefault((db, sid), {})[int(seq)] = meta["timestamp"]
    return out


def _sessions(cursor: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    return cursor.execute(
        "SELECT db, id, title, model, source, parent_session_id, metadata_json FROM sessions"
    ).df()


def project_of(metadata_json: Any) -> str:
    """A session's project: the last part of its working directory, else ``NO_PROJECT``."""
    path = project_path(metadata_json)
    return PurePosixPath(path.rstrip("/")).name or path if path is not None else NO_PROJECT


def project_path(metadata_json: Any) -> str | None:
    """The project or working directory a session's metadata names (None: none)."""
    try:
        meta = json.loads(metadata_json) if isinstance(metadata_json, str) else {}
    except ValueError:
        meta = {}
    for key in ("project", "cwd"):
        value = meta.get(key) if isinstance(meta, dict) else None
        if isinstance(value, str) and value.strip():
            return value
    return None


def project_labels(paths: Iterable[str | None]) -> dict[str | None, str]:
    """Each project's name: the last part of its path, with as many parts before it as it takes
    to tell apart folders of the same name (two checkouts both called ``repo`` are two projects)."""
    parts = {p: PurePosixPath(p.rstrip("/")).parts or (p,) for p in set(paths) if p is not None}
    labels: dict[str | None, str] = {None: NO_PROJECT}
    for path, split in parts.items():
        depth = 1
        while depth < len(split) and any(
            other != path and o[-depth:] == split[-depth:] for other, o in parts.items()
        ):
            depth += 1
        labels[path] = "/".join(split[-depth:]).lstrip("/") or path
    return labels


def call_costs(cursor: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """One row per model call with provider usage across the loaded databases (``CALL_COLUMNS``)."""
    sessions = _sessions(cursor)
    events = _events(cursor)
    times = _message_times(cursor)
    rows: list[dict[str, Any]] = []
    labels = project_labels(project_path(m) for m in sessions["metadata_json"])
    for db, group in sessions.groupby("db", sort=True):
        parents = dict(
            zip(
                group["id"],
                group["parent_session_id"].where(group["parent_session_id"].notna(), None),
                strict=True,
            )
        )
        meta = dict(zip(group["id"], group["metadata_json"], strict=True))
        models = dict(zip(group["id"], group["model"], strict=True))
        timed = {
            sid: event_time_is_call_time(source)
            for sid, source in zip(group["id"], group["source"], strict=True)
        }
        for sid in group["id"]:
            evs = events.get((db, sid))
            if not evs:
                continue
            calls = call_records(
                evs, message_times=times.get((db, sid)), default_model=models.get(sid) or None,
                event_time_is_call_time=timed[sid],
            )  # fmt: skip
            if not calls:
                continue
            root = root_of(sid, parents)
            project = labels[project_path(meta.get(root))]
            for row in cost_rows(calls, analyze_cache(calls)):
                row.update(db=db, session_id=sid, root_session_id=root, project=project)
                row["event_seq"] = next((c.event_seq for c in calls if c.event_id == row["event_id"]), None)
                rows.append(row)
    return pd.DataFrame(rows, columns=list(CALL_COLUMNS))


def _summed(calls: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    frame = calls.assign(
        calls=1,
        unpriced_calls=calls["priced_as"].isna().astype(int),
        cache_write_usd=calls["cache_write_5m_usd"] + calls["cache_write_1h_usd"],
        cache_write_tokens=calls["cache_write_5m_tokens"] + calls["cache_write_1h_tokens"],
    )
    return frame.groupby(list(by), as_index=False, dropna=False)[list(SUM_COLUMNS)].sum()


def session_costs(cursor: duckdb.DuckDBPyConnection, calls: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per (db, session_id): cost totals, its project and root session, first day and models used."""
    calls = call_costs(cursor) if calls is None else calls
    if calls.empty:
        return pd.DataFrame(
            columns=["db", "session_id", "root_session_id", "project", "days", "models", *SUM_COLUMNS]
        )
    out = _summed(calls, ["db", "session_id", "root_session_id", "project"])
    extra = calls.groupby(["db", "session_id"], as_index=False).agg(
        days=("day", lambda s: ", ".join(sorted({d for d in s if isinstance(d, str)}))),
        models=("model", lambda s: ", ".join(sorted({m for m in s if isinstance(m, str)}))),
    )
    return out.merge(extra, on=["db", "session_id"], how="left")


def filter_calls(
    calls: pd.DataFrame, *, projects: Sequence[str] = (), models: Sequence[str] = (), days: Sequence[str] = ()
) -> pd.DataFrame:
    """Calls of the chosen projects, models and UTC days (an empty choice keeps everything)."""
    keep = pd.Series(True, index=calls.index)
    if projects:
        keep &= calls["project"].isin(list(projects))
    if models:
        keep &= calls["model"].isin(list(models))
    if days:
        keep &= calls["day"].isin(list(days))
    return calls[keep]


def cost_totals(calls: pd.DataFrame) -> dict[str, float]:
    """Sums of ``SUM_COLUMNS`` over calls, and the share lost to cache rebuilds."""
    if calls.empty:
        return {**dict.fromkeys(SUM_COLUMNS, 0.0), "lost_share": 0.0}
    summed = _summed(calls.assign(_all=1), ["_all"]).iloc[0]
    out = {c: float(summed[c]) for c in SUM_COLUMNS}
    out["lost_share"] = out["lost_usd"] / out["total_usd"] if out["total_usd"] else 0.0
    return out


#: The day of a call whose time is unknown (after every date: 'u' sorts after digits).
UNKNOWN_DAY = "unknown"


def rollup(calls: pd.DataFrame, by: str) -> pd.DataFrame:
    """Totals per ``by`` (project, root_session_id, day or model), largest cost first (days in order)."""
    if calls.empty:
        return pd.DataFrame(columns=[by, *SUM_COLUMNS])
    if by == "day":  # a call with no time of its own (an import whose transcript keeps none), as the CLI says
        calls = calls.assign(day=calls["day"].fillna(UNKNOWN_DAY))
    out = _summed(calls, [by])
    return out.sort_values(by if by == "day" else "total_usd", ascending=by == "day", ignore_index=True)


def session_call_costs(cursor: duckdb.DuckDBPyConnection, db: str, session_id: str) -> pd.DataFrame:
    """One session's calls (for the timeline: cost and cache cause per call)."""
    calls = call_costs(cursor)
    return calls[(calls["db"] == db) & (calls["session_id"] == session_id)].reset_index(drop=True)


def agent_costs(cursor: duckdb.DuckDBPyConnection) -> pd.DataFrame:
    """Sessions whose agent recorded what they cost by its own prices: db, session_id, title,
    agent_cost_usd and agent_cost_source (where in the agent's file it came from)."""
    rows = []
    for db, sid, title, metadata_json in cursor.execute(
        "SELECT db, id, title, metadata_json FROM sessions"
    ).fetchall():
        try:
            meta = json.loads(metadata_json) if isinstance(metadata_json, str) else {}
        except ValueError:
            continue
        usd = meta.get("agent_cost_usd") if isinstance(meta, dict) else None
        if isinstance(usd, int | float) and not isinstance(usd, bool):
            rows.append((db, sid, title, float(usd), meta.get("agent_cost_source")))
    return pd.DataFrame(rows, columns=["db", "session_id", "title", "agent_cost_usd", "agent_cost_source"])


def beside_agent_costs(agents: pd.DataFrame, calls: pd.DataFrame) -> pd.DataFrame:
    """Each session of ``agents`` (:func:`agent_costs`) with our cost of it and its sub-agents
    (``calls``: :func:`call_costs`) and, in words, whether the two agree."""
    out = []
    for r in agents.itertuples():
        mine = calls[(calls["db"] == r.db) & (calls["root_session_id"] == r.session_id)]
        ours = float(mine["total_usd"].sum()) if len(mine) else None
        unpriced = int(mine["priced_as"].isna().sum())
        out.append({
            "db": r.db, "session_id": r.session_id, "title": r.title, "agent_cost_usd": r.agent_cost_usd,
            "our_cost_usd": ours, "difference_usd": None if ours is None else ours - r.agent_cost_usd,
            "comparison": _agreement(r.agent_cost_usd, ours, calls=len(mine), unpriced=unpriced),
            "agent_cost_source": r.agent_cost_source,
        })  # fmt: skip
    columns = ["db", "session_id", "title", "agent_cost_usd", "our_cost_usd", "difference_usd", "comparison",
               "agent_cost_source"]  # fmt: skip
    return pd.DataFrame(out, columns=columns)


def _agreement(agent: float, ours: float | None, *, calls: int, unpriced: int) -> str:
    if not calls:
        return "no provider usage recorded here: only the agent's figure"
    if unpriced == calls:
        return "its model has no list price here: only the agent's figure"
    partly = f" ({unpriced} of {calls} calls unpriced, counted at $0)" if unpriced else ""
    if abs(ours - agent) < AGREE_USD:
        return "agree within a cent" + partly
    if abs(ours - agent) <= AGREE_SHARE * max(abs(ours), abs(agent)):
        return f"agree within {AGREE_SHARE:.0%}" + partly
    if agent == 0:
        return f"differ: the agent recorded $0, we count ${ours:,.4f}{partly}"
    share = (ours - agent) / agent
    return f"differ: ours is {abs(share):.0%} {'higher' if share > 0 else 'lower'}{partly}"
