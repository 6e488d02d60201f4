"""How close our prompt estimates come to the provider's own counts, per imported session.

Two measures. *Absolute*: our estimate of each call's prompt against the provider's prompt
tokens. *Delta*: between consecutive calls, what the provider's count grew by against what
our estimate grew by. The delta is the fair one when the provider counts things we never
see (Claude Code's hidden system prompt and tool definitions): they cancel out. Sources
with only run totals (SWE-agent ``model_stats``) get an aggregate: the sum of our estimates
against the tokens sent, when the run made as many calls as we recorded.

:func:`residual_report` checks what a reader sees: the stored components of every call the
provider counted add up to its count, and how much of it no component accounts for (the
"Harness, unattributed" residual).
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from engine.store import SessionStore, StoredEvent


class CallComparison(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: str
    event_seq: int
    message_seq: int | None
    estimate: int
    provider: int | None


class AccuracyReport(BaseModel):
    """Estimate vs provider count. Percentages are in percent; ratios are estimate / provider."""

    model_config = ConfigDict(frozen=True)

    session_ids: tuple[str, ...]
    tokenizer: str | None
    exact: bool
    calls: int
    compared: int
    mean_abs_pct_error: float | None
    median_ratio: float | None
    delta_pairs: int
    delta_mean_abs_pct_error: float | None
    delta_median_ratio: float | None
    delta_total_ratio: float | None
    aggregate_provider_tokens: int | None = None
    aggregate_estimate_tokens: int | None = None
    aggregate_ratio: float | None = None
    rows: tuple[CallComparison, ...] = ()

    def summary(self) -> str:
        """One line for the CLI, the README and the benchmark."""
        parts = [f"{self.compared}/{self.calls} calls with provider counts ({self.tokenizer})"]
        if self.mean_abs_pct_error is not None:
            parts.append(
                f"absolute: MAPE {self.mean_abs_pct_error:.1f}%, median ratio {self.median_ratio:.3f}"
            )
        if self.delta_pairs:
            parts.append(
                f"delta: MAPE {self.delta_mean_abs_pct_error:.1f}%, median ratio {self.delta_median_ratio:.3f},"
                f" total ratio {self.delta_total_ratio:.3f} over {self.delta_pairs} pairs"
            )
        if self.aggregate_ratio is not None:
            parts.append(
                f"aggregate: {self.aggregate_estimate_tokens} estimated vs {self.aggregate_provider_tokens}"
                f" provider prompt tokens, ratio {self.aggregate_ratio:.3f}"
            )
        return "; ".join(parts)


def accuracy_report(store: SessionStore, session_id: str, *, with_sub_agents: bool = False) -> AccuracyReport:
    """Compare each request event's estimate with the provider's prompt tokens.

    ``with_sub_agents`` pools the session with its sub-agent sessions (deltas stay within
    each session).
    """
    session = store.get_session(session_id)
    ids = [session_id]
    if with_sub_agents:
        ids += [s.id for s in store.list_sessions() if s.parent_session_id == session_id]
    rows: list[CallComparison] = []
    deltas: list[tuple[int, int]] = []
    aggregate: list[tuple[int, int]] = []  # (our estimate, provider tokens) per session with totals
    for sid in ids:
        events = store.list_events(sid, kind="request")
        session_rows = [_comparison(sid, e) for e in events]
        rows += session_rows
        for before, after in itertools.pairwise(session_rows):
            if before.provider is not None and after.provider is not None:
                deltas.append((after.estimate - before.estimate, after.provider - before.provider))
        stats = store.get_session(sid).metadata.get("model_stats")
        if (
            isinstance(stats, dict)
            and stats.get("api_calls") == len(session_rows)
            and isinstance(stats.get("tokens_sent"), int)
        ):
            aggregate.append((sum(r.estimate for r in session_rows), stats["tokens_sent"]))
    compared = [(r.estimate, r.provider) for r in rows if r.provider]
    positive = [(ours, theirs) for ours, theirs in deltas if theirs > 0]
    report = {
        "session_ids": tuple(ids),
        "tokenizer": session.tokenizer,
        "exact": session.tokens_exact,
        "calls": len(rows),
        "compared": len(compared),
        "mean_abs_pct_error": _mape(compared),
        "median_ratio": _median_ratio(compared),
        "delta_pairs": len(positive),
        "delta_mean_abs_pct_error": _mape(positive),
        "delta_median_ratio": _median_ratio(positive),
        "delta_total_ratio": (
            sum(o for o, _ in positive) / sum(t for _, t in positive) if positive else None
        ),
        "rows": tuple(rows),
    }
    if aggregate:
        estimated, sent = sum(e for e, _ in aggregate), sum(t for _, t in aggregate)
        report |= {
            "aggregate_provider_tokens": sent,
            "aggregate_estimate_tokens": estimated,
            "aggregate_ratio": estimated / sent if sent else None,
        }
    return AccuracyReport(**report)


def _comparison(session_id: str, event: StoredEvent) -> CallComparison:
    estimate = event.details.get("estimate_total")
    if estimate is None:
        estimate = event.components.total if event.components else 0
    return CallComparison(
        session_id=session_id,
        event_seq=event.seq,
        message_seq=event.message_seq,
        estimate=int(estimate),
        provider=event.usage.prompt_tokens if event.usage else None,
    )


def _mape(pairs: Sequence[tuple[int, int]]) -> float | None:
    if not pairs:
        return None
    return 100 * statistics.fmean(abs(ours - theirs) / theirs for ours, theirs in pairs)


def _median_ratio(pairs: Sequence[tuple[int, int]]) -> float | None:
    if not pairs:
        return None
    return statistics.median(ours / theirs for ours, theirs in pairs)


class ResidualReport(BaseModel):
    """Stored components against the provider's count, over the calls it counted (shares in percent)."""

    model_config = ConfigDict(frozen=True)

    calls: int
    #: Calls whose stored components do not add up to the provider's count (should be 0).
    mismatched: int
    mean_residual_pct: float | None
    max_residual_pct: float | None
    #: Our own measure (before reconciling) against the provider's count.
    mean_measure_error_pct: float | None
    max_measure_error_pct: float | None


def residual_report(store: SessionStore, session_ids: Sequence[str]) -> ResidualReport:
    """How the stored components of the sessions' calls relate to the provider's counts."""
    residuals: list[float] = []
    errors: list[float] = []
    mismatched = 0
    for sid in session_ids:
        for event in store.list_events(sid, kind="request"):
            provider = event.usage.prompt_tokens if event.usage else None
            if not provider or event.components is None:
                continue
            mismatched += event.components.total != provider
            residuals.append(100 * event.components.unattributed / provider)
            measured = event.details.get("estimate_total")
            if isinstance(measured, int):
                errors.append(100 * abs(measured - provider) / provider)
    return ResidualReport(
        calls=len(residuals),
        mismatched=mismatched,
        mean_residual_pct=statistics.fmean(residuals) if residuals else None,
        max_residual_pct=max(residuals, default=None),
        mean_measure_error_pct=statistics.fmean(errors) if errors else None,
        max_measure_error_pct=max(errors, default=None),
    )
