"""Compare: two sessions, or two model calls, side by side: tokens per component, provider usage,
cost and cache, and what differs, in words. The pair is kept in the URL (?a=db::id&b=db::id) so a
comparison can be shared."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, data, display, figures, state

st.title("Compare")
sessions = state.overview()
if sessions.empty:
    st.info("No sessions in the loaded databases.")
    st.stop()

keys = [state.SessionRef(str(r.db), str(r.session_id)).key for r in sessions.itertuples()]
rows = {key: row for key, (_, row) in zip(keys, sessions.iterrows(), strict=True)}
labels = state.session_labels(sessions)
selected = state.selected()
first = selected.key if selected is not None and selected.key in rows else keys[0]
defaults = {"cmp_a": first, "cmp_b": next((k for k in keys if k != first), first)}
# The pair lives in its own state, changed only by a pick or the link: a selectbox whose options
# change (a session written meanwhile appears) is a new widget to Streamlit and falls back to its
# first option, the newest session, which took a shared link's pair over (#36.1).
PAIR_KEY = "_cmp_pair"
pair: dict[str, str] = st.session_state.setdefault(PAIR_KEY, {})
for widget, param in (("cmp_a", "a"), ("cmp_b", "b")):
    if pair.get(widget) not in rows:
        linked = st.query_params.get(param)
        pair[widget] = linked if linked in rows else defaults[widget]
    st.session_state[widget] = pair[widget]


def _picked(widget: str) -> None:
    st.session_state[PAIR_KEY][widget] = st.session_state[widget]


mode = st.radio("Compare", ["Two sessions", "Two calls"], horizontal=True, key="cmp_mode")
left, right = st.columns(2)
a_key = left.selectbox(
    "A", keys, format_func=labels.__getitem__, key="cmp_a", on_change=_picked, args=("cmp_a",)
)
b_key = right.selectbox(
    "B", keys, format_func=labels.__getitem__, key="cmp_b", on_change=_picked, args=("cmp_b",)
)
st.query_params["a"], st.query_params["b"] = a_key, b_key
all_calls = state.call_costs()


def side(key: str) -> tuple[state.SessionRef, pd.Series, pd.DataFrame, pd.DataFrame]:
    """A session's overview row, its request events (one per model call) and its priced calls."""
    ref = state.SessionRef.parse(key)
    requests = state.query(data.events, ref.db, ref.session_id, ("request",)).reset_index(drop=True)
    calls = all_calls[(all_calls["db"] == ref.db) & (all_calls["session_id"] == ref.session_id)]
    return ref, rows[key], requests, calls


def cost_of(calls: pd.DataFrame, seq: int) -> pd.Series | None:
    found = calls[calls["event_seq"] == seq]
    return None if found.empty else found.iloc[0]


def show(comparison: analysis.Comparison, *, key: str) -> None:
    st.dataframe(
        comparison.table, hide_index=True, key=key, placeholder=display.MISSING, height="content",
        column_config={
            "figure": st.column_config.TextColumn("", width="medium"),
            "differs": st.column_config.CheckboxColumn("Differs", width="small"),
        } | {  # the per-component tables hold numbers
            c: st.column_config.NumberColumn(c, format="localized")
            for c in ("A", "B", "difference (B − A)") if comparison.table[c].dtype.kind in "if"
        },
    )  # fmt: skip


def what_differs(lines: tuple[str, ...], *, same: str) -> None:
    st.markdown("**What differs**")
    # Recorded names (models, causes) are in these lines: shown as text, never as markdown.
    st.text("\n".join(f"• {line}" for line in lines) if lines else same)


(ref_a, row_a, requests_a, calls_a), (ref_b, row_b, requests_b, calls_b) = side(a_key), side(b_key)
if a_key == b_key:
    st.info("A and B are the same session: pick another one on either side (or compare two of its calls).")

if mode == "Two sessions":
    compared = analysis.compare(
        analysis.session_figures(row_a, requests_a, calls_a),
        analysis.session_figures(row_b, requests_b, calls_b),
        analysis.SESSION_METRICS,
    )
    show(compared, key="cmp_sessions_table")
    st.caption(
        "—: not recorded (no provider usage or no price for the model, so no cost or cache figures). "
        "Costs are at list prices from the model table."
    )
    peak_a, peak_b = analysis.peak_request(requests_a), analysis.peak_request(requests_b)
    parts = analysis.compare_components(
        analysis.components_of(peak_a) if peak_a is not None else {},
        analysis.components_of(peak_b) if peak_b is not None else {},
    )
    st.subheader("Tokens per component at each session's largest call")
    if parts.table.empty:
        st.info("Neither session recorded a model call with its components.")
    else:
        st.plotly_chart(
            figures.components_bar(
                {"A": analysis.components_of(peak_a) if peak_a is not None else {},
                 "B": analysis.components_of(peak_b) if peak_b is not None else {}},
            ),
            key="cmp_sessions_bar",
        )  # fmt: skip
        show_parts = parts.table.rename(columns={"component": "figure"})
        show(analysis.Comparison(show_parts, parts.differences), key="cmp_sessions_parts")
    what_differs(
        compared.differences + parts.differences, same="Nothing: the two sessions' figures are equal."
    )
else:
    choices = []
    for column, (requests, calls, widget) in zip(
        (left, right),
        ((requests_a, calls_a, "cmp_call_a"), (requests_b, calls_b, "cmp_call_b")),
        strict=True,
    ):
        if requests.empty:
            column.info("This session recorded no model call.")
            choices.append(None)
            continue
        seqs = [int(s) for s in requests["seq"]]
        names = display.distinct_labels(
            {
                int(r["seq"]): analysis.call_label(r, cost_of(calls, int(r["seq"])))
                for _, r in requests.iterrows()
            },
            lambda seq: f"event #{seq}",
        )
        if st.session_state.get(widget) not in names:
            st.session_state[widget] = seqs[-1]
        seq = column.selectbox("Call", seqs, format_func=names.__getitem__, key=widget)
        choices.append(requests[requests["seq"] == seq].iloc[0])
    if all(c is not None for c in choices):
        call_a, call_b = choices
        compared = analysis.compare(
            analysis.call_figures(call_a, cost_of(calls_a, int(call_a["seq"]))),
            analysis.call_figures(call_b, cost_of(calls_b, int(call_b["seq"]))),
            analysis.CALL_METRICS,
        )
        show(compared, key="cmp_calls_table")
        st.caption("—: not recorded for that call (no provider usage, or no price for its model).")
        comps_a, comps_b = analysis.components_of(call_a), analysis.components_of(call_b)
        parts = analysis.compare_components(comps_a, comps_b)
        st.subheader("Tokens per component sent")
        st.plotly_chart(figures.components_bar({"A": comps_a, "B": comps_b}), key="cmp_calls_bar")
        if not parts.table.empty:
            show(
                analysis.Comparison(parts.table.rename(columns={"component": "figure"}), parts.differences),
                key="cmp_calls_parts",
            )
        what_differs(
            compared.differences + parts.differences, same="Nothing: the two calls' figures are equal."
        )
