"""What a Gemini CLI chat log says the model saw, in order: its messages as contexts.

The JSON Lines form appends a message per line (``id`` + ``type``; the same id written again
replaces the earlier copy) and ``{"$set": {"messages": [...]}}`` lines, each the history the CLI
holds from then on. Replayed here into :class:`Entry` values, in order: a message written as it
happened is an original (a reply with ``tokens`` is a call); a ``$set`` list that is not the
history already held starts a new context of copies, because every later call sends it as it
is: a chat compression (a ``<state_snapshot>`` user turn, then "Got it", then the turn in
progress rewritten), or a resumed history (Gemini CLI 0.61 writes each tool result a second time
in it, and the model gets both). A list that is only the start of the history held (each run
starts so, before the resumed list) waits for what follows: a message appended right after it
starts a new context from it (a cleared chat).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.importers.parsed import SourceProblem

Line = tuple[int, Any]
MESSAGE_TYPES = frozenset({"user", "gemini", "info", "error", "warning"})
#: Per-call facts a rewritten copy of a reply may lack (the earlier copy keeps them).
CALL_FACTS = ("tokens", "model", "toolCalls", "thoughts")
SNAPSHOT = "<state_snapshot>"


@dataclass
class Entry:
    """One message of the log in the order the model saw it. ``copy``: written by a ``$set`` (a
    rewritten history: never a call of its own); ``starts``: it starts a new context
    (``compression`` or ``rewrite``)."""

    id: str
    raw: dict[str, Any]
    copy: bool = False
    starts: str | None = None


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
        entry = Entry(message_id, message)
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
        snapshot = any(
            message_id not in self.at and SNAPSHOT in _text_of(message)
            for message_id, message in zip(ids, messages, strict=True)
        )
        self.start_context(messages, "compression" if snapshot else "rewrite", str(number))

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
