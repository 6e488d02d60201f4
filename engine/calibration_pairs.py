"""Calibration pairs from a session database: every two consecutive model calls of a session that
both have the provider's count and our estimate (imported, proxied or run by the session manager).

What the later call added is the transcript messages between what the two calls sent
(``engine.sent.sent_end``: their ``messages_sent``, else the reply they produced); a pair across a compaction, or where the provider's count did not grow, is left
out (the prompt was rebuilt, not grown). Pairs are grouped by conversation (a source file and
its root session: sub-agents with their parent) so :func:`engine.calibration.calibrate` holds each
one out whole.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np

from engine.calibration import (
    CALIBRATED_ESTIMATORS,
    FEATURES,
    Calibration,
    FeatureCounter,
    GrowthPair,
    calibrate,
    load_calibration,
    model_family,
    save_calibration,
)
from engine.messages import Message
from engine.rollup import root_of
from engine.sent import sent_end
from engine.store import SessionStore, StoredEvent
from engine.store.factory import open_store
from engine.store.sqlite import SQLITE_MAGIC
from engine.store.urls import is_database_url

__all__ = ["is_database", "refit_calibration", "source_growth_pairs", "store_growth_pairs"]


def store_growth_pairs(
    stores: Iterable[SessionStore], *, estimators: Iterable[str] = CALIBRATED_ESTIMATORS
) -> dict[tuple[str, str], list[GrowthPair]]:
    """Growth pairs of every session counted by one of ``estimators``, by (estimator, model family)."""
    wanted = set(estimators)
    pairs: dict[tuple[str, str], list[GrowthPair]] = {}
    counters: dict[str, FeatureCounter] = {}
    for store in stores:
        sessions = store.list_sessions()
        parents = {s.id: s.parent_session_id for s in sessions}
        by_id = {s.id: s for s in sessions}
        for session in sessions:
            if session.tokenizer not in wanted:
                continue
            root = by_id.get(root_of(session.id, parents), session)
            # a conversation is held out whole: its file, and its root session where a file holds several
            group = f"{Path(root.source_path).name}:{root.id}" if root.source_path else root.id
            counter = counters.setdefault(session.tokenizer, FeatureCounter(session.tokenizer))
            key = (session.tokenizer, model_family(session.model))
            pairs.setdefault(key, []).extend(_session_pairs(store, session.id, group, counter))
    return pairs


def _session_pairs(
    store: SessionStore, session_id: str, group: str, counter: FeatureCounter
) -> list[GrowthPair]:
    rows = store.load_messages(session_id)
    messages = {row.seq: row.message for row in rows}
    kinds = {row.seq: row.kind for row in rows}
    turn_ends: dict[int, int] = {}
    for row in rows:
        turn_ends[row.turn_index] = row.seq + 1

    def end_of(event: StoredEvent) -> int:  # what the call sent: engine.sent's one rule
        return sent_end(event.details, event.message_seq, event.turn_index, kind_of=kinds.get,
                        turn_end=lambda turn: turn_ends.get(turn, len(rows)))  # fmt: skip

    found: list[GrowthPair] = []
    before: tuple[StoredEvent, int] | None = None
    for event in store.list_events(session_id):
        if event.kind == "compaction" and event.outcome == "compacted":
            before = None  # the prompt was rebuilt: no growth pair across it
            continue
        if event.kind != "request":
            continue
        counted = _counted(event)
        if counted and before is not None:
            pair = _pair(before, (event, end_of(event)), messages, group, counter)
            if pair is not None:
                found.append(pair)
        before = (event, end_of(event)) if counted else None
    return found


def _counted(event: StoredEvent) -> bool:
    return event.usage is not None and event.usage.prompt_tokens > 0 and _estimate(event) is not None


def _estimate(event: StoredEvent) -> int | None:
    """Our estimate recorded for the call (not its components: those are reconciled to the provider)."""
    value = event.details.get("estimate_total", event.projected_tokens)
    return int(value) if isinstance(value, int | float) else None


def _pair(
    before: tuple[StoredEvent, int],
    after: tuple[StoredEvent, int],
    messages: dict[int, Message],
    group: str,
    counter: FeatureCounter,
) -> GrowthPair | None:
    (first, start), (second, end) = before, after
    provider = second.usage.prompt_tokens - first.usage.prompt_tokens  # type: ignore[union-attr]
    if end < start or provider <= 0:
        return None
    features = np.zeros(len(FEATURES))
    for seq in range(start, end):
        if seq in messages:
            features = features + counter.message(messages[seq])[1]
    return GrowthPair(
        group=group,
        features=tuple(float(x) for x in features),
        static=float(_estimate(second) - _estimate(first)),  # type: ignore[operator]
        provider=provider,
    )


def is_database(source: str) -> bool:
    """A ``postgresql://`` URL or a SQLite file (by its header), not a transcript."""
    if is_database_url(source):
        return True
    try:
        with open(source, "rb") as handle:
            return handle.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


def source_growth_pairs(sources: Sequence[str | os.PathLike[str]]) -> dict[tuple[str, str], list[GrowthPair]]:
    """Growth pairs of session databases (read-only) and transcripts (imported into a scratch
    database first: files or folders, as ``ctxdesk import`` takes them)."""
    databases = [str(s) for s in sources if is_database(str(s))]
    transcripts = [Path(s) for s in sources if not is_database(str(s))]
    with contextlib.ExitStack() as stack:
        stores = [stack.enter_context(open_store(db, read_only=True)) for db in databases]
        if transcripts:
            from engine.importers import import_files
            from engine.importers.locations import folder_files

            scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="ctxdesk-calibration-")))
            store = stack.enter_context(SessionStore(scratch / "pairs.db"))
            import_files(
                [p for p in transcripts if not p.is_dir()], store
            )  # a named file that fails: its error
            for folder in (p for p in transcripts if p.is_dir()):  # a folder's non-transcripts are skipped
                import_files(folder_files(folder), store, on_error=lambda _path, _error: None)
            stores.append(store)
        return store_growth_pairs(stores)


def refit_calibration(
    sources: Sequence[str | os.PathLike[str]], path: str | os.PathLike[str] | None = None
) -> Calibration:
    """Fit every (estimator, family) the sources have pairs of, keep the other stored fits, and
    save (:func:`engine.calibration.save_calibration`: the old file kept if the write fails)."""
    book = load_calibration(path)
    for (estimator, family), pairs in sorted(source_growth_pairs(sources).items()):
        if pairs:
            book = book.with_fit(calibrate(pairs, estimator, family))
    save_calibration(book, path)
    return book
