"""OpenHands event lists and evaluation output lines (``history`` of events with ids and sources).

Actions with ``tool_call_metadata`` are the model's tool calls: actions of one model response
merge into one assistant message carrying that response's usage. Observations answering a
tool call become tool results; message actions become user or assistant text; the
``system`` action gives the system prompt and the tool definitions. Bookkeeping events
(agent state changes, null observations, recalls) are skipped. Per-call usage comes from
each response's ``usage``, else from ``metrics.token_usages`` by response id.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.importers.formats import SNIFF_LINES
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, openai_usage, provider_of, tool_arguments
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock

_TEXT_FROM_ENVIRONMENT = ("error",)


def parse_openhands_events(
    events: list[Any], *, key: str, token_usages: list[Any] | None = None, configured_model: str | None = None
) -> ParsedSession:
    usages_by_response = {
        u.get("response_id"): u for u in token_usages or [] if isinstance(u, dict) and u.get("response_id")
    }
    messages: list[ParsedMessage] = []
    by_response: dict[str, ParsedMessage] = {}
    models: Counter[str] = Counter()
    system_prompt: str | None = None
    tools: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    condensation: dict[str, Any] | None = None
    for index, event in enumerate(events):
        if condensation is not None and len(messages) > condensation["at"]:
            first = messages[condensation.pop("at")]
            first.starts_context, first.compaction = True, condensation
            condensation = None
        where = f"event {event.get('id', index) if isinstance(event, dict) else index}"
        if not isinstance(event, dict):
            raise SourceProblem(f"{where}: event is {type(event).__name__}, not an object")
        metadata = event.get("tool_call_metadata")
        action = event.get("action")
        if action == "condensation":
            args = event.get("args") if isinstance(event.get("args"), dict) else {}
            forgotten = args.get("forgotten_event_ids") or []
            start, end = args.get("forgotten_events_start_id"), args.get("forgotten_events_end_id")
            count = (
                len(forgotten)
                if forgotten
                else (end - start + 1 if isinstance(start, int) and isinstance(end, int) else None)
            )
            summary = args.get("summary")
            condensation = {
                "at": len(messages), "summary": summary, "forgotten_events": count, "source": "openhands",
                "reason": "OpenHands condenser forgot earlier events",
            }  # fmt: skip
            if isinstance(summary, str) and summary:
                meta = {**event_meta(event), "compaction_summary": True}
                messages.append(ParsedMessage(build_message("user", summary, where=where, meta=meta)))
            continue
        if action == "system":
            args = event.get("args") or {}
            system_prompt = args.get("content") or event.get("message")
            tools = [t for t in args.get("tools") or [] if isinstance(t, dict)]
        elif action is not None and isinstance(metadata, dict):
            response = (
                metadata.get("model_response") if isinstance(metadata.get("model_response"), dict) else {}
            )
            response_id = response.get("id")
            use = _tool_use(event, metadata, response, where)
            existing = by_response.get(response_id) if response_id else None
            if existing is not None:
                existing.message = existing.message.with_content([*existing.message.blocks, use])
                continue
            model = response.get("model")
            if model:
                models[model] += 1
            usage = openai_usage(response.get("usage")) or openai_usage(usages_by_response.get(response_id))
            text = _response_text(response) or str((event.get("args") or {}).get("thought") or "")
            blocks = [TextBlock(text=text), use] if text else [use]
            message = build_message("assistant", blocks, where=where, id=response_id, meta=event_meta(event))
            pm = ParsedMessage(
                message, call=CallInfo(usage=usage, model=model, details={"response_id": response_id})
            )
            messages.append(pm)
            if response_id:
                by_response[response_id] = pm
        elif action == "message":
            args = event.get("args") or {}
            text = str(args.get("content") or event.get("message") or "")
            if event.get("source") == "agent":
                message = build_message("assistant", text, where=where, meta=event_meta(event))
                messages.append(ParsedMessage(message, call=CallInfo(details={"usage_not_recorded": True})))
            elif text:
                messages.append(
                    ParsedMessage(build_message("user", text, where=where, meta=event_meta(event)))
                )
        elif "observation" in event and isinstance(metadata, dict) and metadata.get("tool_call_id"):
            result = ToolResultBlock(
                tool_use_id=str(metadata["tool_call_id"]), content=observation_text(event)
            )
            messages.append(
                ParsedMessage(build_message("user", [result], where=where, meta=event_meta(event)))
            )
        elif event.get("observation") in _TEXT_FROM_ENVIRONMENT and event.get("content"):
            messages.append(
                ParsedMessage(
                    build_message("user", str(event["content"]), where=where, meta=event_meta(event))
                )
            )
        else:
            skipped[str(action or f"observation:{event.get('observation')}")] += 1
    if condensation is not None and len(messages) > condensation["at"]:
        first = messages[condensation.pop("at")]
        first.starts_context, first.compaction = True, condensation
    model = models.most_common(1)[0][0] if models else configured_model
    provider = provider_of(configured_model) or provider_of(model)
    session = ParsedSession(
        key=key, messages=messages, model=model, provider=provider, system_prompt=system_prompt, tools=tools
    )
    session.notes.extend(f"skipped {n} {kind!r} event(s)" for kind, n in sorted(skipped.items()))
    if system_prompt is None:  # an older file: no SystemMessageAction, though every call sent one
        session.unlogged_prefix_in = "system"
        session.notes.append(
            "no system prompt or tool definitions in the file (older OpenHands): their size is measured "
            "from the provider's count"
        )
    return session


def parse_openhands_record(record: dict[str, Any], *, key: str) -> ParsedSession:
    """One evaluation output line: ``history`` plus ``metrics.token_usages`` and run metadata."""
    metrics = record.get("metrics") if isinstance(record.get("metrics"), dict) else {}
    meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
    llm = meta.get("llm_config") if isinstance(meta.get("llm_config"), dict) else {}
    session = parse_openhands_events(
        record["history"],
        key=key,
        token_usages=metrics.get("token_usages"),
        configured_model=llm.get("model"),
    )
    extra = {
        "instance_id": record.get("instance_id"),
        "agent_class": meta.get("agent_class"),
        "configured_model": llm.get("model"),
        "accumulated_token_usage": metrics.get("accumulated_token_usage"),
        "token_usage_count": len(metrics.get("token_usages") or []),
        "error": record.get("error"),
    }
    session.metadata.update({k: v for k, v in extra.items() if v is not None})
    agent_costs(session, metrics)
    return session


def agent_costs(session: ParsedSession, metrics: dict[str, Any]) -> None:
    """What OpenHands itself says the run cost (``metrics.accumulated_cost``, its own prices):
    the session's ``agent_cost_usd``; ``metrics.costs`` (one per model call, in order) each
    call's, when there is one per call."""
    total = metrics.get("accumulated_cost")
    if isinstance(total, (int, float)) and not isinstance(total, bool):
        session.metadata["agent_cost_usd"] = round(float(total), 6)
        session.metadata["agent_cost_source"] = "openhands metrics.accumulated_cost"
    costs = metrics.get("costs")
    calls = [pm.call for pm in session.messages if pm.call is not None]
    if isinstance(costs, list) and len(costs) == len(calls) and calls:
        for call, cost in zip(calls, costs, strict=True):
            if isinstance(cost, (int, float)) and not isinstance(cost, bool):
                call.details["agent_cost_usd"] = round(float(cost), 6)


def _tool_use(
    event: dict[str, Any], metadata: dict[str, Any], response: dict[str, Any], where: str
) -> ToolUseBlock:
    call_id = metadata.get("tool_call_id")
    name = metadata.get("function_name")
    if not call_id or not name:
        raise SourceProblem(f"{where}: tool_call_metadata without tool_call_id or function_name")
    arguments: dict[str, Any] | None = None
    for choice in response.get("choices") or []:
        for call in ((choice or {}).get("message") or {}).get("tool_calls") or []:
            if isinstance(call, dict) and call.get("id") == call_id:
                arguments = tool_arguments((call.get("function") or {}).get("arguments"))
    if arguments is None:
        arguments = {k: v for k, v in (event.get("args") or {}).items() if k != "thought"}
    return ToolUseBlock(id=str(call_id), name=str(name), input=arguments)


def _response_text(response: dict[str, Any]) -> str:
    for choice in response.get("choices") or []:
        content = ((choice or {}).get("message") or {}).get("content")
        if isinstance(content, str) and content:
            return content
    return ""


def observation_text(event: dict[str, Any]) -> str:
    """What the model saw: an editor's formatted output (its ``content`` is a diff for the UI),
    else the content with a command's prefix/suffix notes around it."""
    extras = event.get("extras") if isinstance(event.get("extras"), dict) else {}
    formatted = extras.get("formatted_output_and_error")
    if isinstance(formatted, str) and formatted:
        return formatted
    text = str(event.get("content") or "")
    cmd = extras.get("metadata") if isinstance(extras.get("metadata"), dict) else {}
    return f"{cmd.get('prefix') or ''}{text}{cmd.get('suffix') or ''}"


def event_meta(event: dict[str, Any]) -> dict[str, Any]:
    meta = {
        "event_id": event.get("id"),
        "timestamp": event.get("timestamp"),
        "source": event.get("source"),
        "action": event.get("action"),
        "observation": event.get("observation"),
    }
    return {k: v for k, v in meta.items() if v is not None}


def is_openhands_record(value: Any) -> bool:
    """An OpenHands evaluation output line: ``history`` events plus instance or metrics."""
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and ("instance_id" in value or "metrics" in value)
        and all(isinstance(e, dict) for e in value["history"][:SNIFF_LINES])
        and not any("role" in e for e in value["history"][:SNIFF_LINES])
    )


def is_openhands_event(value: Any) -> bool:
    return isinstance(value, dict) and ("action" in value or "observation" in value) and "source" in value
