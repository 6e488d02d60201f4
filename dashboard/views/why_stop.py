"""Why did it stop? For each forced final turn or skipped provider: the limit calculation with
its sources, projected vs limit, what grew, what tipped it, and settings that would have avoided it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, charts, state

ref, row = state.require_session()
st.title("Why did it stop?")
st.text(f"{row['title'] or ref.session_id} · {row['model']} · {ref.db}")

ev = state.query("events", ref.db, ref.session_id, ("guard", "request"))
stops = analysis.stop_events(ev[ev["kind"] == "guard"])
if stops.empty:
    st.success("This session never hit a forced final turn or skipped a provider.")
    st.stop()

OUTCOME_TEXT = {
    "forced_final": "Forced final turn: the next request would not fit, so the model was asked to wrap up.",
    "skipped_provider": "Skipped provider: the request would not fit this provider's window, so it was not called.",
    "rejected": "A tool result would not fit: it was refused and the session was forced into its final turn.",
}


def render_stop(stop: pd.Series) -> None:
    earlier = ev[(ev["kind"] == "request") & (ev["seq"] < stop["seq"])]
    previous = earlier.iloc[-1].to_dict() if not earlier.empty else None
    details = stop["details"] or {}
    tipping_seq = (details.get("tipping") or {}).get("message_seq", stop["message_seq"])
    tipping = None
    if tipping_seq is not None and tipping_seq == tipping_seq:
        tipping = state.query("message", ref.db, ref.session_id, int(tipping_seq))
    tipping_bytes = len(tipping["text"].encode("utf-8")) if tipping else None
    x = analysis.explain_stop(stop.to_dict(), previous, tipping_bytes=tipping_bytes)
    st.write(OUTCOME_TEXT.get(x.outcome, x.outcome))
    c1, c2, c3 = st.columns(3)
    c1.metric("Projected", f"{x.projected:,}" if x.projected is not None else "n/a")
    c2.metric("Limit", f"{x.limit:,}" if x.limit is not None else "n/a")
    if x.over_by is not None:
        c3.metric(
            f"vs {x.hard_block_threshold:.0%} of limit", f"{x.over_by:+,}", delta_color="inverse",
            help="Tokens past the hard-block threshold (positive: over).",
        )  # fmt: skip
    counters = details.get("counters")
    if counters:
        st.text("Guard counters: " + ", ".join(f"{k} {v}" for k, v in counters.items()))
    st.markdown("**Limit calculation**")
    st.code(x.formula, language=None)
    st.dataframe(
        pd.DataFrame(
            [(line.field, "" if line.value is None else f"{line.value:,}" if isinstance(line.value, int) else str(line.value), line.source)
             for line in x.limit_lines],
            columns=["setting", "value", "came from"],
        ),
        hide_index=True,
    )  # fmt: skip
    st.markdown("**What grew since the previous request**")
    st.dataframe(
        pd.DataFrame(
            [(charts.COMPONENT_LABELS[g.component], g.before, g.after, g.delta) for g in x.growth],
            columns=["component", "before", "now", "change"],
        ),
        hide_index=True,
    )
    st.markdown("**What tipped it**")
    if tipping is not None:
        st.text(
            f"Message {x.tipping_seq} ({tipping['kind']}{', ' + str(tipping['tool_names']) if tipping['tool_names'] else ''})"
            f" · {int(tipping['tokens']):,} tokens · component: {x.tipping_component or 'unknown'}"
        )
        with st.expander("Show the message", expanded=False):
            st.code(tipping["text"][:20_000], language=None, wrap_lines=True)
    else:
        st.text(f"Largest growth: {x.tipping_component or 'unknown'} (+{x.tipping_tokens or 0:,} tokens)")
    st.markdown("**What would have avoided it**")
    if x.suggestions:
        for suggestion in x.suggestions:
            st.text("• " + suggestion)
    else:
        st.text("No single setting change found from the recorded values.")


for _, stop in stops.iterrows():
    label = (
        f"Turn {stop['turn_index']}: {stop['outcome']} ({stop['trigger'] or 'guard'}) · {stop['model'] or ''}"
    )
    with st.expander(label, expanded=True):
        render_stop(stop)
