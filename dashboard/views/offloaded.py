"""Offloaded results: tool outputs held in tool_result_blobs instead of the context; browse by
session, tool and size, read with paging, search inside, download."""

from __future__ import annotations

import streamlit as st

from dashboard import data, display, state, table_columns, textview
from dashboard.data import blob_pages

st.title("Offloaded results")
ref = state.selected()
f1, f2, f3 = st.columns([2, 2, 2])
scope = f1.radio("Sessions", ["Selected session", "All sessions"], horizontal=True, key="blobs_scope")
everything = state.query(data.blobs)
if scope == "Selected session" and ref is not None:
    everything = everything[(everything["db"] == ref.db) & (everything["session_id"] == ref.session_id)]
tools = sorted(everything["tool_name"].dropna().unique())
tool = f2.selectbox("Tool", ["(any)", *tools], key="blobs_tool")
min_kib = f3.number_input("At least (KiB)", min_value=0, value=0, step=1, key="blobs_min")
view = everything
if tool != "(any)":
    view = view[view["tool_name"] == tool]
view = view[view["size_bytes"] >= min_kib * 1024].reset_index(drop=True)
if view.empty:
    st.info("No offloaded outputs match.")
    st.stop()
st.caption(f"{len(view):,} output(s), {int(view['size_bytes'].sum()):,} bytes. Select one to read it.")
pick = st.dataframe(
    display.for_table(view), key="blobs_table", on_select="rerun", selection_mode="single-row", hide_index=True, placeholder=display.MISSING,
    column_config={**table_columns.readable(view), "preview": st.column_config.TextColumn("Preview", width="large")},
)  # fmt: skip
rows = pick.selection.rows if pick is not None else []
refs = [str(r) for r in view["ref_id"]]
if rows and refs[rows[0]] != st.session_state.get("_blobs_last_row"):
    st.session_state["_blobs_last_row"] = refs[rows[0]]
    st.session_state["blobs_open"] = refs[rows[0]]
if st.session_state.get("blobs_open") not in refs:
    st.session_state["blobs_open"] = refs[0]
ref_id = st.selectbox("Open output", refs, key="blobs_open")
blob = view.iloc[refs.index(ref_id)]


@st.fragment
def blob_viewer(db: str, ref_id: str, tool_name: str | None) -> None:
    with st.spinner("Reading the stored output…"):
        content = state.query(data.blob_content, db, ref_id)
    text = textview.decode(content)
    st.download_button(
        "Download", content, file_name=f"{ref_id}.{'txt' if text is not None else 'bin'}",
        mime="text/plain" if text is not None else "application/octet-stream", icon=":material/download:",
        key="blob_download",
    )  # fmt: skip
    if text is None:
        st.text(f"Binary output, {len(content):,} bytes (hex dump of the first 4 KiB)")
        st.code(textview.hexdump(content), language=None, height=640)
        return
    c1, c2 = st.columns([1, 3])
    size = int(c1.selectbox("Lines per page", [100, 500, 2000], key="blob_page_size"))
    needle = c2.text_input("Search inside", key="blob_search")
    hits = textview.search_lines(text, needle)
    if needle:
        st.caption(f"{len(hits)} matching line(s){' (first 200)' if len(hits) >= 200 else ''}")
        if hits:
            st.code("\n".join(f"{n:>7}: {line}" for n, line in hits), language=None)
            if st.button("Go to first match", key="blob_goto"):
                st.session_state["blob_page"] = textview.page_for_line(hits[0][0], size)
    pages = textview.page_of(text, 1, size).pages
    if st.session_state.get("blob_page", 1) > pages:
        st.session_state["blob_page"] = pages
    number = int(st.number_input(f"Page (of {pages})", min_value=1, max_value=pages, step=1, key="blob_page"))
    page = textview.page_of(text, number, size)
    st.caption(f"Lines {page.first_line:,}-{page.last_line:,} of {page.total_lines:,}")
    st.code(page.text, language=None, line_numbers=False, height=640)


@st.fragment
def paged_viewer(db: str, ref_id: str) -> None:
    """An output too large to read whole: byte pages read from the database on demand."""
    reader = blob_pages.open_blob(state.connection(), db, ref_id)
    st.caption(
        f"Large output: read {blob_pages.PAGE_BYTES // 1024} KiB at a time from the database, never whole "
        "(no download here: `ctxdesk` reads it with read_result)."
    )
    needle = st.text_input("Search inside", key="blob_search")
    if needle:
        hits = reader.search(needle)
        st.caption(f"{len(hits)} match(es){' (first 200)' if len(hits) >= 200 else ''}")
        if hits:
            st.code("\n".join(f"{at:>13,}: {line}" for at, line in hits), language=None)
            if st.button("Go to first match", key="blob_goto"):
                st.session_state["blob_page"] = reader.page_at(hits[0][0])
    pages = reader.pages
    if st.session_state.get("blob_page", 1) > pages:
        st.session_state["blob_page"] = pages
    number = int(
        st.number_input(f"Page (of {pages:,})", min_value=1, max_value=pages, step=1, key="blob_page")
    )
    page = reader.page(number)
    st.caption(f"Bytes {page.start:,}-{page.end:,} of {page.size:,}")
    st.code(page.text, language=None, line_numbers=False, height=640)


st.subheader("Output")
st.text(
    f"{blob['ref_id']} · {display.text(blob['tool_name'], 'unknown tool')} · {int(blob['size_bytes']):,} bytes"
    f" · session {blob['session_id']}"
)
if int(blob["size_bytes"]) > blob_pages.WHOLE_LIMIT:
    paged_viewer(str(blob["db"]), str(blob["ref_id"]))
else:
    blob_viewer(str(blob["db"]), str(blob["ref_id"]), blob["tool_name"])
