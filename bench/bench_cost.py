"""Per-session cost and cache-rebuild share beside the tools users run, on the same Claude Code files.

``python -m bench --only cost``. Each set of Claude Code transcripts (the real sessions in
../shared/sessions, and the real-client fixtures under tests/fixtures/real_agents/claude-code)
is staged in a scratch ``CLAUDE_CONFIG_DIR`` and read by:

- ctxdesk: ``import_file`` into a scratch database, then ``engine.store.costs`` (list prices
  from the bundled model table; sub-agent threads rolled into their parent session);
- ccusage (npm, ``ccusage claude session --offline --json``);
- claude-cache-audit (PyPI, ``--all --json``; in bench/.venv);

both pinned in bench/peers.py and installed by ``python -m bench.peers install`` (.ci/run runs it);
- Claude Code itself where the fixture kept its ``total_cost_usd`` (runs.json).

Where a tool reads the same file differently, the table names the difference and gives
ctxdesk's figure under that tool's reading (``adjusted``), which must agree within 1%.
The rebuild share is compared the same way, within 5 points.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.common import ROOT, SHARED_SESSIONS
from bench.peers import npm_bin, venv_bin
from bench.report import Table
from engine.cache_analysis import CallRecord, analyze_cache, call_records
from engine.cost import prices_for
from engine.importers import import_file
from engine.rollup import root_of, sum_rows
from engine.store import SessionStore
from engine.store.costs import exact_requests, message_times, project_costs

REAL_CLIENT_FIXTURES = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
REAL_AGENT_FIXTURES = ROOT / "tests" / "fixtures" / "real_agents"
TOOL_TIMEOUT_S = 300
NOT_INSTALLED = "not installed (python -m bench.peers install)"
#: Agreement the issue asks for: totals within 1% (where prices agree), rebuild share within 5 points.
COST_TOLERANCE = 0.01
SHARE_TOLERANCE_POINTS = 5.0


@dataclass
class TranscriptSet:
    """One Claude Code session (its main file and any sub-agent files), as a folder to stage."""

    label: str
    files: list[tuple[Path, str]]  # (source, path relative to the project folder)
    claude_code_usd: float | None = None


@dataclass
class RawUsage:
    """What the JSONL says, read the ways the tools read it."""

    calls: int = 0
    output_last: int = 0
    output_first: int = 0
    writes_without_split: int = 0  # cache writes whose 5m/1h split is present but sums to 0
    notes: list[str] = field(default_factory=list)


def transcript_sets(quick: bool) -> list[TranscriptSet]:
    sets = [
        TranscriptSet(p.stem.rsplit("__", 1)[-1], [(p, p.name)])
        for p in sorted(SHARED_SESSIONS.glob("claude-code__*.jsonl"))
    ]
    if REAL_CLIENT_FIXTURES.is_dir():
        for scenario in sorted(p for p in REAL_CLIENT_FIXTURES.iterdir() if (p / "transcripts").is_dir()):
            root = scenario / "transcripts"
            files = [(f, str(f.relative_to(root))) for f in sorted(root.rglob("*.jsonl"))]
            runs = scenario / "runs.json"
            own = None
            if runs.is_file():
                data = json.loads(runs.read_text(encoding="utf-8"))
                own = sum(((r.get("result") or {}).get("total_cost_usd") or 0) for r in data.get("runs", []))
            if files:
                sets.append(TranscriptSet(f"real-client {scenario.name}", files, own or None))
    return sets[:3] if quick else sets


def read_raw(files: list[tuple[Path, str]]) -> RawUsage:
    raw = RawUsage()
    for path, _ in files:
        first: dict[Any, dict[str, Any]] = {}
        last: dict[Any, dict[str, Any]] = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            message = obj.get("message") if isinstance(obj, dict) else None
            if obj.get("type") != "assistant" or not isinstance(message, dict) or not message.get("usage"):
                continue
            if message.get("model") == "<synthetic>":
                continue
            key = (message.get("id"), obj.get("requestId"))
            first.setdefault(key, message["usage"])
            last[key] = message["usage"]
        raw.calls += len(last)
        raw.output_first += sum(u.get("output_tokens") or 0 for u in first.values())
        raw.output_last += sum(u.get("output_tokens") or 0 for u in last.values())
        for u in last.values():
            split = u.get("cache_creation")
            if isinstance(split, dict) and not sum(v or 0 for v in split.values() if isinstance(v, int)):
                raw.writes_without_split += u.get("cache_creation_input_tokens") or 0
    return raw


def stage(tset: TranscriptSet, into: Path) -> Path:
    """A scratch Claude config dir holding the set under projects/<label>/."""
    project = into / "projects" / tset.label.replace(" ", "-")
    for source, rel in tset.files:
        target = project / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        meta = source.with_suffix(".meta.json")
        if meta.is_file():
            shutil.copy2(meta, target.with_suffix(".meta.json"))
    return into


def ccusage_bin() -> str | None:
    """ccusage as bench.peers installs it (pinned), else one on PATH, else None."""
    found = npm_bin("ccusage")
    return str(found) if found else shutil.which("ccusage")


def run_ccusage(config: Path) -> float | None:
    binary = ccusage_bin()
    if binary is None:
        return None
    env = {**os.environ, "CLAUDE_CONFIG_DIR": str(config)}
    done = subprocess.run(
        [binary, "claude", "session", "--offline", "--json"],
        capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT_S, cwd=config,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ccusage exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return float(json.loads(done.stdout)["totals"]["totalCost"])


def run_cache_audit(config: Path) -> dict[str, Any] | None:
    tool = venv_bin("claude-cache-audit")
    if tool is None:
        return None
    done = subprocess.run(
        [str(tool), "--all", "--config-dir", str(config), "--json"],
        capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, cwd=config,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"claude-cache-audit exited {done.returncode}: {done.stderr.strip()[-300:]}")
    data = json.loads(done.stdout)
    return {"cost": data["totals"]["cost"], "share": data["rebuilds"]["headline"]["pct_of_total_cost"]}


@dataclass
class Ours:
    calls: int
    usd: float
    share_per_thread: float  # % of cost lost to avoidable rebuilds, each thread its own sequence
    share_per_file: float  # the same with one sequence per transcript file (claude-cache-audit's grouping)
    shrink_share_per_file: float  # rebuilds after a prompt shrank by over 30%: a compaction to ctxdesk


def run_ctxdesk(tset: TranscriptSet, scratch: Path) -> Ours:
    db = scratch / "ctxdesk.db"
    with SessionStore(db) as store:
        for source, rel in tset.files:
            if "/subagents/" not in f"/{rel}":  # the importer finds a main file's sub-agent files itself
                import_file(source, store)
        sessions = project_costs(store)
        records = {s.id: s for s in store.list_sessions()}
        by_file: dict[str, list[CallRecord]] = {}
        parents = {sid: r.parent_session_id for sid, r in records.items()}
        for sid, rec in records.items():
            calls = call_records(
                store.list_events(sid), message_times=message_times(store, sid), default_model=rec.model,
                exact_requests=exact_requests(store, sid),
            )  # fmt: skip
            # claude-cache-audit's grouping: one sequence per transcript file (a sub-agent's own file in
            # Claude Code 2.x, the main file for older sidechains)
            file_key = rec.metadata.get("agent_file") or rec.source_path or root_of(sid, parents)
            by_file.setdefault(f"{file_key}", []).extend(calls)
    totals = sum_rows(r for s in sessions for r in s.rows)
    lost_per_file = shrink_per_file = 0.0
    for calls in by_file.values():
        ordered = sorted(calls, key=lambda c: (c.at is None, c.at, c.index))
        reindexed = [dataclasses.replace(c, index=i) for i, c in enumerate(ordered)]
        analysis = analyze_cache(reindexed)
        lost_per_file += analysis.lost_usd
        for c, a in zip(reindexed, analysis.calls, strict=True):
            if a.cause == "compaction" and c.reset_before is None and c.prices is not None:
                shrink_per_file += a.rebuilt_tokens * (c.prices.cache_write_5m - c.prices.cache_read)
    total = totals["total_usd"]
    return Ours(
        calls=totals["calls"],
        usd=total,
        share_per_thread=100 * totals["lost_usd"] / total if total else 0.0,
        share_per_file=100 * lost_per_file / total if total else 0.0,
        shrink_share_per_file=100 * shrink_per_file / total if total else 0.0,
    )


def usd(value: float | None) -> str | None:
    return None if value is None else f"${value:,.4f}"


def pct_diff(ours: float, theirs: float | None) -> float | None:
    if theirs is None or not theirs:
        return None
    return round(100 * (ours - theirs) / theirs, 2)


def run(quick: bool = False) -> list[Table]:
    costs = Table(
        title="Per-session cost (USD, list prices): ctxdesk beside ccusage, claude-cache-audit and Claude Code",
        columns=["session", "calls", "ctxdesk", "ccusage", "Δ %", "adjusted Δ %", "claude-cache-audit", "Δ %",
                 "adjusted Δ %", "Claude Code", "Δ %", "why they differ"],
    )  # fmt: skip
    shares = Table(
        title="Share of the cost lost to prompt-cache rebuilds (%): ctxdesk beside claude-cache-audit",
        columns=["session", "ctxdesk (each thread)", "ctxdesk (one sequence per file)", "claude-cache-audit",
                 "Δ points (same grouping and rule)", "why they differ"],
    )  # fmt: skip
    sets = transcript_sets(quick)
    if not sets:
        costs.notes.append(
            "No Claude Code transcripts found (../shared/sessions, tests/fixtures/real_agents)."
        )
        return [costs, shares]
    output_price = (prices_for("claude-sonnet-4-20250514") or prices_for("claude-sonnet-4-5")).output  # type: ignore[union-attr]
    for tset in sets:
        with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-cost-") as tmp:
            scratch = Path(tmp)
            config = stage(tset, scratch / "claude")
            ours = run_ctxdesk(tset, scratch)
            cc = run_ccusage(config)
            audit = run_cache_audit(config)
        raw = read_raw(tset.files)
        write_price = (
            prices_for("claude-sonnet-4-5") or prices_for("claude-sonnet-4-20250514")
        ).cache_write_5m  # type: ignore[union-attr]
        unsplit_usd = raw.writes_without_split * write_price
        first_line_usd = (raw.output_last - raw.output_first) * output_price
        why = []
        if unsplit_usd:
            why.append(
                f"{raw.writes_without_split:,} cache-write tokens carry a 5m/1h split summing to 0: ccusage and "
                f"claude-cache-audit price them at $0 (${unsplit_usd:.4f}); ctxdesk and Claude Code price the total"
            )
        if first_line_usd:
            why.append(
                f"claude-cache-audit keeps the first JSONL line of each streamed response, whose output count is "
                f"partial ({raw.output_first:,} vs {raw.output_last:,} output tokens, ${first_line_usd:.4f})"
            )
        adjusted_cc = ours.usd - unsplit_usd
        adjusted_audit = ours.usd - unsplit_usd - first_line_usd
        audit_cost = audit["cost"] if audit else None
        costs.add(
            tset.label, ours.calls, usd(ours.usd), usd(cc), pct_diff(ours.usd, cc), pct_diff(adjusted_cc, cc),
            usd(audit_cost), pct_diff(ours.usd, audit_cost), pct_diff(adjusted_audit, audit_cost),
            usd(tset.claude_code_usd),
            pct_diff(ours.usd, tset.claude_code_usd), "; ".join(why) or "same reading, same prices",
        )  # fmt: skip
        share_why = "same"
        if audit and abs(ours.share_per_thread - audit["share"]) > 0.05:
            parts = []
            if abs(ours.share_per_file - ours.share_per_thread) > 0.05 or ours.shrink_share_per_file:
                parts.append(
                    "claude-cache-audit follows one sequence per transcript file: an older Claude Code file holds "
                    "its sub-agents' sidechains, so a sub-agent's first write (a cold start of its own cache) "
                    "counts as the main thread's prefix change; ctxdesk analyses each thread on its own"
                )
            if ours.shrink_share_per_file:
                parts.append(
                    f"in that one sequence, calls whose prompt is over 30% smaller than the previous one are a "
                    f"compaction to ctxdesk (expected, nothing lost) and a prefix change to claude-cache-audit, "
                    f"which knows compactions only from compact_boundary lines "
                    f"({ours.shrink_share_per_file:.2f} points)"
                )
            share_why = "; ".join(parts) or "see the per-call causes in `ctxdesk report`"
        shares.add(
            tset.label, round(ours.share_per_thread, 2), round(ours.share_per_file, 2),
            audit["share"] if audit else None,
            None if audit is None else round(ours.share_per_file + ours.shrink_share_per_file - audit["share"], 2),
            share_why,
        )  # fmt: skip
    other = other_agents_table()
    costs.notes += [
        "Δ % = (ctxdesk − tool) / tool; adjusted = ctxdesk's figure under the tool's reading of the file "
        f"(must be within {100 * COST_TOLERANCE:g}%).",
        "Claude Code's own total_cost_usd (runs.json of the real-client fixtures) also prices its compaction call, "
        "which no transcript logs: the compaction fixtures cost that call more.",
        f"ccusage: {ccusage_bin() or NOT_INSTALLED}; "
        f"claude-cache-audit: {venv_bin('claude-cache-audit') or NOT_INSTALLED}.",
    ]
    shares.notes.append(
        "Lost = cached tokens written again × (write − read price), cold starts and compactions excluded "
        f"(claude-cache-audit's headline measure); agreement within {SHARE_TOLERANCE_POINTS:g} points is asked "
        "under the same grouping."
    )
    return [costs, shares, other]


def other_agent_files() -> list[tuple[str, Path, Path]]:
    """(agent, transcript, path under the scratch home) of the Codex and Gemini CLI fixtures."""
    out: list[tuple[str, Path, Path]] = []
    for f in sorted((REAL_AGENT_FIXTURES / "codex").glob("*/sessions/**/*.jsonl")):
        out.append(("codex", f, Path("codex") / f.relative_to(f.parents[3])))
    for f in sorted((REAL_AGENT_FIXTURES / "gemini").glob("*/tmp/*/chats/*.jsonl")):
        out.append(("gemini", f, Path(".gemini") / f.relative_to(f.parents[3])))
    return out


def run_ccusage_agent(agent: str, home: Path) -> float | None:
    binary = ccusage_bin()
    if binary is None:
        return None
    env = {**os.environ, "HOME": str(home), "CODEX_HOME": str(home / "codex")}
    done = subprocess.run(
        [binary, agent, "session", "--offline", "--json"],
        capture_output=True, text=True, env=env, timeout=TOOL_TIMEOUT_S, cwd=home,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"ccusage {agent} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    totals = json.loads(done.stdout)["totals"]
    return float(totals.get("costUSD", totals.get("totalCost", 0.0)))


def other_agents_table() -> Table:
    table = Table(
        title="Codex CLI and Gemini CLI sessions (real-client fixtures): ctxdesk beside ccusage",
        columns=["agent", "session", "calls", "model", "ctxdesk", "ccusage", "Δ %"],
    )
    for agent, path, rel in other_agent_files():
        with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-cost-") as tmp:
            home = Path(tmp)
            target = home / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            with SessionStore(home / "ctxdesk.db") as store:
                import_file(path, store)
                rows = [r for s in project_costs(store) for r in s.rows]
            theirs = run_ccusage_agent(agent, home)
        ours = sum(r["total_usd"] for r in rows)
        models = ", ".join(sorted({r["model"] or "?" for r in rows}))
        table.add(agent, path.stem[-36:], len(rows), models, usd(ours), usd(theirs), pct_diff(ours, theirs))
    table.notes.append(
        "ccusage codex/gemini session --offline --json, on a scratch HOME / CODEX_HOME holding the file; "
        f"ccusage: {ccusage_bin() or NOT_INSTALLED}."
    )
    return table


if __name__ == "__main__":
    from bench.report import render_table

    for t in run():
        print(render_table(t))
