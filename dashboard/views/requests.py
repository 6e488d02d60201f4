"""Requests: every model call exactly as sent (recorded by ``ctxdesk proxy`` or the engine, or rebuilt by an
importer): the provider's count beside ours per call, and any call opened whole (system prompt,
tools, messages, parameters, cache breakpoints, the answer)."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import streamlit as st

from dashboard import analysis, data, display, state

#: Each column's heading (tokens and times with thousands separators).
COLUMNS = {
    "call_number": ("Call", False), "api": ("API", False), "model": ("Model", False), "status_code": ("Status", False),
    "message_count": ("Messages", True), "our_prompt_tokens": ("Ours (prompt)", True),
    "provider_prompt_tokens": ("Provider (prompt)", True), "cache_read_input_tokens": ("Cache read", True),
    "cache_creation_input_tokens": ("Cache write", True), "output_tokens": ("Output", True),
    "stop_reason": ("Stop reason", False), "ttfb_ms": ("TTFB (ms)", True), "latency_ms": ("Latency (ms)", True),
    "started_utc": ("Started (UTC)", False),
}  # fmt: skip


#: The key of the container whose labels quote recorded messages (its CSS class: st-key-<key>).
RECORDED_TEXT_KEY = "recorded_messages"

ref, row = state.require_session()
st.title("Requests")
st.text(display.session_line(row["title"], ref.session_id, row["model"], ref.db))


@st.cache_data(max_entries=64, show_spinner=False)
def _calls(_conn: Any, signature: tuple[Any, ...], db: str, session_id: str) -> Any:
    return data.read(_conn, _session_calls, db, session_id)


def _session_calls(cursor: Any, db: str, session_id: str) -> Any:
    return data.session_calls(cursor, db, session_id) if data.has_requests(cursor, db) else None


@st.cache_data(max_entries=64, show_spinner=False)
def _detail(_conn: Any, signature: tuple[Any, ...], db: str, request_id: int) -> dict[str, Any]:
    return data.read(_conn, data.call_detail, db, request_id)


conn = state.connection()
calls = _calls(conn, state.signature(), ref.db, ref.session_id)
if calls is None or calls.empty:
    st.info(
        "No exact requests recorded for this session. Run your agent through `ctxdesk proxy` (or on "
        "ctxdesk's engine with a client that names what it sends) to see every call as the model received it."
    )
    st.stop()

c1, c2, c3, c4 = st.columns(4)
c1.metric("Calls", len(calls))
c2.metric("Errors", int((calls["status_code"].fillna(0) >= 400).sum()))
ratio = (calls["provider_prompt_tokens"] / calls["our_prompt_tokens"]).dropna()
c3.metric("Provider ÷ ours (median)", f"{ratio.median():.3f}" if not ratio.empty else "—")
c4.metric("TTFB p50 (ms)", f"{calls['ttfb_ms'].median():.0f}" if calls["ttfb_ms"].notna().any() else "—")
shown = calls[
    ["call_number", "api", "model", "status_code", "message_count", "our_prompt_tokens", "provider_prompt_tokens",
     "cache_read_input_tokens", "cache_creation_input_tokens", "output_tokens", "stop_reason", "ttfb_ms",
     "latency_ms", "started_utc"]
]  # fmt: skip
pick = st.dataframe(
    display.for_table(shown),
    key="requests_table",
    on_select="rerun",
    selection_mode="single-row",
    hide_index=True,
    placeholder=display.MISSING,
    column_config={
        c: st.column_config.NumberColumn(label, format="localized")
        if number
        else st.column_config.Column(label)
        for c, (label, number) in COLUMNS.items()
    },
)
rows = pick.selection.rows if pick is not None else []
ids = [int(i) for i in calls["id"]]
names = [
    f"call {int(n)}" if not display.is_missing(n) else f"request {int(s)}"  # a request no call event holds
    for n, s in zip(calls["call_number"], calls["seq"], strict=True)
]
labels = {
    i: f"{name} · {a} · {m}" for i, name, a, m in zip(ids, names, calls["api"], calls["model"], strict=True)
}
if rows and ids[rows[0]] != st.session_state.get("_requests_last_row"):
    st.session_state["_requests_last_row"] = ids[rows[0]]
    st.session_state["requests_open"] = ids[rows[0]]
if st.session_state.get("requests_open") not in ids:
    st.session_state["requests_open"] = ids[-1]
request_id = st.selectbox("Open call", ids, format_func=lambda i: labels[i], key="requests_open")
call = calls.iloc[ids.index(request_id)]
detail = _detail(conn, state.signature(), ref.db, request_id)
info = detail["row"]

st.subheader(names[ids.index(request_id)].capitalize())
m1, m2, m3, m4 = st.columns(4)
m1.metric("Ours (prompt tokens)", display.number(call["our_prompt_tokens"], display.MISSING))
m2.metric("Provider (prompt tokens)", display.number(call["provider_prompt_tokens"], display.MISSING))
m3.metric("Status", display.text(call["status_code"]))
m4.metric("Stop reason", display.text(call["stop_reason"]))
if info.get("error_message"):
    kind = info.get("error_type")  # a provider's error without a type is its message alone
    st.error(
        f"{display.md(kind)}: {display.md(info['error_message'])}"
        if kind
        else display.md(info["error_message"])
    )
breakdown = {
    "System prompt": call.get("system_tokens"), "Tool definitions": call.get("tools_tokens"),
    "Conversation": call.get("conversation_tokens"), "Tool results": call.get("tool_results_tokens"),
    "Provider: uncached input": call.get("input_tokens"), "Provider: cache read": call.get("cache_read_input_tokens"),
    "Provider: cache write 5m": call.get("cache_creation_5m_tokens"),
    "Provider: cache write 1h": call.get("cache_creation_1h_tokens"), "Provider: output": call.get("output_tokens"),
}  # fmt: skip
st.dataframe(
    display.for_table(
        pd.DataFrame(
            {
                "part": list(breakdown),
                "tokens": [display.number(v, display.MISSING) for v in breakdown.values()],
            }
        )
    ),
    hide_index=True,
    placeholder=display.MISSING,
)

original_id = call.get("original_id")
if original_id is not None and not pd.isna(original_id):
    original = _detail(conn, state.signature(), ref.db, int(original_id))
    saved = int(original["row"].get("request_bytes") or 0) - int(info.get("request_bytes") or 0)
    st.warning(
        f"A ctxdesk policy edited this call: the agent sent {len(original['messages'])} message(s), "
        f"the model received {len(detail['messages'])} ({saved:,} bytes fewer). The timeline shows each edit "
        "with its reason and tokens before and after."
    )
    with st.expander("Agent sent vs model received (diff)", expanded=True):
        st.code(analysis.edit_diff(original, detail) or "(no difference in the messages)", language="diff")

tab_system, tab_tools, tab_messages, tab_params, tab_answer = st.tabs(
    ["System prompt", "Tools", "Messages", "Parameters", "Answer"]
)
with tab_system:
    system = detail["system"]
    if system is None:
        st.info("No separate system prompt (for Chat Completions it is a message).")
    else:
        st.code(analysis.part_text(system), language=None, wrap_lines=True)
        with st.expander("As sent (JSON)"):
            st.json(system, expanded=False)
with tab_tools:
    tools = detail["tools"] or []
    st.caption(f"{len(tools)} tool definition(s)")
    for tool in tools:
        name = tool.get("name") or (tool.get("function") or {}).get("name") or tool.get("type", "tool")
        with st.expander(display.md(name)):
            st.json(tool, expanded=False)
with tab_messages:
    messages = detail["messages"]
    st.caption(f"{len(messages)} message(s) as sent")
    # Each label opens with the message's own words (recorded text: "is not None" in a tool's input
    # is the agent's, not a missing value); the container's key names them so.
    with st.container(key=RECORDED_TEXT_KEY):
        for index, message in enumerate(messages):
            role = message.get("role", message.get("type", "?")) if isinstance(message, dict) else "?"
            text = analysis.part_text(message)
            with st.expander(f"{index}: {display.md(role)} — {display.md(text[:120])}"):
                st.code(text, language=None, wrap_lines=True)
                st.json(message, expanded=False)
with tab_params:
    st.json(
        {"model": info.get("model"), "max_tokens": info.get("max_tokens"), "stream": info.get("stream"),
         "params": detail["params"], "cache_control": detail["cache_control"]},
        expanded=True,
    )  # fmt: skip
with tab_answer:
    if detail["response"] is None:
        st.info("No answer recorded.")
    else:
        st.json(detail["response"], expanded=True)
    if detail["usage"] is not None:
        st.caption("Provider usage as received")
        st.code(json.dumps(detail["usage"], indent=2), language="json")
