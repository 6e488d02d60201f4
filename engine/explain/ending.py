"""How a session ended, from whatever the source recorded, last thing first:

1. a stop ctxdesk or its proxy imposed (a forced final turn, a policy refusal) in the last turn;
2. a last call that got no answer (its failure record: prompt too long, interrupted, an error);
3. what the agent's own file says (SWE-agent's ``exit_status``, OpenHands' ``error``);
4. the transcript's tail: the last reply's stop reason (``end_turn``, ``max_tokens``, ``refusal``,
   and the OpenAI/Gemini words for them), a tool call left without a result, a final-answer tool
   (``finish``, ``submit``, ``attempt_completion``, ``send_message``), the harness's interruption
   marker, a tool result or a user message no call answered.

``unknown`` only when none of these is there (an empty session, a stop reason nobody knows).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.call_failures import failure_of
from engine.explain.calls import Calls
from engine.explain.explanations import EndCause, Ending
from engine.explain.failures import OUTCOME_CAUSES
from engine.messages import ToolResultBlock, ToolUseBlock
from engine.store import SessionRecord, StoredEvent, StoredMessage

#: Stop reasons (Anthropic ``stop_reason``, OpenAI ``finish_reason`` / Responses ``status``,
#: Gemini ``finishReason``) and the end cause each one is.
STOP_REASONS: dict[str, EndCause] = {
    "end_turn": "finished", "stop_sequence": "finished", "stop": "finished", "completed": "finished",
    "pause_turn": "finished", "tool_use": "finished", "tool_calls": "finished", "function_call": "finished",
    "max_tokens": "max_tokens", "length": "max_tokens", "incomplete": "max_tokens",
    "model_context_window_exceeded": "prompt_too_long",
    "refusal": "refusal", "content_filter": "refusal", "safety": "refusal", "blocklist": "refusal",
    "prohibited_content": "refusal", "spii": "refusal", "recitation": "refusal",
    "cancelled": "interrupted", "failed": "provider_error", "error": "provider_error",
}  # fmt: skip
#: Tools whose call is the agent's final answer: after one, nothing else was due.
FINAL_TOOLS = frozenset(
    {
        "finish",
        "submit",
        "attempt_completion",
        "send_message",
        "final_report",
        "task_complete",
        "complete_task",
    }
)
#: The model name Claude Code gives the error notices it writes as replies.
SYNTHETIC_MODEL = "<synthetic>"
_OUTPUT_LIMIT = re.compile(r"exceeded the [\d,]+ output token maximum", re.IGNORECASE)
#: What a harness writes into the transcript when the user stops a turn.
INTERRUPT_MARKERS = (
    "[Request interrupted by user",
    "<turn_aborted>",
    "Request cancelled",
    "Operation cancelled",
)


def explain_ending(
    session: SessionRecord,
    agent_label: str,
    messages: Sequence[StoredMessage],
    events: Sequence[StoredEvent],
    calls: Calls,
) -> Ending:
    """The :class:`Ending` of one session (see the module docstring for the order of evidence)."""
    last_call = calls.last
    n = last_call.number if last_call else None
    ordered = sorted(events, key=lambda e: e.seq)
    stop = _imposed_stop(ordered, calls)
    if stop is not None:
        return stop
    if last_call is not None and last_call.failed and last_call.event is not None:
        return _failed_ending(last_call.event, n, agent_label, messages)
    recorded = _agent_record(session, n, agent_label)
    if recorded is not None:
        return recorded
    if not messages:
        return Ending(
            cause="unknown", call=n, detail="The session holds no messages: nothing tells how it ended."
        )
    return _tail(messages, n, agent_label, last_call.event if last_call else None)


def _imposed_stop(events: Sequence[StoredEvent], calls: Calls) -> Ending | None:
    """A stop ctxdesk imposed in the session's last turn: a forced final turn (the model then wraps
    up), a policy refusal or every provider skipped (no call answered after it)."""
    last_turn = max(
        (c.event.turn_index for c in calls.calls if c.event and c.event.turn_index is not None), default=None
    )
    for event in reversed(events):
        if event.kind != "guard":
            continue
        if last_turn is not None and event.turn_index is not None and event.turn_index < last_turn:
            return None
        answered_after = any(not c.failed for c in calls.after(event))
        if event.trigger == "proxy_policy" and event.outcome == "rejected":
            if answered_after:
                return None
            n = len(calls.before(event)) + 1  # never sent: the number it would have had
            reason = f": {event.reason}" if event.reason else ""
            return Ending(
                cause="policy_refused",
                call=n,
                detail=f"A proxy policy refused call {n}{reason}; the model never saw it.",
            )
        if event.outcome == "skipped_provider" and not answered_after:
            n = len(calls.before(event)) + 1
            return Ending(
                cause="forced_final", call=n,
                detail=f"ctxdesk's guard skipped {event.model or 'the provider'} for call {n}: the request would not fit its "
                "window, and no other provider answered.",
            )  # fmt: skip
        if event.outcome == "forced_final" or (
            event.outcome == "rejected" and event.details.get("final_forced")
        ):
            # A tool result refused in the same turn is the cause the forced final turn answers.
            event = next(
                (e for e in events if e.kind == "guard" and e.outcome == "rejected" and e.details.get("final_forced")
                 and e.turn_index == event.turn_index and e.seq <= event.seq),
                event,
            )  # fmt: skip
            over = (
                f" (projected {event.projected_tokens:,} tokens against a limit of {event.limit_tokens:,})"
                if event.projected_tokens and event.limit_tokens
                else ""
            )
            what = (
                "a tool result would not fit"
                if event.outcome == "rejected"
                else "the next request would not fit"
            )
            return Ending(
                cause="forced_final", call=calls.last.number if calls.last else None,
                detail=f"ctxdesk's guard forced a final turn after call {_call_number_at(calls, event)}: {what}{over}, "
                "so the model was asked to wrap up.",
            )  # fmt: skip
    return None


def _failed_ending(
    event: StoredEvent, n: int | None, agent_label: str, messages: Sequence[StoredMessage]
) -> Ending:
    record = failure_of(event.details) or {}
    cause = record.get("cause") or OUTCOME_CAUSES.get(str(event.outcome)) or "provider_error"
    message = record.get("message") or event.reason or ""
    said = f": {' '.join(str(message).split())[:200].rstrip('.')}" if message else ""
    harness = _harness_stop(str(message), messages)
    if harness == "max_tokens":
        return Ending(
            cause="max_tokens", call=n,
            detail=f"The model's replies kept stopping at their output limit and {agent_label} gave up after call {n}{said}.",
        )  # fmt: skip
    if harness == "refusal":
        return Ending(
            cause="refusal", call=n, detail=f"The model refused call {n} and {agent_label} stopped{said}."
        )
    if cause == "prompt_too_long":
        return Ending(
            cause="prompt_too_long",
            call=n,
            detail=f"The provider refused call {n} as too long{said}; no call followed.",
        )
    if cause == "interrupted":
        return Ending(
            cause="interrupted", call=n, detail=f"Call {n} was interrupted before its answer came{said}."
        )
    status = record.get("status")
    return Ending(
        cause="provider_error", call=n,
        detail=f"Call {n} failed{f' with status {status}' if status else ''} ({cause.replace('_', ' ')}){said}; {agent_label} made no call after it.",
    )  # fmt: skip


def _harness_stop(message: str, messages: Sequence[StoredMessage]) -> EndCause | None:
    """The reply's own stop behind an error the agent wrote itself (Claude Code's "API Error: Claude's
    response exceeded the 32000 output token maximum", its refusal notice) rather than the provider's."""
    if _OUTPUT_LIMIT.search(message):
        return "max_tokens"
    last = messages[-1] if messages else None
    if (
        last is not None
        and last.message.role == "assistant"
        and last.message.meta.get("stop_reason") == "refusal"
    ):
        return "refusal"
    return None


def _agent_record(session: SessionRecord, n: int | None, agent_label: str) -> Ending | None:
    """What the agent's own file says about the end (kept in the session metadata by importers)."""
    meta = session.metadata
    status = meta.get("exit_status")
    if isinstance(status, str) and status:
        low = status.lower()
        if low.startswith("submitted") and "(" not in low:
            return Ending(
                cause="finished", call=n, detail=f"{agent_label} submitted its answer (exit_status {status})."
            )
        if "context" in low:
            return Ending(
                cause="prompt_too_long",
                call=n,
                detail=f"{agent_label} stopped: the context ran out (exit_status {status}).",
            )
        if "format" in low or "error" in low:
            return Ending(
                cause="provider_error",
                call=n,
                detail=f"{agent_label} stopped on an error (exit_status {status}).",
            )
        return Ending(
            cause="interrupted",
            call=n,
            detail=f"{agent_label} stopped the run itself (exit_status {status}).",
        )
    error = meta.get("error")
    if isinstance(error, str) and error:
        low = error.lower()
        if "maximum iteration" in low or "budget" in low or "stopped" in low:
            return Ending(cause="interrupted", call=n, detail=f"{agent_label} stopped the run: {error[:200]}")
        if "context" in low and ("window" in low or "length" in low or "too long" in low):
            return Ending(cause="prompt_too_long", call=n, detail=f"{agent_label} stopped: {error[:200]}")
        return Ending(
            cause="provider_error", call=n, detail=f"{agent_label} stopped on an error: {error[:200]}"
        )
    return None


def _tail(
    messages: Sequence[StoredMessage], n: int | None, agent_label: str, last_request: StoredEvent | None
) -> Ending:
    last = messages[-1]
    answered = {b.tool_use_id for m in messages for b in m.message.blocks if isinstance(b, ToolResultBlock)}
    if last.message.role == "assistant" and last.message.meta.get("model") == SYNTHETIC_MODEL:
        # The agent's own error notice written as a reply (Claude Code: "API Error: ..."), not the model's.
        text = " ".join(last.message.text.split())
        harness = _harness_stop(text, messages)
        if harness == "max_tokens":
            return Ending(
                cause="max_tokens",
                call=n,
                detail=f"The model's replies kept stopping at their output limit; {agent_label} gave up: {text[:200]}",
            )
        if harness == "refusal":
            return Ending(
                cause="refusal", call=n, detail=f"The model refused and {agent_label} stopped: {text[:200]}"
            )
        return Ending(
            cause="provider_error",
            call=n,
            detail=f"{agent_label} stopped on an error it reported: {text[:200]}",
        )
    if last.message.role == "assistant":
        uses = [b for b in last.message.blocks if isinstance(b, ToolUseBlock)]
        if any(u.name.lower() in FINAL_TOOLS for u in uses):
            tool = next(u.name for u in uses if u.name.lower() in FINAL_TOOLS)
            return Ending(
                cause="finished", call=n, detail=f"The model gave its final answer with {tool} at call {n}."
            )
        open_uses = [u for u in uses if u.id not in answered]
        if open_uses:
            return Ending(
                cause="interrupted", call=n,
                detail=f"The last reply (call {n}) asked for {open_uses[0].name} and no result came back: the run was stopped mid-turn.",
            )  # fmt: skip
        reason = _stop_reason(last, last_request)
        if reason is not None:
            cause = STOP_REASONS.get(reason.lower())
            if cause is None:
                return Ending(
                    cause="unknown",
                    call=n,
                    detail=f"The last reply's stop reason {reason!r} is not one ctxdesk knows.",
                )
            return Ending(cause=cause, call=n, detail=_stop_detail(cause, reason, n, last_request))
        return Ending(
            cause="finished", call=n,
            detail=f"The model's last reply (call {n}) answers in text and asks for no tool; the file records no stop reason.",
        )  # fmt: skip
    text = last.message.text.strip()
    if text.startswith(INTERRUPT_MARKERS):
        return Ending(
            cause="interrupted", call=n, detail=f"The user stopped the turn after call {n}: {_marker(text)}"
        )
    if any(isinstance(b, ToolResultBlock) for b in last.message.blocks):
        tool = _tool_of(messages, last)
        if tool is not None and tool.lower() in FINAL_TOOLS:
            return Ending(
                cause="finished", call=n, detail=f"The model gave its final answer with {tool} at call {n}."
            )
        return Ending(
            cause="interrupted", call=n,
            detail=f"The transcript ends on the result of {tool or 'a tool call'}: no model call followed it: the run was stopped mid-turn (or the file was cut there).",
        )  # fmt: skip
    return Ending(
        cause="interrupted", call=n,
        detail=f"The last user message ({_clip(text)}) got no answer: the run stopped before the model replied.",
    )  # fmt: skip


def _stop_reason(last: StoredMessage, request: StoredEvent | None) -> str | None:
    for source in (last.message.meta, request.details if request else {}):
        for key in ("stop_reason", "finish_reason", "finishReason", "status"):
            value = source.get(key)
            if isinstance(value, str) and value:
                return value
    return None


def _stop_detail(cause: EndCause, reason: str, n: int | None, request: StoredEvent | None) -> str:
    if cause == "finished":
        return f"The model ended its turn ({reason}) at call {n}."
    if cause == "max_tokens":
        cap = request.details.get("max_tokens") if request else None
        at = f" ({cap:,} output tokens)" if isinstance(cap, int) else ""
        return f"The reply to call {n} was cut at its output limit{at} ({reason})."
    if cause == "refusal":
        return f"The model refused to answer call {n} ({reason})."
    return f"Call {n} ended with {reason}."


def _tool_of(messages: Sequence[StoredMessage], result_row: StoredMessage) -> str | None:
    ids = {b.tool_use_id for b in result_row.message.blocks if isinstance(b, ToolResultBlock)}
    for row in reversed(messages):
        for block in row.message.blocks:
            if isinstance(block, ToolUseBlock) and block.id in ids:
                return block.name
    return None


def _call_number_at(calls: Calls, event: StoredEvent) -> int | None:
    before = calls.before(event)
    return before[-1].number if before else (1 if calls.calls else None)


def _marker(text: str) -> str:
    """The harness's interruption note on one line ("[Request interrupted by user for tool use]";
    Codex's "<turn_aborted> The user interrupted the previous turn on purpose. ...": its first sentence)."""
    words = " ".join(text.replace("<turn_aborted>", "").replace("</turn_aborted>", "").split())
    if not words.startswith("["):
        words = words.split(". ")[0].rstrip(".")
    return words if len(words) <= 100 else words[:99] + "…"


def _clip(text: str, limit: int = 80) -> str:
    text = " ".join(text.split())
    return f"“{text}”" if len(text) <= limit else f"“{text[: limit - 1]}…”"
