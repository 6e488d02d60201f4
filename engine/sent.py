"""What did model request N send? The one rule every reader uses (findings, report, CLI, dashboard).

A request sent the transcript messages with ``seq < sent_end``, less what compactions recorded
before it removed (or, for tool results, cleared), less the request's own ``messages_excluded``
(what it left out below its bound: a compaction's summarizer does not send the segment kept after
it, so what it sent is not a prefix). ``sent_end`` is the request event's
``details.messages_sent`` (the session manager, the proxy and the importers record it); for
older databases, the reply the request produced (``message_seq``) or the end of its turn.
Pure: the caller says how to look a message's kind and a turn's end up.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

#: Transcript message kinds that are a model's reply (the request that produced one did not send it).
REPLY_KINDS = frozenset({"assistant", "tool_use"})


def sent_end(
    details: Mapping[str, Any],
    message_seq: int | None,
    turn_index: int | None,
    *,
    kind_of: Callable[[int], str | None],
    turn_end: Callable[[int], int],
) -> int:
    """The transcript seq before which a request event's messages were sent.

    ``kind_of(seq)`` is the kind of transcript message ``seq`` (None if there is none);
    ``turn_end(turn)`` is one past the last seq of that turn.
    """
    sent = details.get("messages_sent")
    if isinstance(sent, int) and not isinstance(sent, bool):
        return sent
    if message_seq is not None:
        return message_seq if kind_of(message_seq) in REPLY_KINDS else message_seq + 1
    return turn_end(turn_index or 0)


def sent_seqs(first: int, end: int, excluded: Iterable[int] = ()) -> list[int]:
    """The seqs from ``first`` (the request's context start) below ``end`` (its ``sent_end``)
    that it sent, without its ``messages_excluded``."""
    left_out = set(excluded)
    return [s for s in range(first, end) if s not in left_out]


def compaction_removals(details: Mapping[str, Any]) -> tuple[set[int], set[int]]:
    """(removed or summarized seqs, seqs whose tool results were cleared) of a ``compacted`` event."""
    return _ints(details.get("removed_message_seqs")), _ints(details.get("cleared_message_seqs"))


def _ints(value: Any) -> set[int]:
    return {v for v in value if isinstance(v, int)} if isinstance(value, list) else set()


__all__ = ["REPLY_KINDS", "compaction_removals", "sent_end", "sent_seqs"]
