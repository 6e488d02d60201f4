"""Every failed model call of a session: its cause, the provider's status and message (secrets
redacted), and what the agent did next (read from the record, else from what followed it)."""

from __future__ import annotations

from collections.abc import Sequence

from engine.call_failures import classify_failure, failure_of, prompt_too_long_counts
from engine.explain.calls import Call, Calls
from engine.explain.explanations import FailedCall
from engine.redact import redact_secrets
from engine.store import StoredEvent

#: Request outcomes the sources wrote before ``details["failure"]`` existed, and their cause.
OUTCOME_CAUSES = {
    "context_length_exceeded": "prompt_too_long",
    "interrupted": "interrupted",
    "rate_limited": "rate_limited",
    "overloaded": "overloaded",
}
MESSAGE_CHARS = 500


def explain_failures(calls: Calls, events: Sequence[StoredEvent], agent_label: str) -> tuple[FailedCall, ...]:
    """One :class:`FailedCall` per request event that got no answer, in call order."""
    out = []
    ordered = sorted(events, key=lambda e: e.seq)
    for call in calls.calls:
        if not call.failed or call.event is None:
            continue
        event = call.event
        record = failure_of(event.details) or {}
        message = record.get("message") or event.reason
        cause = (
            record.get("cause")
            or OUTCOME_CAUSES.get(str(event.outcome))
            or classify_failure(None, None, message)
        )
        message = _short(redact_secrets(message)) if message else None
        counts = (
            (record.get("prompt_tokens"), record.get("maximum_tokens"))
            if record.get("prompt_tokens")
            else prompt_too_long_counts(message) or (None, None)
        )
        following = _next(call, calls, ordered)
        said = str(record.get("next") or "")
        # The source's own word wins unless what followed says the same thing more precisely.
        nxt = said if said and not following.startswith(said.split()[0]) else following
        failed = FailedCall(
            event_seq=event.seq, call=call.number, cause=cause, status=_status(record.get("status")),
            message=message, next=nxt, prompt_tokens=counts[0], maximum_tokens=counts[1],
        )  # fmt: skip
        out.append(failed.model_copy(update={"sentence": failure_sentence(failed, agent_label)}))
    return tuple(out)


def _next(call: Call, calls: Calls, events: Sequence[StoredEvent]) -> str:
    """What followed a failed call: a compaction, a retry, another call, or nothing."""
    assert call.event is not None
    later_calls = [c for c in calls.calls if c.number > call.number]
    upto = later_calls[0].position if later_calls else None
    between = [e for e in events if e.seq > call.event.seq and (upto is None or e.seq < upto)]
    compacted = [e for e in between if e.kind == "compaction" and e.outcome == "compacted"]
    forced = [e for e in between if e.kind == "guard" and e.outcome in ("forced_final", "skipped_provider")]
    if compacted:
        words = "compacted reactively"
    elif forced:
        words = (
            "was forced into a final turn" if forced[0].outcome == "forced_final" else "skipped the provider"
        )
    else:
        words = ""
    if not later_calls:
        return f"{words}; no call followed" if words else "stopped: no call followed"
    nxt = later_calls[0]
    if nxt.is_compaction_call:
        words = words or "compacted reactively"
        after = [c for c in later_calls[1:] if not c.is_compaction_call]
        return f"{words}, then sent call {after[0].number}" if after else f"{words}; no call followed"
    same_turn = nxt.event is not None and nxt.event.turn_index == call.event.turn_index
    if words:
        return f"{words}, then sent call {nxt.number}"
    return f"retried as call {nxt.number}" if same_turn else f"sent call {nxt.number} (a later turn)"


def failure_sentence(failed: FailedCall, agent_label: str) -> str:
    """ "The provider refused call 12: prompt is too long (212,301 > 200,000); Claude Code then
    compacted reactively"."""
    return f"{_failure_head(failed, f'call {failed.call}')}; {agent_label} then {failed.next}"


def failure_summaries(failed: Sequence[FailedCall], agent_label: str) -> list[str]:
    """The failed calls in sentences, a run of retries of the same failure in one: "The provider answered
    calls 1 to 10 with an error, status 500 (...); Claude Code retried each one, as calls 2 to 11"."""
    runs: list[list[FailedCall]] = []
    for f in failed:
        last = runs[-1][-1] if runs else None
        if (
            last is not None
            and last.next == f"retried as call {f.call}"
            and (last.cause, last.status, last.message) == (f.cause, f.status, f.message)
        ):
            runs[-1].append(f)
        else:
            runs.append([f])
    out = []
    for run in runs:
        first, last = run[0], run[-1]
        if len(run) == 1:
            out.append(first.sentence or failure_sentence(first, agent_label))
            continue
        head = _failure_head(first, f"calls {first.call} to {last.call}")
        retried_as = last.next.removeprefix("retried as call ")
        if retried_as != last.next:  # the last one was retried too, and failed otherwise
            out.append(f"{head}; {agent_label} retried each one, as calls {first.call + 1} to {retried_as}")
        else:
            out.append(
                f"{head}; {agent_label} retried each but the last, as calls {first.call + 1} to {last.call}, "
                f"then {last.next}"
            )
    return out


def _failure_head(failed: FailedCall, which: str) -> str:
    """What the provider did with ``which`` (a call or calls): refused it, answered it with an error, ..."""
    if failed.cause == "interrupted":
        one = which.startswith("call ")
        return f"{which.capitalize()} {'was' if one else 'were'} interrupted before {'its answer' if one else 'their answers'} came"
    if failed.cause == "prompt_too_long":
        counts = (
            f" ({failed.prompt_tokens:,} > {failed.maximum_tokens:,})"
            if failed.prompt_tokens and failed.maximum_tokens
            else ""
        )
        return f"The provider refused {which}: prompt is too long{counts}"
    words = {"rate_limited": "a rate limit", "overloaded": "an overloaded error"}.get(
        failed.cause, "an error"
    )
    head = f"The provider answered {which} with {words}"
    if failed.status:
        head += f", status {failed.status}"
    if failed.message:
        head += f" ({_short(failed.message, 120)})"
    return head


def _status(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _short(text: str, limit: int = MESSAGE_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
