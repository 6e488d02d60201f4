"""Crash safety: kill -9 a writer mid-transaction, many times, and the database stays whole.

A pre-imported zygote forks each writer (tests/reliability/zygote.py), the test sleeps a
random, seeded delay and sends SIGKILL. After every kill: ``PRAGMA integrity_check`` is ok, the
transcript is prefix-complete and made of whole batches, every blob is whole, every snapshot
is complete JSON whose length matches its count.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.store import SessionStore
from tests.reliability.checks import (
    check_blobs,
    check_compaction_records,
    check_integrity,
    check_snapshots,
    check_transcript,
)
from tests.reliability.workloads import append_batch, progress_lines
from tests.reliability.zygote import Zygote

pytestmark = pytest.mark.slow

KILLS = 30
BLOB_KILLS = 20
COMPACTION_KILLS = 30
#: Longest a worker may take to commit its next unit of work before the test calls it stuck.
PROGRESS_WAIT_S = 60.0


@pytest.fixture(scope="module")
def zygote() -> Iterator[Zygote]:
    with Zygote() as z:
        yield z


def new_session(db: Path) -> str:
    with SessionStore(db) as store:
        return store.create_session(title="crash test", model="gpt-4.1", tokenizer="chars/4")


def kill_after(zygote: Zygote, rng: random.Random, workload: str, low: float, high: float, **kwargs) -> None:
    pid = zygote.spawn(workload, **kwargs)
    time.sleep(rng.uniform(low, high))
    status = zygote.kill(pid)
    assert status["signal"] == 9, f"{workload} child ended on its own before the kill: {status}"


def kill_after_progress(
    zygote: Zygote, rng: random.Random, workload: str, progress: Path, high: float, **kwargs
) -> None:
    """Kill ``workload`` at a random moment after it reported one more committed unit of work.

    Waiting for progress (not a fixed delay) makes every kill land inside real work however fast
    or loaded the machine is; the random delay after it places the kill anywhere in the next unit.
    """
    before = len(progress_lines(progress))
    pid = zygote.spawn(workload, progress=str(progress), **kwargs)
    deadline = time.monotonic() + PROGRESS_WAIT_S
    while len(progress_lines(progress)) <= before:
        assert time.monotonic() < deadline, f"{workload} made no progress in {PROGRESS_WAIT_S:.0f} s"
        time.sleep(0.01)
    time.sleep(rng.uniform(0, high))
    status = zygote.kill(pid)
    assert status["signal"] == 9, f"{workload} child ended on its own before the kill: {status}"


def test_kill_during_message_appends_leaves_a_prefix_complete_transcript(
    tmp_path: Path, zygote: Zygote
) -> None:
    db, progress = tmp_path / "s.db", tmp_path / "progress.txt"
    session_id = new_session(db)
    rng = random.Random(8_001)
    lengths = []
    for _ in range(KILLS):
        kill_after(
            zygote, rng, "append", 0.01, 0.3, db=str(db), session_id=session_id, progress=str(progress)
        )
        check_integrity(db)
        reported = progress_lines(progress)
        lengths.append(check_transcript(db, session_id, at_least=int(reported[-1]) if reported else 0))
    assert lengths == sorted(lengths) and lengths[-1] > 500, lengths
    with SessionStore(db, read_only=True) as store:
        assert len(store.load_transcript(session_id)) == lengths[-1]


@pytest.mark.parametrize("use_result_store", [False, True], ids=["put_blob", "ResultStore.offload"])
def test_kill_while_storing_big_outputs_leaves_only_whole_blobs(
    tmp_path: Path, zygote: Zygote, use_result_store: bool
) -> None:
    db, progress = tmp_path / "s.db", tmp_path / "progress.txt"
    session_id = new_session(db)
    rng = random.Random(8_002 + use_result_store)
    counts = []
    for _ in range(BLOB_KILLS // 2):
        kill_after(
            zygote,
            rng,
            "blobs",
            0.02,
            0.4,
            db=str(db),
            session_id=session_id,
            progress=str(progress),
            use_result_store=use_result_store,
        )
        check_integrity(db)
        counts.append(check_blobs(db, progress))
    assert counts[-1] >= len(progress_lines(progress)) > 3


def test_kill_during_compaction_leaves_old_or_new_snapshots_never_half_of_one(
    tmp_path: Path, zygote: Zygote
) -> None:
    db, progress = tmp_path / "s.db", tmp_path / "progress.txt"
    session_id = new_session(db)
    with SessionStore(db) as store:
        for _ in range(40):
            append_batch(store, session_id, store.message_count(session_id))
    rng = random.Random(8_004)
    latest: list[int] = []
    for kill in range(COMPACTION_KILLS):
        if kill % 2:  # half the kills at any early moment, half inside the compaction after a committed one
            kill_after(
                zygote, rng, "compact", 0.05, 0.6, db=str(db), session_id=session_id, progress=str(progress)
            )
        else:
            kill_after_progress(zygote, rng, "compact", progress, 0.5, db=str(db), session_id=session_id)
        check_integrity(db)
        check_transcript(db, session_id, at_least=0)
        snapshots = check_snapshots(db, session_id)
        assert check_compaction_records(db, session_id) == len(snapshots)
        reported = [int(line.split()[0]) for line in progress_lines(progress)]
        assert set(reported) <= {s[0] for s in snapshots}, "a committed snapshot is missing"
        latest.append(snapshots[-1][0] if snapshots else 0)
        with SessionStore(db, read_only=True) as store:
            history, _, through = store.load_resume_history(session_id)
            assert history and through == (snapshots[-1][1] if snapshots else -1)
    assert latest == sorted(latest) and len(set(latest)) >= 3, latest
