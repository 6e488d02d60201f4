"""Gemini API (``/v1beta/models/MODEL:streamGenerateContent?alt=sse``) for the scripted model server.

A scripted reply is a list of parts as the API has them, in a short form::

    [{"thought": "Checking the files"}, {"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}},
     {"text": "Done."}]

(a plain string is one text part; ``{"error": {"code", "status", "message"}}`` answers that error;
``{"parts": [...], "usage": {...}}`` overrides usageMetadata keys,
e.g. a prompt near the window to make the CLI compress its history). Streamed answers carry ``usageMetadata`` derived from the
request (prompt = characters of ``contents`` + ``systemInstruction`` + ``tools`` / 4; cached =
the previous streamed call's prompt when this one extends it; thoughts counted apart).
Side calls to ``:generateContent`` (Gemini CLI's model router, next-speaker checks) do not
take script items: they answer JSON built from the request's response schema. ``:countTokens``
answers the same estimate.
"""

from __future__ import annotations

import json
from typing import Any

from .core import HttpReply, RecordedRequest, ScriptedServer, sse_events

PATH_PREFIX = "/v1beta/models/"
CHARS_PER_TOKEN = 4
ANSWERED = "gemini_usage"  # server.state key: seq -> the usageMetadata answered (streamed calls)


def prompt_tokens(body: dict[str, Any]) -> int:
    sent = {k: body.get(k) for k in ("contents", "systemInstruction", "tools")}
    return max(1, len(json.dumps(sent, ensure_ascii=False)) // CHARS_PER_TOKEN)


def full_parts(reply: list[Any]) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for part in reply:
        if isinstance(part, str):
            parts.append({"text": part})
        elif "thought" in part and isinstance(part["thought"], str):
            parts.append({"text": part["thought"], "thought": True})
        else:
            parts.append(dict(part))
    return parts


def usage_for(body: dict[str, Any], parts: list[dict[str, Any]], previous_prompt: int) -> dict[str, Any]:
    prompt = prompt_tokens(body)
    thoughts = sum(max(1, len(p["text"]) // CHARS_PER_TOKEN) for p in parts if p.get("thought"))
    candidates = sum(
        max(1, len(json.dumps(p, ensure_ascii=False)) // CHARS_PER_TOKEN)
        for p in parts
        if not p.get("thought")
    )
    usage = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    cached = min(previous_prompt, prompt)
    if cached:
        usage["cachedContentTokenCount"] = cached
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return usage


def stream_chunks(
    body: dict[str, Any], reply: list[Any], *, model: str, previous_prompt: int = 0, response_id: str = "resp"
) -> list[dict[str, Any]]:
    """The streamed GenerateContentResponse chunks: one per part, usage on the last."""
    parts = full_parts(reply)
    chunks: list[dict[str, Any]] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": [part]}, "index": 0}
        if last:
            candidate["finishReason"] = "STOP"
        chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
        if last:
            chunk["usageMetadata"] = usage_for(body, parts, previous_prompt)
        chunks.append(chunk)
    return chunks


def instance_of(schema: Any) -> Any:
    """A small value matching a JSON schema (or a Gemini ``Schema`` with upper-case types)."""
    if not isinstance(schema, dict):
        return "ok"
    if schema.get("enum"):
        return schema["enum"][0]
    kind = str(schema.get("type") or ("object" if "properties" in schema else "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: instance_of(sub) for name, sub in props.items()}
    if kind == "array":
        return [instance_of(schema.get("items"))] if schema.get("minItems") else []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    return "ok"


def compression_snapshot(body: dict[str, Any]) -> str | None:
    """The answer to Gemini CLI's chat compression calls (their system instruction asks for a
    ``<state_snapshot>``): a snapshot naming the first request of the history; the verification
    call (the snapshot is the last model turn) gets the same snapshot again. None: not one."""
    system = json.dumps(body.get("systemInstruction") or "")
    if "state_snapshot" not in system:
        return None
    contents = body.get("contents") or []
    for content in contents[-3:]:
        for part in content.get("parts") or []:
            if content.get("role") == "model" and "<state_snapshot>" in str(part.get("text")):
                return str(part["text"])
    texts = [p.get("text", "") for c in contents if c.get("role") == "user" for p in c.get("parts") or []]
    asked = next((t for t in texts if t and not t.startswith("<session_context>")), "")
    return f"<state_snapshot>\n<overall_goal>{asked[:200]}</overall_goal>\n</state_snapshot>"


def side_call_answer(body: dict[str, Any]) -> dict[str, Any]:
    config = body.get("generationConfig") or {}
    schema = config.get("responseJsonSchema") or config.get("responseSchema")
    text = json.dumps(instance_of(schema)) if schema else (compression_snapshot(body) or "ok")
    # The router's schema asks for a model choice: keep the main model on the scripted path.
    if schema and "model_choice" in (schema.get("properties") or {}):
        text = json.dumps({"reasoning": "scripted", "model_choice": "flash"})
    return {
        "candidates": [
            {"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}
        ],
        "usageMetadata": {
            "promptTokenCount": prompt_tokens(body),
            "candidatesTokenCount": 8,
            "totalTokenCount": 8,
        },
    }


def handle_models(server: ScriptedServer, request: RecordedRequest) -> HttpReply:
    name, _, method = request.path.removeprefix(PATH_PREFIX).partition(":")
    body = request.body if isinstance(request.body, dict) else {}
    if method == "countTokens":
        return HttpReply(200, {"totalTokens": prompt_tokens(body.get("generateContentRequest") or body)})
    if method == "generateContent":
        return HttpReply(200, side_call_answer(body))
    if method != "streamGenerateContent":
        return HttpReply(
            404, {"error": {"code": 404, "message": f"unknown method {method!r}", "status": "NOT_FOUND"}}
        )
    item = server.next_item(request)
    if item is None:
        return HttpReply(
            500, {"error": {"code": 500, "message": "the script has no reply left", "status": "INTERNAL"}}
        )
    if isinstance(item, dict) and "error" in item:  # {"error": {"code": 400, "status", "message"}}
        error = {"code": 500, "status": "INTERNAL", "message": "scripted error", **item["error"]}
        return HttpReply(int(error["code"]), {"error": error})
    override: dict[str, Any] = {}
    if isinstance(item, dict) and "parts" in item:  # {"parts": [...], "usage": {usageMetadata keys}}
        override, item = dict(item.get("usage") or {}), item["parts"]
    reply = [item] if isinstance(item, str) else list(item)
    index = server.counter("gemini-stream")
    chunks = stream_chunks(
        body,
        reply,
        model=name,
        previous_prompt=server.state.get("gemini_prompt", 0),
        response_id=f"resp-{index:04d}",
    )
    chunks[-1]["usageMetadata"].update(override)
    server.state["gemini_prompt"] = chunks[-1]["usageMetadata"]["promptTokenCount"]
    server.state.setdefault(ANSWERED, {})[request.seq] = chunks[-1]["usageMetadata"]
    return HttpReply(200, chunks=sse_events((None, c) for c in chunks), content_type="text/event-stream")


def answered_usages(server: ScriptedServer) -> dict[int, dict[str, Any]]:
    """The usageMetadata answered to each streamed request, by the request's ``seq``."""
    with server._lock:
        return dict(server.state.get(ANSWERED, {}))


def install(server: ScriptedServer) -> ScriptedServer:
    server.add_route("POST", PATH_PREFIX + "*", handle_models)
    return server
