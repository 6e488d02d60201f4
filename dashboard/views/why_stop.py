"""Why did it stop? For every session one sentence first (how it ended, or the failed call or the
compaction that shaped it), then the evidence: how it ended, each failed call and what the agent
did next, each compaction (who, why, tokens against the limit and the threshold in force, what it
kept and dropped); for a stop ctxdesk's guard forced, the limit calculation with its sources,
projected vs limit, what grew, what tipped it, and settings that would have avoided it."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import analysis, data, display, state
from dashboard.analysis import why as why_view
from dashboard.data import why as why_data
from engine.errors import ContextDeskError
from engine.events import COMPONENT_LABELS
from engine.explain.explanations import SessionExplanation

ref, row = state.require_session()
st.title("Why did it stop?")
st.text(display.session_line(row["title"], ref.session_id, row["model"], ref.db))

try:
    with st.spinner("Reading how the session ended…"):
        why = why_data.explanation(state.database_paths()[ref.db], ref.session_id)
except ContextDeskError as exc:
    why = None
    st.warning(f"The explanation is unavailable for this session: {display.md(exc)}")
if why is not None:
    # The one sentence first. Recorded words (messages, instructions) are shown as text, never markdown.
    st.subheader(display.md(why.headline), anchor=False)
    st.caption(
        f"{display.md(why.agent_label)} · {why.calls:,} model call(s) · ended: {why.ended.cause.replace('_', ' ')}"
        + (f" · {len(why.compactions)} compaction(s)" if why.compactions else "")
        + (f" · {len(why.failed_calls)} failed call(s)" if why.failed_calls else "")
    )
    for sentence in why_view.sentences(why):
        st.text("• " + sentence)

ev = state.query(data.events, ref.db, ref.session_id, ("guard", "request"))
recorded_settings = state.query(data.session_settings, ref.db, ref.session_id)
stops = analysis.stop_events(ev[ev["kind"] == "guard"])
CLOSE_CALLS = {
    "provider_error": "the provider refused the request as too long; an emergency compaction made it fit",
    "hard_block": "the request reached the hard-block threshold; compaction made it fit",
}
#: Sessions ctxdesk's own guard watched (the session manager, the proxy): an imported agent's never were.
GUARDED = why is None or why.agent in ("ctxdesk", "proxy")
if stops.empty and GUARDED:
    st.success("ctxdesk's guard never hit a forced final turn or skipped a provider in this session.")
    compacted = state.query(data.events, ref.db, ref.session_id, ("compaction",))
    close = compacted[compacted["trigger"].isin(list(CLOSE_CALLS)) & (compacted["outcome"] == "compacted")]
    if not close.empty:
        st.markdown("**Close calls**")
        for _, event in close.iterrows():
            # ``reason`` is recorded text: shown as text, never markdown.
            st.text(
                f"Turn {event['turn_index']}: {CLOSE_CALLS[event['trigger']]}. {event['reason'] or ''}".strip()
            )

OUTCOME_TEXT = {
    "forced_final": "Forced final turn: the next request would not fit, so the model was asked to wrap up.",
    "skipped_provider": "Skipped provider: the request would not fit this provider's window, so it was not called.",
    "rejected": "A tool result would not fit: it was refused and the session was forced into its final turn.",
}


def render_stop(stop: pd.Series) -> None:
    earlier = ev[(ev["kind"] == "request") & (ev["seq"] < stop["seq"])]
    previous = earlier.iloc[-1].to_dict() if not earlier.empty else None
    details = stop["details"] or {}
    # Without an earlier request nothing grew, so the latest message did not tip anything.
    tipping_seq = (details.get("tipping") or {}).get("message_seq", stop["message_seq"] if previous else None)
    tipping = None
    if tipping_seq is not None and tipping_seq == tipping_seq:
        tipping = state.query(data.message, ref.db, ref.session_id, int(tipping_seq))
    refused = stop["outcome"] == "rejected"
    # A refused output never reached the transcript: the message there is the refusal, not the output.
    tipping_bytes = len(tipping["text"].encode("utf-8")) if tipping and not refused else None
    x = analysis.explain_stop(
        stop.to_dict(), previous, tipping_bytes=tipping_bytes, settings=recorded_settings
    )
    st.write(OUTCOME_TEXT.get(x.outcome) or display.md(x.outcome))
    c1, c2, c3 = st.columns(3)
    c1.metric("Projected", f"{x.projected:,}" if x.projected is not None else "n/a")
    c2.metric("Limit", f"{x.limit:,}" if x.limit is not None else "n/a")
    if x.over_by is not None:
        c3.metric(
            f"vs {x.hard_block_threshold:.0%} of limit", f"{x.over_by:+,}", delta_color="inverse",
            help="Tokens past the hard-block threshold (positive: over).",
        )  # fmt: skip
    counters = details.get("counters")
    if counters:  # the guard's internal bookkeeping: behind a toggle, for whoever debugs the guard
        with st.expander("Guard counters (internal)", expanded=False):
            st.text(", ".join(f"{k} {v}" for k, v in counters.items()))
    st.markdown("**Limit calculation**")
    st.code(x.formula, language=None)
    st.dataframe(
        pd.DataFrame(
            [(line.field, line.text, line.source) for line in x.limit_lines],
            columns=["setting", "value", "came from"],
        ),
        hide_index=True,
        placeholder=display.MISSING,
        height="content",
        column_config={"came from": st.column_config.TextColumn("came from", width="large")},
    )
    if x.first_request:
        st.markdown("**What the request held**")
        st.caption("The session's first request: nothing grew before it.")
        st.dataframe(
            pd.DataFrame(
                [(COMPONENT_LABELS[g.component], g.after) for g in sorted(x.growth, key=lambda g: -g.after)],
                columns=["component", "tokens"],
            ),
            hide_index=True,
            placeholder=display.MISSING,
            column_config={"tokens": st.column_config.NumberColumn("tokens", format="localized")},
        )
    else:
        st.markdown("**What grew since the previous request**")
        if x.growth_estimated:
            st.caption(
                'This check recorded no breakdown of its own: "now" is the previous request plus the '
                + ("refused output." if refused else "output being checked.")
            )
        st.dataframe(
            pd.DataFrame(
                [(COMPONENT_LABELS[g.component], g.before, g.after, g.delta) for g in x.growth],
                columns=["component", "before", "now", "change"],
            ),
            hide_index=True,
            placeholder=display.MISSING,
            column_config={
                c: st.column_config.NumberColumn(c, format="localized") for c in ("before", "now", "change")
            },
        )
    st.markdown("**What tipped it**")
    tool = (details.get("tipping") or {}).get("tool_name") or details.get("tool_name")
    if refused and x.tipping_tokens:
        st.text(
            f"The {tool or 'tool'} output of about {x.tipping_tokens:,} tokens would not fit and was refused"
            + (f"; message {x.tipping_seq} holds what the model got instead." if tipping is not None else ".")
        )
        if tipping is not None:
            with st.expander(f"Show message {x.tipping_seq}", expanded=False):
                st.code(tipping["text"][:20_000], language=None, wrap_lines=True)
    elif tipping is not None:
        st.text(
            f"Message {x.tipping_seq} ({tipping['kind']}{', ' + str(tipping['tool_names']) if tipping['tool_names'] else ''})"
            f" · {int(tipping['tokens']):,} tokens · component: {x.tipping_component or 'unknown'}"
        )
        with st.expander("Show the message", expanded=False):
            st.code(tipping["text"][:20_000], language=None, wrap_lines=True)
    elif x.first_request:
        st.text(
            "No single message: the first request as a whole"
            + (f" ({x.projected:,} tokens)" if x.projected is not None else "")
            + " did not fit this model's limit"
            + (f" of {x.limit:,}." if x.limit is not None else ".")
        )
    else:
        st.text(f"Largest growth: {x.tipping_component or 'unknown'} (+{x.tipping_tokens or 0:,} tokens)")
    st.markdown("**What would have avoided it**")
    if x.suggestions:
        for i, suggestion in enumerate(x.suggestions):
            edit = analysis.suggestion_edit(suggestion)
            text_col, button_col = st.columns([5, 1], vertical_alignment="center")
            text_col.text("• " + suggestion)
            if edit is not None and x.model:
                button_col.button(
                    "Apply in settings", key=f"fix_{int(stop['seq'])}_{i}", icon=":material/tune:",
                    help=f"Put {edit[0]} = {edit[1]} for this model into Model settings (not saved yet)",
                    on_click=state.prefill_setting, args=(str(x.model), *edit),
                )  # fmt: skip
    else:
        st.text("No single setting change found from the recorded values.")


OUTCOME_LABELS = {
    "forced_final": "final turn forced",
    "skipped_provider": "provider skipped",
    "rejected": "tool result refused, final turn forced",
}
if st.session_state.pop(state.GOTO_SETTINGS_KEY, False):
    st.switch_page("views/model_settings.py")
if not stops.empty:
    st.markdown("**ctxdesk's guard stops**")
for _, stop in stops.iterrows():
    outcome = OUTCOME_LABELS.get(stop["outcome"], stop["outcome"])
    label = (
        f"Turn {display.text(stop['turn_index'])}: {display.md(outcome)} ({display.md(display.value_or_none(stop['trigger']) or 'guard')})"
        f" · {display.md(stop['model'], 'model not recorded')}"
    )
    with st.expander(label, expanded=True):
        render_stop(stop)


def render_evidence(why: SessionExplanation) -> None:
    """Each failed call and what followed; each compaction with its facts and what it kept and dropped."""
    if why.failed_calls:
        st.markdown("**Failed calls**")
        st.dataframe(
            why_view.failed_calls_frame(why), hide_index=True, placeholder=display.MISSING, height="content",
            column_config={"message": st.column_config.TextColumn("provider's message", width="large")},
        )  # fmt: skip
    for c in why.compactions:
        where = f"call {c.call}" if c.call else "before the first call"
        with st.expander(f"Compaction at {where} · {c.by}, {c.trigger}", expanded=len(why.compactions) <= 3):
            st.text(c.sentence)
            facts = why_view.compaction_facts(c)
            # st.table renders Markdown in its cells: recorded words (instructions, settings) made inert.
            facts["value"] = facts["value"].map(display.md)
            st.table(facts.set_index("fact"))
            items = why_view.items_frame(c)
            if items.empty:
                st.caption("What it removed held no instruction, file, error or command.")
            else:
                st.markdown("**What it kept and dropped**")
                st.dataframe(
                    items, hide_index=True, placeholder=display.MISSING, height="content",
                    column_config={"why": st.column_config.TextColumn("why", width="large")},
                )  # fmt: skip


if why is not None:
    render_evidence(why)
