"""A scripted Anthropic Messages server that does the provider's own context management, built from
the documented shapes (the anthropic SDK's beta types: ``BetaContextManagementResponse``,
``BetaClearToolUses20250919EditResponse``, ``BetaCompactionBlock``, ``compaction_delta``,
``BetaIterationsUsage``):

- ``clear_tool_uses_20250919``: over its trigger (input tokens), the oldest tool results beyond the
  ``keep`` most recent tool uses are cleared server-side; the answer's ``context_management`` says
  how many and how many input tokens (on ``message_delta`` when streaming);
- ``compact_20260112``: over its trigger, the answer starts with a ``compaction`` block (its summary;
  ``compaction_delta`` when streaming), ``stop_reason`` is ``compaction`` with ``pause_after_compaction``,
  and ``usage.iterations`` holds the compaction's own usage (not in the top-level usage) and the
  message's, whose prompt is the compacted context.

``install(server)`` adds the route; the server's ``state["native"]`` keeps what each call did.
"""

from __future__ import annotations

from typing import Any

from model_server import HttpReply, RecordedRequest, ScriptedServer, sse_events
from model_server.anthropic import estimate_prompt_tokens

#: The compacted context's size the server reports after a compaction.
COMPACTED_TOKENS = 420
SUMMARY = "The user asked for the files to be read; f0 to f5 were read and all hold test data."


def _threshold(edit: dict[str, Any], default: int) -> int:
    trigger = edit.get("trigger") or {}
    return int(trigger.get("value", default)) if isinstance(trigger, dict) else default


def _clear_tool_uses(body: dict[str, Any], edit: dict[str, Any], prompt: int) -> dict[str, Any] | None:
    if prompt <= _threshold(edit, 100_000):
        return None
    keep = int((edit.get("keep") or {}).get("value", 3))
    uses = [b["id"] for m in body["messages"] if isinstance(m.get("content"), list)
            for b in m["content"] if b.get("type") == "tool_use"]  # fmt: skip
    kept = set(uses[len(uses) - keep :]) if keep else set()
    cleared = [
        b for m in body["messages"] if isinstance(m.get("content"), list) for b in m["content"]
        if b.get("type") == "tool_result" and b.get("tool_use_id") not in kept
    ]  # fmt: skip
    tokens = sum(estimate_prompt_tokens({"messages": [{"content": b.get("content")}]}) for b in cleared)
    return {
        "type": "clear_tool_uses_20250919",
        "cleared_tool_uses": len(cleared),
        "cleared_input_tokens": tokens,
    }


def handle(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    body = request.body if isinstance(request.body, dict) else {}
    edits = (body.get("context_management") or {}).get("edits") or []
    prompt = estimate_prompt_tokens(body)
    applied = [
        a
        for e in edits
        if e.get("type") == "clear_tool_uses_20250919" and (a := _clear_tool_uses(body, e, prompt))
    ]
    compact = next(
        (e for e in edits if e.get("type") == "compact_20260112" and prompt > _threshold(e, 150_000)), None
    )
    content: list[dict[str, Any]] = []
    usage: dict[str, Any] = {"input_tokens": prompt - sum(a["cleared_input_tokens"] for a in applied),
                             "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 12}  # fmt: skip
    stop_reason = "end_turn"
    if compact is not None:
        content.append({"type": "compaction", "content": SUMMARY})
        message_usage = {"type": "message", "input_tokens": COMPACTED_TOKENS, "output_tokens": 12,
                         "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}  # fmt: skip
        usage = {k: v for k, v in message_usage.items() if k != "type"}
        usage["iterations"] = [
            {"type": "compaction", "input_tokens": prompt, "output_tokens": 180, "cache_creation_input_tokens": 0,
             "cache_read_input_tokens": 0},
            message_usage,
        ]  # fmt: skip
        if compact.get("pause_after_compaction"):
            stop_reason = "compaction"
    if stop_reason != "compaction":
        content.append({"type": "text", "text": "Done."})
    message = {
        "id": f"msg_native_{server.counter('message'):04d}", "type": "message", "role": "assistant",
        "model": body.get("model"), "content": content, "stop_reason": stop_reason, "stop_sequence": None,
        "usage": usage,
    }  # fmt: skip
    if applied:
        message["context_management"] = {"applied_edits": applied}
    server.state.setdefault("native", []).append(
        {"applied": applied, "compacted": compact is not None, "prompt": prompt}
    )
    if not body.get("stream"):
        return HttpReply(200, message)
    return HttpReply(200, None, chunks=sse_events(_events(message)), content_type="text/event-stream")


def _events(message: dict[str, Any]) -> list[tuple[str, Any]]:
    start = {**message, "content": [], "stop_reason": None, "usage": {**message["usage"], "output_tokens": 1}}
    start.pop("context_management", None)
    events: list[tuple[str, Any]] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "compaction":
            first, delta = (
                {"type": "compaction", "content": None},
                {"type": "compaction_delta", "content": block["content"]},
            )
        else:
            first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
        events += [
            ("content_block_start", {"type": "content_block_start", "index": index, "content_block": first}),
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}),
            ("content_block_stop", {"type": "content_block_stop", "index": index}),
        ]
    tail: dict[str, Any] = {"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                            "usage": message["usage"]}  # fmt: skip
    if "context_management" in message:
        tail["context_management"] = message["context_management"]
    return [*events, ("message_delta", tail), ("message_stop", {"type": "message_stop"})]


def install(server: ScriptedServer) -> ScriptedServer:
    server.add_route("POST", "/v1/messages", handle)
    return server
