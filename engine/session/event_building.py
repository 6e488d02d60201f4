"""Building the events the session manager records: one ``request`` event per model call (with
``details.messages_sent``, as the importers write it), the note the model was shown, a resume.

Pure: values in, :class:`ContextEvent` out.
"""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any

from engine.budget import ContextBudget
from engine.clients import ModelRequest, ModelResponse
from engine.components import reconcile_call
from engine.convert import sent_system_text
from engine.events import ContextEvent
from engine.prompt import count_cache_breakpoints
from engine.session.assembly import RequestView
from engine.settings import ResolvedModelSettings


def settings_snapshot(resolved: ResolvedModelSettings) -> dict[str, Any]:
    """Resolved settings as stored in ``sessions.settings_json``: values, derived limits, sources."""
    data = resolved.model_dump(mode="json", exclude={"model_info"})
    data.update(
        effective_window=resolved.limit.tokens,  # the old names, kept for stored readers: both the limit
        budget_tokens=resolved.limit.tokens,
        limit_tokens=resolved.limit.tokens,
        compact_tokens=resolved.compact_tokens,
        hard_block_tokens=resolved.hard_block_tokens,
    )
    return data


def request_event(
    view: RequestView,
    settings: ResolvedModelSettings,
    request: ModelRequest,
    *,
    provider: str | None,
    trigger: str,
    outcome: str,
    step: int,
    messages_sent: int,
    deferred_tools: int,
    summary_injected: bool,
    tokenizer_id: str,
    response: ModelResponse | None = None,
    reason: str | None = None,
) -> ContextEvent:
    """The ``request`` event of one model call: what it sent (``messages_sent`` transcript
    messages, by component) and, when it answered, the provider's usage."""
    budget = ContextBudget.from_settings(settings, view.components)
    usage = response.usage if response else None
    details: dict[str, Any] = {
        "step": step,
        "messages_sent": messages_sent,
        "tools_sent": [str(t.get("name")) for t in view.tools],
        "deferred_tools": 0 if view.final else deferred_tools,
        "cache_breakpoints": (
            request.cache_breakpoints
            if request.cache_breakpoints is not None
            else count_cache_breakpoints(request.payload)
        ),
        # what the cache analysis compares between calls (engine.cache_analysis): a changed or
        # reordered tool list, a changed system prompt
        "system_sha256": hashlib.sha256(_sent_system(request).encode("utf-8")).hexdigest(),
        "tools_sha256": hashlib.sha256(
            json.dumps(list(request.tools), sort_keys=True, separators=(",", ":")).encode("utf-8")
        ).hexdigest(),
        "summary_injected": summary_injected,
        "note": view.note,
        "final_forced": view.final,
        "level": budget.level,
        "tokenizer": tokenizer_id,
    }
    if response is not None:
        details["stop_reason"] = response.stop_reason
        if response.model:
            details["provider_model"] = response.model
    if usage is not None and usage.prompt_tokens and view.components.total:
        details["provider_over_estimate"] = round(usage.prompt_tokens / view.components.total, 4)
    # the manager built every byte it sent: a gap to the provider's count is our count's error,
    # spread over the components (none of it is harness text we did not see)
    components, basis = reconcile_call(
        view.components,
        usage.prompt_tokens if usage else None,
        exact_tokenizer=view.prompt.tokenizer.exact,
        max_scale_up=math.inf,
    )
    return ContextEvent(
        kind="request",
        trigger=trigger,
        outcome=outcome,
        reason=reason,
        provider=provider,
        model=request.model,
        **budget.limit.columns(),
        projected_tokens=view.components.total,
        remaining_tokens=budget.remaining,
        components=components,
        components_basis=basis,
        usage=usage,
        details=details,
    )


def note_event(view: RequestView) -> ContextEvent:
    """The context-status note the model is shown once the note threshold is crossed."""
    return ContextEvent(
        kind="note",
        trigger="note_threshold",
        outcome="added",
        reason=view.note,
        limit_tokens=view.budget.limit.tokens,
        projected_tokens=view.components.total,
        remaining_tokens=view.budget.remaining,
        details={"pct": view.budget.used_pct, "section": "context_status"},
    )


def resume_event(
    view: RequestView,
    settings: ResolvedModelSettings,
    *,
    through_seq: int,
    history_messages: int,
    transcript_messages: int,
    summary: bool,
    status: str,
) -> ContextEvent:
    """A session continued from its latest snapshot plus later messages (or its whole transcript)."""
    return ContextEvent(
        kind="resume",
        outcome="resumed",
        reason="latest snapshot plus later messages" if through_seq >= 0 else "full transcript",
        model=settings.model,
        provider=settings.provider,
        limit_tokens=view.budget.limit.tokens,
        projected_tokens=view.components.total,
        remaining_tokens=view.budget.remaining,
        components=view.components,
        components_basis="estimate",
        message_seq=transcript_messages - 1 if transcript_messages else None,
        details={
            "snapshot_through_seq": through_seq if through_seq >= 0 else None,
            "history_messages": history_messages,
            "transcript_messages": transcript_messages,
            "summary": summary,
            "status": status,
        },
    )


def _sent_system(request: ModelRequest) -> str:
    """The system prompt the provider received: the payload's (without the volatile context status,
    which the Anthropic body sends after the conversation), else the request's own text."""
    sent = sent_system_text(dict(request.payload)) if request.payload else None
    return request.system if sent is None else sent
