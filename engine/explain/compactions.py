"""Every compaction of a session: who did it and why, tokens before and after, the limit and the
threshold in force, and what it kept and dropped.

Read from the compaction event's details (``by``, ``trigger_kind``, ``threshold_tokens``,
``agent_setting``, ``instructions``, ``after_failed_call``: docs/HELPERS.md "Compaction events"),
derived where a source leaves one out: the event's trigger and source say who; a compaction right
after a call the provider refused as too long is reactive; an agent's own threshold follows its
rule (:mod:`engine.explain.agents`); ctxdesk's is its ``compact_threshold`` share of the limit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from engine.call_failures import failure_of
from engine.explain.agents import agent_threshold
from engine.explain.calls import Call, Calls
from engine.explain.explanations import (
    COMPACTION_BY,
    COMPACTION_TRIGGERS,
    CompactionBy,
    CompactionExplanation,
    CompactionTrigger,
)
from engine.explain.sentences import compaction_sentence
from engine.limit import recorded_limit
from engine.messages import is_user_input
from engine.sent import compaction_removals
from engine.settings import DEFAULT_COMPACT_THRESHOLD, DEFAULT_HARD_BLOCK_THRESHOLD
from engine.store import SessionRecord, Snapshot, StoredEvent, StoredMessage

#: ctxdesk's own compaction triggers (the session manager) -> (by, trigger kind).
ENGINE_TRIGGERS: dict[str, tuple[CompactionBy, CompactionTrigger]] = {
    "compact_threshold": ("ctxdesk", "threshold"),
    "hard_block": ("ctxdesk", "threshold"),
    "provider_error": ("ctxdesk", "reactive"),
    "manual": ("user", "manual"),
    "tool": ("agent", "manual"),
}


def explain_compactions(
    session: SessionRecord,
    agent: str,
    agent_label: str,
    messages: Sequence[StoredMessage],
    events: Sequence[StoredEvent],
    calls: Calls,
    snapshots: Mapping[int, Snapshot] | None = None,
    *,
    detail: bool = True,
) -> tuple[CompactionExplanation, ...]:
    """One explanation per compaction that changed what the model saw (outcome ``compacted``);
    what each kept and dropped only with ``detail``."""
    if detail:  # what each compaction kept reads the findings' tool calls (numpy, the session manager)
        from engine.explain.kept import ToolHistory, kept_and_dropped
    out = []
    history = ToolHistory.of(messages) if detail and any(e.kind == "compaction" for e in events) else None
    for event in sorted(events, key=lambda e: e.seq):
        if event.kind != "compaction" or event.outcome != "compacted":
            continue
        prior = [c for c in calls.before(event) if not c.is_compaction_call]
        last = prior[-1] if prior else None
        failed = _failed_before(event, prior, calls)
        by, trigger = _who_and_why(event, agent, failed)
        if by == "proxy":  # a policy edits the request it is recorded with: the call after it
            edited = [c for c in calls.after(event) if not c.is_compaction_call]
            last = edited[0] if edited else last
        window = _window(event, last, session)
        # The limit every page shows for that call (engine.limit's rule over what was recorded); an
        # agent's own threshold rule reads the provider's window (agents.agent_threshold).
        limit = _limit(event, last, session) or window
        setting = event.details.get("agent_setting")
        setting = setting if isinstance(setting, dict) else {}
        threshold, rule = _threshold(event, by, trigger, agent, window, limit, setting, session)
        removed, cleared = compaction_removals(event.details)
        kept, dropped = (
            kept_and_dropped(
                messages,
                removed,
                cleared,
                _surviving_text(event, messages, removed, snapshots or {}, _next_call_seq(event, calls)),
                calls=calls,
                history=history,
            )
            if detail
            else ((), ())
        )
        before = _int(event.details.get("before_tokens"))
        explained = CompactionExplanation(
            event_seq=event.seq, call=last.number if last else None, by=by, trigger=trigger,
            tokens_before=before, tokens_after=_int(event.details.get("after_tokens")),
            reached_tokens=_guard_estimate(event, events) if by == "ctxdesk" else before,
            last_call_tokens=_counted(last), next_call_tokens=_next_prompt(event, calls),
            limit_tokens=limit, window_tokens=window, threshold_tokens=threshold, threshold_rule=rule, agent_setting=setting,
            instructions=_instructions(event, trigger, messages, last, calls), after_failed_call=failed.number if failed else None,
            kept=kept, dropped=dropped,
        )  # fmt: skip
        out.append(
            explained.model_copy(update={"sentence": compaction_sentence(explained, agent_label, event)})
        )
    return tuple(out)


def _counted(call: Call | None) -> int | None:
    """The provider's count of a call: its prompt and its output (Claude Code compares this sum)."""
    usage = call.event.usage if call is not None and call.event is not None else None
    return usage.prompt_tokens + usage.output_tokens if usage is not None else None


def _next_prompt(event: StoredEvent, calls: Calls) -> int | None:
    """The provider's prompt count of the first answered call after a compaction (not a summarizer)."""
    for call in calls.after(event):
        usage = call.event.usage if call.event is not None else None
        if not call.is_compaction_call and usage is not None:
            return usage.prompt_tokens
    return None


def _guard_estimate(event: StoredEvent, events: Sequence[StoredEvent]) -> int | None:
    """The guard's projection of the request that set off a ctxdesk compaction (the last guard check
    of the same turn before it): the number the thresholds were compared with."""
    for earlier in sorted(events, key=lambda e: e.seq, reverse=True):
        if earlier.seq >= event.seq or earlier.kind != "guard":
            continue
        if earlier.turn_index != event.turn_index:
            return None
        if earlier.projected_tokens is not None:
            return earlier.projected_tokens
    return None


def _failed_before(event: StoredEvent, prior: Sequence[Call], calls: Calls) -> Call | None:
    """The failed call a compaction answered: named in its details, else the last call before it
    when that one got no answer because the prompt was too long."""
    named = event.details.get("after_failed_call")
    if isinstance(named, int):
        return calls.of_event(named)
    if not prior or not prior[-1].failed or prior[-1].event is None:
        return None
    failure = failure_of(prior[-1].event.details) or {}
    too_long = (
        failure.get("cause") == "prompt_too_long" or prior[-1].event.outcome == "context_length_exceeded"
    )
    return prior[-1] if too_long else None


def _who_and_why(
    event: StoredEvent, agent: str, failed: Call | None
) -> tuple[CompactionBy, CompactionTrigger]:
    """``details.by`` / ``details.trigger_kind`` where the source recorded them, else derived: the
    proxy's policies, a live compaction from the dashboard, an imported agent's own (manual when the
    user asked), the session manager's triggers; after a refused call, reactive."""
    d = event.details
    if event.trigger == "proxy_policy":
        by, trigger = "proxy", "policy"
    elif event.trigger == "manual" and (d.get("policy") == "live_compaction" or agent == "proxy"):
        by, trigger = "user", "manual"
    elif str(d.get("source") or "").startswith("import:") or d.get("harness"):
        by, trigger = ("user", "manual") if event.trigger == "manual" else ("agent", "auto")
    else:
        by, trigger = ENGINE_TRIGGERS.get(str(event.trigger), ("ctxdesk", "threshold"))
    if failed is not None and trigger in ("auto", "threshold"):
        trigger = "reactive"
    recorded_by, recorded_trigger = d.get("by"), d.get("trigger_kind")
    return (
        recorded_by if recorded_by in COMPACTION_BY else by,  # type: ignore[return-value]
        recorded_trigger if recorded_trigger in COMPACTION_TRIGGERS else trigger,
    )


def _limit(event: StoredEvent, last: Call | None, session: SessionRecord) -> int | None:
    if last is not None and last.event is not None:
        found = recorded_limit(last.event)
        if found:
            return found
    if not event.details.get("target_tokens"):  # the session manager records its target there instead
        found = recorded_limit(event)
        if found:
            return found
    return _int(session.metadata.get("context_window"))


def _window(event: StoredEvent, last: Call | None, session: SessionRecord) -> int | None:
    for source in (last.event if last else None, event):
        if source is not None and source.context_window:
            return source.context_window
    return _int(session.metadata.get("context_window")) or _int(session.settings.get("context_window"))


def _threshold(
    event: StoredEvent,
    by: str,
    trigger: str,
    agent: str,
    window: int | None,
    limit: int | None,
    setting: dict[str, Any],
    session: SessionRecord,
) -> tuple[int | None, str | None]:
    recorded = _int(event.details.get("threshold_tokens"))
    version = session.metadata.get("cli_version")  # the agent's, where its rule changed (Codex)
    version = version if isinstance(version, str) else None
    if recorded:
        rule = (
            agent_threshold(agent, window=window, setting=setting, version=version) if by == "agent" else None
        )
        return (
            recorded,
            rule.rule if rule is not None and rule.tokens == recorded else "recorded with the compaction",
        )
    if by == "ctxdesk" and limit and event.trigger in ("compact_threshold", "hard_block"):
        name = "compact_threshold" if event.trigger == "compact_threshold" else "hard_block_threshold"
        default = DEFAULT_COMPACT_THRESHOLD if name == "compact_threshold" else DEFAULT_HARD_BLOCK_THRESHOLD
        share = _float(session.settings.get(name)) or default
        return math.floor(limit * share), f"{name} {share:g} × limit {limit:,}"
    if by == "agent" and trigger in ("auto", "reactive"):
        rule = agent_threshold(agent, window=window, setting=setting, version=version)
        if rule is not None:
            return rule.tokens, rule.rule
    return None, None


def _instructions(
    event: StoredEvent, trigger: str, messages: Sequence[StoredMessage], last: Call | None, calls: Calls
) -> str | None:
    """A manual compaction's instructions: recorded, else the arguments of the ``/compact`` the
    user typed between the call before it and the call after it."""
    recorded = event.details.get("instructions")
    if isinstance(recorded, str) and recorded.strip():
        return recorded.strip()
    if trigger != "manual":
        return None
    start = last.message_seq if last and last.message_seq is not None else -1
    later = [c for c in calls.after(event) if not c.is_compaction_call and c.message_seq is not None]
    end = later[0].message_seq if later else None
    from engine.compaction.constraints import slash_command  # the compaction package: read only here

    for row in messages:
        if row.seq <= start or (end is not None and row.seq > end) or not is_user_input(row.message):
            continue
        command = slash_command(row.message.text)
        if command and command[0].lstrip("/") == "compact":
            return command[1] or None
    return None


def _next_call_seq(event: StoredEvent, calls: Calls) -> int | None:
    """The last transcript seq the first model call after a compaction sent (None: no later call)."""
    later = [c for c in calls.after(event) if not c.is_compaction_call and c.event is not None]
    return later[0].event.message_seq if later else None


def _surviving_text(
    event: StoredEvent,
    messages: Sequence[StoredMessage],
    removed: frozenset[int] | set[int],
    snapshots: Mapping[int, Snapshot],
    resent_until: int | None = None,
) -> str:
    """The summary the compaction wrote, the messages it left in place and those the agent sent
    again after it (Codex and Gemini CLI rebuild the history after the summary: a pending prompt is
    re-sent there, so it was kept, not dropped), up to the first call after the compaction."""
    d = event.details
    snapshot = snapshots.get(d["snapshot_id"]) if isinstance(d.get("snapshot_id"), int) else None
    summary = (snapshot.summary if snapshot else None) or d.get("summary") or ""
    if snapshot is not None:
        kept = [m.text for m in snapshot.messages]
    else:
        upto = max(removed) if removed else (event.message_seq if event.message_seq is not None else -1)
        kept = [m.message.text for m in messages if m.seq not in removed and m.seq <= upto]
    if resent_until is not None:
        after = event.message_seq if event.message_seq is not None else -1
        kept += [m.message.text for m in messages if after < m.seq <= resent_until and m.seq not in removed]
    return "\n".join([str(summary), *kept])


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
