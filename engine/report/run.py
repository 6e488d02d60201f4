"""What the CLI calls: ``run_report`` and ``run_diff`` render to a file or stdout and return the
exit code (``EXIT_GATE_FAILED`` when a ``--fail-over`` / ``--fail-on-findings`` gate trips)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TextIO

from engine.errors import ValidationError
from engine.report.build import build_report, gate_failure
from engine.report.diff import diff_contexts, load_side, parse_side, snapshot_pair
from engine.report.jsonstream import json_pieces
from engine.report.lookup import open_target, read_store
from engine.report.output import write_output
from engine.report.shapes import Report, SessionReport
from engine.report.stream import report_json_pieces, summary_report
from engine.report.text import render_diff_text, render_text
from engine.settings import load_settings

#: Exit code when a --fail-over / --fail-on-findings gate trips (1 and 2 are errors and usage).
EXIT_GATE_FAILED = 3
FORMATS = ("text", "json", "html")


def render(report: Report, fmt: str) -> str:
    return "".join(render_pieces(report, fmt))


def render_pieces(report: Report, fmt: str) -> Iterator[str]:
    """The report as ``render`` writes it, in pieces: JSON is never one string (a large session's
    report is hundreds of MB of it), the other formats are."""
    if fmt == "json":
        yield from json_pieces(report)
        yield "\n"
        return
    yield _render_whole(report, fmt)


def _render_whole(report: Report, fmt: str) -> str:
    if fmt == "html":
        from engine.report.html import render_html  # plotly is imported only for HTML

        return render_html(report)
    if fmt == "text":
        return render_text(report)
    raise ValidationError(f"unknown report format {fmt!r}; known: {', '.join(FORMATS)}", field="format")


def run_report(
    target: str | None,
    *,
    db: str | None = None,
    fmt: str = "text",
    out_path: str | None = None,
    fail_over: float | None = None,
    fail_on_findings: int | None = None,
    settings_path: str | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """``ctxdesk report``: write the report; 0, or EXIT_GATE_FAILED with one line on stderr."""
    if fmt not in FORMATS:
        raise ValidationError(f"unknown report format {fmt!r}; known: {', '.join(FORMATS)}", field="format")
    settings = load_settings(settings_path)
    with open_target(target, db=db) as (store, session_ids, label):
        if fmt == "json":  # written while read (engine.report.stream): a large session is never held
            summaries: list[SessionReport] = []
            pieces = report_json_pieces(
                store, session_ids, source=label, settings=settings, summaries=summaries
            )
            write_output(pieces, out_path, stdout or sys.stdout)
            report = summary_report(summaries, source=label)
        else:
            report = build_report(store, session_ids, source=label, settings=settings)
    if fmt != "json":
        write_output(render_pieces(report, fmt), out_path, stdout or sys.stdout)
    reason = gate_failure(report, fail_over=fail_over, fail_on_findings=fail_on_findings)
    if reason is None:
        return 0
    print(f"ctxdesk: report: {reason}", file=stderr or sys.stderr)
    return EXIT_GATE_FAILED


def run_diff(
    a: str,
    b: str | None,
    *,
    db: str | None = None,
    snapshots: bool = False,
    fmt: str = "text",
    out_path: str | None = None,
    stdout: TextIO | None = None,
) -> int:
    """``ctxdesk diff``: two sessions or snapshots side by side; with ``snapshots`` and one
    session, its previous state against its latest snapshot."""
    if fmt not in ("text", "json"):
        raise ValidationError(f"diff format must be text or json, got {fmt!r}", field="format")
    path_a, session_a, snap_a = parse_side(a, db)
    if b is None:
        if not snapshots:
            raise ValidationError("diff needs two sides (A B), or one session with --snapshots", field="b")
        with read_store(path_a) as store:
            side_a, side_b = snapshot_pair(store, a, session_a)
            diff = diff_contexts(side_a, side_b)
    else:
        path_b, session_b, snap_b = parse_side(b, db)
        with read_store(path_a) as store_a, read_store(path_b) as store_b:
            diff = diff_contexts(
                load_side(store_a, a, session_a, snap_a), load_side(store_b, b, session_b, snap_b)
            )
    text = diff.model_dump_json(indent=2) + "\n" if fmt == "json" else render_diff_text(diff)
    write_output(text, out_path, stdout or sys.stdout)
    return 0
