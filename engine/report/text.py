"""The plain-text forms of a report and of a diff (what a terminal or a CI log shows)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.events import COMPONENTS
from engine.report.costs import project_cost_text, session_cost_text
from engine.report.notes import FLOAT_FORMAT, cell, event_note, is_routine
from engine.report.shapes import DiffReport, Report, SessionReport
from engine.textfmt import format_table


def render_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain-text columns: numbers right-aligned with thousands separators, None as '-'."""
    return format_table(headers, rows, float_format=FLOAT_FORMAT)


def money_text(value: float | None) -> str:
    return "-" if value is None else f"${value:,.4f}"


def render_text(report: Report) -> str:
    out = [f"ctxdesk report of {report.source} (report_version {report.report_version})"]
    if report.project is not None and report.project.totals.calls:
        out += ["", *project_cost_text(report.project)]
    for s in report.sessions:
        out.append("")
        thread = f"sub-agent thread of {s.parent_session_id}" if s.parent_session_id else "session"
        out.append(f"== {thread} {s.id}" + (f": {s.title}" if s.title else ""))
        out.append(
            f"model {s.model or '-'}  provider {s.provider or '-'}  messages {s.message_count:,}  "
            f"requests {s.request_count:,}"
        )
        out.append(
            f"tokens: components add up to the provider's own count where a call has one ({basis_words(s)}); "
            f"'estimate' is ours before the call, by tokenizer {s.tokenizer} ({'exact' if s.exact else 'an estimate'})"
        )
        limit = s.limit
        out.append(
            f"limit {cell(limit.limit_tokens)} tokens (window {cell(limit.context_window)}, from {limit.source}); "
            + (
                f"peak {s.peak_usage_pct:.1f}% ({s.peak_used_tokens:,} tokens, {s.peak_source}) at turn {s.peak_turn_index}"
                if s.peak_usage_pct is not None
                else "no requests recorded"
            )
        )
        out.append(
            "\nper turn (the turn's last request; basis: how its components were known; provider = exact)"
        )
        rows = [
            (t.turn_index, t.requests, *(getattr(t.components, c) if t.components else None for c in COMPONENTS),
             t.components.total if t.components else None, t.components_basis, t.estimate_tokens,
             t.provider_usage.prompt_tokens if t.provider_usage else None, t.used_pct)
            for t in s.turns
        ]  # fmt: skip
        headers = ("turn", "requests", *COMPONENTS, "total", "basis", "estimate", "provider", "used %")
        out.append(render_table(headers, rows) if rows else "(no model requests)")
        out.append("\ncontext events")
        notable = [e for e in s.events if not is_routine(e)]
        rows = [
            (e.seq, e.turn_index, e.kind, e.trigger or "", e.outcome or "", e.reason or "", event_note(e))
            for e in notable
        ]
        headers = ("event", "turn", "kind", "trigger", "outcome", "reason", "details")
        out.append(render_table(headers, rows) if rows else "(none)")
        if len(notable) < len(s.events):
            out.append(
                f"(+{len(s.events) - len(notable):,} guard checks that passed; --format json lists every event)"
            )
        if s.costs is not None and s.costs.calls:
            out += session_cost_text(s.costs)
        out.append(
            f"\nfindings: {len(s.findings)}, {s.findings_tokens:,} tokens, {money_text(s.findings_money)} "
            f"({'exact' if s.exact else 'estimated'} by {s.tokenizer} unless marked provider)"
        )
        for i, f in enumerate(s.findings, start=1):
            out.append(
                f"{i:>3}. [{f.kind}] turn {f.turn_index}: {f.title}\n"
                f"     saves {f.tokens:,} tokens over {f.requests} request(s) ({f.context_tokens:,} per request, "
                f"{'exact' if f.exact else 'estimate'} by {f.tokenizer}), {money_text(f.money)}\n"
                f"     {f.detail}\n     fix: {f.fix}"
            )
    gate = f"peak {report.peak_usage_pct:.1f}%" if report.peak_usage_pct is not None else "no peak"
    out.append(f"\n{len(report.sessions)} thread(s), {report.findings_count} finding(s), {gate}")
    return "\n".join(out) + "\n"


def render_diff_text(diff: DiffReport) -> str:
    a, b = diff.a, diff.b
    out = [
        f"A: {a.spec}: {a.description}, {a.message_count:,} messages, tokenizer {a.tokenizer}"
        f" ({'exact' if a.exact else 'estimate'})",
        f"B: {b.spec}: {b.description}, {b.message_count:,} messages, tokenizer {b.tokenizer}"
        f" ({'exact' if b.exact else 'estimate'})",
    ]
    if not diff.comparable:
        out.append("note: the sides were counted by different tokenizers; token numbers are not comparable")
    rows = [(name, getattr(a.components, name), getattr(b.components, name), diff.component_delta[name])
            for name in (*COMPONENTS, "total")]  # fmt: skip
    out += ["", render_table(("component", "A", "B", "B - A"), rows), ""]
    out.append(
        "messages: " + ", ".join(f"{s} {diff.counts[s]:,} ({diff.tokens[s]:,} tokens)" for s in diff.counts)
    )
    changed = [c for c in diff.changes if c.status != "kept"]
    if changed:
        rows = [
            (c.status, c.a_index, c.b_index, c.role, c.kind, c.a_tokens, c.b_tokens, c.preview)
            for c in changed
        ]
        out += [
            "",
            render_table(("status", "A#", "B#", "role", "kind", "A tokens", "B tokens", "preview"), rows),
        ]
    if b.summary and b.summary != a.summary:
        out += ["", f"B's summary ({b.components.summary:,} tokens):", b.summary]
    return "\n".join(out) + "\n"


def basis_words(session: SessionReport) -> str:
    """How many of a session's requests had their components reconciled, exact or estimated."""
    counts: dict[str, int] = {}
    for r in session.requests:
        counts[r.components_basis or "not recorded"] = counts.get(r.components_basis or "not recorded", 0) + 1
    words = {"reconciled": "reconciled to the provider", "exact": "exact", "estimate": "estimate"}
    return (
        ", ".join(f"{n:,} {words.get(basis, basis)}" for basis, n in sorted(counts.items())) or "no requests"
    )
