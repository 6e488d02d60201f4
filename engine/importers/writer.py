"""Persisting a parsed session: transcript rows (appended, or the changed tail replaced on
re-import), one ``request`` event per model call (:mod:`engine.importers.request_events`),
saved outputs as blobs, and the session's tools.

Identity: a session keyed by the agent's own id is the same session whichever of its files is
read (:func:`claim_session_id`; another file only extends it, never cuts it), and a fork is linked
to its origin in either order (:class:`~engine.importers.lineages.Lineages`).

One concept over ~400 lines: writing one parsed session (its rows, what a re-import keeps of those
stored before, its calls' events, its tools and blobs), each step reading what the one before wrote.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.errors import NotFoundError
from engine.events import ProviderUsage
from engine.importers.parsing.parsed import ImportedSession, ParsedMessage, ParsedSession
from engine.importers.parsing.readers import title_of, tool_category
from engine.importers.request_events import record_requests
from engine.importers.utc_times import utc_text
from engine.messages import Message, TextBlock, ToolResultBlock, ToolUseBlock, is_tool_result_only
from engine.settings import Settings
from engine.store import SessionStore, ToolRecord
from engine.store.records import redact_message  # stored messages hold no secrets: compare like with like
from engine.tokens import Tokenizer, get_tokenizer

#: Tokenizer for sources that name no model (or one whose tokenizer is unknown).
FALLBACK_TOKENIZER = "chars/4"
MISSING_RESULT_TEXT = "[no tool result recorded in the source]"


def claim_session_id(
    store: SessionStore, wanted: str, source_path: str, *, shared: bool = False
) -> tuple[str, bool]:
    """(session id, imported before): ``wanted``, or suffixed with a hash of the path when another
    file already holds it. A session from the same file is continued, and so is one from any file
    when ``shared`` (the key is the agent's own id of the session: the same session, not a copy)."""
    for candidate in (wanted, f"{wanted}-{hashlib.sha1(source_path.encode()).hexdigest()[:8]}"):
        try:
            existing = store.get_session(candidate)
        except NotFoundError:
            return candidate, False
        if existing.source_path == source_path or (shared and candidate == wanted):
            return candidate, True
    raise NotFoundError(f"cannot find a free session id for {wanted!r} from {source_path}")


def repair_tool_pairing(messages: list[ParsedMessage]) -> list[str]:
    """Make every tool_result follow its tool_use and every tool_use get a result, in place.

    A result whose tool_use is not in the transcript becomes text (its tokens stay); a
    tool_use left unanswered (the source lost the result) gets an is_error result saying so,
    except in the last assistant message, whose tools may still be running. Returns notes.
    """
    # each message's blocks read where they are (a text content holds no tool block), not as
    # Message.blocks' copies: this runs over every message of every parse
    notes: list[str] = []
    seen: set[str] = set()
    for pm in messages:
        content = pm.message.content
        if isinstance(content, str):
            continue
        seen.update(b.id for b in content if isinstance(b, ToolUseBlock))
        if any(isinstance(b, ToolResultBlock) and b.tool_use_id not in seen for b in content):
            blocks = [
                TextBlock(text=f"[tool result for {b.tool_use_id}]\n{b.text}")
                if isinstance(b, ToolResultBlock) and b.tool_use_id not in seen
                else b
                for b in pm.message.blocks
            ]
            lost = sum(
                1 for b in pm.message.blocks if isinstance(b, ToolResultBlock) and b.tool_use_id not in seen
            )
            notes.append(f"{lost} tool result(s) without a tool_use kept as text")
            pm.message = pm.message.with_content(blocks)
    last_assistant = next((pm for pm in reversed(messages) if pm.message.role == "assistant"), None)
    answered = {
        b.tool_use_id
        for pm in messages
        if not isinstance(pm.message.content, str)
        for b in pm.message.content
        if isinstance(b, ToolResultBlock)
    }
    i = 0
    while i < len(messages):
        message = messages[i].message
        content = message.content
        unanswered = (
            [b.id for b in content if isinstance(b, ToolUseBlock) and b.id not in answered]
            if message.role == "assistant" and not isinstance(content, str)
            else []
        )
        # calls the provider ran itself (a web search) are answered inside the same response
        server_run = set(message.meta.get("server_tool_use_ids") or ()) if unanswered else set()
        missing = [u for u in unanswered if u not in server_run]
        if missing and messages[i] is not last_assistant:
            results = [
                ToolResultBlock(tool_use_id=u, content=MISSING_RESULT_TEXT, is_error=True) for u in missing
            ]
            after = messages[i + 1].message if i + 1 < len(messages) else None
            if after is not None and after.role == "user":
                # Anthropic puts tool results first in the user message that follows.
                messages[i + 1].message = after.with_content([*results, *after.blocks])
            else:
                messages.insert(
                    i + 1,
                    ParsedMessage(
                        Message(role="user", content=results, meta={"synthetic": "missing_tool_result"})
                    ),
                )
            answered.update(missing)
            notes.append(f"{len(missing)} tool_use(s) without a result given an is_error result")
        i += 1
    return notes


def write_session(
    store: SessionStore,
    parsed: ParsedSession,
    *,
    session_id: str,
    parent_id: str | None,
    source: str,
    source_path: str,
    existing: bool = False,
    import_state: dict[str, Any] | None = None,
    settings: Settings | None = None,
) -> ImportedSession:
    """Write one parsed session (caller holds the transaction); returns its summary.

    ``existing``: the session was imported from this file before. Only what is new is added:
    the stored transcript is kept up to the first message that differs (a source that rewrote
    its last message), later messages and the request/compaction events the import recorded
    for them are replaced; snapshots, manual compactions and every other event stay.
    """
    tokenizer = get_tokenizer(parsed.tokenizer_model or parsed.model or FALLBACK_TOKENIZER)
    if not parsed.model:
        parsed.notes.append(
            "model unknown: the source names no model, so its context window is not known "
            "(give one with --model)"
        )
    messages = [pm.message for pm in parsed.messages]
    title = parsed.title or title_of(messages)  # a parser's own title wins (Claude Code)
    metadata = dict(parsed.metadata)
    if parsed.system_prompt is not None:
        metadata["system_prompt"] = parsed.system_prompt
    if parsed.context_window:
        metadata["context_window"] = parsed.context_window
    if import_state is not None:
        metadata["import_state"] = import_state
    times = session_times(parsed)
    if times:  # when the session ran, as the transcript tells it (not when it was imported)
        metadata["started_utc"], metadata["ended_utc"] = min(times), max(times)
    if parsed.lineage_key is not None:
        metadata["lineage_key"] = parsed.lineage_key
    if parsed.forked:
        metadata["forked"] = True
    usages = [pm.call.usage if pm.call else None for pm in parsed.messages]
    start = 0
    kept: list[Any] = []
    if existing:
        stored = store.get_session(session_id)
        kept = _appended_to(store, session_id, messages, usages)
        if kept is not None:
            start = len(kept)
        elif stored.source_path != source_path:
            # another file of the same session (an older copy, a sub-agent's own file) that does not
            # extend what is stored: it never replaces what the session's own file gave
            return _as_stored(
                store, stored, tokenizer, parent_id, source_path=source_path, import_state=import_state
            )
        else:
            prior = store.load_messages(session_id)
            # Kept up to the first message that differs, in content or in the usage of its call
            # (a call's usage is written after its reply: an earlier import may have missed it).
            while (
                start < min(len(prior), len(messages))
                and prior[start].message.content_hash == redact_message(messages[start]).content_hash
                and prior[start].usage == usages[start]
            ):
                start += 1
            kept = prior[:start]
            if start < len(prior):
                parsed.notes.append(
                    f"the source changed {len(prior) - start} message(s) imported before: replaced from seq {start}"
                )
                _truncate(store, session_id, start)
        if start and parsed.messages[start - 1].pending_calls:
            # calls made right after the last kept message (a failed call the agent logged after an
            # earlier import) are recorded with it: read it again, so that none is missed
            start -= 1
            kept = kept[:start]
            _truncate(store, session_id, start)
        if parsed.notes:
            metadata["import_notes"] = list(dict.fromkeys(parsed.notes))
        links: dict[str, Any] = {}
        if stored.source_path != source_path:  # the same session read from another of its files
            metadata = {**stored.metadata, **metadata, "import_state": stored.metadata.get("import_state")}
            metadata = {k: v for k, v in metadata.items() if v is not None}
            if import_state is not None:  # so that reading that file again is known unchanged
                metadata["also_from"] = {
                    **(stored.metadata.get("also_from") or {}),
                    source_path: import_state,
                }
        if parent_id is not None and stored.parent_session_id != parent_id:
            links["parent_session_id"] = parent_id  # imported before its parent was: linked now
        store.update_session(
            session_id, title=title, model=parsed.model, provider=parsed.provider, metadata=metadata, **links
        )
    else:
        if parsed.notes:
            metadata["import_notes"] = list(dict.fromkeys(parsed.notes))
        store.create_session(
            session_id=session_id, title=title, model=parsed.model, provider=parsed.provider,
            tokenizer=tokenizer.id, tokens_exact=tokenizer.exact, source=source, source_path=source_path,
            parent_session_id=parent_id, metadata=metadata,
        )  # fmt: skip
    added = store.append_messages(
        session_id, messages[start:], tokenizer=tokenizer, usages=usages[start:],
        counts=[pm.counted_parts(tokenizer.id) for pm in parsed.messages[start:]],
    )  # fmt: skip
    rows = [*kept, *added]
    with store.batched_costs():  # the calls' request_costs rows in one pass, not one per event
        estimates = record_requests(
            store, session_id, parsed, rows, tokenizer, source, first_new=start, settings=settings
        )
    store.upsert_tools(session_id, _tool_records(parsed, messages, tokenizer))
    _write_blobs(store, session_id, parsed.blobs)
    with_usage = [m for m in estimates if m.usage is not None]
    last = with_usage[-1] if with_usage else (estimates[-1] if estimates else None)
    limited = [m for m in estimates if m.limit_tokens]
    peak = max(limited, key=lambda m: m.prompt_tokens / (m.limit_tokens or 1), default=None)
    return ImportedSession(
        session_id=session_id,
        parent_session_id=parent_id,
        title=title,
        model=parsed.model,
        tokenizer=tokenizer.id,
        tokens_exact=tokenizer.exact,
        message_count=len(rows),
        request_count=len(estimates),
        usage_count=len(with_usage),
        transcript_tokens=sum(r.tokens for r in rows),
        last_estimate_tokens=last.estimate if last else None,
        last_provider_prompt_tokens=last.usage.prompt_tokens if last and last.usage else None,
        last_prompt_tokens=estimates[-1].prompt_tokens if estimates else None,
        last_limit_tokens=estimates[-1].limit_tokens if estimates else None,
        peak_prompt_tokens=peak.prompt_tokens if peak else None,
        peak_limit_tokens=peak.limit_tokens if peak else None,
        added_messages=len(added),
        context_window=parsed.context_window,
        project=metadata.get("project") or metadata.get("cwd"),
    )


def _as_stored(
    store: SessionStore,
    stored: Any,
    tokenizer: Any,
    parent_id: str | None,
    *,
    source_path: str,
    import_state: dict[str, Any] | None,
) -> ImportedSession:
    """The summary of a session this file adds nothing to (it is kept as another file wrote it)."""
    links: dict[str, Any] = {}
    if parent_id is not None and stored.parent_session_id != parent_id:
        links["parent_session_id"] = parent_id
    if import_state is not None and stored.source_path is not None:
        also = {**(stored.metadata.get("also_from") or {}), source_path: import_state}
        links["metadata"] = {**stored.metadata, "also_from": also}
    if links:
        store.update_session(stored.id, **links)
    return ImportedSession(
        session_id=stored.id, parent_session_id=parent_id or stored.parent_session_id, title=stored.title,
        model=stored.model, tokenizer=tokenizer.id, tokens_exact=tokenizer.exact,
        message_count=store.message_count(stored.id), request_count=0, usage_count=0, transcript_tokens=0,
        last_estimate_tokens=None, last_provider_prompt_tokens=None, added_messages=0,
        project=stored.metadata.get("project") or stored.metadata.get("cwd"),
    )  # fmt: skip


#: Stored messages compared with the source's before trusting that it was only appended to.
TAIL_CHECK = 8


class _KeptMessages:
    """A re-import's kept messages, loaded when first asked, from that one to the last, once (each
    row loading its own read every later row too: a grown 20 MB Codex session took minutes)."""

    def __init__(self, store: SessionStore, session_id: str) -> None:
        self.store, self.session_id, self.first, self.messages = store, session_id, -1, list[Message]()

    def at(self, seq: int) -> Message:
        if self.first < 0 or seq < self.first:
            self.first, self.messages = (
                seq,
                [r.message for r in self.store.load_messages(self.session_id, from_seq=seq)],
            )
        return self.messages[seq - self.first]


@dataclass
class _KeptRow:
    """A stored message's sizes, read without decoding its content (loaded on demand)."""

    kept: _KeptMessages
    seq: int
    turn_index: int
    tokens: int
    tool_result_tokens: int

    @property
    def message(self) -> Message:
        return self.kept.at(self.seq)


def _appended_to(
    store: SessionStore, session_id: str, messages: list[Message], usages: list[ProviderUsage | None]
) -> list[Any] | None:
    """The stored rows, when the source only grew since: its last ``TAIL_CHECK`` stored messages
    (content and usage) are still where they were. None: compare everything."""
    count = store.message_count(session_id)
    if count > len(messages):
        return None
    tail_from = max(0, count - TAIL_CHECK)
    tail = store.load_messages(session_id, from_seq=tail_from)
    if len(tail) != count - tail_from or any(
        row.message.content_hash != redact_message(messages[row.seq]).content_hash
        or row.usage != usages[row.seq]
        for row in tail
    ):
        return None
    kept = _KeptMessages(store, session_id)
    return [_KeptRow(kept, *row) for row in store.message_sizes(session_id)]


def _truncate(store: SessionStore, session_id: str, from_seq: int) -> None:
    """Drop transcript rows from ``from_seq`` on, with the events an import recorded for them."""
    # an import's events go with their exact requests (Claude Code 2.1.3xx, rebuilt by the parser)
    store.truncate_messages(session_id, from_seq, event_source="import:")


def _write_blobs(store: SessionStore, session_id: str, blobs: Sequence[Any]) -> None:
    """Outputs the agent saved beside its transcript, as offloaded blobs of their results
    (``tool_use_id``, ``content``, ``tool_name``, ``preview``); each written once per result."""
    if not blobs:
        return
    held = {b.tool_use_id for b in store.list_blobs(session_id)}
    for blob in blobs:
        if blob.tool_use_id not in held:
            store.put_blob(
                session_id,
                blob.content,
                tool_name=blob.tool_name,
                tool_use_id=blob.tool_use_id,
                preview=blob.preview,
            )
            held.add(blob.tool_use_id)


def _tool_records(parsed: ParsedSession, messages: list[Message], tokenizer: Tokenizer) -> list[ToolRecord]:
    """Offered definitions when the source has them; else the tools the transcript used
    (definition unknown, cost 0)."""
    records: dict[str, ToolRecord] = {}
    for tool in parsed.tools:
        name = str((tool.get("function") or tool).get("name") or "")
        if name:
            category, server = tool_category(name)
            records[name] = ToolRecord(
                name=name,
                category=category,
                server=server,
                tokens=tokenizer.count_tool(tool),
                definition=tool,
            )
    if not parsed.tools:
        for message in messages:
            if isinstance(message.content, str):
                continue  # a text holds no tool_use (Message.blocks would make it a block to look at)
            for block in message.content:
                if isinstance(block, ToolUseBlock) and block.name not in records:
                    category, server = tool_category(block.name)
                    records[block.name] = ToolRecord(
                        name=block.name, category=category, server=server, tokens=0,
                        definition={"name": block.name, "observed_in_transcript": True},
                    )  # fmt: skip
    return list(records.values())


def is_result_message(pm: ParsedMessage) -> bool:
    return pm.message.role == "user" and bool(pm.message.content) and is_tool_result_only(pm.message)


def session_times(parsed: ParsedSession) -> list[str]:
    """Every time the transcript gives its messages and calls, as UTC text (a format that stamps only its
    calls, like Qwen Code's or OpenCode's, still says when its session ran)."""
    calls = [c for pm in parsed.messages for c in (pm.call, *pm.pending_calls) if c is not None]
    stamps = [pm.message.meta.get("timestamp") for pm in parsed.messages] + [
        c.details.get("call_utc") for c in calls
    ]
    return [t for t in map(utc_text, stamps) if t is not None]
