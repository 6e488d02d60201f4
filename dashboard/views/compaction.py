"""Compaction: preview a strategy on the selected session (dry run), apply it (the only write
besides settings: SessionStore with WAL + busy timeout, safe beside a running agent, run in a
child process by dashboard.actions), restore an earlier snapshot, and review past compactions."""

from __future__ import annotations

import re
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import actions, analysis, data, display, figures, state, table_columns
from engine.compaction import STRATEGY_NAMES, describe_report, parse_strategy
from engine.errors import ContextDeskError
from engine.events import COMPONENT_LABELS

PREVIEW_KEY = "compaction_preview"
RESTORED_KEY = "cmp_restored"
#: The "restore" choice that undoes every compaction (a snapshot of the whole transcript).
FULL_TRANSCRIPT = -1
#: What the compaction table's token columns count, by who compacted.
COMPACTION_TOKENS_HELP = (
    "ctxdesk's compactions: tokens of the conversation's messages (the system prompt and tools stay as they "
    "are); an agent's own: the agent's count of its prompt, where its transcript records one"
)
#: "When", by who compacted: an import writes its rows long after the agent compacted.
WHEN_HELP = (
    "An agent's own: when its transcript says it compacted (else the next call's start). Others: when made."
)

ref, row = state.require_session()
st.title("Compaction")
st.text(display.session_line(row["title"], ref.session_id, row["model"], ref.db))
db_path = state.database_paths()[ref.db]


def strategy_settings(name: str) -> dict[str, Any]:
    """Widgets for the strategy's own fields (from its config model); returns the values set."""
    config = parse_strategy(name)
    fields = {k: f for k, f in type(config).model_fields.items() if k != "type"}
    if name == "chain":
        st.caption("Chain runs " + " → ".join(s.type for s in config.steps) + " until the history fits.")
        return {}
    values: dict[str, Any] = {}
    cols = st.columns(3)
    for i, (field, info) in enumerate(fields.items()):
        col, key, default = cols[i % 3], f"cmp_{name}_{field}", info.default
        if isinstance(default, bool):
            values[field] = col.checkbox(field, value=default, key=key, help=info.description)
        elif isinstance(default, float):
            values[field] = col.number_input(field, value=default, step=0.05, key=key, help=info.description)
        elif isinstance(default, int):
            values[field] = int(
                col.number_input(field, value=default, step=1, min_value=0, key=key, help=info.description)
            )
        elif isinstance(default, tuple):
            text = col.text_input(field, key=key, help=(info.description or "") + " Comma-separated.")
            values[field] = tuple(t.strip() for t in text.split(",") if t.strip())
        elif default is None:
            text = col.text_input(field, key=key, help=info.description, placeholder="not set")
            if text.strip():
                values[field] = text.strip()
    return values


#: How our clearing strategy words what it did (engine.compaction.clearing), to set beside the count
#: of messages still cleared after the compaction's later strategies ran.
CLEARED_IN_REASON = re.compile(r"\bcleared (\d+) tool results?\b")


def cleared_in_reason(reason: object) -> int | None:
    """Tool results a compaction's recorded reason says it cleared, or None when it does not say."""
    found = CLEARED_IN_REASON.search(str(reason or ""))
    return int(found.group(1)) if found else None


def message_diff(details: dict[str, Any], reason: object = None) -> None:
    """Message by message, what a compaction (ours or the agent's own) did: removed or summarized,
    cleared to a placeholder, and what it kept; with token counts before and after."""
    removed = [int(s) for s in details.get("removed_message_seqs") or []]
    cleared = [int(s) for s in details.get("cleared_message_seqs") or []]
    before, after = details.get("before_tokens"), details.get("after_tokens")
    if before is not None and after is not None:
        whose = " (the agent's own count)" if details.get("harness") else ""
        st.text(
            f"Tokens{whose}: {int(before):,} before -> {int(after):,} after ({int(after) - int(before):+,})."
        )
    if not removed and not cleared:
        st.caption("This compaction recorded no message-level changes.")
        return
    rows = state.query(data.messages_by_seq, ref.db, ref.session_id, tuple(sorted({*removed, *cleared})))
    if rows.empty:
        return
    what = {s: "removed or summarized" for s in removed} | {s: "cleared to a placeholder" for s in cleared}
    rows = rows.assign(change=[what.get(int(s), "") for s in rows["seq"]])
    st.markdown(
        f"**Messages: {len(removed)} removed or summarized, {len(cleared)} cleared**"
        " (every message after them was kept as it was)"
    )
    counted = cleared_in_reason(reason)
    if counted is not None and counted != len(cleared):
        st.caption(
            f"The reason counts {counted} tool results cleared; {len(cleared)} of them are still in the "
            "context, cleared to a placeholder: the others were in messages a later strategy of the same "
            "compaction summarized or removed (counted above as removed)."
            if counted > len(cleared)
            else f"The reason counts {counted} tool results cleared, in these {len(cleared)} messages."
        )
    st.dataframe(
        display.for_table(rows), hide_index=True, placeholder=display.MISSING, key="cmp_past_messages",
        column_order=["seq", "turn", "change", "role", "kind", "tokens", "tool_names", "text_preview"],
        column_config={
            **table_columns.readable(rows),
            "seq": st.column_config.NumberColumn("#", width=50), "turn": st.column_config.NumberColumn("Turn", width=50),
            "change": st.column_config.TextColumn("Change", width=170),
            "tokens": st.column_config.NumberColumn("Tokens", format="localized"),
            "text_preview": st.column_config.TextColumn("Preview", width="large"),
        },
    )  # fmt: skip


def snapshot_label(snap: Any) -> str:
    what = "restored" if snap.strategy == "restore" else display.text(snap.strategy, "strategy not recorded")
    return (
        f"Snapshot #{int(snap.id)} · {what} · {display.number(snap.message_count, '?')} messages, "
        f"{display.number(snap.tokens, '?')} tokens · through message {display.number(snap.through_seq, '?')}"
        f" · {display.text(snap.when_utc, 'time not recorded')[:19]}"
    )


def details_of(value: Any) -> dict[str, Any]:
    """An event's details as a dict (an event recorded without details has none)."""
    return value if isinstance(value, dict) else {}


def run_compaction(action: str, params: dict[str, Any]) -> None:
    """Run a clicked Preview or Apply; its outcome lands in session state (shown on every rerun)."""
    dry_run = action == "preview"
    label = (
        "Planning the compaction (nothing is written)…" if dry_run else "Compacting and writing the snapshot…"
    )
    with st.spinner(label):
        # No streamlit call between the write and the bookkeeping: a rerun can only stop the
        # script at a streamlit call, so the result is never lost nor the action run twice.
        try:
            run = actions.preview_compaction if dry_run else actions.apply_compaction
            report = run(db_path, ref.session_id, **params)
        except ContextDeskError as exc:
            st.session_state[PREVIEW_KEY] = (
                ref.key,
                params,
                None,
                f"{'Cannot preview' if dry_run else 'Not applied'}: {exc}",
            )
        else:
            st.session_state[PREVIEW_KEY] = (ref.key, params, report, None)
        state.finish_action()


def show_result(used: dict[str, Any], report: Any, problem: str | None) -> None:
    if problem is not None:
        st.error(display.md(problem), icon=":material/error:")
        return
    if report.dry_run and used != params:
        # A preview of other settings would mislead: Apply runs what is on screen now.
        st.info(
            "The strategy or its settings changed since the preview: preview again to see what Apply would do."
        )
        return
    if report.dry_run:
        st.markdown("**Preview** (nothing written)")
    elif report.snapshot_id is not None:
        st.success(f"Applied: snapshot #{report.snapshot_id} written.")
    else:
        st.info("Applied: nothing to compact, only the event was recorded.")
    target_tokens = report.result.target_tokens
    if target_tokens and report.after_tokens > target_tokens:
        st.warning(
            f"Misses the target: {report.after_tokens:,} tokens left, {report.after_tokens - target_tokens:,} over "
            f"the target of {target_tokens:,}. A stronger strategy (chain, emergency) or a lower target frees more.",
            icon=":material/warning:",
        )
    st.text(describe_report(report))
    m1, m2, m3 = st.columns(3)
    m1.metric(
        "Tokens",
        f"{report.after_tokens:,}",
        f"{report.after_tokens - report.before_tokens:,}",
        delta_color="inverse",
    )
    m2.metric("Messages", report.after_count, report.after_count - report.before_count, delta_color="inverse")
    m3.metric("Target", display.number(target_tokens))
    st.plotly_chart(
        figures.components_bar({"before": report.result.before_components.as_dict(),
                               "after": report.result.after_components.as_dict()}, title="Tokens per component"),
        key="cmp_preview_bar",
    )  # fmt: skip
    removed = state.query(data.messages_by_seq, ref.db, ref.session_id, tuple(report.removed_message_seqs))
    st.markdown(f"**Removed or summarized: {len(report.removed_message_seqs)} message(s)**")
    if report.result.cleared:
        st.text(f"{len(report.result.cleared)} older tool result(s) kept but cleared to a placeholder.")
    if not removed.empty:
        st.dataframe(
            display.for_table(removed), hide_index=True, placeholder=display.MISSING,
            column_config=table_columns.readable(removed),
        )  # fmt: skip
    if report.summary:
        st.markdown("**Summary text**")
        st.code(report.summary, language=None, wrap_lines=True)


with st.container(border=True):
    st.subheader("Compact now")
    c1, c2 = st.columns([2, 1])
    strategy = c1.selectbox(
        "Strategy", STRATEGY_NAMES, index=STRATEGY_NAMES.index("chain"), key="cmp_strategy"
    )
    target = int(
        c2.number_input("Target tokens (0: default)", min_value=0, value=0, step=500, key="cmp_target")
    )
    settings = strategy_settings(strategy)
    instructions = st.text_area("Instructions for the summary", key="cmp_instructions",
                                placeholder="e.g. focus on the API changes")  # fmt: skip
    params = {"strategy": strategy, "instructions": instructions.strip() or None,
              "target_tokens": target or None, **settings}  # fmt: skip
    b1, b2 = st.columns(2)
    # The clicks are recorded by callbacks (state.request_action): a live refresh cannot drop them.
    b1.button("Preview (dry run)", icon=":material/preview:", key="cmp_preview",
              on_click=state.request_action, args=("preview", ref.key))  # fmt: skip
    b2.button("Apply", type="primary", icon=":material/compress:", key="cmp_apply",
              on_click=state.request_action, args=("apply", ref.key))  # fmt: skip
    for action in ("preview", "apply"):
        if state.pending_action(action, ref.key):
            run_compaction(action, params)

    preview = st.session_state.get(PREVIEW_KEY)
    if preview is not None and preview[0] == ref.key:
        show_result(*preview[1:])

st.subheader("Snapshots")
snaps = state.query(data.snapshots, ref.db, ref.session_id)
restored_note = st.session_state.get(RESTORED_KEY)
if snaps.empty:
    st.info("No snapshots yet: the session resumes from its full transcript.")
else:
    st.caption(
        "The newest snapshot is what the session resumes from; later messages follow it. "
        "Event —: the snapshot was written without a compaction event (a restore, or an import)."
    )
    st.dataframe(
        display.for_table(snaps), hide_index=True, placeholder=display.MISSING,
        column_order=["id", "event", "when_utc", "strategy", "through_seq", "message_count", "tokens", "summary", "created_utc"],
        column_config={
            **table_columns.readable(snaps),
            "id": st.column_config.NumberColumn("Snapshot", format="#%d", width=80),
            "event": st.column_config.NumberColumn("Event", format="#%d", width=70),
            "through_seq": st.column_config.NumberColumn("Through message", width=110),
            "message_count": st.column_config.NumberColumn("Messages", width=80),
            "tokens": st.column_config.NumberColumn("Tokens", format="localized", width=80),
            "summary": st.column_config.TextColumn("Summary", width="large"),
            "when_utc": st.column_config.TextColumn("When (UTC)", help=WHEN_HELP),
            "created_utc": st.column_config.TextColumn("Stored (UTC)", help="When the database got it (an import's time)"),
        },
    )  # fmt: skip
    labels = {int(r.id): snapshot_label(r) for r in snaps.itertuples()}
    labels[FULL_TRANSCRIPT] = "The full transcript (undo every compaction)"
    r1, r2 = st.columns([3, 1])
    if st.session_state.get("cmp_restore_id") not in labels:
        st.session_state.pop("cmp_restore_id", None)
    snap_id = r1.selectbox("Restore", list(labels), key="cmp_restore_id", format_func=labels.__getitem__)
    r2.button("Restore", icon=":material/history:", key="cmp_restore",
              on_click=state.request_action, args=("restore", ref.key))  # fmt: skip
    if state.pending_action("restore", ref.key):
        with st.spinner("Restoring…"):
            try:
                if snap_id == FULL_TRANSCRIPT:
                    restored = actions.restore_full_transcript(db_path, ref.session_id)
                else:
                    restored = actions.restore(db_path, ref.session_id, int(snap_id))
            except ContextDeskError as exc:
                st.session_state[RESTORED_KEY] = (ref.key, f"Not restored: {exc}", False)
            else:
                what = "the full transcript" if snap_id == FULL_TRANSCRIPT else f"snapshot #{snap_id}"
                st.session_state[RESTORED_KEY] = (
                    ref.key,
                    f"Restored {what} as new snapshot #{restored.id}.",
                    True,
                )
            state.finish_action()
        restored_note = st.session_state.get(RESTORED_KEY)
if restored_note is not None and restored_note[0] == ref.key:
    (st.success if restored_note[2] else st.error)(display.md(restored_note[1]))

st.subheader("Past compactions")
past = state.query(data.compactions, ref.db, ref.session_id)
if past.empty:
    st.info("No compactions recorded for this session.")
else:
    past = past.assign(details=[details_of(d) for d in past["details"]])
    snapshot_of = {
        int(e): int(i) for e, i in zip(snaps["event"], snaps["id"], strict=True) if e == e and e is not None
    }
    table = pd.DataFrame(
        {
            "event": past["seq"], "turn": past["turn_index"], "when": past["when_utc"],
            # who compacted, and the agent's own trigger (auto, reactive, manual) where an agent did
            "by": [d.get("by") for d in past["details"]],
            "trigger": [
                d.get("trigger_kind") if d.get("by") in ("agent", "user") and d.get("trigger_kind") else t
                for d, t in zip(past["details"], past["trigger"], strict=True)
            ],
            "outcome": past["outcome"],
            "strategies": [", ".join(map(str, d.get("strategies_run") or [])) for d in past["details"]],
            "before_tokens": pd.array([d.get("before_tokens") for d in past["details"]], dtype="float64"),
            "after_tokens": pd.array([d.get("after_tokens") for d in past["details"]], dtype="float64"),
            "removed": [len(d.get("removed_message_seqs") or []) for d in past["details"]],
            "cleared": [len(d.get("cleared_message_seqs") or []) for d in past["details"]],
            # the snapshot the event recorded, else the one that names the event (restores, imports)
            "snapshot": pd.array(
                [d.get("snapshot_id") or snapshot_of.get(int(seq)) for d, seq in zip(past["details"], past["seq"], strict=True)],
                dtype="float64",
            ),
            "reason": past["reason"],
        }
    )  # fmt: skip
    st.dataframe(
        display.for_table(table), hide_index=True, placeholder=display.MISSING,
        column_config={
            **table_columns.readable(table),
            "event": st.column_config.NumberColumn("Event", format="#%d", width=70),
            "snapshot": st.column_config.NumberColumn("Snapshot", format="#%d", width=80),
            "by": st.column_config.TextColumn("By", help="Who compacted: agent (itself), user, ctxdesk or proxy"),
            "before_tokens": st.column_config.NumberColumn("Tokens before", format="localized", help=COMPACTION_TOKENS_HELP),
            "after_tokens": st.column_config.NumberColumn("Tokens after", format="localized", help=COMPACTION_TOKENS_HELP),
            "removed": st.column_config.NumberColumn("Removed", help="Messages removed or summarized"),
            "cleared": st.column_config.NumberColumn("Cleared", help="Messages still in the context, their tool results cleared to a placeholder"),
            "reason": st.column_config.TextColumn("Reason", width="large"),
            "when": st.column_config.TextColumn("When (UTC)", help=WHEN_HELP),
        },
    )  # fmt: skip
    if table[["before_tokens", "after_tokens", "snapshot"]].isna().to_numpy().any():
        st.caption(
            "—: not recorded. An agent's own compaction (imported) or one that failed records no token "
            "counts; a compaction that wrote no snapshot (nothing to compact, a proxy policy) has no snapshot."
        )
    events = [int(e) for e in table["event"]]
    if st.session_state.get("cmp_past") not in events:
        # A live rerun can bring a new compaction (or another session): show the newest.
        st.session_state["cmp_past"] = events[-1]
    which = st.selectbox("Compare before / after of event", events, key="cmp_past")
    chosen = past[past["seq"] == which].iloc[0]
    details = chosen["details"]
    before_total = details.get("before_tokens")
    calls = state.query(data.requests, ref.db, ref.session_id)
    earlier = calls[calls["event_seq"] < which]
    if before_total is not None and not earlier.empty:
        sent = int(sum(int(earlier.iloc[-1][c]) for c in COMPONENT_LABELS))
        if sent > int(before_total):
            st.caption(
                f"A compaction counts the messages only: {int(before_total):,} tokens before it. The call before "
                f"it sent {sent:,} in all (the timeline's number): the other {sent - int(before_total):,} are the "
                "system prompt, the tool descriptions and the harness's own text, sent unchanged, so a "
                "compaction neither counts nor removes them."
            )
    if details.get("before") and details.get("after"):
        st.plotly_chart(
            figures.components_bar({"before": details["before"], "after": details["after"]}),
            key="cmp_past_bar",
        )
        diff = pd.DataFrame(
            [(COMPONENT_LABELS[c], details["before"].get(c, 0), details["after"].get(c, 0)) for c in COMPONENT_LABELS],
            columns=["component", "before", "after"],
        )  # fmt: skip
        diff = diff[(diff["before"] != 0) | (diff["after"] != 0)]
        st.dataframe(
            diff.assign(change=diff["after"] - diff["before"]), hide_index=True, placeholder=display.MISSING,
            column_config={c: st.column_config.NumberColumn(c, format="localized") for c in ("before", "after", "change")},
        )  # fmt: skip
    message_diff(details, chosen.get("reason"))
    if details.get("summary"):
        st.markdown("**Summary that replaced them**")
        st.code(str(details["summary"]), language=None, wrap_lines=True, height=400)

# -- proxied calls: what the agent sent beside what the model received (ctxdesk proxy) ------------
edited = state.read(data.edited_calls, ref.db, ref.session_id)
if not edited.empty:
    st.subheader("Proxied calls: agent sent vs model received")
    call_seq = st.selectbox("Edited call", list(edited["seq"]), index=len(edited) - 1, key="cmp_proxied")
    picked = edited[edited["seq"] == call_seq].iloc[0]
    sent_detail = state.read(data.call_detail, ref.db, int(picked["id"]))
    agent_detail = state.read(data.call_detail, ref.db, int(picked["original_id"]))
    savings = analysis.edit_savings(agent_detail, sent_detail)
    p1, p2, p3 = st.columns(3)
    p1.metric("Messages (agent → model)", f"{savings['agent_messages']} → {savings['model_messages']}")
    p2.metric("Tokens saved (messages, our count)", f"{savings['tokens_saved']:,}")
    p3.metric("Bytes saved", f"{savings['agent_bytes'] - savings['model_bytes']:,}")
    st.code(analysis.edit_diff(agent_detail, sent_detail) or "(no difference)", language="diff")
    st.page_link("views/requests.py", label="Every call in full on the Requests page", icon=":material/http:")
