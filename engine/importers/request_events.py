"""The events of an imported session's model calls: one ``request`` event per call, and the
agent's own compactions (with the snapshot of what it went on with).

A request event carries our estimate of what that call sent, by component: the system
prompt and tool definitions when the source has them, and the messages before the call
(since the last compaction boundary), split into tool-result content and the rest. The
provider's usage sits beside it, so the timeline shows estimate and truth together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.importers.model import CallInfo, ParsedSession
from engine.store import SessionStore, StoredMessage
from engine.tokens import MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS, Tokenizer


def record_requests(
    store: SessionStore,
    session_id: str,
    parsed: ParsedSession,
    rows: Sequence[StoredMessage],
    tokenizer: Tokenizer,
    source: str,
    *,
    first_new: int = 0,
) -> list[tuple[int, ProviderUsage | None]]:
    """Record a request event per call at messages from ``first_new`` on (earlier ones were
    recorded by an earlier import); returns (estimate, usage) per call in order, all of them.

    When the source does not keep part of what every call sent (``parsed.unlogged_prefix_in``:
    Codex's tool definitions, Gemini CLI's system instruction and tools), that part is the
    provider's count minus ours at the first call with usage, added to that component of every
    call and named in its details (``unlogged_prefix_tokens``, ``unlogged_prefix_in``)."""
    prefix = 0
    if parsed.unlogged_prefix_in:
        dry = _walk(store, session_id, parsed, rows, tokenizer, source, first_new=len(rows) + 1, prefix=0)
        prefix = next(
            (max(0, u.prompt_tokens - est) for est, u in dry if u is not None and u.prompt_tokens), 0
        )
        if prefix:
            parsed.notes.append(
                f"{prefix:,} tokens every call sent are not in the file ({parsed.unlogged_prefix_in}): "
                "measured at the first call with usage"
            )
    return _walk(store, session_id, parsed, rows, tokenizer, source, first_new=first_new, prefix=prefix)


def _walk(
    store: SessionStore,
    session_id: str,
    parsed: ParsedSession,
    rows: Sequence[Any],
    tokenizer: Tokenizer,
    source: str,
    *,
    first_new: int,
    prefix: int,
) -> list[tuple[int, ProviderUsage | None]]:
    out: list[tuple[int, ProviderUsage | None]] = []
    memo: dict[Any, int] = {}  # the system prompt and tool list are mostly the same call after call
    conversation = tool_results = 0  # running sums over the messages sent so far
    for i, (pm, row) in enumerate(zip(parsed.messages, rows, strict=True)):
        record = i >= first_new
        if pm.starts_context:
            if pm.compaction is not None and record:
                _compaction(
                    store, session_id, pm.compaction, row, conversation + tool_results, source, rows=rows
                )
            conversation = tool_results = 0
        if pm.call is not None:
            out.append(
                _request(
                    store, session_id, parsed, pm.call, row, i, conversation, tool_results, tokenizer, source,
                    record=record, memo=memo, prefix=prefix,
                )
            )  # fmt: skip
        conversation += row.tokens - row.tool_result_tokens
        tool_results += row.tool_result_tokens
        for call in pm.pending_calls:
            out.append(
                _request(
                    store, session_id, parsed, call, row, i + 1, conversation, tool_results, tokenizer, source,
                    record=record, memo=memo, prefix=prefix,
                )
            )  # fmt: skip
    return out


def _compaction(
    store: SessionStore,
    session_id: str,
    details: dict[str, Any],
    row: StoredMessage,
    before: int,
    source: str,
    *,
    rows: Sequence[StoredMessage] = (),
) -> None:
    """A compaction the agent made (the source says where): later calls start from ``row``."""
    event_id = store.record_event(
        session_id,
        ContextEvent(
            kind="compaction", trigger=str(details.get("trigger") or "compact_threshold"), outcome="compacted",
            reason=str(details.get("reason") or "the agent compacted its context"), turn_index=row.turn_index,
            message_seq=row.seq,
            details={
                "source": source, "before_tokens": details.get("before_tokens", before),
                "removed_message_seqs": list(range(row.seq)),
                **{k: v for k, v in details.items() if k not in ("trigger", "reason", "source")},
            },
        ),
    )  # fmt: skip
    # the context the agent went on with: its summary and the messages it kept (Claude Code's
    # preserved segment, as seqs), so resume/diff/restore see the harness's own compaction
    kept = [rows[s] for s in details.get("kept_message_seqs") or () if isinstance(s, int) and s < row.seq]
    if rows:
        after = [row, *kept]
        store.write_snapshot(
            session_id, [r.message for r in after], through_seq=row.seq, summary=str(details.get("summary") or ""),
            tokens=sum(r.tokens for r in after), strategy=f"harness:{details.get('harness') or 'agent'}",
            event_id=event_id,
        )  # fmt: skip


def _request(
    store: SessionStore,
    session_id: str,
    parsed: ParsedSession,
    call: CallInfo,
    row: StoredMessage,
    sent_messages: int,
    conversation: int,
    tool_results: int,
    tokenizer: Tokenizer,
    source: str,
    *,
    record: bool = True,
    memo: dict[Any, int] | None = None,
    prefix: int = 0,
) -> tuple[int, ProviderUsage | None]:
    memo = {} if memo is None else memo
    system = call.system_prompt if call.system_prompt is not None else parsed.system_prompt
    tools = call.tools if call.tools is not None else parsed.tools
    components = ComponentTokens(
        system=_memo(memo, ("system", system), lambda: tokenizer.count(system) + MESSAGE_OVERHEAD_TOKENS)
        if system
        else 0,
        tools=_memo(memo, ("tools", id(tools)), lambda: tokenizer.count_tools(tools)) if tools else 0,
        conversation=conversation + (REPLY_PRIMING_TOKENS if conversation or tool_results else 0),
        tool_results=tool_results,
    )
    # a parser that rebuilt the exact request computed its components itself (Claude Code)
    components = call.components or components
    where = parsed.unlogged_prefix_in
    if prefix and where:
        components = components.model_copy(update={where: getattr(components, where) + prefix})
    total = components.total
    usage = call.usage
    details: dict[str, Any] = {
        "estimate_total": total,
        "provider_prompt_tokens": usage.prompt_tokens if usage else None,
        "exact": tokenizer.exact,
        "tokenizer": tokenizer.id,
        "source": source,
        "messages_sent": sent_messages,
        **call.details,
    }
    if prefix and where:
        details.update(unlogged_prefix_tokens=prefix, unlogged_prefix_in=where)
    if not record:
        return total, usage
    event_id = store.record_event(
        session_id,
        ContextEvent(
            kind="request", provider=parsed.provider, model=call.model or parsed.model,
            context_window=call.context_window or parsed.context_window, turn_index=row.turn_index, projected_tokens=total, components=components, usage=usage,
            limit_tokens=call.limit_tokens,  # the harness's own limit when the source tells it
            message_seq=row.seq, details=details,
        ),
    )  # fmt: skip
    exact = call.exact_request  # a RequestRecord the parser rebuilt (Claude Code 2.1.3xx)
    if exact is not None:
        store.record_request(session_id, exact.model_copy(update={"event_id": event_id}))
    return total, usage


def _memo(memo: dict[Any, int], key: Any, compute: Callable[[], int]) -> int:
    if key not in memo:
        memo[key] = compute()
    return memo[key]
