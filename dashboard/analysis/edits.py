"""What a proxy policy or a live compaction changed in a call (pure): the agent's request against
what the model received, as text, as a diff and as savings. Inputs are
:func:`dashboard.data.call_detail` values."""

from __future__ import annotations

import difflib
import json
from typing import Any

from engine.tokens import get_tokenizer


def part_text(value: Any) -> str:
    """Readable text of a system prompt, a message's content or a tool result."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n\n".join(part_text(v) for v in value)
    if isinstance(value, dict):
        for key in ("text", "thinking"):
            if isinstance(value.get(key), str):
                return value[key]
        if "content" in value:
            return part_text(value["content"])
        if value.get("type") in ("tool_use", "function_call"):
            args = value.get("input", value.get("arguments"))
            return f"[{value.get('type')}] {value.get('name')}({json.dumps(args, ensure_ascii=False)})"
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def edit_diff(original: dict[str, Any], sent: dict[str, Any], *, context: int = 1) -> str:
    """A unified diff of what the agent sent against what the model received, message by message."""

    def lines(detail: dict[str, Any]) -> list[str]:
        out = [f"system: {part_text(detail['system'])}"] if detail.get("system") is not None else []
        for index, message in enumerate(detail["messages"]):
            role = message.get("role", message.get("type", "?")) if isinstance(message, dict) else "?"
            out += [f"[{index}] {role}: {line}" for line in (part_text(message) or "").splitlines() or [""]]
        return out

    return "\n".join(
        difflib.unified_diff(
            lines(original), lines(sent), "agent sent", "model received", n=context, lineterm=""
        )
    )


def edit_savings(original: dict[str, Any], sent: dict[str, Any]) -> dict[str, int]:
    """Messages, bytes and tokens (our count of the messages' text) the agent sent vs the model received."""
    tokenizer = get_tokenizer("anthropic")

    def tokens(detail: dict[str, Any]) -> int:
        return sum(tokenizer.count(part_text(m)) for m in detail["messages"])

    agent, model = tokens(original), tokens(sent)
    return {
        "agent_messages": len(original["messages"]), "model_messages": len(sent["messages"]),
        "agent_bytes": int(original["row"].get("request_bytes") or 0),
        "model_bytes": int(sent["row"].get("request_bytes") or 0),
        "agent_tokens": agent, "model_tokens": model, "tokens_saved": agent - model,
    }  # fmt: skip
