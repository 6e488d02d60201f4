"""Sessions: every session across the loaded databases, filtered and sorted; pick one, and see
where it wasted context (its findings, largest savings first)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, data, display, figures, state, table_columns, warm
from dashboard.analysis import why as why_view

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

#: The "Peak usage by session" expander's state (open or closed), kept across runs.
PEAK_CHART_KEY = "sessions_peak_chart"
#: What the table can be sorted by (the URL's ``sort=`` names the column), with the table's own labels.
SORT_LABELS = {
    "last_active_utc": "Last active (UTC)", "peak_usage_pct": "Peak usage", "turns": "Turns",
    "messages": "Messages", "compactions": "Compactions", "forced_final": "Forced final",
    "offloaded_bytes": "Offloaded bytes", "title": "Title", "updated_utc": "Updated (UTC)",
}  # fmt: skip
SORT_OPTIONS = list(SORT_LABELS)
# Filters live in the URL (?q=...&model=...&status=...&db=...&sort=...&ended=forced), so a view can be
# shared; the link sets them once, later edits write them back.
URL_FILTERS = {"sessions_search": "q", "sessions_models": "model", "sessions_status": "status",
               "sessions_dbs": "db", "sessions_sort": "sort", "sessions_ended": "ended"}  # fmt: skip
if not st.session_state.get("_sessions_url_read"):
    st.session_state["_sessions_url_read"] = True
    for key, param in URL_FILTERS.items():
        values = st.query_params.get_all(param)
        if not values:
            continue
        if key in ("sessions_models", "sessions_status", "sessions_dbs"):
            column = {"sessions_models": "model", "sessions_status": "status", "sessions_dbs": "db"}[key]
            st.session_state[key] = [v for v in values if v in set(df[column].dropna())]
        elif key == "sessions_ended":
            st.session_state[key] = [v for v in values if v in why_view.ENDED_HOW_CHOICES]
        elif key == "sessions_sort":
            if values[0] in SORT_OPTIONS:
                st.session_state[key] = values[0]
        else:
            st.session_state[key] = values[0]

with st.container(border=True):
    f1, f2, f3, f4 = st.columns([3, 2, 2, 2])
    text = f1.text_input("Search title or id", key="sessions_search")
    models = f2.multiselect("Model", sorted(df["model"].dropna().unique()), key="sessions_models")
    statuses = f3.multiselect("Status", sorted(df["status"].dropna().unique()), key="sessions_status")
    dbs = f4.multiselect("Database", sorted(df["db"].unique()), key="sessions_dbs")
    s1, s2, s3 = st.columns([3, 2, 2])
    sort_by = s1.selectbox("Sort by", SORT_OPTIONS, format_func=SORT_LABELS.__getitem__, key="sessions_sort")
    descending = s2.toggle("Descending", value=True, key="sessions_desc")
    ended_how = s3.multiselect("Ended how", why_view.ENDED_HOW_CHOICES, key="sessions_ended")
    s3.toggle("Sub-agents under their parent", value=True, key="sessions_tree")

for key, param in URL_FILTERS.items():
    value = st.session_state.get(key)
    default = {"sessions_sort": "last_active_utc"}.get(key)
    if value in (None, "", [], default):
        st.query_params.pop(param, None)
    else:
        st.query_params[param] = ("1" if value is True else value) if not isinstance(value, list) else value


def _narrowed(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, pd.DataFrame]]:
    """The sessions the filters keep (as a tree when asked), and what each filter keeps on its own."""
    view = why_view.keep_ended(
        data.filter_sessions(
            df,
            data.SessionFilter(text, tuple(models), tuple(statuses), tuple(dbs)),
            sort_by=sort_by,
            descending=descending,
        ),
        ended_how,
    )
    alone = {"Search": data.SessionFilter(text=text), "Model": data.SessionFilter(models=tuple(models)),
             "Status": data.SessionFilter(statuses=tuple(statuses)), "Database": data.SessionFilter(dbs=tuple(dbs))}  # fmt: skip
    kept = {name: data.filter_sessions(df, f) for name, f in alone.items() if f != data.SessionFilter()}
    if ended_how:
        kept["Ended how"] = why_view.keep_ended(df, ended_how)
    if st.session_state.get("sessions_tree", True):
        view = data.as_tree(view)
        # A sub-agent reads as a branch of its parent session (indented title).
        view = view.assign(
            title=[("    " * d + "└ " if d else "") + display.text(t, sid)
                   for d, t, sid in zip(view["depth"], view["title"], view["session_id"], strict=True)]
        )  # fmt: skip
    return view, kept


def _caption(df: pd.DataFrame, view: pd.DataFrame, kept: dict[str, pd.DataFrame]) -> None:
    st.caption(
        f"{len(view):,} of {len(df):,} sessions. Click a row to select it."
        + (f" {why_view.filter_counts(df, kept)}." if kept else "")
    )


def _table(view: pd.DataFrame, **selection: object) -> object:
    return st.dataframe(
        display.for_table(view),
        **selection,
        hide_index=True,
        placeholder=display.MISSING,
        column_order=[
            "title",
            "ended_how",
            "model",
            "turns",
            "peak_usage_pct",
            "forced_final",
            "compactions",
            "skipped_provider",
            "offloaded_bytes",
            "messages",
            "status",
            "db",
            "session_id",
            "provider",
            "source",
            "last_active_utc",
            "why",
        ],
        column_config={
            "title": st.column_config.TextColumn("Title", width="medium"),
            "model": st.column_config.TextColumn("Model"),
            "ended_how": st.column_config.TextColumn(
                "Ended how", help="finished, forced, failed, interrupted; compacted"
            ),
            "why": st.column_config.TextColumn("Why it ended", width="large"),
            "turns": st.column_config.NumberColumn("Turns", width="small"),
            "peak_usage_pct": st.column_config.ProgressColumn(
                "Peak usage", format="%.1f%%", min_value=0, max_value=100
            ),
            "compactions": st.column_config.NumberColumn("Compactions"),
            "forced_final": st.column_config.NumberColumn("Forced final"),
            "skipped_provider": st.column_config.NumberColumn("Skipped provider"),
            "offloaded_bytes": st.column_config.NumberColumn("Offloaded bytes", format="localized"),
            "messages": st.column_config.NumberColumn("Messages", width="small"),
            "status": st.column_config.TextColumn("Status", width="small"),
            "db": st.column_config.TextColumn("Database"),
            "session_id": st.column_config.TextColumn("Session"),
            "provider": st.column_config.TextColumn("Provider"),
            "source": st.column_config.TextColumn("Source"),
            "last_active_utc": st.column_config.TextColumn(
                "Last active (UTC)",
                help="the last time the agent's transcript gives (a message's or a call's; an Aider chat log without "
                "its LLM history, and Continue CLI, give only when a session started), else the last update",
            ),
        },
    )


# How each session ended is read from every transcript's end (~3 ms a session, in a worker process):
# up front for a few thousand sessions, else once the filter asks for it. The first read starts a
# worker (seconds on a cold start): on this browser's first read the table is drawn first without it,
# then again with it (later reads, after a database changed, redraw the table once, as before).
ENDINGS_READ_KEY = "_sessions_endings_read"
if ended_how or len(df) <= why_view.ENDED_UP_FRONT:
    first_read = not ended_how and not st.session_state.get(ENDINGS_READ_KEY)
    preview = st.empty()
    if first_read:
        with preview.container():
            shown, kept = _narrowed(why_view.with_ended(df, why_view.ended_frame({})))
            _caption(df, shown, kept)
            _table(shown)
    with st.spinner("Reading how each session ended…"):
        df = why_view.with_ended(df, warm.session_endings(state.database_paths(), df))
    st.session_state[ENDINGS_READ_KEY] = True
    preview.empty()
else:
    df = why_view.with_ended(df, why_view.ended_frame({}))
view, kept = _narrowed(df)
_caption(df, view, kept)
event = _table(view, key="sessions_table", on_select="rerun", selection_mode="single-row")
rows = event.selection.rows if event is not None else []
if rows:
    row = view.iloc[rows[0]]
    ref = state.SessionRef(str(row["db"]), str(row["session_id"]))
    if state.selected() != ref:
        state.select(ref)
        st.rerun()

ref = state.selected()
if ref is not None:
    st.success(
        f"Selected: {display.md(ref.session_id)} ({display.md(ref.db)}). Open the Context timeline or another page."
    )
    cols = st.columns(3)
    if cols[0].button("Open timeline", icon=":material/stacked_line_chart:"):
        st.switch_page("views/timeline.py")
    if cols[1].button("Why did it stop?", icon=":material/help:"):
        st.switch_page("views/why_stop.py")


@st.fragment
def findings_section(ref: state.SessionRef) -> None:
    """Where the selected session wasted context, largest savings first; pick one to read it whole."""
    st.subheader("Findings")
    table = analysis.findings_frame(state.findings(ref))
    if table.empty:
        st.success("No wasted context found in this session.")
        return
    priced = table["usd"].dropna()
    money = f", about {analysis.money_text(float(priced.sum()))}" if not priced.empty else ""
    st.caption(
        f"{len(table)} finding(s) in {ref.session_id}: fixing them would save {int(table['tokens'].sum()):,} "
        f"input tokens{money}. Select a row for the details."
    )
    pick = st.dataframe(
        # A finding without a price reads "price unknown", not a bare None.
        table.assign(usd=[analysis.money_text(display.value_or_none(v)) for v in table["usd"]]),
        key="sessions_findings", on_select="rerun", selection_mode="single-row", hide_index=True, placeholder=display.MISSING,
        column_order=["turn", "kind", "title", "tokens", "usd", "fix"],
        column_config={
            "turn": st.column_config.NumberColumn("Turn", width=45),
            "kind": st.column_config.TextColumn("Kind", width=140),
            "title": st.column_config.TextColumn("Finding", width=320),
            "tokens": st.column_config.NumberColumn("Tokens saved", format="localized", width=95),
            "usd": st.column_config.TextColumn("USD saved", width=95),
            "fix": st.column_config.TextColumn("Fix", width=330),
        },
    )  # fmt: skip
    rows = pick.selection.rows if pick is not None else []
    if not rows:
        return
    f = table.iloc[rows[0]]
    with st.container(border=True):
        # Session text (paths, tool arguments) is shown as text, never as markdown.
        st.text(f"{f['kind']} at turn {int(f['turn'])}: {f['title']}")
        st.text(f["detail"])
        st.text(f"Fix: {f['fix']}")
        if f["messages"]:
            st.text(f"Messages: {f['messages']}")
        if st.button(
            "Show this turn on the timeline", icon=":material/stacked_line_chart:", key="findings_open"
        ):
            st.session_state["timeline_step"] = "turn"
            st.session_state["_timeline_step_for"] = ref.key  # the finding's turn, not the call axis
            st.session_state["timeline_turn"] = int(f["turn"])
            st.switch_page("views/timeline.py")


if ref is not None and not df[(df["db"] == ref.db) & (df["session_id"] == ref.session_id)].empty:
    findings_section(ref)

if len(view) > 1:
    # The chart is built only while the expander is open (a closed one reruns the page when opened):
    # building it costs every run of this page ~0.3 s, the first one plotly's validators too.
    with st.expander("Peak usage by session", key=PEAK_CHART_KEY, on_change="rerun") as peak_chart:
        if peak_chart.open:
            st.plotly_chart(figures.sessions_scatter(view))


# -- cost (dashboard/data/costs.py): totals, filters by project, model and day, roll-ups ------------------


#: The cost tables' columns as the page names them (USD at list prices, tokens as counts).
COST_LABELS = {
    "project": "Project", "root_session_id": "Session (with sub-agents)", "day": "Day (UTC)", "model": "Model",
    "calls": "Calls", "unpriced_calls": "Calls without a price", "total_usd": "Cost",
    "input_usd": "Input", "output_usd": "Output", "cache_read_usd": "Cache reads", "cache_write_usd": "Cache writes",
    "uncached_usd": "Cost with no cache", "lost_usd": "Lost to cache rebuilds",
    "output_tokens": "Output tokens", "cache_read_tokens": "Cache-read tokens", "cache_write_tokens": "Cache-write tokens",
}  # fmt: skip
COST_ORDER = (
    "calls", "unpriced_calls", "total_usd", "input_usd", "output_usd", "cache_read_usd", "cache_write_usd",
    "lost_usd", "uncached_usd", "output_tokens", "cache_read_tokens", "cache_write_tokens",
)  # fmt: skip


def _unpriced_note(calls: pd.DataFrame) -> str | None:
    unpriced = calls[calls["priced_as"].isna()]
    if unpriced.empty:
        return None
    models = ", ".join(sorted(str(m) for m in unpriced["model"].dropna().unique())) or "model not recorded"
    return (
        f"{len(unpriced):,} of {len(calls):,} calls ({models}) have no list price in the model table: they are "
        "counted at $0, so the costs below leave them out."
    )


@st.fragment
def cost_section() -> None:
    """What the loaded sessions cost at list prices, by project, day and model, and what cache rebuilds lost."""
    st.subheader("Cost")
    calls = state.call_costs()
    if calls.empty:
        st.info("No model calls with provider usage in the loaded databases.")
        return
    g1, g2, g3 = st.columns(3)
    projects = g1.multiselect("Project", sorted(calls["project"].dropna().unique()), key="cost_projects")
    models = g2.multiselect("Model", sorted(calls["model"].dropna().unique()), key="cost_models")
    days = g3.multiselect("Day (UTC)", sorted(calls["day"].dropna().unique()), key="cost_days")
    chosen = data.filter_calls(calls, projects=projects, models=models, days=days)
    note = _unpriced_note(chosen)
    if note:
        st.warning(note, icon=":material/money_off:")
    t = data.cost_totals(chosen)
    m = st.columns(5)
    m[0].metric("Cost" if not note else "Cost of priced calls", f"${t['total_usd']:,.2f}",
                help="Provider usage at the model table's list prices.")  # fmt: skip
    m[1].metric("Cache reads", f"${t['cache_read_usd']:,.2f}")
    m[2].metric("Cache writes", f"${t['cache_write_usd']:,.2f}")
    m[3].metric("Output", f"${t['output_usd']:,.2f}")
    m[4].metric("Lost to cache rebuilds", f"${t['lost_usd']:,.2f}", f"{100 * t['lost_share']:.1f}% of cost",
                delta_color="off")  # fmt: skip
    by = st.radio("Per", ["project", "root_session_id", "day", "model"], horizontal=True, key="cost_by",
                  format_func=lambda k: COST_LABELS[k].lower())  # fmt: skip
    table = data.rollup(chosen, by)
    if by == "root_session_id":  # a session by its title (its id when it has none)
        titles = {
            str(r.session_id): display.text(r.title, str(r.session_id)) for r in state.overview().itertuples()
        }
        table[by] = [titles.get(str(s), str(s)) for s in table[by]]
    table = table[[by, *COST_ORDER]]
    st.dataframe(
        table,
        hide_index=True,
        placeholder=display.MISSING,
        column_config=table_columns.readable(table, COST_LABELS),
    )
    agents = data.beside_agent_costs(state.query(data.agent_costs), calls)
    if not agents.empty:
        st.markdown(
            "**What the agents recorded themselves** (by their own prices, beside ours at list prices)"
        )
        shown = agents.assign(
            title=[display.text(t, s) for t, s in zip(agents["title"], agents["session_id"], strict=True)]
        )
        st.dataframe(
            shown[["title", "agent_cost_usd", "our_cost_usd", "difference_usd", "comparison", "agent_cost_source"]],
            hide_index=True, placeholder=display.MISSING,
            column_config={
                "title": st.column_config.TextColumn("Session"),
                "agent_cost_usd": st.column_config.NumberColumn("Agent's own cost", format="$%.4f"),
                "our_cost_usd": st.column_config.NumberColumn("Ours (with sub-agents)", format="$%.4f"),
                "difference_usd": st.column_config.NumberColumn("Ours − agent's", format="$%.4f"),
                "comparison": st.column_config.TextColumn("Compared"),
                "agent_cost_source": st.column_config.TextColumn("Recorded in"),
            },
        )  # fmt: skip
    rebuilds = chosen[chosen["lost_usd"] > 0].sort_values("lost_usd", ascending=False).head(20)
    if not rebuilds.empty:
        with st.expander(f"Largest cache rebuilds ({len(chosen[chosen['lost_usd'] > 0]):,})"):
            st.dataframe(
                rebuilds[["session_id", "call_index", "cache_explanation", "rebuilt_tokens", "lost_usd", "fix"]]
                .assign(call_index=rebuilds["call_index"] + 1),
                hide_index=True, placeholder=display.MISSING,
                column_config={
                    "session_id": st.column_config.TextColumn("Session"),
                    "call_index": st.column_config.NumberColumn("Call", format="localized"),
                    "cache_explanation": st.column_config.TextColumn("Why", width="large"),
                    "rebuilt_tokens": st.column_config.NumberColumn("Tokens written again", format="localized"),
                    "lost_usd": st.column_config.NumberColumn("Lost", format="$%.4f"),
                    "fix": st.column_config.TextColumn("Fix", width="large"),
                },
            )  # fmt: skip


cost_section()
