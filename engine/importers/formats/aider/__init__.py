"""Aider: its chat log (``.aider.chat.history.md``, :mod:`.chat_log`) and, when Aider was run with
``--llm-history-file .aider.llm.history``, the exact requests beside it (:mod:`.llm_history`).

With the LLM history, each session's calls are rebuilt from what Aider sent: the conversation
(the user's inputs, the replies, the command outputs and edit confirmations Aider adds, a
resumed chat's restored history) is the transcript, and each call's framing (Aider's prompts,
repository map, files in the chat, reminder) is that call's system prompt. Calls are placed in
the chat log's sessions by time; the chat log gives each call's token counts (rounded).
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path

from engine.importers.documents import Document
from engine.importers.formats import Beside, ImportFormat
from engine.importers.formats.aider.chat_log import parse_aider
from engine.importers.formats.aider.llm_history import (
    LoggedCall,
    is_llm_history,
    parse_llm_history,
    split_request,
)
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession
from engine.importers.parsing.readers import build_message
from engine.importers.utc_times import local_utc_text
from engine.messages import Message

#: Where this importer looks for the LLM history, beside the chat log.
LLM_HISTORY_NAMES = (".aider.llm.history",)


def llm_history_beside(chat_log: Path) -> Path | None:
    for name in LLM_HISTORY_NAMES:
        path = chat_log.parent / name
        if path.is_file():
            return path
    return None


def parse(doc: Document, key: str) -> list[ParsedSession]:
    sessions = parse_aider(doc.text or "", key=key, path=doc.path)
    history = llm_history_beside(doc.path)
    if history is None:
        return sessions
    text = history.read_text(encoding="utf-8", errors="replace")
    calls = parse_llm_history(text) if is_llm_history(text) else []
    if not calls:
        return sessions
    starts = [_started(s) for s in sessions]
    rebuilt = []
    for index, session in enumerate(sessions):
        begin = starts[index]
        end = next((t for t in starts[index + 1 :] if t is not None), None)
        mine = [
            c for c in calls if (begin is None or c.sent_at >= begin) and (end is None or c.sent_at < end)
        ]
        rebuilt.append(exact_session(session, mine, history.name) if mine else session)
    return rebuilt


def _started(session: ParsedSession) -> datetime | None:
    try:
        return datetime.fromisoformat(str(session.metadata.get("started")))
    except ValueError:
        return None


def exact_session(session: ParsedSession, calls: list[LoggedCall], source: str) -> ParsedSession:
    """``session`` with its messages rebuilt from the requests Aider logged for it."""
    counted = [m.call for m in session.messages if m.call is not None]
    # calls the log shows after each reply (a commit message's): kept after the same reply
    side_calls = [list(m.pending_calls) for m in session.messages if m.call is not None]
    messages: list[ParsedMessage] = []
    conversation: list[tuple[str, str]] = []
    for number, call in enumerate(calls):
        framing, sent = split_request(call.messages)
        restarted = sent[: len(conversation)] != conversation
        new = sent if restarted else sent[len(conversation) :]
        for offset, (role, content) in enumerate(new):
            message = _message(role, content, where=f"{source} call {number + 1}")
            messages.append(ParsedMessage(message, starts_context=restarted and offset == 0 and number > 0))
        conversation = list(sent)
        info = counted[number] if number < len(counted) else CallInfo(model=session.model)
        info.model = info.model or session.model
        sent_utc = local_utc_text(call.sent_at.isoformat())
        if sent_utc is not None:
            info.details["call_utc"] = sent_utc
        info.system_prompt = "\n\n".join(content for _, content in framing)
        if call.reply is None:  # no reply logged (an error, an interrupt): the call happened
            if messages:
                messages[-1].pending_calls.append(info)
            continue
        reply = build_message("assistant", call.reply, where=f"{source} reply {number + 1}")
        messages.append(
            ParsedMessage(
                reply, call=info, pending_calls=side_calls[number] if number < len(side_calls) else []
            )
        )
        conversation.append(("assistant", call.reply))
    started_utc = local_utc_text(str(session.metadata.get("started") or ""))  # the chat log's header
    if started_utc is not None and messages:
        messages[0].message.meta.setdefault("timestamp", started_utc)
    rebuilt = ParsedSession(
        key=session.key,
        messages=messages,
        model=session.model,
        provider=session.provider,
        system_prompt=next((m.call.system_prompt for m in messages if m.call is not None), None),
        metadata={**session.metadata, "llm_history": source},
        notes=[n for n in session.notes if "not logged by Aider" not in n],
    )
    rebuilt.notes.append(
        f"messages rebuilt from Aider's LLM history ({source}): each request as sent, line endings as "
        "Aider logs them; each call's prompts, repository map and files are its system prompt"
    )
    if len(counted) != len(calls):
        rebuilt.notes.append(
            f"the chat log counts {len(counted)} call(s), the LLM history {len(calls)}: token counts "
            "paired in order"
        )
    return rebuilt


def _message(role: str, content: str, *, where: str) -> Message:
    if role in ("user", "assistant"):
        return build_message(role, content, where=where)
    return build_message("user", content, where=where, meta={"openai_role": role})


def sniff(doc: Document) -> bool:
    return doc.text is not None  # the reader recognises the chat log by its session headers


def companions(path: Path) -> str | None:
    """The LLM history beside a chat log (its size and time), so a re-import sees it grow."""
    history = llm_history_beside(Path(path)) if Path(path).suffix == ".md" else None
    if history is None:
        return None
    stat = history.stat()
    return hashlib.sha256(f"{history.name}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()


FORMAT = ImportFormat(
    name="aider",
    agent="Aider",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"text"}),
    files="`<repo>/.aider.chat.history.md` (+ `.aider.llm.history` with `--llm-history-file`)",
    companions=Beside("*.md", companions),  # the chat log, not its LLM history
)
