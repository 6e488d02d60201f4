"""Compaction as calls: ``compact`` (pure, no store), ``force_compact`` and ``restore_snapshot``
(session level: plan, then persist event + snapshot + cached summaries in one transaction;
the transcript is never modified). The ``compact_context`` tool is in ``context_tool``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError as PydanticValidationError

from engine.compaction.config import CACHING_STRATEGIES, parse_strategy
from engine.compaction.offline import OfflineSummarizer
from engine.compaction.result import CompactionResult, PlanContext, SummaryCache
from engine.compaction.stored_history import history_seqs, load_summary_cache
from engine.compaction.strategies import plan_compaction
from engine.compaction.summarizers import AnthropicSummarizer, Summarizer
from engine.errors import NotFoundError, ValidationError
from engine.events import ContextEvent
from engine.messages import Message
from engine.store import SessionStore, Snapshot
from engine.tokens import Tokenizer, get_tokenizer

#: Tokenizer used when neither a model nor a session tokenizer names one.
DEFAULT_TOKENIZER = "o200k_base"
#: Without an explicit target, compaction aims at this share of the tokens before it...
DEFAULT_TARGET_SHARE = 0.5
#: ...and, when the model's window is known, at most this share of the window.
DEFAULT_WINDOW_SHARE = 0.5
#: Fields of the ``compaction`` event a caller may set (the session manager knows the turn and
#: the window in force; force_compact alone knows only the session row).
EVENT_FIELDS = (
    "turn_index", "provider", "model", "context_window", "max_output_tokens", "buffer_tokens", "limit_tokens",
)  # fmt: skip


def default_summarizer(env: Mapping[str, str] | None = None) -> Summarizer:
    """The Anthropic summarizer when an API key is configured, else the offline one."""
    env = os.environ if env is None else env
    if env.get("ANTHROPIC_API_KEY") or env.get("ANTHROPIC_AUTH_TOKEN"):
        return AnthropicSummarizer()
    return OfflineSummarizer()


def model_window(model: str | None) -> int | None:
    """The model's context window from the model table, when that table is installed and knows it."""
    if not model:
        return None
    try:
        from engine.model_table import load_model_table
    except ImportError:  # the model table is optional for compaction
        return None
    info = load_model_table().lookup(model)
    return info.context_window if info else None


def default_target(before_tokens: int, model: str | None) -> int:
    """Half the tokens before compaction, and at most half the model's window when it is known."""
    target = int(before_tokens * DEFAULT_TARGET_SHARE)
    window = model_window(model)
    if window:
        target = min(target, int(window * DEFAULT_WINDOW_SHARE))
    return max(1, target)


def _check_target(target_tokens: int | None) -> None:
    if target_tokens is not None and (not isinstance(target_tokens, int) or target_tokens <= 0):
        raise ValidationError(
            f"target_tokens must be a positive integer, got {target_tokens!r}",
            field="target_tokens",
            value=target_tokens,
        )


def _plan(
    messages: Sequence[Message],
    *,
    strategy: Any,
    settings: Mapping[str, Any],
    target_tokens: int | None,
    model: str | None,
    tokenizer: Tokenizer,
    summarizer: Summarizer | None,
    instructions: str | None,
    summary: str | None,
    seqs: Sequence[int | None] | None = None,
    cache: Sequence[SummaryCache] = (),
) -> CompactionResult:
    if not messages:
        raise ValidationError("nothing to compact: the message list is empty", field="messages", value=[])
    _check_target(target_tokens)
    config = parse_strategy(strategy, **settings)
    if target_tokens is None:
        before = tokenizer.count_messages(messages) + (tokenizer.count(summary) if summary else 0)
        target_tokens = default_target(before, model)
    ctx = PlanContext(
        target_tokens=target_tokens,
        tokenizer=tokenizer,
        summarizer=summarizer or default_summarizer(),
        summary=summary,
        instructions=instructions,
        seqs=seqs,
        cache=tuple(cache),
    )
    return plan_compaction(list(messages), config, ctx)


def compact(
    messages: Sequence[Message],
    *,
    strategy: Any = "chain",
    target_tokens: int | None = None,
    model: str | None = None,
    summarizer: Summarizer | None = None,
    instructions: str | None = None,
    summary: str | None = None,
    tokenizer: Tokenizer | None = None,
    cache: Sequence[SummaryCache] = (),
    **settings: Any,
) -> CompactionResult:
    """Plan a compaction of ``messages`` (nothing is stored; the input is not modified).

    ``strategy`` is a name (``chain``, ``clear_tool_results``, ``summarize``, ``sandwich``,
    ``sliding_window``, ``truncate``, ``rolling_iterations``, ``tree_summary``, ``emergency``),
    a ``{"type": ...}`` dict or a config object; ``settings`` are that strategy's fields.
    ``summary`` is an earlier summary already in effect (it is folded into a new one).
    Without ``target_tokens`` the target is half the tokens before compaction, capped at half
    the model's window when the model table knows ``model``. Tokens are counted with
    ``tokenizer``, else ``get_tokenizer(model)``, else ``o200k_base``. Without a summarizer,
    the Anthropic one is used when ``ANTHROPIC_API_KEY`` is set, else the offline one.
    ``cache`` takes an earlier plan's ``result.cache`` (summaries by input index range), so a
    re-plan of the same history grown by new messages summarizes only what is new.
    """
    tokenizer = tokenizer or get_tokenizer(model or DEFAULT_TOKENIZER)
    return _plan(
        messages,
        strategy=strategy,
        settings=settings,
        target_tokens=target_tokens,
        model=model,
        tokenizer=tokenizer,
        summarizer=summarizer,
        instructions=instructions,
        summary=summary,
        cache=cache,
    )


# -- session level ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactionReport:
    """What ``force_compact`` did (or, with ``dry_run``, would do) to a session."""

    session_id: str
    strategy: str
    before_tokens: int
    after_tokens: int
    before_count: int
    after_count: int
    strategies_run: tuple[str, ...]
    removed_message_seqs: tuple[int, ...]
    snapshot_id: int | None
    event_id: int | None
    summary: str | None
    reason: str
    noop: bool
    dry_run: bool
    result: CompactionResult

    @property
    def fits(self) -> bool:
        return self.result.fits


def _check_event_fields(event_fields: Mapping[str, Any] | None) -> dict[str, Any]:
    """The caller's event fields, checked before anything is planned or written."""
    fields = dict(event_fields or {})
    unknown = sorted(set(fields) - set(EVENT_FIELDS))
    if unknown:
        raise ValidationError(
            f"event_fields may only set {', '.join(EVENT_FIELDS)}; got {unknown}",
            field="event_fields",
            value=unknown,
        )
    try:
        ContextEvent(kind="compaction", **fields)
    except PydanticValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(map(str, error["loc"]))
        raise ValidationError(
            f"invalid event_fields: {where}: {error['msg']}", field="event_fields", value=fields
        ) from exc
    return fields


def _caching_types(config: Any) -> list[str]:
    steps = config.steps if config.type == "chain" else (config,)
    return [s.type for s in steps if s.type in CACHING_STRATEGIES]


def force_compact(
    store: SessionStore,
    session_id: str,
    *,
    strategy: Any = "chain",
    instructions: str | None = None,
    summarizer: Summarizer | None = None,
    target_tokens: int | None = None,
    dry_run: bool = False,
    trigger: str = "manual",
    event_fields: Mapping[str, Any] | None = None,
    **settings: Any,
) -> CompactionReport:
    """Compact a stored session's resume history now.

    Unless ``dry_run``, one transaction writes the ``compaction`` event, a snapshot (through the
    last transcript seq) and, for caching strategies, the summaries with the transcript seq
    ranges they cover (cached summaries of other strategies are cleared). A no-op writes only
    its event. A summarizer failure raises SummarizerUnavailableError and writes nothing.
    ``event_fields`` sets the event's :data:`EVENT_FIELDS` (turn, provider, model, window) that
    only the caller knows; the model defaults to the session's.
    """
    fields = _check_event_fields(event_fields)
    session = store.get_session(session_id)
    messages, summary, through_seq = store.load_resume_history(session_id)
    if not messages:
        raise ValidationError(f"session {session_id!r} has no messages to compact", field="session_id")
    config = parse_strategy(strategy, **settings)
    tokenizer = get_tokenizer(session.tokenizer or session.model or DEFAULT_TOKENIZER)
    seqs = history_seqs(store, session_id, messages, through_seq)
    cache_types = _caching_types(config)
    result = _plan(
        messages,
        strategy=config,
        settings={},
        target_tokens=target_tokens,
        model=session.model,
        tokenizer=tokenizer,
        summarizer=summarizer,
        instructions=instructions,
        summary=summary,
        seqs=seqs,
        cache=load_summary_cache(store, session_id, cache_types, seqs),
    )
    removed_seqs = tuple(s for s in (seqs[i] for i in result.removed) if s is not None)
    last_seq = max((s for s in seqs if s is not None), default=through_seq)
    details: dict[str, Any] = {
        "strategy": config.type,
        "strategies_run": list(result.strategies_run),
        "removed_message_seqs": list(removed_seqs),
        "cleared_message_seqs": [s for s in (seqs[i] for i in result.cleared) if s is not None],
        "before": result.before_components.as_dict(),
        "after": result.after_components.as_dict(),
        "before_tokens": result.before_tokens,
        "after_tokens": result.after_tokens,
        "before_count": result.before_count,
        "after_count": result.after_count,
        "target_tokens": result.target_tokens,
        "summary": result.summary if not result.noop else None,
        "summarizer": result.summarizer,
        "instructions": instructions,
        "snapshot_id": None,
    }
    event_id = snapshot_id = None
    if not dry_run:
        with store.transaction():
            if not result.noop:
                snapshot_id = store.write_snapshot(
                    session_id,
                    result.messages,
                    through_seq=last_seq,
                    summary=result.summary,
                    tokens=result.after_tokens,
                    strategy=config.type,
                )
                details["snapshot_id"] = snapshot_id
            event_id = store.record_event(
                session_id,
                ContextEvent(
                    kind="compaction",
                    trigger=trigger,
                    outcome="noop" if result.noop else "compacted",
                    reason=result.reason,
                    projected_tokens=result.after_tokens,
                    components=result.after_components,
                    message_seq=last_seq if last_seq >= 0 else None,
                    details=details,
                    **{"model": session.model, **fields},
                ),
            )
            if snapshot_id is not None:
                # The snapshot and its event name each other; the event id exists only now.
                store.link_snapshot_event(snapshot_id, event_id)
                _save_cache(store, session_id, result, seqs, tokenizer, keep=cache_types)
    return CompactionReport(
        session_id=session_id,
        strategy=config.type,
        before_tokens=result.before_tokens,
        after_tokens=result.after_tokens,
        before_count=result.before_count,
        after_count=result.after_count,
        strategies_run=result.strategies_run,
        removed_message_seqs=removed_seqs,
        snapshot_id=snapshot_id,
        event_id=event_id,
        summary=result.summary,
        reason=result.reason,
        noop=result.noop,
        dry_run=dry_run,
        result=result,
    )


def _save_cache(
    store: SessionStore,
    session_id: str,
    result: CompactionResult,
    seqs: Sequence[int | None],
    tokenizer: Tokenizer,
    *,
    keep: Sequence[str],
) -> None:
    """Clear other strategies' cached summaries; store this plan's, as transcript seq ranges."""
    store.clear_context_states(session_id, keep_strategy=keep[0] if keep else None)
    for entry in result.cache:
        start, last = seqs[entry.range_start], seqs[entry.range_end - 1]
        if start is None or last is None:
            continue  # a range that no longer maps to the transcript cannot be reused anyway
        store.save_context_state(
            session_id,
            strategy=entry.strategy,
            level=entry.level,
            range_start=start,
            range_end=last + 1,
            summary=entry.summary,
            summary_tokens=tokenizer.count(entry.summary),
            summarizer=entry.summarizer,
        )


def restore_snapshot(store: SessionStore, session_id: str, snapshot_id: int) -> Snapshot:
    """Make an older snapshot current again: a new snapshot equal to it (strategy ``restore``)
    and a ``restore`` event, in one transaction. Returns the new snapshot."""
    store.get_session(session_id)
    old = store.get_snapshot(snapshot_id)
    if old.session_id != session_id:
        raise NotFoundError(f"snapshot {snapshot_id} does not belong to session {session_id!r}")
    with store.transaction():
        new_id = store.write_snapshot(
            session_id,
            old.messages,
            through_seq=old.through_seq,
            summary=old.summary,
            tokens=old.tokens,
            strategy="restore",
        )
        event_id = store.record_event(
            session_id,
            ContextEvent(
                kind="restore",
                trigger="manual",
                outcome="restored",
                reason=f"restored snapshot {snapshot_id}",
                message_seq=old.through_seq,
                details={
                    "restored_snapshot_id": snapshot_id,
                    "snapshot_id": new_id,
                    "after_count": old.message_count,
                    "after_tokens": old.tokens,
                },
            ),
        )
        store.link_snapshot_event(new_id, event_id)
    return store.get_snapshot(new_id)
