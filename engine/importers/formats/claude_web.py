"""Claude.ai data exports (``conversations.json`` from Settings → Export data).

A JSON list of conversations ``{uuid, name, created_at, updated_at, chat_messages}``; each
message has a ``sender`` (human / assistant), ``text``, ``content`` blocks (text, and the
app's own server-side tool calls and results, kept here as text since the app ran them
inside one reply), and ``attachments`` whose ``extracted_content`` the app sent with the
message. One session per conversation; every assistant message is one model call. The
export names no model and keeps no usage.
"""

from __future__ import annotations

from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, objects_of
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import as_json_text, build_message
from engine.messages import TextBlock


def is_claude_web_export(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(
            isinstance(c, dict) and isinstance(c.get("chat_messages"), list) and "uuid" in c
            for c in value[:20]
        )
    )


def parse_claude_web_export(conversations: list[Any], *, key: str) -> list[ParsedSession]:
    sessions: list[ParsedSession] = []
    empty = 0
    for index, conversation in enumerate(conversations):
        where = f"conversations[{index}]"
        if not isinstance(conversation, dict):
            raise SourceProblem(f"{where}: conversation is {type(conversation).__name__}, not an object")
        session = ParsedSession(
            key=str(conversation.get("uuid") or f"{key}-{index}"), messages=[], provider="anthropic"
        )
        for m, raw in enumerate(conversation.get("chat_messages") or []):
            message = _message(raw, f"{where}.chat_messages[{m}]")
            if message is not None:
                call = CallInfo(details={"usage_not_recorded": True}) if message.role == "assistant" else None
                session.messages.append(ParsedMessage(message, call=call))
        if not session.messages:
            empty += 1
            continue
        session.metadata.update(
            {
                k: v
                for k, v in {
                    "title": conversation.get("name"),
                    "started_utc": conversation.get("created_at"),
                    "updated_utc": conversation.get("updated_at"),
                }.items()
                if v
            }
        )
        session.notes.append("a claude.ai export names no model and keeps no usage")
        sessions.append(session)
    if not sessions:
        raise SourceProblem(f"a claude.ai export whose {empty} conversation(s) hold no messages")
    return sessions


def _message(raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise SourceProblem(f"{where}: message is {type(raw).__name__}, not an object")
    sender = raw.get("sender")
    if sender not in ("human", "assistant"):
        raise SourceProblem(f"{where}: sender {sender!r} is not human or assistant")
    blocks: list[TextBlock] = []
    content = raw.get("content")
    if isinstance(content, list) and content:
        for block in content:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                blocks.append(TextBlock(text=str(block.get("text") or "")))
            elif kind == "tool_use":
                blocks.append(
                    TextBlock(text=f"[tool_use {block.get('name')}] {as_json_text(block.get('input'))}")
                )
            elif kind == "tool_result":
                inner = block.get("content")
                text = (
                    "\n".join(str(p.get("text") or "") for p in inner if isinstance(p, dict))
                    if isinstance(inner, list)
                    else str(inner or "")
                )
                blocks.append(TextBlock(text=f"[tool_result {block.get('name') or ''}] {text}"))
            elif kind == "thinking":
                continue  # shown in the app, not sent back in later turns
    elif isinstance(raw.get("text"), str) and raw["text"]:
        blocks.append(TextBlock(text=raw["text"]))
    for attachment in raw.get("attachments") or []:
        if isinstance(attachment, dict) and attachment.get("extracted_content"):
            name = attachment.get("file_name") or "attachment"
            blocks.append(
                TextBlock(
                    text=f"<attachment name={name!r}>\n{attachment['extracted_content']}\n</attachment>"
                )
            )
    blocks = [b for b in blocks if b.text]
    if not blocks:
        return None
    role = "user" if sender == "human" else "assistant"
    meta = {k: raw[k] for k in ("uuid", "created_at") if raw.get(k)}
    if raw.get("created_at"):
        meta["timestamp"] = raw["created_at"]  # when it was said: the call's and session's time
    return build_message(role, blocks if len(blocks) > 1 else blocks[0].text, where=where, meta=meta)


def sniff(doc: Document) -> bool:
    return is_claude_web_export(objects_of(doc))


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_claude_web_export(objects_of(doc) or [], key=key)


FORMAT = ImportFormat(
    name="claude-web",
    agent="claude.ai",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="data export `conversations.json`",
)
