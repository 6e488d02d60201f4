"""Calls Claude Code made that got no answer: a 400 "prompt is too long" before a reactive
compaction, an API error it wrote (an ``isApiErrorMessage`` line, or a system ``api_error`` line
for each attempt it retried), a stream the user interrupted.

Each becomes a call with ``details["failure"]`` (engine.call_failures) and no usage (the provider
billed nothing), placed after the last message it sent. Claude Code (2.1.3xx) records every request
it sends (``api-request``); one that no assistant line answers failed. What the file tells of why:
an API-error line after it (its text, the status in it), a compaction right after it (Claude Code
compacts reactively only after "prompt is too long"), the user's "[Request interrupted by user]".
Older files without request records still keep the API-error lines.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.importers.formats.claude_code.replay import ReplayedRequest
from engine.importers.formats.claude_code.thread import Line, Thread
from engine.importers.parsing.parsed import CallInfo

#: What Claude Code writes when the user stops a call.
INTERRUPTED_TEXT = "[Request interrupted by user"
_STATUS = re.compile(r"API Error:\s*(\d{3})")


@dataclass(frozen=True)
class FailedCall:
    """A call that got no answer, after thread message ``after_index`` (None: before any)."""

    call: CallInfo
    after_index: int | None
    line: int
    #: The request it sent, when the file recorded it.
    replay: ReplayedRequest | None = None


def failed_calls(
    thread: Thread, lines: Sequence[Line], replays: dict[str, ReplayedRequest], model: str | None
) -> list[FailedCall]:
    """Every call of ``lines`` that got no answer line, in file order (their request bodies are
    the replays' when recorded). A call the provider refused to answer (``stop_reason``
    "refusal": Claude Code writes a notice or an API-error line instead of the answer) is no
    failure: it is kept as a call with that stop reason."""
    answered: set[str] = set()  # only a file with recorded requests (replays) refers to them
    if replays:
        answered = {
            str(o["requestRef"]) for _, o in lines if o.get("type") == "assistant" and o.get("requestRef")
        }
    errors = [(n, o) for n, o in lines if _is_api_error(o)]
    used_errors: set[int] = set()
    out: list[FailedCall] = []
    for replay in sorted(replays.values(), key=lambda r: r.line):
        if replay.request_id in answered or replay.body is None:
            continue
        error = _error_after(replay.line, lines, errors)
        if error is not None:
            used_errors.add(error[0])
        call = _unanswered(replay, error, lines, model)
        out.append(FailedCall(call, _index_before(thread, lines, replay.line), replay.line, replay))
    if not replays:  # older files record no requests: their API-error lines are the failed calls
        for n, obj in errors:
            if n not in used_errors and not _EXCEEDED_OUTPUT.search(_text(obj)):
                out.append(
                    FailedCall(_unanswered(None, (n, obj), lines, model), _index_before(thread, lines, n), n)
                )
    return sorted(out, key=lambda f: f.line)


#: An API-error line Claude Code writes after an answered call whose reply hit the output maximum
#: (the call itself was answered, with stop_reason max_tokens).
_EXCEEDED_OUTPUT = re.compile(r"exceeded the \d+ output token maximum", re.I)


def _unanswered(
    replay: ReplayedRequest | None, error: Line | None, lines: Sequence[Line], model: str | None
) -> CallInfo:
    call = _failed(replay, error, lines, model)
    if _refused(replay.line if replay is not None else error[0] if error else 0, error, lines):
        failure = call.details.pop("failure", None) or {}
        call.details["stop_reason"] = "refusal"
        if error is not None and failure.get("message"):
            call.details["refusal_message"] = failure["message"]
    return call


def _refused(line: int, error: Line | None, lines: Sequence[Line]) -> bool:
    """The provider answered the call at ``line`` with a refusal (Claude Code withheld the answer)."""
    if error is not None:
        message = error[1].get("message")
        if isinstance(message, dict) and message.get("stop_reason") == "refusal":
            return True
    next_request = min((n for n, o in lines if o.get("type") == "api-request" and n > line), default=None)
    for n, obj in lines:
        if n <= line or (next_request is not None and n >= next_request):
            continue
        if obj.get("type") == "system" and (
            str(obj.get("subtype", "")).startswith("model_refusal")
            or "safeguards stopped" in str(obj.get("content"))
        ):
            return True
    return False


def _failed(
    replay: ReplayedRequest | None, error: Line | None, lines: Sequence[Line], model: str | None
) -> CallInfo:
    line = replay.line if replay is not None else error[0] if error is not None else 0
    details: dict[str, Any] = {}
    if replay is not None:
        details.update(request_ref=replay.request_id, query_source=replay.query_source)
    nxt = _next_event(line, lines)
    if error is not None:
        text = _error_text(error[1])
        status = _status(error[1], text)
        cause = classify_failure(status, None, text)
        details["failure"] = failure_details(cause, status=status, message=text, next_action=nxt)
    elif nxt == "interrupted":
        details["failure"] = failure_details(
            "interrupted", message="the user interrupted the call", next_action=nxt
        )
    elif nxt == "compacted":
        # Claude Code compacts on its own after an unanswered call only when the provider said
        # the prompt was too long (its reactive compaction); the file keeps no error text
        details["failure"] = failure_details("prompt_too_long", next_action="compacted")
    else:
        details["failure"] = failure_details(
            "interrupted", message="no answer was recorded for this call", next_action=nxt
        )
    body_model = (replay.body or {}).get("model") if replay is not None else None
    return CallInfo(model=body_model or model, details={k: v for k, v in details.items() if v is not None})


def _error_after(line: int, lines: Sequence[Line], errors: list[Line]) -> Line | None:
    """The API-error line answering the request at ``line``: the first one after it, before the
    next request record."""
    next_request = min((n for n, o in lines if o.get("type") == "api-request" and n > line), default=None)
    for n, obj in errors:
        if n > line and (next_request is None or n < next_request):
            return n, obj
    return None


def _next_event(line: int, lines: Sequence[Line]) -> str | None:
    """What Claude Code did after the call at ``line``: compacted, the user interrupted, retried
    (another request), or nothing more (None)."""
    for n, obj in lines:
        if n <= line:
            continue
        kind = obj.get("type")
        if kind == "system" and obj.get("subtype") == "compact_boundary":
            return "compacted"
        if kind == "user" and INTERRUPTED_TEXT in _text(obj):
            return "interrupted"
        if kind == "api-request":
            return "retried"
        if kind == "user" and not obj.get("isMeta") and not _is_tool_result(obj):
            return "next prompt"
    return None


def _index_before(thread: Thread, lines: Sequence[Line], line: int) -> int | None:
    indexes = [
        thread.uuid_index[str(o["uuid"])]
        for n, o in lines
        if n < line and str(o.get("uuid")) in thread.uuid_index
    ]
    return max(indexes) if indexes else None


def _is_api_error(obj: dict[str, Any]) -> bool:
    """An API error Claude Code wrote: the assistant line it shows the user, or (2.1.3xx) the
    system line of each failed attempt it retries (``subtype`` "api_error", the status inside)."""
    if obj.get("type") == "assistant":
        return bool(obj.get("isApiErrorMessage"))
    return obj.get("type") == "system" and obj.get("subtype") == "api_error"


def _error_text(obj: dict[str, Any]) -> str:
    text = _text(obj)
    error = obj.get("error")
    if not text and isinstance(error, str | dict):
        text = (
            error if isinstance(error, str) else str(error.get("formatted") or error.get("message") or error)
        )
    return text


def _status(obj: dict[str, Any], text: str) -> int | None:
    error = obj.get("error")
    for holder, key in ((obj, "apiErrorStatus"), (obj, "status"), (error, "status")):
        if isinstance(holder, dict) and isinstance(holder.get(key), int):
            return holder[key]
    match = _STATUS.search(text)
    return int(match.group(1)) if match else None


def _text(obj: dict[str, Any]) -> str:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(b.get("text", "")) for b in content if isinstance(b, dict) and b.get("type") == "text"
        )
    return ""


def _is_tool_result(obj: dict[str, Any]) -> bool:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )
