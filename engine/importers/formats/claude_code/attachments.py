"""Claude Code's attachment lines as the text it sends: listings, re-read files, reminders, hook output.

An attachment line is not a message: Claude Code renders it as ``<system-reminder>`` text and appends
it to the last tool result (or sends it as a text block of its own). :func:`render_attachment` gives
that text as near as the line tells it; :func:`with_attachment` places it the way the requests show.
"""

from __future__ import annotations

import json
from typing import Any

from engine.messages import Message, TextBlock, ToolResultBlock

#: The sentence Claude Code ends its agent listing with (2.1.3xx requests).
AGENT_LISTING_CLOSE = (
    "\n\nWhen you launch multiple agents for independent work, send them in a single message with multiple "
    "tool uses so they run concurrently."
)


def as_reminder(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>"


def render_attachment(attachment: Any) -> str | None:
    """The text Claude Code sends for an attachment line, as near as the line tells it.

    Known kinds: agent and skill listings, files it re-reads after a compaction, edited-file
    notices, the tokens-left reminder and hook context Claude Code folds into tool results, a
    prompt hook's output, the model and the date; others are left out (their rendering is not in
    the file).
    """
    if not isinstance(attachment, dict):
        return None
    kind = attachment.get("type")
    if kind == "agent_listing_delta":
        lines = attachment.get("addedLines") or []
        if not lines:
            return None
        return as_reminder(
            "Available agent types for the Agent tool:\n" + "\n".join(map(str, lines)) + AGENT_LISTING_CLOSE
        )
    if kind == "skill_listing":
        content = attachment.get("content")
        if not content:
            return None
        return as_reminder(f"The following skills are available for use with the Skill tool:\n\n{content}")
    if kind in ("file", "edited_text_file", "compact_file_reference"):
        name = attachment.get("filename") or attachment.get("path") or ""
        body = attachment.get("content")
        if isinstance(body, dict):
            file = body.get("file") if isinstance(body.get("file"), dict) else body
            text = file.get("content") if isinstance(file, dict) else None
            body = text if isinstance(text, str) else json.dumps(body, ensure_ascii=False)
        if kind == "compact_file_reference" or body is None:
            return as_reminder(f"Note: {name} was read before the last conversation was summarized.")
        call = json.dumps({"file_path": name}, ensure_ascii=False, separators=(",", ":"))
        return "\n".join(
            [
                as_reminder(f"Called the Read tool with the following input: {call}"),
                as_reminder(f"Result of calling the Read tool:\n{body}"),
            ]
        )
    if kind in ("total_tokens_reminder", "model") and isinstance(attachment.get("text"), str):
        return as_reminder(attachment["text"] + ("\n" if kind == "model" else ""))
    if kind in ("hook_success", "hook_additional_context"):  # a hook's output the model reads
        content = attachment.get("content")
        text = "\n".join(map(str, content)) if isinstance(content, list) else content
        if not isinstance(text, str) or not text:
            return None
        what = "hook success" if kind == "hook_success" else "hook additional context"
        return as_reminder(f"{attachment.get('hookName') or attachment.get('hookEvent')} {what}: {text}")
    if kind == "date" and isinstance(attachment.get("date"), str):
        return as_reminder(f"Today's date is {attachment['date']}.")
    if kind in ("todo_reminder", "critical_system_reminder", "queued_command", "nested_memory", "plan_mode"):
        content = attachment.get("content") or attachment.get("prompt")
        if isinstance(content, str) and content:
            return as_reminder(content)
    return None


def with_attachment(message: Message, block: TextBlock) -> Message:
    """``message`` with an attachment's text: after a tool result, Claude Code appends it to that
    result (to its text, or as a text block of a result made of blocks, as its requests show);
    otherwise it is a text block of its own."""
    last = message.blocks[-1] if message.blocks else None
    if isinstance(last, ToolResultBlock) and isinstance(last.content, str):
        # the result's trailing whitespace goes, then a blank line and the reminder; an empty
        # result is left out (1.0.108's cli.js joins the trimmed, non-empty parts with "\n\n")
        output = last.content.rstrip()
        merged = last.model_copy(update={"content": f"{output}\n\n{block.text}" if output else block.text})
        return message.with_content([*message.blocks[:-1], merged])
    if isinstance(last, ToolResultBlock) and isinstance(last.content, list):  # a block of its own in it
        content = list(last.content)
        if content and isinstance(content[-1], TextBlock):  # the text before it ends its line
            content[-1] = content[-1].model_copy(update={"text": content[-1].text + "\n"})
        merged = last.model_copy(update={"content": [*content, block]})
        return message.with_content([*message.blocks[:-1], merged])
    return message.with_content([*message.blocks, block])
