"""Tools: what tool definitions cost per request, per tool and per MCP server; which were deferred
or loaded turn by turn; tool_search queries with hits and misses; cost against use."""

from __future__ import annotations

import streamlit as st

from dashboard import data, display, figures, state, table_columns
from dashboard.display import BASIS_WORDS

#: The tool tables' headings (the rest as table_columns names them).
TOOL_LABELS = {**table_columns.LABELS, "name": "Tool", "tokens": "Definition tokens"}

ref, row = state.require_session()
st.title("Tools")
st.text(display.session_line(row["title"], ref.session_id, row["model"], ref.db))

tools = state.query(data.tool_costs, ref.db, ref.session_id)
calls = state.query(data.requests, ref.db, ref.session_id)
# The timeline's "Tool descriptions" is the tools component of each call: the same number is named here.
sent = int(calls["tools"].iloc[-1]) if not calls.empty else 0
basis = BASIS_WORDS.get(
    display.value_or_none(calls["components_basis"].iloc[-1]) if not calls.empty else None, "estimate"
)
per_tool = not tools.empty and int(tools["tokens"].sum()) > 0
if tools.empty and not sent:
    st.info("This session recorded no tool definitions.")
elif not per_tool:
    c1, c2, c3 = st.columns(3)
    c1.metric("Tools named", len(tools))
    c2.metric(
        "Tool descriptions, latest call", f"{sent:,}", help=f"The timeline's 'Tool descriptions' ({basis})."
    )
    never = int((tools["calls"] == 0).sum()) if not tools.empty else 0
    c3.metric(
        "Never called",
        f"at least {never}" if never else "not known",
        help="The session did not record which tools it offered, only those it named or called.",
    )
    st.info(
        f"The session did not record its tool definitions one by one, so there is no per-tool split: its "
        f"latest call sent {sent:,} tokens of tool descriptions in all ({basis}), the number the timeline shows."
        + (" The tools below are those it named." if not tools.empty else "")
    )
    if not tools.empty:
        st.dataframe(
            display.for_table(tools[["name", "category", "server", "calls"]]), hide_index=True,
            placeholder=display.MISSING, column_config=table_columns.readable(tools, TOOL_LABELS),
        )  # fmt: skip
else:
    c1, c2, c3 = st.columns(3)
    c1.metric("Tools offered", len(tools))
    c2.metric("Definition tokens (all)", f"{int(tools['tokens'].sum()):,}")
    c3.metric("Never called", int((tools["calls"] == 0).sum()))
    if sent and abs(sent - int(tools["tokens"].sum())) > 0.05 * sent:
        st.caption(
            f"The definitions one by one add up to {int(tools['tokens'].sum()):,} tokens; the latest call's "
            f"tool descriptions on the timeline are {sent:,} ({basis}): that count includes how the request "
            "frames the tool list, and only the tools it sent."
        )
    st.subheader("Tokens per tool")
    st.plotly_chart(figures.tools_bar(tools), key="tools_bar")
    st.subheader("Per MCP server")
    servers = data.server_costs(tools)
    st.dataframe(
        display.for_table(servers), hide_index=True, placeholder=display.MISSING,
        column_config=table_columns.readable(servers, TOOL_LABELS),
    )  # fmt: skip
    st.subheader("Cost against use")
    st.caption("Definition tokens are paid on every request the tool is loaded; calls are tool_use blocks.")
    st.dataframe(
        # A tool never called has no per-call cost: it says so instead of an empty None cell.
        display.for_table(tools).assign(
            tokens_per_call=[f"{v:,.1f}" if display.value_or_none(v) is not None else "never called"
                             for v in tools["tokens_per_call"]]
        ), hide_index=True, placeholder=display.MISSING,
        column_config={
            **table_columns.readable(tools, TOOL_LABELS),
            "tokens_per_call": st.column_config.TextColumn("Tokens per call"),
        },
    )  # fmt: skip

st.subheader("Deferred vs loaded, turn by turn")
matrix = state.query(data.deferral_matrix, ref.db, ref.session_id)
if matrix.empty:
    st.info("No deferral events: every tool was sent on every request.")
else:
    st.plotly_chart(figures.deferral_heatmap(matrix), key="deferral_heatmap")

st.subheader("tool_search queries")
searches = state.query(data.tool_searches, ref.db, ref.session_id)
if searches.empty:
    st.info("No tool_search queries in this session.")
else:
    c1, c2 = st.columns(2)
    c1.metric("Hits", int(searches["hit"].sum()))
    c2.metric("Misses", int((~searches["hit"]).sum()))
    st.dataframe(
        display.for_table(searches), hide_index=True, placeholder=display.MISSING,
        column_config=table_columns.readable(searches),
    )  # fmt: skip
