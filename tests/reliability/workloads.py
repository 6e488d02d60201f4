"""Write loops run in forked children (see zygote.py) until the test kills them with SIGKILL.

Every loop writes deterministic data, one transaction at a time, and after each commit appends
one line to a progress file; so after a kill the test knows what was committed at least, and
what every stored row must hold. Message ``seq`` always holds ``expected_message(seq)`` and
transcripts grow in batches that start where ``batch_size`` says.
"""

from __future__ import annotations

import hashlib
import random
import time
from pathlib import Path

from bench.corpus import generate_history
from engine.events import ContextEvent
from engine.messages import Message
from engine.store import SessionStore
from engine.tokens import get_tokenizer

CORPUS_SIZE = 3_000
CORPUS_SEED = 5
#: Children stop writing after this many blob bytes and wait to be killed (bounds the DB size).
BLOB_BYTES_PER_CHILD = 16 << 20
IDLE_S = 600

_corpus: list[Message] = []


def preload() -> None:
    """Import and build everything once in the zygote, before any fork."""
    _corpus[:] = generate_history(CORPUS_SIZE, seed=CORPUS_SEED)
    get_tokenizer("chars/4")


def expected_message(seq: int) -> Message:
    if not _corpus:
        preload()
    return _corpus[seq % len(_corpus)]


def batch_size(start: int) -> int:
    """Messages in the batch that starts at transcript seq ``start`` (1 to 7)."""
    return 1 + start % 7


def batch_ends(limit: int) -> set[int]:
    """Every transcript length a sequence of whole batches can reach, up to ``limit``."""
    ends, n = {0}, 0
    while n < limit:
        n += batch_size(n)
        ends.add(n)
    return ends


def append_batch(store: SessionStore, session_id: str, start: int) -> int:
    """One batch of messages and its note event, in one transaction; returns the new length."""
    size = batch_size(start)
    batch = [expected_message(s) for s in range(start, start + size)]
    with store.transaction():
        store.append_messages(session_id, batch, tokenizer=get_tokenizer("chars/4"))
        store.record_event(
            session_id,
            ContextEvent(
                kind="note",
                trigger="append",
                outcome="ok",
                message_seq=start + size - 1,
                details={"batch_start": start, "batch_size": size},
            ),
        )
    return start + size


def append(db: str, session_id: str, progress: str, pause_s: float = 0.0) -> None:
    """Append batches forever, ``pause_s`` apart; progress line: the transcript length after
    each commit."""
    store = SessionStore(db)
    n = store.message_count(session_id)
    with open(progress, "a", encoding="utf-8") as out:
        while True:
            n = append_batch(store, session_id, n)
            out.write(f"{n}\n")
            out.flush()
            if pause_s:
                time.sleep(pause_s)


def blob_bytes(index: int) -> bytes:
    """The deterministic content of blob ``index``: 128 KiB to 3 MiB, text or binary."""
    r = random.Random(index)
    size = r.randint(128 << 10, 3 << 20)
    if index % 2:
        line = f"{index:08d} " + "log line with ünïcode ✓ and numbers 0123456789\n"
        return (line * (size // len(line) + 1)).encode("utf-8")[:size]
    return r.randbytes(size)


def blobs(db: str, session_id: str, progress: str, use_result_store: bool = False) -> None:
    """Store big outputs (put_blob, or ResultStore.offload); progress line: ``ref_id sha256 size``."""
    store = SessionStore(db)
    written = 0
    index = len(store.list_blobs(session_id))
    result_store = None
    if use_result_store:
        from engine.offload import ResultStore

        result_store = ResultStore(store, session_id)
    with open(progress, "a", encoding="utf-8") as out:
        while written < BLOB_BYTES_PER_CHILD:
            data = blob_bytes(index)
            if result_store is not None:
                ref_id = result_store.offload(
                    data, tool_name="bash", tool_use_id=f"toolu_blob_{index}"
                ).ref_id
            else:
                ref_id = store.put_blob(
                    session_id, data, tool_name="bash", tool_use_id=f"toolu_blob_{index}"
                ).ref_id
            out.write(f"{ref_id} {hashlib.sha256(data).hexdigest()} {len(data)}\n")
            out.flush()
            written += len(data)
            index += 1
    time.sleep(IDLE_S)


#: Manual compactions cycle through these; each leaves a short resume history for the next.
COMPACTION_STRATEGIES = ("sliding_window", "summarize", "truncate", "emergency", "chain")


def compact(
    db: str,
    session_id: str,
    progress: str,
    append_between: bool = True,
    strategies: tuple[str, ...] | list[str] = COMPACTION_STRATEGIES,
) -> None:
    """Compact forever (force_compact, offline summarizer, cycling ``strategies``), a batch of
    messages appended before each unless another process appends; progress line:
    ``snapshot_id through_seq message_count`` after each commit."""
    from engine.compaction import OfflineSummarizer, force_compact

    store = SessionStore(db)
    summarizer = OfflineSummarizer()
    done = 0
    with open(progress, "a", encoding="utf-8") as out:
        while True:
            if append_between:
                append_batch(store, session_id, store.message_count(session_id))
            strategy = strategies[done % len(strategies)]
            report = force_compact(store, session_id, strategy=strategy, summarizer=summarizer)
            done += 1
            if report.snapshot_id is not None:
                snapshot = store.get_snapshot(report.snapshot_id)
                out.write(f"{report.snapshot_id} {snapshot.through_seq} {snapshot.message_count}\n")
                out.flush()


def progress_lines(progress: str | Path) -> list[str]:
    """Complete lines of a progress file (a kill may cut the last one short)."""
    path = Path(progress)
    if not path.exists():
        return []
    text = path.read_text(encoding="utf-8")
    return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
