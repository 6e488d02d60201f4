"""Token accuracy against the provider's own counts, on the real sessions in ../shared/sessions.

Each file is imported into a scratch database (one ``request`` event per model call, our
estimate beside the provider's usage) and ``accuracy_report`` compares the two: absolute (each
call's prompt) and delta (growth between consecutive calls, where hidden system prompts and
tool definitions cancel out). Without ../shared the table says so and has no rows to show.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from bench import bench_accuracy_calibration as calibration
from bench.common import SHARED_SESSIONS
from bench.report import Table
from engine.importers import accuracy_report, import_file
from engine.store import SessionStore

QUICK_FILES = 2


def short_name(path: Path) -> str:
    name = path.name
    return name if len(name) <= 48 else name[:30] + "…" + name[-16:]


def run(quick: bool = False, *, sessions_dir: Path = SHARED_SESSIONS) -> list[Table]:
    """The static estimator per file, then the calibrated one held out beside it (the same run)."""
    return [
        static_accuracy(quick, sessions_dir=sessions_dir),
        calibration.run(quick, sessions_dir=sessions_dir),
    ]


def static_accuracy(quick: bool = False, *, sessions_dir: Path = SHARED_SESSIONS) -> Table:
    table = Table(
        title="Token accuracy against the provider's own counts (real sessions in ../shared/sessions)",
        columns=[
            "file",
            "format",
            "tokenizer",
            "calls with counts",
            "absolute MAPE %",
            "absolute median ratio",
            "delta pairs",
            "delta MAPE %",
            "delta median ratio",
            "delta total ratio",
            "run-total ratio",
        ],
        baseline="the provider's usage for each call (input + cache reads + cache writes); ratio = ours ÷ provider.",
    )
    files = sorted(p for p in sessions_dir.glob("*") if p.is_file()) if sessions_dir.is_dir() else []
    if not files:
        table.notes.append(
            f"Skipped: no session files at {sessions_dir} (../shared is absent on a fresh clone)."
        )
        return table
    if quick:
        files = files[:QUICK_FILES]
    with tempfile.TemporaryDirectory(prefix="ctxdesk-accuracy-") as scratch:
        store = SessionStore(Path(scratch) / "accuracy.db")
        try:
            for path in files:
                result = import_file(path, store)
                roots = [s for s in result.sessions if s.parent_session_id is None]
                for k, session in enumerate(roots, start=1):
                    report = accuracy_report(store, session.session_id, with_sub_agents=True)
                    table.add(
                        short_name(path) + (f" #{k}" if len(roots) > 1 else ""),
                        result.format,
                        f"{report.tokenizer}{'' if report.exact else ' (estimate)'}",
                        report.compared,
                        report.mean_abs_pct_error,
                        report.median_ratio,
                        report.delta_pairs,
                        report.delta_mean_abs_pct_error,
                        report.delta_median_ratio,
                        report.delta_total_ratio,
                        report.aggregate_ratio,
                    )
        finally:
            store.close()
    table.notes += [
        "Absolute error includes what the provider counts and the transcript never shows (Claude Code's "
        "system prompt and tool definitions); the delta columns cancel that out.",
        "Sub-agent sessions are pooled with their parent. — means the source has no per-call usage; "
        "run-total ratio compares our estimates with a run's total tokens sent (SWE-agent model_stats).",
    ]
    return table
