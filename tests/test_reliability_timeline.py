"""The timeline of a very long session is drawn from a bounded number of steps, peaks kept: the
chart of 100,000 turns has ~2,000 points per trace, every marked turn and the highest turn among
them (its time is bench_reliability's: timings are not tests here)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dashboard import figures
from dashboard.analysis.downsample import MAX_STEPS, peak_steps


@pytest.fixture(scope="module")
def recorded_row(tmp_path_factory) -> pd.DataFrame:
    """One per-turn row as dashboard.data.timeline reads it from a real session database."""
    from bench.bench_reliability import make_session
    from dashboard import data

    db = tmp_path_factory.mktemp("tl") / "t.db"
    session_id = make_session(db, 6)
    con = data.connect([db])
    return data.timeline(con, data.db_labels([db])[0], session_id).head(1)


def _turns(row: pd.DataFrame, n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    frame = row.loc[row.index.repeat(n)].reset_index(drop=True)
    frame["turn"] = np.arange(n)
    frame["conversation"] = np.cumsum(rng.integers(10, 200, n)) % 150_000
    frame["tool_results"] = rng.integers(0, 3_000, n)
    frame["projected_tokens"] = frame["system"] + frame["conversation"] + frame["tool_results"]
    return frame


def test_short_timelines_are_drawn_whole(recorded_row):
    frame = _turns(recorded_row, 500)
    assert peak_steps(frame) is frame


def test_a_long_timeline_keeps_its_peaks_ends_and_marked_turns(recorded_row):
    frame = _turns(recorded_row, 100_000)
    marked = [17, 50_001, 99_998]
    drawn = peak_steps(frame, keep=marked)
    assert len(drawn) <= MAX_STEPS + len(marked) + 2
    turns = set(drawn["turn"])
    assert {0, 99_999, *marked} <= turns
    total = frame[["system", "tools", "conversation", "tool_results"]].sum(axis=1)
    assert int(frame.loc[total.idxmax(), "turn"]) in turns  # the session's peak is drawn
    # every bucket's own peak: no run of 50 turns loses its highest point
    for start in range(0, 100_000, 10_000):
        window = total.iloc[start : start + 50]
        assert (
            int(frame.loc[window.idxmax(), "turn"]) in turns
            or window.max()
            == total.iloc[start : start + 50].loc[list(set(drawn.index) & set(window.index))].max()
        )
    assert drawn["turn"].is_monotonic_increasing


def test_the_chart_of_100k_turns_is_small(recorded_row):
    frame = _turns(recorded_row, 100_000)
    marks = pd.DataFrame({"turn": [10, 60_000], "kind": ["compaction"] * 2, "trigger": ["compact_threshold"] * 2,
                          "outcome": ["compacted"] * 2, "projected_tokens": [None, None], "limit_tokens": [None, None],
                          "event_seq": [1, 2]})  # fmt: skip
    fig = figures.timeline_figure(peak_steps(frame, keep=marks["turn"]), marks, unit="turn")
    size = len(fig.to_json())
    assert all(len(trace.x) <= MAX_STEPS + 4 for trace in fig.data if trace.x is not None)
    assert size < 2_000_000, size
