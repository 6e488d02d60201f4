"""Text for plotly hovers and annotations: escaped, clipped to a length, wrapped to lines."""

from __future__ import annotations

import html
import textwrap

__all__ = ["clipped", "escape", "wrapped"]


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
