"""The pieces of a proxied call's records, built from its parsed request and answer: the
provider's usage, the request event's details, each policy edit as an event, the session's
title and tools. Used by :mod:`engine.proxy.recording.writer`.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.errors import ContextDeskError
from engine.events import ContextEvent, ProviderUsage
from engine.messages import Message
from engine.proxy.wire.shared import ParsedResponse, RequestView
from engine.settings import Settings, resolve_model_settings
from engine.store import ToolRecord
from engine.tokens import tool_parts


def provider_usage(parsed: ParsedResponse, fields: dict[str, int | None]) -> ProviderUsage | None:
    """The provider's usage as ours (None when the answer carried none)."""
    if not parsed.usage:
        return None
    return ProviderUsage(
        input_tokens=fields["input_tokens"] or 0,
        output_tokens=fields["output_tokens"] or 0,
        cache_read_input_tokens=fields["cache_read_input_tokens"] or 0,
        cache_creation_input_tokens=fields["cache_creation_input_tokens"] or 0,
    )


def call_details(
    exchange: Any, api: str, view: RequestView, body: dict[str, Any], parsed: ParsedResponse,
    fields: dict[str, int | None], *, new_messages: int, tokenizer_id: str, components_total: int,
    usage: ProviderUsage | None, rewritten: bool,
) -> dict[str, Any]:  # fmt: skip
    """The ``details`` of a proxied call's request event."""
    system_value = body.get("system", body.get("instructions"))
    details: dict[str, Any] = {
        "api": api,
        "path": exchange.path,
        "status": exchange.status,
        "stream": view.stream,
        "agent_session_id": view.agent_session_id,
        "request_messages": len(view.raw_messages),
        "new_messages": new_messages,
        "history_rewritten": rewritten,
        "stop_reason": parsed.stop_reason,
        "max_tokens": max_tokens(body),
        "ttfb_ms": exchange.ttfb_ms,
        "latency_ms": exchange.latency_ms,
        "call_utc": exchange.started_utc,
        "tokenizer": tokenizer_id,
        "tools_sent": [tool_parts(t)[0] for t in view.tools],
        "system_sha256": hashlib.sha256(json.dumps(system_value, ensure_ascii=False).encode()).hexdigest()
        if system_value is not None
        else None,
        "tools_sha256": hashlib.sha256(json.dumps(body.get("tools"), ensure_ascii=False).encode()).hexdigest()
        if body.get("tools") is not None
        else None,
    }
    for key, column in (
        ("cache_write_5m_tokens", "cache_creation_5m_tokens"),
        ("cache_write_1h_tokens", "cache_creation_1h_tokens"),
        ("reasoning_tokens", "reasoning_tokens"),
    ):
        if fields[column] is not None:
            details[key] = fields[column]
    if parsed.error_type:
        details["error_type"] = parsed.error_type
    if exchange.closed_after_answer:
        details["client_closed_after_answer"] = True
    if exchange.via:
        details["transport"] = exchange.via
    if isinstance(body.get("previous_response_id"), str):  # the prompt continues a stored response
        details["previous_response_id"] = body["previous_response_id"]
    if usage is not None and usage.prompt_tokens and components_total:
        details["provider_over_estimate"] = round(usage.prompt_tokens / components_total, 4)
    return details


#: What the proxy itself ran into, as the outcome of the call (the provider's own errors aside).
PROXY_ERRORS = (
    "upstream_unreachable",
    "upstream_timeout",
    "upstream_error",
    "upstream_answer_too_large",
    "proxy_error",
    "client_disconnected",
)


def call_outcome(exchange: Any, parsed: ParsedResponse) -> tuple[str, dict[str, Any] | None]:
    """A call's outcome word and, for a failed call, its ``details["failure"]`` (engine.call_failures):
    ``ok``; ``context_length_exceeded`` or ``provider_error`` from the provider's answer; else what
    the proxy ran into (``client_disconnected``: the agent gave up, an interrupted call)."""
    status = exchange.status
    if exchange.proxy_error is None and status is not None and 200 <= status < 300 and not parsed.error_type:
        return "ok", None
    if exchange.proxy_error:
        outcome = exchange.proxy_error
    else:
        outcome = "context_length_exceeded" if parsed.prompt_too_long else "provider_error"
    cause = classify_failure(
        status, parsed.error_type, parsed.error_message, interrupted=outcome == "client_disconnected"
    )
    if outcome == "context_length_exceeded":
        cause = "prompt_too_long"
    return outcome, failure_details(
        cause,
        status=status,
        message=parsed.error_message or exchange.proxy_error_detail,
        error_type=parsed.error_type,
    )


def is_new_edit(edit: Any) -> bool:
    """Whether a policy edit changed something in this request, rather than sending an earlier edit
    again unchanged (results cleared or offloaded before, a compacted prefix or a live compaction re-sent)."""
    if edit.policy == "live_compaction":
        return False  # the compaction was recorded when it was applied; each request re-sends it
    if edit.policy == "guard" or not edit.changes:
        return True
    return any(c.get("new") or c.get("reused") is False for c in edit.changes)


def record_policy_events(
    store: Any, exchange: Any, session_id: str, message_seq: int | None, provider: str, model: str,
    turn_index: int | None = None,
) -> list[int]:  # fmt: skip
    """Record each policy edit (and keep what it cleared as a blob); returns the event ids. An edit
    made anew in this request is ``compacted`` (drawn on the timeline), one sent again ``kept``."""
    policy = exchange.policy
    if policy is None or not (policy.edits or policy.skipped):
        return []
    for ref, content, tool_name in policy.blobs:
        try:
            store.get_blob(ref, with_content=False)
        except ContextDeskError:
            store.put_blob(session_id, content.encode("utf-8"), tool_name=tool_name, ref_id=ref)
    ids = []
    for edit in policy.edits:
        guard = edit.policy == "guard"
        trigger = "manual" if edit.policy == "live_compaction" else "proxy_policy"
        ids.append(
            store.record_event(
                session_id,
                ContextEvent(
                    kind="guard" if guard else "compaction",
                    trigger=trigger,
                    outcome="rejected" if guard else "compacted" if is_new_edit(edit) else "kept",
                    reason=edit.reason,
                    provider=provider,
                    model=model,
                    turn_index=turn_index,
                    projected_tokens=edit.after_tokens,
                    message_seq=message_seq,
                    details={
                        "policy": edit.policy, "before_tokens": edit.before_tokens,
                        "after_tokens": edit.after_tokens, "changes": list(edit.changes),
                        "strategies_run": [edit.policy], "path": exchange.path,
                    },
                ),
            )
        )  # fmt: skip
    if policy.skipped:
        ids.append(
            store.record_event(
                session_id,
                ContextEvent(
                    kind="note", trigger="proxy_policy", outcome="note", provider=provider, model=model,
                    reason=f"policies configured but not applied by this proxy yet: {', '.join(policy.skipped)}",
                ),
            )
        )  # fmt: skip
    return ids


#: What an applied edit of each type cleared, in the event's words and details.
_CLEARED = {"clear_tool_uses_20250919": "tool use", "clear_thinking_20251015": "thinking turn"}


def record_provider_edits(
    store: Any, session_id: str, wire: Any, parsed: ParsedResponse, usage: ProviderUsage | None, *,
    path: str, measured_tokens: int, provider: str, model: str, turn_index: int | None, message_seq: int | None,
) -> None:  # fmt: skip
    """The provider's own context management on a call, as compaction events (``details.by``
    ``provider``): each applied edit with what it cleared, each server-side compaction with its
    summary; and each compaction iteration the provider billed outside the answer's usage as a
    request event of its own (trigger ``provider_compaction``), so costs count it."""
    iterations = wire.unbilled_iterations(parsed)
    context = _last_context(parsed)
    for edit in wire.provider_edits(parsed):
        if edit.kind == "compaction":
            after = context
            before = measured_tokens
            reason = "the provider compacted the conversation (server-side compaction)"
            if parsed.stop_reason == "compaction":
                reason += "; it paused after compacting (stop_reason compaction)"
        else:
            after = usage.prompt_tokens if usage else None
            before = (
                after + edit.cleared_input_tokens
                if after is not None and edit.cleared_input_tokens
                else after
            )
            what = _CLEARED.get(edit.kind, "item")
            reason = (
                f"the provider cleared {edit.cleared or 0} {what}(s) ({edit.cleared_input_tokens or 0:,} input tokens) "
                f"before the model read the prompt ({edit.kind})"
            )
        store.record_event(
            session_id,
            ContextEvent(
                kind="compaction", trigger="provider", outcome="compacted", reason=reason, provider=provider,
                model=model, turn_index=turn_index, projected_tokens=after, message_seq=message_seq,
                details={
                    "by": "provider", "trigger_kind": "threshold", "edit": edit.kind, "strategies_run": [edit.kind],
                    "before_tokens": before, "after_tokens": after, "cleared": edit.cleared,
                    "cleared_input_tokens": edit.cleared_input_tokens, "summary": edit.summary, "path": path,
                },
            ),
        )  # fmt: skip
    for iteration in iterations:
        store.record_event(
            session_id,
            ContextEvent(
                kind="request", trigger="provider_compaction", outcome="ok", provider=provider, model=model,
                turn_index=turn_index, message_seq=message_seq,
                usage=ProviderUsage(
                    input_tokens=_count(iteration, "input_tokens"), output_tokens=_count(iteration, "output_tokens"),
                    cache_read_input_tokens=_count(iteration, "cache_read_input_tokens"),
                    cache_creation_input_tokens=_count(iteration, "cache_creation_input_tokens"),
                ),
                details={"api": wire.name, "served_by_provider": "compaction", "path": path},
            ),
        )  # fmt: skip


def _count(usage: dict[str, Any], key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _last_context(parsed: ParsedResponse) -> int | None:
    """The prompt of the call's last sampling iteration (the context after a server-side compaction)."""
    iterations = (parsed.usage or {}).get("iterations")
    messages = (
        [i for i in iterations if isinstance(i, dict) and i.get("type") == "message"]
        if isinstance(iterations, list)
        else []
    )
    if not messages:
        return None
    last = messages[-1]
    return sum(
        _count(last, k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    )


def json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data) if data else None
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def exists(store: Any, session_id: str) -> bool:
    try:
        store.get_session(session_id)
    except ContextDeskError:
        return False
    return True


def resolve(model: str, provider: str, settings: Settings | None) -> Any:
    try:
        return resolve_model_settings(model, provider, settings)
    except ContextDeskError:
        return None


def settings_dict(resolved: Any) -> dict[str, Any] | None:
    if resolved is None:
        return None
    return resolved.model_dump(mode="json", exclude={"model_info"})


def max_tokens(body: dict[str, Any]) -> int | None:
    for key in ("max_tokens", "max_output_tokens", "max_completion_tokens"):
        if isinstance(body.get(key), int):
            return int(body[key])
    return None


def title(messages: list[Message]) -> str:
    """The first user words that are not an agent's injected reminder."""
    for message in messages:
        if message.role != "user":
            continue
        texts = (
            [message.content]
            if isinstance(message.content, str)
            else [getattr(b, "text", "") for b in message.content]
        )
        for text in texts:
            text = text.strip()
            if text and not text.startswith("<"):
                return text.splitlines()[0][:100]
    return "proxied session"


def tool_record(tool: dict[str, Any], tokenizer: Any) -> ToolRecord:
    name = tool_parts(tool)[0] or str(tool.get("type", "tool"))
    category, server = "builtin", None
    if name.startswith("mcp__"):
        category, server = "mcp", name.split("__")[1] if name.count("__") >= 2 else None
    elif name == "Skill":
        category = "skill"
    return ToolRecord(
        name=name, category=category, server=server, tokens=tokenizer.count_tool(tool), definition=tool
    )
