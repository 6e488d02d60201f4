"""The "Why did it stop?" explanations (engine.explain) as the pages show them (pure: no streamlit,
no I/O): the Sessions page's "ended how" column and filter with what each filter keeps, and the
frames of a session's failed calls and of what each compaction kept and dropped."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import pandas as pd

from engine.explain import failure_summaries
from engine.explain.explanations import ENDED_HOW_WORDS, CompactionExplanation, SessionExplanation, WhyReport

#: The Sessions filter's choices, in the order shown.
ENDED_HOW_CHOICES: tuple[str, ...] = tuple(w for w in ENDED_HOW_WORDS if w != "unknown")
ENDED_COLUMNS = ("db", "session_id", "ended", "ended_how", "why")
#: Sessions whose endings the Sessions page reads before anyone filters by them (a few seconds at most).
ENDED_UP_FRONT = 2_000


def ended_frame(reports: Mapping[str, WhyReport]) -> pd.DataFrame:
    """One row per session of each database: its end cause, its "ended how" words, its sentence."""
    rows = [
        (db, s.session_id, s.ended.cause, ", ".join(s.ended_how), s.headline)
        for db, report in reports.items()
        for s in report.sessions
    ]
    return pd.DataFrame(rows, columns=list(ENDED_COLUMNS))


def with_ended(overview: pd.DataFrame, ended: pd.DataFrame) -> pd.DataFrame:
    """The Sessions overview with ``ended``, ``ended_how`` and ``why`` (blank for a session not explained)."""
    out = overview.merge(ended, on=["db", "session_id"], how="left")
    for column in ("ended", "ended_how", "why"):
        out[column] = out[column].fillna("")
    return out


def keep_ended(frame: pd.DataFrame, words: Iterable[str]) -> pd.DataFrame:
    """Sessions whose "ended how" holds any of ``words`` (all sessions when none is chosen)."""
    wanted = set(words)
    if not wanted:
        return frame
    return frame[[bool(wanted & set(filter(None, how.split(", ")))) for how in frame["ended_how"]]]


def filter_counts(frame: pd.DataFrame, kept: Mapping[str, pd.DataFrame]) -> str:
    """How many sessions each active filter keeps on its own: "Model keeps 12 of 40 · Ended how keeps 3 of 40"."""
    total = len(frame)
    parts = [f"{name} keeps {len(rows):,} of {total:,}" for name, rows in kept.items()]
    return " · ".join(parts)


def failed_calls_frame(why: SessionExplanation) -> pd.DataFrame:
    return pd.DataFrame(
        [(f.call, f.cause.replace("_", " "), f.status, f.message, f.next) for f in why.failed_calls],
        columns=["call", "cause", "status", "message", "then"],
    )


def compaction_facts(c: CompactionExplanation) -> pd.DataFrame:
    """The evidence of one compaction, one fact a row (values as text: the grid shows them as given)."""

    def n(value: int | None) -> str | None:
        return f"{value:,}" if value is not None else None

    rows: list[tuple[str, str | None]] = [
        (
            "who",
            {"agent": "the agent itself", "ctxdesk": "ctxdesk", "proxy": "ctxdesk proxy", "user": "the user"}[
                c.by
            ],
        ),
        ("trigger", c.trigger),
        ("tokens before", n(c.tokens_before)),
        ("tokens after", n(c.tokens_after)),
        ("estimate that set it off", n(c.reached_tokens) if c.reached_tokens != c.tokens_before else None),
        ("provider's count of the call before", n(c.last_call_tokens)),
        ("provider's count of the first call after", n(c.next_call_tokens)),
        ("limit", n(c.limit_tokens)),
        ("window", n(c.window_tokens) if c.window_tokens != c.limit_tokens else None),
        ("threshold in force", n(c.threshold_tokens)),
        ("threshold rule", c.threshold_rule),
        ("how close (share of the limit)", f"{c.share:.1%}" if c.share is not None else None),
        ("agent setting", ", ".join(f"{k} = {v}" for k, v in c.agent_setting.items()) or None),
        ("instructions", c.instructions),
        ("after failed call", n(c.after_failed_call)),
    ]
    return pd.DataFrame([r for r in rows if r[1] is not None], columns=["fact", "value"])


def items_frame(c: CompactionExplanation) -> pd.DataFrame:
    """What a compaction kept and dropped: instructions, files, errors, commands (dropped first)."""
    rows = [("dropped", i.kind, i.text, i.detail) for i in c.dropped]
    rows += [("kept", i.kind, i.text, i.detail) for i in c.kept]
    return pd.DataFrame(rows, columns=["outcome", "kind", "what", "why"])


def sentences(why: SessionExplanation) -> Sequence[str]:
    """Every sentence of the session after the first: the ending, each failed call, each compaction."""
    failed = failure_summaries(why.failed_calls, why.agent_label)  # a run of retries in one sentence
    out = [why.ended.detail, *failed, *(c.sentence for c in why.compactions)]
    return [s for s in out if s and s != why.headline]
