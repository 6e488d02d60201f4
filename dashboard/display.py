"""Recorded values as the page shows them (pure; no streamlit): missing values never appear as a raw
``None``/``nan``/``<NA>``, and recorded text placed where Streamlit renders markdown (titles, alerts,
labels) is escaped so it stays text: no link, image, LaTeX, ``:color[]`` or icon shortcode forms;
text placed in plotly hovers and annotations is HTML-escaped (:func:`escape`, clipped, wrapped).
"""

from __future__ import annotations

import html
import math
import re
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import pandas as pd

K = TypeVar("K")

#: How a call's components were known (``context_events.components_basis``), as the page says it.
BASIS_WORDS = {"exact": "exact", "reconciled": "reconciled to the provider", "estimate": "estimate"}
BASIS_HELP = {
    "exact": "Counted from what was sent, and equal to the provider's own count.",
    "reconciled": "Our measure of each component, made to add up to the provider's own prompt count; what no "
    "component accounts for (harness text, framing) is 'Harness, unattributed'.",
    "estimate": "Our own count: the provider's count of this call is not recorded.",
}
#: What a missing value reads as.
MISSING = "—"
#: ASCII punctuation CommonMark lets a backslash escape; every one that could start markup.
_BARE_URL = re.compile(r"(?i)(?:\\:/|www(?=\\\.)|@)")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>$:~&=\"'])")


def is_missing(value: Any) -> bool:
    """None, NaN, pd.NA / NaT, or an empty string."""
    if value is None or value is pd.NA or value is pd.NaT:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and not value


def value_or_none(value: Any) -> Any:
    """``value``, or None when it is missing (NaN from a frame becomes None)."""
    return None if is_missing(value) else value


def text(value: Any, missing: str = MISSING) -> str:
    """A recorded value as text; ``missing`` for None/NaN/NA/empty; whole floats without ``.0``."""
    if is_missing(value):
        return missing
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def number(value: Any, missing: str = "n/a") -> str:
    """An integer count with thousands separators, or ``missing``."""
    if is_missing(value):
        return missing
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError, OverflowError):
        return str(value)


def md(value: Any, missing: str = MISSING) -> str:
    """Recorded text made inert for markdown-rendering elements (st.title, st.error, labels...)."""
    escaped = _MARKDOWN_SPECIAL.sub(r"\\\1", text(value, missing)).replace("\n", " ")
    # GFM links bare URLs after escapes are resolved: a zero-width space keeps them plain text.
    return _BARE_URL.sub(_unlink, escaped)


def _unlink(m: re.Match[str]) -> str:
    found = m.group(0)
    return {"\\:/": "\\:\u200b/", "@": "\u200b@"}.get(found, found + "\u200b")


def session_line(title: Any, session_id: str, model: Any, db: str) -> str:
    """The one-line header under each page's title: title (or id) · model · database."""
    return f"{text(title, session_id)} · {text(model, 'model not recorded')} · {db}"


def distinct_labels(labels: Mapping[K, str], tell: Callable[[K], str] = str) -> dict[K, str]:
    """``labels`` made unique for a selectbox's ``format_func``: Streamlit keeps a selection by its
    label, so of two options with one label the first is picked on every rerun (two sessions with one
    title: a live rerun moved the picked one to the other). A shared label gets `` · tell(key)``, and
    a number when even that is shared."""
    shared = Counter(labels.values())
    told = {k: f"{v} · {tell(k)}" if shared[v] > 1 else v for k, v in labels.items()}
    seen: Counter[str] = Counter()
    out = {}
    for key, label in told.items():
        seen[label] += 1
        out[key] = label if seen[label] == 1 else f"{label} ({seen[label]})"
    return out


def for_table(df: pd.DataFrame, missing: str = "") -> pd.DataFrame:
    """A copy for st.dataframe with missing text cells blank (numbers stay numbers: the grid shows
    an empty cell for NaN) and no column of all-missing values left as ``None``."""
    out = df.copy()
    for column in out.columns:
        if out[column].dtype == object or pd.api.types.is_string_dtype(out[column]):
            out[column] = [missing if is_missing(v) else v for v in out[column]]
    return out


# -- text in plotly figures (hover text, annotations): plotly renders a subset of HTML there ------


def escape(text: object) -> str:
    """Text safe to place in plotly hover text or annotations (no markup is interpreted).

    Quotes stay as they are: plotly draws ``&quot;`` literally, and with ``<`` escaped no tag
    (so no attribute) can form.
    """
    return html.escape("" if text is None else str(text), quote=False)


def clipped(text: object, chars: int) -> str:
    """``text`` escaped, cut to ``chars`` characters (an ellipsis marks the cut)."""
    plain = "" if text is None else str(text)
    if len(plain) > chars:
        plain = plain[: chars - 1] + "…"
    return escape(plain)


def wrapped(text: object, width: int) -> str:
    """``text`` escaped, in lines of at most ``width`` characters joined by ``<br>``."""
    return "<br>".join(escape(line) for line in textwrap.wrap("" if text is None else str(text), width))
