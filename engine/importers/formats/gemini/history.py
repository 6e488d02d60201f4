"""What a Gemini CLI chat log says the model saw, in order: its messages as contexts.

The JSON Lines form appends a message per line (``id`` + ``type``; the same id written again
replaces the earlier copy) and ``{"$set": {"messages": [...]}}`` lines, each the history the CLI
holds from then on. Replayed here into :class:`Entry` values, in order: a message written as it
happened is an original (a reply with ``tokens`` is a call). A resumed history that is the one
held with tool results added among it (Gemini CLI 0.61 writes each a second time, and the model
gets both) places the added ones where they stand, sent from the resumed run on (``Entry.run``):
the rest is stored once. Any other ``$set`` list that is not the history already held starts a
new context of copies, because every later call sends it as it is: a chat compression (a
``<state_snapshot>`` user turn, then "Got it", then the turn in progress rewritten). A list that is only the start of the history held (each run
starts so, before the resumed list) waits for what follows: a message appended right after it
starts a new context from it (a cleared chat).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.importers.parsing.parsed import SourceProblem

Line = tuple[int, Any]
MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
#: Per-call facts a rewritten copy of a reply may lack (the earlier copy keeps them).
CALL_FACTS = ("tokens", "model", "toolCalls", "thoughts")
SNAPSHOT = "<state_snapshot>"


@dataclass
class Entry:
    """One message of the log in the order the model saw it. ``copy``: written by a ``$set`` (a
    rewritten history: never a call of its own); ``starts``: it starts a new context
    (``compression`` or ``rewrite``). ``run``: how many resumed histories were read before it was
    written; an entry a resumed history inserted among earlier ones (Gemini CLI 0.61's second
    copy of each tool result) has the resumed run's number, so calls of earlier runs did not
    send it."""

    id: str
    raw: dict[str, Any]
    copy: bool = False
    starts: str | None = None
    run: int = 0


@dataclass
class ChatLog:
    """A replayed log: its header fields and its entries; ``lines``: the JSON Lines form."""

    header: dict[str, Any]
    entries: list[Entry]
    lines: bool = True


def replay_lines(lines: Sequence[Line]) -> ChatLog:
    """The entries of a chat's JSON Lines (raises SourceProblem naming a line that is wrong)."""
    replay = _Replay()
    for number, value in lines:
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}", line=number)
        try:
            replay.line(value, number)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=number) from exc
    return ChatLog(replay.header, replay.entries)


def replay_document(value: dict[str, Any]) -> ChatLog:
    """The entries of the one-object JSON form (``messages`` as they are)."""
    entries = [Entry(_message_id(m, f"messages[{i}]"), _checked(m)) for i, m in enumerate(value["messages"])]
    return ChatLog({k: v for k, v in value.items() if k != "messages"}, entries, lines=False)


class _Replay:
    def __init__(self) -> None:
        self.header: dict[str, Any] = {}
        self.entries: list[Entry] = []
        self.current: list[str] = []  # ids of the history the CLI holds, in order
        self.at: dict[str, Entry] = {}  # the entry of each id of the current context
        self.pending: list[dict[str, Any]] | None = None  # a list that is the start of `current`
        self.run = 0  # resumed histories read so far (each inserted messages among earlier ones)

    def line(self, value: dict[str, Any], number: int) -> None:
        if "$set" in value:
            update = value["$set"]
            if not isinstance(update, dict):
                raise SourceProblem("$set is not an object")
            if "messages" in update:
                if not isinstance(update["messages"], list):
                    raise SourceProblem("$set.messages is not a list")
                self.rewrite([_checked(m) for m in update["messages"]], number)
            self.header.update({k: v for k, v in update.items() if k != "messages"})
        elif isinstance(value.get("type"), str) and value["type"] in MESSAGE_TYPES:
            self.append(value, str(number))
        elif "sessionId" in value:
            self.header.update({k: v for k, v in value.items() if k != "messages"})
        elif "$unset" not in value:
            raise SourceProblem(f"not a Gemini CLI chat line (keys {', '.join(sorted(value)[:6])})")

    def append(self, message: dict[str, Any], fallback: str) -> None:
        if self.pending is not None:  # the history was cut back to its start (a cleared chat)
            self.start_context(self.pending, "rewrite", fallback)
        message_id = _message_id(message, f"line-{fallback}")
        held = self.at.get(message_id)
        if held is not None:  # written again (a reply gets its tool calls): the last copy wins
            held.raw = _merged(held.raw, message)
            return
        entry = Entry(message_id, message, run=self.run)
        self.entries.append(entry)
        self.current.append(message_id)
        self.at[message_id] = entry

    def rewrite(self, messages: list[dict[str, Any]], number: int) -> None:
        ids = [_message_id(m, f"{number}:{i}") for i, m in enumerate(messages)]
        if ids == self.current:
            self.pending = None
            for message_id, message in zip(ids, messages, strict=True):
                self.at[message_id].raw = _merged(self.at[message_id].raw, message)
            return
        if len(ids) < len(self.current) and ids == self.current[: len(ids)]:
            self.pending = messages  # a run starts: the resumed list follows, or a message does
            return
        if _only_adds(ids, messages, self.current):
            self.insert(ids, messages)
            return
        snapshot = any(
            message_id not in self.at and SNAPSHOT in _text_of(message)
            for message_id, message in zip(ids, messages, strict=True)
        )
        self.start_context(messages, "compression" if snapshot else "rewrite", str(number))

    def insert(self, ids: list[str], messages: list[dict[str, Any]]) -> None:
        """A resumed history that is the one held with messages added among it (each tool
        result's second copy): each added one takes its place, right after the message before
        it, sent from this run on; the messages held stay as the earlier runs' calls sent them."""
        self.pending = None
        self.run += 1
        after: dict[str, list[Entry]] = {}
        previous = ids[0]  # held (_only_adds)
        for message_id, message in zip(ids, messages, strict=True):
            if message_id in self.at:
                previous = message_id
                continue
            entry = self.at[message_id] = Entry(message_id, message, copy=True, run=self.run)
            after.setdefault(previous, []).append(entry)
        held = {id(self.at[i]): i for i in self.current}
        placed: list[Entry] = []
        for entry in self.entries:
            placed.append(entry)
            placed.extend(after.get(held.get(id(entry), ""), ()))
        self.entries = placed
        self.current = ids

    def start_context(self, messages: list[dict[str, Any]], kind: str, fallback: str) -> None:
        """Every later call sends ``messages`` as they are: a new context of copies."""
        self.pending = None
        old = self.at
        first = bool(self.entries)  # the list a chat starts with starts no new context
        self.current, self.at = [], {}
        for i, message in enumerate(messages):
            message_id = _message_id(message, f"{fallback}:{i}")
            earlier = old.get(message_id)
            raw = _merged(earlier.raw, message) if earlier is not None else message
            entry = Entry(message_id, raw, copy=True, starts=kind if i == 0 and first else None)
            self.entries.append(entry)
            self.current.append(message_id)
            self.at[message_id] = entry


def _only_adds(ids: list[str], messages: list[dict[str, Any]], current: list[str]) -> bool:
    """``ids`` is the history held (``current``, in order) with user messages of tool results
    only added among it (Gemini CLI 0.61 resumes a chat so: ``<reply id>_response`` after each
    reply with tool calls)."""
    held = set(current)
    if [i for i in ids if i in held] != current or len(ids) == len(current) or not current:
        return False
    added = [m for i, m in zip(ids, messages, strict=True) if i not in held]
    return ids[0] == current[0] and all(_is_results(m) for m in added)


def _is_results(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return (
        message.get("type") == "user"
        and isinstance(content, list)
        and bool(content)
        and all(isinstance(p, dict) and isinstance(p.get("functionResponse"), dict) for p in content)
    )


def _checked(message: Any) -> dict[str, Any]:
    if not isinstance(message, dict):
        raise SourceProblem(f"a message is {type(message).__name__}, not an object")
    return message


def _message_id(message: dict[str, Any], fallback: str) -> str:
    return str(message.get("id") or fallback)


def _merged(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """``after`` with the call facts only ``before`` has (a rewritten reply lacks its tokens)."""
    if before.get("type") != after.get("type"):
        return after
    return {**{k: before[k] for k in CALL_FACTS if k in before}, **after}


def _text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return ""
