"""Opt-in context debugging: ``CONTEXT_DEBUG=true`` logs what the guard counted and decided.

Records go to the ``ctxdesk.context`` logger at DEBUG, message ``context-guard/<topic> k=v ...``,
with ``ctx_topic`` and ``ctx_fields`` on the record. Disabled, :func:`debug` costs one
environment lookup and formats nothing.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from engine.errors import ValidationError

ENV_VAR = "CONTEXT_DEBUG"
LOGGER_NAME = "ctxdesk.context"
TOPIC_PREFIX = "context-guard/"
TOPICS = frozenset(
    {
        "init-counters",
        "loop-init",
        "schema-estimate",
        "provider-eval",
        "enforce",
        "tool-eval",
        "request-metrics",
    }
)
_TRUE = frozenset({"1", "true", "yes", "on"})

logger = logging.getLogger(LOGGER_NAME)


def is_debug_enabled() -> bool:
    """True when ``CONTEXT_DEBUG`` is set to 1, true, yes or on (any case)."""
    value = os.environ.get(ENV_VAR)
    return value is not None and value.strip().lower() in _TRUE


def debug(topic: str, **fields: Any) -> None:
    """Log one debug topic with its fields; a no-op unless ``CONTEXT_DEBUG`` is on."""
    if not is_debug_enabled():
        return
    if topic not in TOPICS:
        raise ValidationError(
            f"unknown debug topic {topic!r}; known: {', '.join(sorted(TOPICS))}", field="topic"
        )
    _ensure_visible()
    text = " ".join(f"{key}={_format(value)}" for key, value in fields.items())
    logger.debug("%s%s %s", TOPIC_PREFIX, topic, text, extra={"ctx_topic": topic, "ctx_fields": dict(fields)})


def _ensure_visible() -> None:
    # Turning CONTEXT_DEBUG on must be enough to see the output: lower this logger to DEBUG,
    # and print to stderr when the application configured no handler at all.
    if not logger.isEnabledFor(logging.DEBUG):
        logger.setLevel(logging.DEBUG)
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
        logger.addHandler(handler)


def _format(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_format(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_format(v) for v in value) + "]"
    return str(value)
