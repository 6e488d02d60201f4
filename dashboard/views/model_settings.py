"""Model settings: edit windows, buffers, output reserve, thresholds and tokenizers per model,
provider and defaults; validated as you type, saved atomically to the settings file that running
engines watch. Valid edits re-project every chart at once."""

from __future__ import annotations

import streamlit as st

from dashboard import analysis, charts, settings_form, state
from engine.errors import ConfigError, ContextDeskError
from engine.settings import (
    DEFAULT_SETTINGS_PATH,
    ModelSettings,
    Settings,
    load_settings,
    resolve_model_settings,
    save_settings,
    settings_path,
)
from engine.tokens import tokenizer_ids

DRAFT_KEY = "settings_draft"
BASE_KEY = "settings_base"

st.title("Model settings")
path = settings_path() or DEFAULT_SETTINGS_PATH.expanduser()
st.text(f"Settings file: {path}{'' if path.exists() else ' (not created yet)'}")


def load_base() -> Settings:
    try:
        return load_settings(path) if path.exists() else Settings()
    except ConfigError as exc:
        st.error(f"The settings file is invalid, starting from empty settings: {exc}")
        return Settings()


if BASE_KEY not in st.session_state:
    st.session_state[BASE_KEY] = settings_form.draft_of(load_base())
    st.session_state[DRAFT_KEY] = dict(st.session_state[BASE_KEY])
if st.button("Reload from file", icon=":material/refresh:"):
    st.session_state[BASE_KEY] = settings_form.draft_of(load_base())
    st.session_state[DRAFT_KEY] = dict(st.session_state[BASE_KEY])
    st.session_state[state.EDITED_SETTINGS_KEY] = None
    for key in [k for k in st.session_state if str(k).startswith("ms_")]:
        del st.session_state[key]

sessions = state.overview()
ref = state.selected()
current = (
    sessions[(sessions["db"] == ref.db) & (sessions["session_id"] == ref.session_id)]
    if ref
    else sessions.iloc[0:0]
)
session_model = str(current.iloc[0]["model"]) if not current.empty and current.iloc[0]["model"] else None
session_provider = (
    str(current.iloc[0]["provider"]) if not current.empty and current.iloc[0]["provider"] else None
)

draft: dict = st.session_state[DRAFT_KEY]
c1, c2 = st.columns([1, 2])
level = c1.radio("Edit", ["models", "providers", "defaults"], format_func=str.capitalize, key="ms_level")
name = None
if level == "models":
    known = sorted({*(m for m in sessions["model"].dropna()), *draft.get("models", {})})
    default = known.index(session_model) if session_model in known else 0
    name = (
        c2.selectbox("Model", known, index=default, accept_new_options=True, key="ms_model")
        if known
        else None
    )
elif level == "providers":
    known = sorted({*(p for p in sessions["provider"].dropna()), *draft.get("providers", {})})
    default = known.index(session_provider) if session_provider in known else 0
    name = (
        c2.selectbox("Provider", known, index=default, accept_new_options=True, key="ms_provider")
        if known
        else None
    )

values = settings_form.level_values(draft, level, name)
st.caption("Leave a field blank to inherit it (model → provider → model table → defaults → built-in).")
parsed: dict = {}
field_errors: list[str] = []
cols = st.columns(3)
for i, field in enumerate(settings_form.EDITABLE_FIELDS):
    info = ModelSettings.model_fields[field]
    col = cols[i % 3]
    key = f"ms_{level}_{name}_{field}"
    if field == "tokenizer":
        options = ["", *tokenizer_ids()]
        now = values.get(field) or ""
        choice = col.selectbox(
            field,
            options,
            index=options.index(now) if now in options else 0,
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
    st.error(message, icon=":material/error:")
new_draft = settings_form.with_level(draft, level, name, parsed) if (level == "defaults" or name) else draft
checked = settings_form.validate(new_draft, source=str(path))
resolved = None
resolve_error = False
if checked.error is not None:
    st.error(f"Not valid: {checked.error}", icon=":material/error:")
else:
    st.session_state[DRAFT_KEY] = new_draft
    changed = new_draft != st.session_state[BASE_KEY]
    st.session_state[state.EDITED_SETTINGS_KEY] = (
        checked.settings if changed or st.session_state.get("_ms_saved") else None
    )
    if session_model:
        try:
            resolved = resolve_model_settings(session_model, session_provider, checked.settings)
        except ContextDeskError as exc:
            resolve_error = True
            st.error(f"Not valid for {session_model}: {exc}", icon=":material/error:")

if resolved is not None:
    st.subheader(f"Resolved for {session_model}")
    rows = [
        (f, getattr(resolved, f), resolved.sources.get(f, ""))
        for f in ("context_window", "max_output_tokens", "buffer_tokens", "context_budget", "compact_threshold",
                  "hard_block_threshold", "note_threshold", "result_offload_threshold", "tool_response_max_bytes",
                  "tool_deferral_threshold", "tokenizer")
    ]  # fmt: skip
    # What the selected session recorded when it started: often a different settings file.
    recorded = (
        state.query("session_settings", ref.db, ref.session_id)
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
    st.dataframe(table, hide_index=True, height="content")
    st.text(f"Effective limit: {resolved.budget_tokens:,} tokens")
    if ref is not None:
        turns = state.query("timeline", ref.db, ref.session_id)
        edited = st.session_state.get(state.EDITED_SETTINGS_KEY) is not None
        projection = analysis.project_timeline(
            turns, resolved, label="edited settings" if edited else "these settings"
        )
        if projection is not None:
            st.info(projection.headline)
            marks = state.query("markers", ref.db, ref.session_id)
            st.plotly_chart(
                charts.timeline_figure(turns, marks, projection=projection, show_usage=False),
                key="ms_preview",
            )

save_disabled = checked.error is not None or bool(field_errors) or resolve_error
if st.button("Save settings", type="primary", disabled=save_disabled, icon=":material/save:"):
    with st.spinner("Saving…"):
        try:
            written = save_settings(checked.settings, path)
        except ConfigError as exc:
            st.error(f"Not saved: {exc}")
        else:
            st.session_state["_ms_saved"] = True
            st.session_state[state.EDITED_SETTINGS_KEY] = checked.settings
            st.success(f"Saved to {written}; running engines pick it up on their next check.")
