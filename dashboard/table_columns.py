"""Headings and number formats for the dashboard's tables: a raw column name (``cache_read_tokens``)
or an ungrouped count (``12018476``) on a page reads as a bug, so every table a page shows gets
its columns named in words, dollars to a hundredth of a cent and counts with thousands separators.
"""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

#: Headings that a word-by-word spelling of the column name would get wrong.
LABELS = {
    "call_index": "Call", "turn_index": "Turn", "total_usd": "Cost", "lost_usd": "Lost to cache rebuilds",
    "cache_read_tokens": "Cache-read tokens", "cache_write_5m_tokens": "Cache writes (5 min)",
    "cache_write_1h_tokens": "Cache writes (1 h)", "cache_cause": "Cache cause",
    "cache_explanation": "Why the cache was rebuilt", "ref_id": "Reference", "tool_use_id": "Tool call id",
    "size_bytes": "Bytes", "is_text": "Text", "line_count": "Lines", "created_utc": "Created (UTC)",
    "session_id": "Session", "tool_name": "Tool", "tool_names": "Tools", "hit_count": "Hits found",
    "hits": "Tools found",
}  # fmt: skip


def heading(column: str, labels: Mapping[str, str] = LABELS) -> str:
    """``labels``' heading for ``column``, else its name in words (``seq`` -> ``Seq``)."""
    if column in labels:
        return labels[column]
    words = column.replace("_", " ").strip()
    return words[:1].upper() + words[1:]


def readable(frame: pd.DataFrame, labels: Mapping[str, str] = LABELS) -> dict:
    """A ``column_config`` for ``frame``: every column headed in words; ``*_usd`` columns in dollars,
    other numeric columns grouped by thousands, yes/no columns as ticks."""
    config: dict[str, object] = {}
    for column in frame.columns:
        label = heading(str(column), labels)
        if str(column).endswith("_usd"):
            config[column] = st.column_config.NumberColumn(label, format="$%.4f")
        elif pd.api.types.is_bool_dtype(frame[column]):
            config[column] = st.column_config.CheckboxColumn(label)
        elif pd.api.types.is_numeric_dtype(frame[column]):
            config[column] = st.column_config.NumberColumn(label, format="localized")
        else:
            config[column] = st.column_config.Column(label)
    return config
