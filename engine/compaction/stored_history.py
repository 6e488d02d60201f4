"""A stored session's history as a plan's input: the transcript seq of each message of a
resume history, and the cached summaries (stored by seq range) as index ranges of it.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from engine.compaction.result import SummaryCache
from engine.messages import Message
from engine.store import SessionStore


def history_seqs(
    store: SessionStore, session_id: str, history: Sequence[Message], through_seq: int
) -> list[int | None]:
    """The transcript seq of each message of a resume history (None where none matches).

    Messages after the snapshot map one to one; snapshot messages are matched in order
    against the transcript by content, id, or the tool ids a cleared placeholder keeps.
    """
    rows = store.load_messages(session_id)
    if through_seq < 0:
        return [row.seq for row in rows[: len(history)]]
    covered = [row for row in rows if row.seq <= through_seq]
    later = [row.seq for row in rows if row.seq > through_seq]
    n_snapshot = len(history) - len(later)
    # Transcript positions by each way a message matches (same content, same id, same role and
    # tool ids), so each finds its first match at or after the cursor by bisection: a scan would
    # run to the end of the transcript for every message without a match, quadratic in all.
    by_hash: dict[str, list[int]] = {}
    by_id: dict[str, list[int]] = {}
    by_tools: dict[tuple[str, frozenset[str]], list[int]] = {}
    for k, row in enumerate(covered):
        by_hash.setdefault(row.message.content_hash, []).append(k)
        if row.message.id is not None:
            by_id.setdefault(row.message.id, []).append(k)
        if key := _tools_key(row.message):
            by_tools.setdefault(key, []).append(k)
    seqs: list[int | None] = []
    cursor = 0
    for message in history[:n_snapshot]:
        candidates = (
            by_hash.get(message.content_hash, []),
            by_id.get(message.id, []) if message.id is not None else [],
            by_tools.get(key, []) if (key := _tools_key(message)) else [],
        )
        firsts = [p[at] for p in candidates if (at := bisect.bisect_left(p, cursor)) < len(p)]
        found = min(firsts, default=None)
        if found is None:
            seqs.append(None)
        else:
            seqs.append(covered[found].seq)
            cursor = found + 1
    return [*seqs, *later]


def _tools_key(message: Message) -> tuple[str, frozenset[str]] | None:
    """(role, tool ids) of a message holding tool uses or results: what a cleared copy keeps."""
    ids = frozenset({*message.tool_use_ids, *message.tool_result_ids})
    return (message.role, ids) if ids else None


def load_summary_cache(
    store: SessionStore, session_id: str, strategy_types: Sequence[str], seqs: Sequence[int | None]
) -> list[SummaryCache]:
    """Cached summaries (stored with transcript seq ranges) as index ranges of this history."""
    index_of = {seq: i for i, seq in enumerate(seqs) if seq is not None}
    entries: list[SummaryCache] = []
    for strategy in strategy_types:
        for state in store.list_context_states(session_id, strategy=strategy):
            start = index_of.get(state.range_start)
            last = index_of.get(state.range_end - 1)
            if start is None or last is None or last < start:
                continue
            entries.append(
                SummaryCache(strategy, start, last + 1, state.summary, state.level, state.summarizer)
            )
    return entries
