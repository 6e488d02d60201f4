"""Model settings: edit windows, buffers, output reserve, thresholds and tokenizers per model,
provider and defaults; validated as you type, saved atomically to the settings file that running
engines watch. Valid edits re-project every chart at once.

The file is followed live: an edit on disk shows here within the live-follow interval, merged
under the edits not saved yet; an invalid file keeps the last valid settings (and says why);
Save writes only the entries edited here and refuses to overwrite a file changed since it was read.
"""

from __future__ import annotations

from typing import Any

import streamlit as st
from pydantic import TypeAdapter

from dashboard import analysis, data, display, figures, settings_form, state
from dashboard.analysis import whatif
from engine.errors import ConfigError, ContextDeskError
from engine.replay import Variant, cache_rules_for
from engine.settings import (
    DEFAULT_SETTINGS_PATH,
    ModelSettings,
    ResolvedModelSettings,
    resolve_model_settings,
    settings_path,
)
from engine.tokens import tokenizer_ids

DRAFT_KEY, FILE_KEY, GENERATION_KEY = (
    state.SETTINGS_DRAFT_KEY,
    state.SETTINGS_FILE_KEY,
    state.SETTINGS_GENERATION_KEY,
)
SAVED_KEY = "settings_saved"
SESSION_KEY = state.SETTINGS_SESSION_KEY
RESOLVED_FIELDS = (
    "context_window", "max_output_tokens", "buffer_tokens", "context_budget", "compact_threshold",
    "hard_block_threshold", "note_threshold", "result_offload_threshold", "tool_response_max_bytes",
    "tool_deferral_threshold", "tokenizer",
)  # fmt: skip

st.title("Model settings")
path = settings_path() or DEFAULT_SETTINGS_PATH.expanduser()


def _reset_widgets() -> None:
    # Widget keys carry a generation: a new one shows the draft's values instead of stale input.
    st.session_state[GENERATION_KEY] = st.session_state.get(GENERATION_KEY, 0) + 1


def _reload_from_file() -> None:
    """The "Reload from file" button: drop unsaved edits, show the file as it is now."""
    now = settings_form.read_file(path)
    st.session_state[FILE_KEY] = now
    st.session_state[DRAFT_KEY] = now.draft
    st.session_state[state.EDITED_SETTINGS_KEY] = None
    st.session_state.pop(SAVED_KEY, None)
    _reset_widgets()


loaded: settings_form.FileState | None = st.session_state.get(FILE_KEY)
now = settings_form.read_file(path, loaded)
if loaded is None or loaded.path != path:
    st.session_state[FILE_KEY] = now
    st.session_state[DRAFT_KEY] = now.draft
    _reset_widgets()
elif now is not loaded:
    # Changed on disk: the new file, with what was edited here and not saved (typed this run too) on top.
    level_now = st.session_state.get("ms_level", "models")
    name_now = None if level_now == "defaults" else st.session_state.get(f"ms_{level_now.removesuffix('s')}")
    typed = settings_form.with_typed(
        st.session_state[DRAFT_KEY],
        st.session_state,
        st.session_state.get(GENERATION_KEY, 0),
        level_now,
        name_now,
    )
    st.session_state[DRAFT_KEY] = settings_form.rebase(typed, loaded.draft, now.draft)
    st.session_state[FILE_KEY] = now
    if state.pending_action("save_settings"):
        # Save was clicked on the file as it was before: never write over what was not seen.
        changes = tuple(settings_form.describe_changes(loaded.draft, now.draft)) or ("(formatting only)",)
        problem = "the file changed on disk since it was read; it was not overwritten"
        if now.error is not None:
            changes, problem = (), f"the file changed on disk and is now invalid: {now.error}"
        st.session_state[SAVED_KEY] = settings_form.SaveOutcome(now, False, problem, changes)
        state.finish_action()
    elif now.error is None:
        st.session_state.pop(SAVED_KEY, None)
        st.toast("The settings file changed on disk: reloaded.", icon=":material/sync:")
    _reset_widgets()
file_state: settings_form.FileState = st.session_state[FILE_KEY]
generation = st.session_state[GENERATION_KEY]

st.text(f"Settings file: {path}{'' if file_state.exists else ' (not created yet)'}")
if file_state.error is not None:
    st.error(
        "The settings file on disk is invalid; the last valid settings stay in force here, and Save "
        f"is refused until it is fixed: {display.md(file_state.error)}",
        icon=":material/error:",
    )
st.button("Reload from file", icon=":material/refresh:", on_click=_reload_from_file, key="ms_reload")

sessions = state.overview()
ref = state.selected()
current = (
    sessions[(sessions["db"] == ref.db) & (sessions["session_id"] == ref.session_id)]
    if ref
    else sessions.iloc[0:0]
)
session_model = display.value_or_none(current.iloc[0]["model"]) if not current.empty else None
session_provider = display.value_or_none(current.iloc[0]["provider"]) if not current.empty else None

draft: dict = st.session_state[DRAFT_KEY]
known_models = sorted({*(m for m in sessions["model"].dropna()), *draft.get("models", {})})
known_providers = sorted({*(p for p in sessions["provider"].dropna()), *draft.get("providers", {})})
if st.session_state.get(SESSION_KEY) != (ref.key if ref else None):
    # A newly selected session: edit its own model (and its provider on the providers level).
    st.session_state[SESSION_KEY] = ref.key if ref else None
    if session_model:
        st.session_state["ms_level"] = "models"
        st.session_state["ms_model"] = session_model
    if session_provider:
        st.session_state["ms_provider"] = session_provider
for key, known in (("ms_model", known_models), ("ms_provider", known_providers)):
    if known and st.session_state.get(key) not in known:
        st.session_state[key] = known[0]

c1, c2 = st.columns([1, 2])
level = c1.radio("Edit", ["models", "providers", "defaults"], format_func=str.capitalize, key="ms_level")
name = None
if level == "models" and known_models:
    name = c2.selectbox("Model", known_models, accept_new_options=True, key="ms_model")
elif level == "providers" and known_providers:
    name = c2.selectbox("Provider", known_providers, accept_new_options=True, key="ms_provider")

values = settings_form.level_values(draft, level, name)
st.caption("Leave a field blank to inherit it (model → provider → model table → defaults → built-in).")
parsed: dict = {}
field_errors: list[str] = []
cols = st.columns(3)
for i, field in enumerate(settings_form.EDITABLE_FIELDS):
    info = ModelSettings.model_fields[field]
    col = cols[i % 3]
    key = settings_form.field_key(generation, level, name, field)
    if field == "tokenizer":
        options = ["", *tokenizer_ids()]
        now_value = values.get(field) or ""
        choice = col.selectbox(
            field,
            options,
            index=options.index(now_value) if now_value in options else 0,
            key=key,
            format_func=lambda v: v or "(inherit)",
            help=info.description,
        )
        parsed[field] = choice or None
        continue
    text = col.text_input(
        field,
        value="" if values.get(field) is None else str(values[field]),
        key=key,
        help=info.description,
        placeholder="inherit",
    )
    try:
        parsed[field] = settings_form.parse_field(field, text)
    except ConfigError as exc:
        field_errors.append(str(exc))
        parsed[field] = values.get(field)

for message in field_errors:
    st.error(display.md(message), icon=":material/error:")
new_draft = settings_form.with_level(draft, level, name, parsed) if (level == "defaults" or name) else draft
checked = settings_form.validate(new_draft, source=str(path))
# The model whose resolution is shown: the one being edited, else the selected session's.
shown_model = name if level == "models" and name else session_model
shown_provider = session_provider if shown_model == session_model else None
if level == "providers" and name:
    shown_provider = name
resolved = None
resolve_error = False
if checked.error is not None:
    st.error(f"Not valid: {display.md(checked.error)}", icon=":material/error:")
else:
    st.session_state[DRAFT_KEY] = new_draft
    edited = new_draft != file_state.draft
    st.session_state[state.EDITED_SETTINGS_KEY] = (
        checked.settings if edited or st.session_state.get(SAVED_KEY) else None
    )
    if shown_model:
        try:
            resolved = resolve_model_settings(shown_model, shown_provider, checked.settings)
        except ContextDeskError as exc:
            resolve_error = True
            st.error(f"Not valid for {display.md(shown_model)}: {display.md(exc)}", icon=":material/error:")

pending = settings_form.edits_of(st.session_state[DRAFT_KEY], file_state.draft)
if pending:
    st.caption(
        f"{len(pending)} unsaved change(s): "
        + "; ".join(settings_form.describe_changes(file_state.draft, st.session_state[DRAFT_KEY]))
    )

if resolved is not None:
    st.subheader(f"Resolved for {display.md(shown_model)}")
    if session_model and shown_model != session_model:
        st.caption(
            f"The selected session runs {display.md(session_model)}: its charts change only with its own "
            "model's (or its provider's, or the defaults') settings."
        )
    rows = [(f, getattr(resolved, f), resolved.sources.get(f, "")) for f in RESOLVED_FIELDS]
    # What the selected session recorded when it started: often a different settings file.
    recorded = (
        analysis.settings_for_model(state.query(data.session_settings, ref.db, ref.session_id), shown_model)
        if ref is not None and not current.empty
        else {}
    )
    table = [
        {"setting": f, "value": analysis.LimitLine(f, v, s, unset=v is None).text, "came from": s}
        | (
            {"the session ran with": analysis.LimitLine(f, recorded.get(f), "", unset=f in recorded).text}
            if recorded
            else {}
        )
        for f, v, s in rows
    ]
    st.dataframe(table, hide_index=True, placeholder=display.MISSING, height="content")
    limit = resolved.limit  # engine.limit.Limit: the number every page measures a call against
    st.text(
        f"Limit: {limit.tokens:,} tokens (window {limit.window:,} less {limit.output_reserve:,} output reserve "
        f"and {limit.buffer:,} buffer"
        + (
            f", capped at {limit.cap:,} by context_budget)"
            if limit.cap is not None and limit.cap < limit.uncapped
            else ")"
        )
    )
    if ref is not None and shown_model == session_model:
        turns = state.query(data.timeline, ref.db, ref.session_id)
        edited = st.session_state.get(state.EDITED_SETTINGS_KEY) is not None
        checks = state.query(data.events, ref.db, ref.session_id, ("guard", "request"))
        projection = analysis.project_timeline(
            turns, resolved, label="edited settings" if edited else "these settings",
            demand=analysis.step_demand(checks, turns),
        )  # fmt: skip
        if projection is not None:
            marks = state.query(data.markers, ref.db, ref.session_id)
            st.info(projection.headline)
            st.caption(analysis.recorded_stops(marks).text())
            st.plotly_chart(
                figures.timeline_figure(turns, marks, projection=projection, show_usage=False),
                key="ms_preview",
            )

save_disabled = checked.error is not None or bool(field_errors) or resolve_error
st.button(
    "Save settings", type="primary", disabled=save_disabled, icon=":material/save:", key="ms_save",
    on_click=state.request_action, args=("save_settings", None),
)  # fmt: skip
if state.pending_action("save_settings"):
    with st.spinner("Saving…"):
        try:
            outcome = settings_form.save_draft(st.session_state[DRAFT_KEY], file_state)
        except ConfigError as exc:
            outcome = settings_form.SaveOutcome(file_state, False, str(exc))
        st.session_state[SAVED_KEY] = outcome
        if outcome.written:
            st.session_state[FILE_KEY] = outcome.state
            st.session_state[DRAFT_KEY] = outcome.state.draft
        state.finish_action()
saved = st.session_state.get(SAVED_KEY)
if isinstance(saved, settings_form.SaveOutcome):
    if saved.written:
        st.success(f"Saved to {display.md(path)}; running engines pick it up on their next check.")
    else:
        st.error(f"Not saved: {display.md(saved.problem)}", icon=":material/error:")
        if saved.changes:
            st.text("Changed on disk since it was read:\n" + "\n".join(f"  {c}" for c in saved.changes))
            st.caption("Your edits are kept on top of the file as it is now: review them and Save again.")


# -- What if (#35.4): the selected session replayed under the provider's edits and ctxdesk's ------------


@st.cache_data(max_entries=32, show_spinner=False)
def _replay(
    db_path: str, session_id: str, variants_json: str, resolved_json: str | None, signature: tuple
) -> Any:
    # The arguments in JSON with the database file's signature are the cache key (a new recorded call
    # replays again); the replay reads the store in a child process (data.session_replay).
    variants = TypeAdapter(list[Variant]).validate_json(variants_json)
    resolved_settings = ResolvedModelSettings.model_validate_json(resolved_json) if resolved_json else None
    return data.session_replay(db_path, session_id, variants, resolved_settings)


def _whatif_choices(cache_provider: str) -> whatif.WhatIfChoices:
    """The what-if's inputs: Anthropic's clear_tool_uses_20250919 parameters (ctxdesk's clearing takes
    the same), each side's compaction point, ctxdesk's cache awareness."""
    defaults = whatif.WhatIfChoices()
    st.markdown(
        "**Clearing old tool results** (the provider's `clear_tool_uses_20250919` and ctxdesk's alike)"
    )
    c1, c2, c3 = st.columns(3)
    trigger = c1.number_input("trigger (prompt tokens)", 1, None, defaults.trigger, 10_000, key="wi_trigger")
    keep = c2.number_input("keep (recent tool uses)", 0, None, defaults.keep, 1, key="wi_keep")
    at_least = c3.number_input(
        "clear_at_least (tokens)", 0, None, defaults.clear_at_least, 1_000, key="wi_least"
    )
    offered = state.query(data.tool_costs, ref.db, ref.session_id)
    c1, c2 = st.columns([2, 1])
    exclude = c1.multiselect(
        "exclude_tools", sorted(offered["name"].dropna().unique()), accept_new_options=True, key="wi_exclude",
        help="Tools whose results are never cleared.",
    )  # fmt: skip
    inputs = c2.checkbox("clear_tool_inputs", key="wi_inputs", help="Also clear the cleared calls' inputs.")
    st.markdown("**Compaction**")
    c1, c2, c3 = st.columns(3)
    anthropic = cache_provider == "anthropic"
    compact = c1.number_input(
        "compact_20260112 trigger" if anthropic else "OpenAI compaction compact_threshold",
        whatif.ANTHROPIC_COMPACT_MIN if anthropic else 1, None, defaults.provider_compact_trigger, 10_000,
        key=f"wi_compact_{cache_provider}",
    )  # fmt: skip
    share = c2.number_input(
        "ctxdesk compaction trigger (share of the limit)", 0.05, 1.0, defaults.ctxdesk_compact_share, 0.05,
        key="wi_share",
    )  # fmt: skip
    aware = c3.selectbox(
        "ctxdesk cache_aware", [False, True, "strict"], key="wi_aware",
        format_func=lambda v: {False: "false", True: "true", "strict": "strict"}[v],
        help="ctxdesk's policies only: edit a cached prefix only when it pays (true) or once the cache "
        "expired (strict).",
    )  # fmt: skip
    return whatif.WhatIfChoices(
        trigger=int(trigger), keep=int(keep), clear_at_least=int(at_least), exclude_tools=tuple(exclude),
        clear_tool_inputs=inputs, provider_compact_trigger=int(compact), ctxdesk_compact_share=float(share),
        cache_aware=aware,
    )  # fmt: skip


@st.fragment
def _what_if() -> None:
    st.subheader("What if")
    if ref is None or current.empty:
        st.caption("Select a session to replay it under other context management.")
        return
    st.caption(
        "Replays the selected session's recorded calls under the provider's own context edits and under "
        "ctxdesk's policies, side by side: the prompts each would have sent, what the prompt cache would have "
        "read and written, and the cost at the model table's prices. The answers are the recorded ones."
    )
    if not st.toggle("Replay this session", key="wi_on"):
        return
    cache_provider = cache_rules_for(session_provider, session_model).provider
    choices = _whatif_choices(cache_provider)
    # ctxdesk's compaction share is of the limit of these settings (the session's own model's).
    settings = resolved if resolved is not None and shown_model == session_model else None
    variants = whatif.variants_for(cache_provider, choices)
    db_path = state.database_paths()[ref.db]
    try:
        with st.spinner("Replaying…"):
            replay = _replay(
                str(db_path), ref.session_id, TypeAdapter(list[Variant]).dump_json(variants).decode(),
                settings.model_dump_json() if settings is not None else None, data.files_signature([db_path]),
            )  # fmt: skip
    except ContextDeskError as exc:
        st.error(f"Cannot replay this session: {display.md(exc)}", icon=":material/error:")
        return
    st.info(display.md(whatif.headline(replay)))
    if not replay.variants or not replay.variants[0].calls:
        return
    table = whatif.totals_table(replay)
    if not table["Calls refused"].any():  # only ctxdesk's guard refuses: a column of zeros says nothing
        table = table.drop(columns="Calls refused")
    counts = {
        c: st.column_config.NumberColumn(format="localized")
        for c in table.select_dtypes("number").columns
        if c != "Cost (USD)"
    }
    st.dataframe(
        table, hide_index=True, key="wi_table",
        column_config={
            "Cost (USD)": st.column_config.NumberColumn(format="$%.4f"), **counts,
        },
    )  # fmt: skip
    st.caption(display.md(whatif.fidelity(replay)))
    st.plotly_chart(figures.whatif_figure(whatif.per_call_frame(replay)), key="wi_chart")


_what_if()
