"""Context timeline: tokens by component turn by turn against the limit, with a marker on turns
that have findings; click a turn to see what was sent (largest messages first) and its findings.
Re-projected under edited model settings when present."""

from __future__ import annotations

from typing import TYPE_CHECKING

import streamlit as st

from dashboard import analysis, data, display, figures, state, table_columns
from engine.errors import ContextDeskError
from engine.events import COMPONENT_LABELS
from engine.settings import DEFAULT_COMPACT_THRESHOLD, resolve_model_settings

if TYPE_CHECKING:  # annotations only: the findings load in a child process (dashboard.actions)
    from engine.findings import Finding

TURN_KEY = "timeline_turn"
CALL_KEY = "timeline_call"
#: Pixels of a message shown in full before it scrolls (a file dump would otherwise fill the page).
MESSAGE_HEIGHT = 480
#: Sessions with at most this many turns open step by model call.
FEW_TURNS = 2

ref, row = state.require_session()
st.title("Context timeline")
st.text(display.session_line(row["title"], ref.session_id, row["model"], ref.db))
agent = state.query(data.agent_context, ref.db, ref.session_id)
if agent.get("import_notes"):  # what the file does not keep, and how it was measured: the numbers' caveats
    with st.expander(f"What the import noted ({len(agent['import_notes'])})", icon=":material/info:"):
        for note in agent["import_notes"]:
            st.text("• " + note)  # recorded words (paths, ids): text, never markdown


def show_findings(found: list[Finding], turn: int) -> None:
    """The findings of one turn: what wasted context, what fixing it saves, and the fix."""
    here = [f for f in found if f.turn_index == turn]
    if not here:
        return
    st.markdown(f"**Findings at turn {turn}** ({len(here)})")
    for f in sorted(here, key=lambda f: -f.tokens):
        with st.container(border=True):
            # Titles, details and fixes quote the session (paths, tool arguments): text, never markdown.
            st.text(f"{analysis.FINDING_LABELS.get(f.kind, f.kind)}: {f.title}")
            st.text(analysis.savings_text(f))
            st.text(f"Fix: {f.fix}")


def edited_projection(turns, unit):
    edited = st.session_state.get(state.EDITED_SETTINGS_KEY)
    if edited is None or turns.empty or not row["model"]:
        return None
    try:
        resolved = resolve_model_settings(str(row["model"]), row["provider"] or None, edited)
    except ContextDeskError as exc:
        st.warning(f"Edited settings do not resolve for {display.md(row['model'])}: {display.md(exc)}")
        return None
    checks = state.query(data.events, ref.db, ref.session_id, ("guard", "request"))
    demand = analysis.step_demand(checks, turns, unit)
    return analysis.project_timeline(turns, resolved, unit=unit, demand=demand)


def _whole(value: object) -> int | None:
    value = display.value_or_none(value)
    return None if value is None else int(value)


def _step_picked() -> None:
    st.session_state["_timeline_step_auto"] = False  # the user's choice now holds for every session


def call_cost_panel(ref: state.SessionRef, event_seq: int | None, turn: int) -> None:
    """What the selected call (or the turn's calls) cost at list prices, and why a cache was rebuilt."""
    calls = state.call_costs()
    calls = calls[(calls["db"] == ref.db) & (calls["session_id"] == ref.session_id)]
    if calls.empty:
        return
    chosen = (
        calls[calls["event_seq"] == event_seq]
        if event_seq is not None
        else calls[calls["turn_index"] == turn]
    )
    if chosen.empty:
        return
    what = "this call" if event_seq is not None else f"turn {turn}'s {len(chosen)} call(s)"
    lost = float(chosen["lost_usd"].fillna(0).sum())
    causes = sorted({str(c) for c in chosen["cache_cause"].dropna()})
    cols = st.columns(5)
    cols[0].metric(f"Cost of {what}", f"${float(chosen['total_usd'].sum()):.4f}")
    cols[1].metric("Of which cache reads", f"${float(chosen['cache_read_usd'].sum()):.4f}")
    writes = chosen["cache_write_5m_usd"] + chosen["cache_write_1h_usd"]
    cols[2].metric("Of which cache writes", f"${float(writes.sum()):.4f}")
    cols[3].metric("Lost to cache rebuilds", f"${lost:.4f}")
    so_far = calls[calls["event_seq"] <= chosen["event_seq"].max()]["total_usd"].sum()
    cols[4].metric("Session so far", f"${float(so_far):.4f}")
    for text in chosen["cache_explanation"].dropna():
        if causes and causes != ["cold_start"]:
            st.caption(display.md(text))
    with st.expander("Cost of every call in this session"):
        shown = calls[["call_index", "turn_index", "model", "total_usd", "cache_read_tokens", "cache_write_5m_tokens",
                       "cache_write_1h_tokens", "cache_cause", "lost_usd", "cache_explanation"]]  # fmt: skip
        shown = shown.assign(call_index=shown["call_index"] + analysis.FIRST_CALL).rename(
            columns={"call_index": "call"}
        )
        st.dataframe(
            display.for_table(shown), hide_index=True, placeholder=display.MISSING,
            column_config=table_columns.readable(shown),
        )  # fmt: skip


@st.fragment
def timeline_panel() -> None:
    if st.session_state.get("_timeline_step_for") != ref.key:
        # A session of one or two long turns (a sub-agent, an imported run) reads best call by call.
        st.session_state["_timeline_step_for"] = ref.key
        if "timeline_step" not in st.session_state or st.session_state.get("_timeline_step_auto"):
            few_turns = int(row["turns"] or 0) <= FEW_TURNS
            # by call too when a turn holds a call larger than its last (a compaction within it)
            hidden = analysis.hides_a_larger_call(state.query(data.timeline, ref.db, ref.session_id))
            st.session_state["timeline_step"] = "model call" if few_turns or hidden else "turn"
            st.session_state["_timeline_step_auto"] = True
    step = st.radio(
        "Step", ["turn", "model call"], horizontal=True, key="timeline_step", on_change=_step_picked
    )
    by_call = step == "model call"
    unit, key = ("call", CALL_KEY) if by_call else ("turn", TURN_KEY)
    turns = state.query(data.timeline, ref.db, ref.session_id)
    marks = state.query(data.markers, ref.db, ref.session_id)
    found = state.findings(ref)
    flagged = analysis.findings_markers(analysis.findings_frame(found))
    if by_call:
        turns, marks = analysis.per_call(state.query(data.requests, ref.db, ref.session_id), marks)
        flagged = analysis.findings_per_call(flagged, turns)
    if turns.empty:
        st.info("This session has no request events yet.")
        return
    if turns["limit_from_window"].fillna(False).astype(bool).any():
        st.caption(
            "This session recorded the model's context window but no limit of its own: the limit drawn is "
            "that window less the output reserve and buffer recorded with it."
        )
    projection = edited_projection(turns, unit)
    if projection is not None:
        st.info(projection.headline)
        st.caption(analysis.recorded_stops(marks).text(unit))
    show_usage = st.toggle("Show the provider's own usage", value=True, key="timeline_usage")
    steps = [int(t) for t in turns["turn"]]
    kept = [*marks["turn"].dropna().astype(int), int(st.session_state.get(key) or 0)]
    drawn = turns if projection is not None else analysis.peak_steps(turns, keep=kept)
    if len(drawn) < len(turns):
        st.caption(
            f"{len(turns):,} {unit}s: the chart draws {len(drawn):,} of them, the peak of each run of "
            f"consecutive {unit}s and every marked one (type a {unit} number below to open any)."
        )
    fig = figures.timeline_figure(
        drawn, marks, show_usage=show_usage, projection=projection, unit=unit,
        selected_turn=st.session_state.get(key), title=row["title"] or ref.session_id, findings=flagged,
    )  # fmt: skip
    event = st.plotly_chart(fig, key=f"timeline_chart_{unit}", on_select="rerun", selection_mode=("points",))
    points = event.selection.points if event is not None else []
    picked = int(points[0]["x"]) if points else None
    if picked is not None and picked != st.session_state.get(f"_timeline_last_pick_{unit}"):
        st.session_state[f"_timeline_last_pick_{unit}"] = picked
        st.session_state[key] = picked
    if st.session_state.get(key) not in steps:
        st.session_state[key] = steps[-1]
    step = int(
        st.number_input(
            unit.capitalize(), min_value=min(steps), max_value=max(steps), step=1, key=key,
            help=f"Click a {unit} on the chart, or type its number.",
        )
    )  # fmt: skip
    this = turns[turns["turn"] == step]
    if this.empty:
        st.info(f"No request recorded at {unit} {step}.")
        return
    r = this.iloc[0]
    turn = int(r["real_turn"]) if by_call else step
    total = int(sum(int(r[c]) for c in COMPONENT_LABELS))
    basis = display.value_or_none(r.get("components_basis"))
    cols = st.columns(4)
    cols[0].metric(
        f"Sent ({display.BASIS_WORDS.get(basis, 'estimate')})",
        f"{total:,}",
        help=display.BASIS_HELP.get(basis),
    )
    from_window = bool(display.value_or_none(r.get("limit_from_window")))
    cols[1].metric(
        "Limit" + (" (model window)" if from_window else ""),
        display.number(r["limit_tokens"], missing="not recorded"),
        help="No limit recorded: the model's context window less the output reserve and buffer recorded with it."
        if from_window
        else "The limit recorded with this call: the window less the output reserve and buffer, capped by "
        "context_budget.",
    )
    prompt = [
        r[c]
        for c in ("provider_input_tokens", "provider_cache_read_tokens", "provider_cache_creation_tokens")
    ]
    if all(v == v and v is not None for v in prompt):
        cols[2].metric("Provider prompt", f"{int(sum(prompt)):,}", help="input + cache reads + cache writes")
    cols[3].metric("Model calls in turn", int(r["requests"]))
    if "reason" in marks:  # the policy edits and compactions made at this step, with their reasons
        for m in marks[
            (marks["turn"] == step) & marks["reason"].notna() & (marks["kind"] == "compaction")
        ].itertuples():
            who = (
                "a ctxdesk policy" if m.trigger == "proxy_policy"
                else "the agent itself" if m.by == "agent"
                else "the user" if m.by == "user"
                else f"a {m.trigger} compaction"
            )  # fmt: skip
            st.info(f"Edited here by {who}: {display.md(m.reason)}", icon=":material/content_cut:")
    recorded = analysis.settings_for_model(
        state.query(data.session_settings, ref.db, ref.session_id), display.value_or_none(r.get("model"))
    )
    window = {f: _whole(r.get(f)) for f in ("context_window", "max_output_tokens", "buffer_tokens")}
    point = analysis.compaction_point(
        agent, window=window["context_window"],
        limit=_whole(r.get("limit_tokens")),
        compact_threshold=float(recorded.get("compact_threshold") or DEFAULT_COMPACT_THRESHOLD),
    )  # fmt: skip
    st.plotly_chart(
        figures.context_now_bar(
            {c: int(r[c]) for c in COMPONENT_LABELS}, **window, limit=_whole(r.get("limit_tokens")),
            compact_at=point.tokens,
        ),
        key=f"timeline_now_{unit}",
    )  # fmt: skip
    # the same point and words as the "Why did it stop?" page's for this agent's compactions
    st.caption(
        f"Auto-compact point: {point.tokens:,} ({display.md(point.rule)})" if point.tokens is not None
        else f"No auto-compact point: {display.md(point.rule)}"
    )  # fmt: skip
    call_cost_panel(ref, int(r["event_seq"]) if by_call else None, turn)
    sent = state.query(data.sent_messages, ref.db, ref.session_id, turn, int(r["event_seq"]))
    st.subheader(f"What was sent at turn {turn}" + (f" (call {step})" if by_call else ""))
    show_findings(found, turn)
    st.caption(
        f"{len(sent)} messages, largest first (previews; select a row or pick below to read one in full)."
    )
    pick = st.dataframe(
        display.for_table(sent), key="timeline_sent", on_select="rerun", selection_mode="single-row", hide_index=True, placeholder=display.MISSING,
        column_config={
            "seq": st.column_config.NumberColumn("#", width=50), "turn": st.column_config.NumberColumn("Turn", width=50),
            "role": "Role", "kind": "Kind", "tokens": st.column_config.NumberColumn("Tokens", format="localized"),
            "tool_result_tokens": st.column_config.NumberColumn("Of which tool result", format="localized"),
            "tool_names": "Tools", "pinned": st.column_config.CheckboxColumn("Pinned", width=60),
            "text_preview": st.column_config.TextColumn("Preview", width="large"),
        },
    )  # fmt: skip
    rows = pick.selection.rows if pick is not None else []
    if sent.empty:
        return
    options = [int(s) for s in sent["seq"]]
    labels = {
        int(r.seq): f"#{int(r.seq)} · {r.role} · {r.kind} · {int(r.tokens):,} tokens"
        for r in sent.itertuples()
    }
    if rows and options[rows[0]] != st.session_state.get("_timeline_last_row"):
        st.session_state["_timeline_last_row"] = options[rows[0]]
        st.session_state["timeline_message"] = options[rows[0]]
    if st.session_state.get("timeline_message") not in options:
        st.session_state["timeline_message"] = options[0]
    seq = st.selectbox("Read message", options, format_func=labels.__getitem__, key="timeline_message")
    msg = state.query(data.message, ref.db, ref.session_id, int(seq))
    if msg is not None:
        st.code(msg["text"], language=None, wrap_lines=True, height=MESSAGE_HEIGHT)


timeline_panel()
