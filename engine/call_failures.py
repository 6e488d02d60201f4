"""Why a model call failed, in the words every source records and every reader explains.

One vocabulary for the session manager, the proxy and every importer: a failed call is a
``request`` event whose outcome is not ``ok`` and whose ``details["failure"]`` is
:func:`failure_details` (cause, the provider's status and message, secrets redacted, and what the
agent did next when the source tells). :func:`classify_failure` decides the cause from what the
provider answered (Anthropic, OpenAI and Gemini error shapes) or from a stream cut short.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args

from engine.redact import redact_secrets

__all__ = [
    "FAILURE_CAUSES",
    "FailureCause",
    "classify_failure",
    "failure_details",
    "failure_of",
    "prompt_too_long_counts",
]

FailureCause = Literal["prompt_too_long", "rate_limited", "overloaded", "provider_error", "interrupted"]
FAILURE_CAUSES: tuple[FailureCause, ...] = get_args(FailureCause)

#: Words providers use when the prompt does not fit (Anthropic, OpenAI, Gemini, and proxies before them).
_TOO_LONG = re.compile(
    r"prompt is too long|context[_ ]length[_ ]exceeded|maximum context length|input token count .* exceeds"
    r"|too many (input )?tokens|context window|request too large",
    re.IGNORECASE,
)
_OVERLOADED = re.compile(r"overloaded|unavailable|capacity", re.IGNORECASE)
_RATE = re.compile(r"rate[_ ]limit|resource[_ ]exhausted|quota|too many requests", re.IGNORECASE)
#: "prompt is too long: 212301 tokens > 200000 maximum" and OpenAI's / Gemini's forms of the same.
_COUNTS = re.compile(
    r"(\d[\d,]*)\s*(?:tokens)?\s*>\s*(\d[\d,]*)|(\d[\d,]*)\D+?(?:exceeds|maximum)\D+?(\d[\d,]*)"
)


def classify_failure(
    status: int | None,
    error_type: str | None = None,
    message: str | None = None,
    *,
    interrupted: bool = False,
) -> FailureCause:
    """The cause of a failed call from the provider's HTTP status, its error type/code and message.

    ``interrupted`` (the stream was cut, the user pressed Esc, the agent gave up) wins: no answer came.
    """
    if interrupted:
        return "interrupted"
    words = f"{error_type or ''} {message or ''}"
    if status == 413 or _TOO_LONG.search(words):
        return "prompt_too_long"
    if status == 429 or _RATE.search(words):
        return "rate_limited"
    if status in (503, 529) or _OVERLOADED.search(words):
        return "overloaded"
    return "provider_error"


def prompt_too_long_counts(message: str | None) -> tuple[int, int] | None:
    """(prompt tokens, maximum) from a "prompt is too long" message when it names both."""
    match = _COUNTS.search(message or "")
    if match is None:
        return None
    first, second = (g for g in match.groups() if g is not None)
    return int(first.replace(",", "")), int(second.replace(",", ""))


def failure_details(
    cause: FailureCause,
    *,
    status: int | None = None,
    message: str | None = None,
    error_type: str | None = None,
    next_action: str | None = None,
) -> dict[str, Any]:
    """``details["failure"]`` of a failed call's request event (the message redacted here, once)."""
    if cause not in FAILURE_CAUSES:
        raise ValueError(f"unknown failure cause {cause!r}; one of {', '.join(FAILURE_CAUSES)}")
    out: dict[str, Any] = {
        "cause": cause,
        "status": status,
        "message": redact_secrets(message) if message else None,
    }
    if error_type:
        out["error_type"] = error_type
    if next_action:
        out["next"] = next_action
    counts = prompt_too_long_counts(message) if cause == "prompt_too_long" else None
    if counts:
        out["prompt_tokens"], out["maximum_tokens"] = counts
    return out


def failure_of(details: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ``failure`` record of a request event's details, or None for a call that did not fail."""
    failure = (details or {}).get("failure")
    return failure if isinstance(failure, dict) and failure.get("cause") in FAILURE_CAUSES else None
