"""Sessions: every session across the loaded databases, filtered and sorted; pick one."""

from __future__ import annotations

import streamlit as st

from dashboard import charts, data, state

st.title("Sessions")
df = state.overview()
if df.empty:
    st.info("No sessions in the loaded databases. Run `ctxdesk demo --out data` or pass database paths.")
    st.stop()

c1, c2, c3, c4 = st.columns(4)
c1.metric("Sessions", f"{len(df):,}")
c2.metric("Messages", f"{int(df['messages'].sum()):,}")
c3.metric("Forced final turns", f"{int(df['forced_final'].sum()):,}")
c4.metric("Offloaded", f"{int(df['offloaded_bytes'].sum()) / 1024:,.1f} KiB")

with st.container(border=True):
    f1, f2, f3, f4 = st.columns([3, 2, 2, 2])
    text = f1.text_input("Search title or id", key="sessions_search")
    models = f2.multiselect("Model", sorted(df["model"].dropna().unique()), key="sessions_models")
    statuses = f3.multiselect("Status", sorted(df["status"].dropna().unique()), key="sessions_status")
    dbs = f4.multiselect("Database", sorted(df["db"].unique()), key="sessions_dbs")
    s1, s2, s3 = st.columns([3, 2, 2])
    sort_by = s1.selectbox(
        "Sort by",
        [
            "updated_utc",
            "peak_usage_pct",
            "turns",
            "messages",
            "compactions",
            "forced_final",
            "offloaded_bytes",
            "title",
        ],
        key="sessions_sort",
    )
    descending = s2.toggle("Descending", value=True, key="sessions_desc")
    only_stopped = s3.toggle("Only sessions that stopped", key="sessions_stopped")

view = data.filter_sessions(
    df,
    data.SessionFilter(text, tuple(models), tuple(statuses), tuple(dbs), only_stopped),
    sort_by=sort_by,
    descending=descending,
)
st.caption(f"{len(view):,} of {len(df):,} sessions. Click a row to select it.")
event = st.dataframe(
    view,
    key="sessions_table",
    on_select="rerun",
    selection_mode="single-row",
    hide_index=True,
    column_order=[
        "title",
        "model",
        "turns",
        "peak_usage_pct",
        "compactions",
        "forced_final",
        "skipped_provider",
        "offloaded_bytes",
        "messages",
        "status",
        "db",
        "session_id",
        "provider",
        "source",
        "updated_utc",
    ],
    column_config={
        "peak_usage_pct": st.column_config.ProgressColumn(
            "Peak usage", format="%.1f%%", min_value=0, max_value=100
        ),
        "offloaded_bytes": st.column_config.NumberColumn("Offloaded bytes", format="%d"),
        "session_id": st.column_config.TextColumn("Session"),
    },
)
rows = event.selection.rows if event is not None else []
if rows:
    row = view.iloc[rows[0]]
    ref = state.SessionRef(str(row["db"]), str(row["session_id"]))
    if state.selected() != ref:
        state.select(ref)
        st.rerun()

ref = state.selected()
if ref is not None:
    st.success(f"Selected: {ref.session_id} ({ref.db}). Open the Context timeline or another page.")
    cols = st.columns(3)
    if cols[0].button("Open timeline", icon=":material/stacked_line_chart:"):
        st.switch_page("views/timeline.py")
    if cols[1].button("Why did it stop?", icon=":material/help:"):
        st.switch_page("views/why_stop.py")

if len(view) > 1:
    with st.expander("Peak usage by session", expanded=False):
        st.plotly_chart(charts.sessions_scatter(view))
