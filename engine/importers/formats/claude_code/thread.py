"""The conversation a Claude Code session file holds: a tree of lines, read as the model saw it.

Claude Code writes one line per content block. Parallel tool calls make the file a tree: each
tool_use block is its own assistant line (same ``message.id``), each tool_result line hangs off
its own tool_use line, and the next assistant line hangs off whichever result came last.
:func:`live_lines` takes the ``parentUuid`` path to the last message line and adds each
assistant message's sibling lines, the results answering its tool uses, and the attachments
hanging off them; nothing the file holds for that conversation is left out, and nothing is
invented. :func:`build_thread` merges the lines into API-shaped messages, renders attachments
(skill and agent listings, files re-read after a compaction) as the ``<system-reminder>`` text
Claude Code sends (attachments.py), and records compactions (``compact_boundary`` +
``isCompactSummary``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from engine.importers.formats.claude_code.attachments import render_attachment, with_attachment
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, SourceProblem
from engine.importers.parsing.readers import anthropic_content, anthropic_usage, message_of, text_block
from engine.messages import Message, TextBlock, ToolResultBlock

Line = tuple[int, dict[str, Any]]

SYNTHETIC_MODEL = "<synthetic>"
_KEPT_LINE_FIELDS = ("isMeta", "isCompactSummary", "isVisibleInTranscriptOnly", "agentId")
_META_LINE_FIELDS = ("timestamp", *_KEPT_LINE_FIELDS)  # after the uuid
#: Strings shorter than this are copied when a parsed message keeps them (:func:`_own`).
_OWN_MAX_CHARS = 256
_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
#: compactMetadata.trigger -> the compaction event's trigger (engine.events vocabulary).
COMPACTION_TRIGGERS = {"auto": "compact_threshold", "manual": "manual"}


@dataclass
class Compaction:
    """One Claude Code compaction: its boundary line and the summary message that follows."""

    boundary_uuid: str
    trigger: str
    pre_tokens: int | None
    post_tokens: int | None
    kept_uuids: list[str]
    line: int
    summary_index: int | None = None  # index of the summary message in Thread.messages
    last_index_before: int | None = None  # last message sent before the compaction
    #: The summarizer call also sent the segment kept after the compaction (set by the caller).
    summarizes_kept: bool = False


@dataclass
class Thread:
    """Messages of one conversation (main thread or one sub-agent), in API shape."""

    messages: list[ParsedMessage]
    uuid_index: dict[str, int]  # line uuid -> index of the message it became part of
    compactions: list[Compaction] = field(default_factory=list)
    models: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)


def _parent(obj: dict[str, Any]) -> str | None:
    return obj.get("parentUuid") or obj.get("logicalParentUuid")


def live_lines(lines: Sequence[Line]) -> tuple[list[Line], list[str]]:
    """The lines of the conversation the last message line belongs to, in file order."""
    by_uuid: dict[str, Line] = {}
    last_message: Line | None = None
    for line in lines:  # one pass: a session's lines are many, each pass over them counts
        obj = line[1]
        uid = obj.get("uuid")
        if isinstance(uid, str):
            by_uuid[uid] = line
        if obj.get("type") in ("user", "assistant"):
            last_message = line
    if last_message is None:
        return [], []
    path: set[str] = set()
    position: dict[str, int] | None = None  # made at the first parent missing from the file
    with_uuid: list[Line] = []
    notes: list[str] = []
    current: Line | None = last_message
    while current is not None:
        uid = current[1].get("uuid")
        if not isinstance(uid, str) or uid in path:
            break
        path.add(uid)
        parent = _parent(current[1])
        if parent is not None and parent not in by_uuid:
            # a trimmed or resumed log: go on from the line written just before this one
            notes.append(
                f"parent {parent} of line {current[0]} is not in the file: followed file order there"
            )
            if position is None:
                with_uuid = [line for line in lines if isinstance(line[1].get("uuid"), str)]
                position = {line[1]["uuid"]: k for k, line in enumerate(with_uuid)}
            k = position[uid]
            current = with_uuid[k - 1] if k > 0 else None
            continue
        current = by_uuid.get(parent) if parent else None

    live = set(path)
    pending = [(uid, line[1]) for uid, line in by_uuid.items() if uid not in live]
    if pending:  # siblings of parallel tool calls, their results, attachments off them
        message_ids: set[Any] = set()
        tool_use_ids: set[Any] = set()
        for uid in live:
            _add_ids(by_uuid[uid][1], message_ids, tool_use_ids)
        changed = True
        while changed and pending:
            # what is taken only adds to what may be taken next: the same lines in any order
            changed = False
            rest = []
            for uid, o in pending:
                kind = o.get("type")
                take = (
                    (kind == "assistant" and _message_id(o) in message_ids)
                    or (
                        kind == "user"
                        and _parent(o) in live
                        and any(
                            b.get("type") == "tool_result" and b.get("tool_use_id") in tool_use_ids
                            for b in _blocks(o)
                        )
                    )
                    or (kind == "attachment" and _parent(o) in live and _parent(o) not in path)
                )
                if take:
                    live.add(uid)
                    _add_ids(o, message_ids, tool_use_ids)
                    changed = True
                else:
                    rest.append((uid, o))
            pending = rest
    kept: list[Line] = []
    left_out = 0
    for line in lines:
        obj = line[1]
        if obj.get("uuid") in live:
            kept.append(line)
        elif obj.get("type") in ("user", "assistant"):
            left_out += 1
    if left_out:
        notes.append(f"left out {left_out} main line(s) on abandoned branches")
    return kept, notes


def _add_ids(obj: dict[str, Any], message_ids: set[Any], tool_use_ids: set[Any]) -> None:
    """An assistant line's message id and tool_use ids, added to what other lines may join."""
    if obj.get("type") != "assistant":
        return
    message = obj.get("message")
    if isinstance(message, dict) and message.get("id") is not None:
        message_ids.add(message["id"])
    tool_use_ids.update(b.get("id") for b in _blocks(obj) if b.get("type") == "tool_use")


def _message_id(obj: dict[str, Any]) -> Any:
    message = obj.get("message")
    return message.get("id") if isinstance(message, dict) else None


def _blocks(obj: dict[str, Any]) -> list[dict[str, Any]]:
    message = obj.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def build_thread(lines: Sequence[Line]) -> Thread:
    """Merge live lines into messages: one assistant message per ``message.id``, the results
    of one assistant message in one user message, attachments as text of a user message."""
    thread = Thread(messages=[], uuid_index={})
    messages = thread.messages
    by_message_id: dict[str, int] = {}
    waiting: list[TextBlock] = []  # attachment text for the next user message
    open_compaction: Compaction | None = None
    shared: dict[Any, Any] = {}  # values most lines repeat (model, stop reason): one copy kept
    for n, obj in lines:
        kind = obj.get("type")
        uid = _own(obj.get("uuid"))
        if kind == "system" and obj.get("subtype") == "compact_boundary":
            meta = obj.get("compactMetadata") or {}
            preserved = (meta.get("preservedMessages") or {}).get("uuids") or []
            open_compaction = Compaction(
                boundary_uuid=str(uid),
                trigger=COMPACTION_TRIGGERS.get(str(meta.get("trigger")), "compact_threshold"),
                pre_tokens=meta.get("preTokens"),
                post_tokens=meta.get("postTokens"),
                kept_uuids=[str(u) for u in preserved],
                line=n,
                last_index_before=len(messages) - 1 if messages else None,
            )
            thread.compactions.append(open_compaction)
            continue
        if kind == "attachment":
            text = render_attachment(obj.get("attachment"))
            if text is None:
                continue
            block = TextBlock(text=text)
            if messages and messages[-1].message.role == "user":
                messages[-1].message = with_attachment(messages[-1].message, block)
                thread.uuid_index[str(uid)] = len(messages) - 1
            else:
                waiting.append(block)
            continue
        if kind not in ("user", "assistant"):
            continue
        raw = obj.get("message")
        if not isinstance(raw, dict):
            raise SourceProblem(f"{kind} line has no message object", line=n)
        try:
            content = _content(raw.get("content"), n)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=n) from exc
        if not content:
            continue
        if kind == "assistant":
            message_id = _own(raw.get("id"))
            existing = by_message_id.get(message_id) if message_id else None
            if existing is not None:
                pm = messages[existing]
                pm.message = _extended(pm.message, _as_blocks(content), uid)
                usage = _usage(raw.get("usage"))
                if pm.call is not None and usage is not None:
                    pm.call.usage = usage
                    pm.call.details.update(cache_write_split(raw.get("usage")))
                thread.uuid_index[str(uid)] = existing
                continue
            model = _shared(shared, raw.get("model"))
            request_id = _own(obj.get("requestId"))
            stop_reason = _shared(shared, raw.get("stop_reason"))
            meta = _meta(obj, uid, {"request_id": request_id, "model": model, "stop_reason": stop_reason})
            message = _message("assistant", content, n, id=message_id or uid, meta=meta)
            call = None
            if model != SYNTHETIC_MODEL:
                details = {"message_id": message_id, "request_id": request_id}
                if isinstance(obj.get("requestRef"), str):
                    details["request_ref"] = _own(obj["requestRef"])
                usage = raw.get("usage")
                details.update(cache_write_split(usage))
                call = CallInfo(usage=_usage(usage), model=model, details=details)
                if model:
                    thread.models[model] += 1
            if message_id:
                by_message_id[message_id] = len(messages)
            thread.uuid_index[str(uid)] = len(messages)
            messages.append(ParsedMessage(message, call=call))
            continue
        message = _message("user", content, n, id=uid, meta=_meta(obj, uid, {}))
        if waiting:
            message = message.with_content([*waiting, *message.blocks])
            waiting = []
        summary = bool(obj.get("isCompactSummary"))
        previous = messages[-1].message if messages else None
        if (
            previous is not None
            and not summary
            and previous.role == "user"
            and previous.tool_result_ids
            and message.tool_result_ids
            and all(isinstance(b, ToolResultBlock) for b in message.blocks)
        ):
            messages[-1].message = _extended(previous, message.blocks, uid)
            thread.uuid_index[str(uid)] = len(messages) - 1
            continue
        pm = ParsedMessage(message)
        if summary and open_compaction is None and messages:
            # older versions wrote the summary without a boundary line: the file still says
            # that later calls start from it (its size before and after is not recorded)
            open_compaction = Compaction(
                boundary_uuid=str(uid), trigger="compact_threshold", pre_tokens=None, post_tokens=None,
                kept_uuids=[], line=n, last_index_before=len(messages) - 1,
            )  # fmt: skip
            thread.compactions.append(open_compaction)
        if summary and open_compaction is not None:
            pm.starts_context = True
            open_compaction.summary_index = len(messages)
            open_compaction = None
        thread.uuid_index[str(uid)] = len(messages)
        messages.append(pm)
    return thread


def cache_write_split(usage: Any) -> dict[str, int]:
    """``cache_write_5m_tokens`` / ``cache_write_1h_tokens`` from Anthropic's
    ``usage.cache_creation`` when it splits the writes (engine.cost prices 1h writes apart)."""
    split = usage.get("cache_creation") if isinstance(usage, dict) else None
    if not isinstance(split, dict):
        return {}
    out = {}
    for key, name in (
        ("ephemeral_5m_input_tokens", "cache_write_5m_tokens"),
        ("ephemeral_1h_input_tokens", "cache_write_1h_tokens"),
    ):
        value = split.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53:
            out[name] = _own(value)
    return out if sum(out.values()) else {}


def _as_blocks(content: str | list[Any]) -> list[Any]:
    """Content as blocks, as ``Message.blocks`` gives them (a text becomes one text block)."""
    if isinstance(content, str):
        return [TextBlock(text=content)] if content else []
    return list(content)


def _extended(message: Message, blocks: list[Any], uuid: Any) -> Message:
    """``message`` with more blocks from another line; the lines' uuids stay in meta."""
    meta = dict(message.meta)
    if uuid is not None:
        meta["uuids"] = [*meta.get("uuids", [meta.get("uuid")]), uuid]
    content = [*_as_blocks(message.content), *blocks]
    return message_of(message.role, content, id=message.id, meta=meta, where="", owned=True)


def _message(role: str, content: Any, line: int, *, id: Any, meta: dict[str, Any]) -> Message:
    """The line's message, of its content and meta as this module made them (new: kept, not copied)."""
    try:
        return message_of(role, content, id=id, meta=meta, where=f"line {line}", owned=True)
    except SourceProblem as exc:
        raise SourceProblem(str(exc), line=line) from exc


def _meta(obj: dict[str, Any], uid: Any, extra: dict[str, Any]) -> dict[str, Any]:
    """The line's uuid (``uid``: its own copy), time and kept fields, then ``extra``: every one
    that is not None."""
    meta: dict[str, Any] = {} if uid is None else {"uuid": uid}
    for key in _META_LINE_FIELDS:  # one read each: a missing field reads as None, and None is left out
        value = obj.get(key)
        if value is not None:
            meta[key] = _own(value)
    origin = obj.get("origin")
    if isinstance(origin, dict) and origin.get("kind"):
        meta["origin"] = _own(origin["kind"])
    for key, value in extra.items():
        if value is not None:
            meta[key] = value
    return meta


def _own(value: Any) -> Any:
    """A short string or an int as a new object, for a parsed message to keep: the decoder's own
    would pin the memory of its whole line (pymalloc frees a pool only once every object in it is
    gone: a 100k-line session that kept 3 strings a line held all its lines' 160 MB after the parse)."""
    kind = type(value)
    if kind is str:
        return "".join((value, "")) if len(value) < _OWN_MAX_CHARS else value
    return value + 0 if kind is int else value


def _shared(memo: dict[Any, Any], value: Any) -> Any:
    """``value``, one copy of it per thread (:func:`_own`) for a value most lines repeat."""
    if type(value) is not str:
        return value
    kept = memo.get(value)
    if kept is None:
        kept = memo[value] = _own(value)
    return kept


def _content(raw: Any, line: int) -> str | list[Any]:
    """A line's message content (:func:`~engine.importers.parsing.readers.anthropic_content`), its
    texts copied (:func:`_own`): text alone or text blocks, the most lines, read directly."""
    if type(raw) is str:
        return _own(raw)
    if type(raw) is list and all(
        type(b) is dict and b.get("type") == "text" and type(b.get("text")) is str for b in raw
    ):
        return [text_block(_own(b["text"])) for b in raw]
    return anthropic_content(raw, where=f"line {line}")


def _usage(raw: Any) -> Any:
    """The line's usage (:func:`~engine.importers.parsing.readers.anthropic_usage`), its counts copied."""
    if not isinstance(raw, dict):
        return anthropic_usage(raw)
    return anthropic_usage({key: _own(raw.get(key)) for key in _USAGE_KEYS})
