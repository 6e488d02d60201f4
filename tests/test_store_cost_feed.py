"""An import's calls priced in a worker process while it writes (engine.store.cost_feed) give the rows
the serial pass gives: every table of the real fixtures' import and of generated sessions (cache writes
of both TTLs, a compaction between calls, calls without times), with the worker's rows taken, and with
them refused when the database no longer reads as the worker assumed, or when the worker dies."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from engine.importers import folder_files, import_files
from engine.store import cost_feed, cost_lanes, sql_store
from engine.store.factory import open_store
from tests.import_rows import table_rows
from tests.killed_writer import still_running, workers_of_killed_writer
from tests.test_store_cost_lanes import session_lines

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(autouse=True)
def may_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's processes keep threads other tests started: the guard would refuse every worker
    (its own test is in tests/test_store_cost_lanes)."""
    monkeypatch.setattr(cost_lanes, "forkable", lambda: True)


class FeedSpy:
    """Every feed started, and its counts once closed."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.feeds: list[cost_feed.CostFeed] = []
        start = cost_feed.CostFeed.start.__func__  # type: ignore[attr-defined]

        def counted(cls: Any, chunk: int) -> Any:
            feed = start(cls, chunk)
            self.feeds.append(feed)
            return feed

        monkeypatch.setattr(cost_feed.CostFeed, "start", classmethod(counted))

    @property
    def taken(self) -> int:
        return sum(f.taken for f in self.feeds)

    @property
    def refused(self) -> int:
        return sum(f.refused for f in self.feeds)


def spaced(path: Path, minutes: int) -> None:
    """The session's calls ``minutes`` apart: the TTL in force decides whether the cache survived."""
    start = datetime(2026, 1, 1)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    for i, line in enumerate(lines):
        line["timestamp"] = (start + timedelta(minutes=minutes * (i // 2))).strftime("%Y-%m-%dT%H:%M:%S.000Z")
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def rebuilt_after_a_pause(path: Path, calls: int) -> None:
    """Calls ten minutes apart: the first ten write the cache for an hour, the others read it, and every
    twentieth writes it again whole. Whether that rebuild is the cache expiring depends on the TTL in
    force: the one the last writer left, chunks of calls earlier."""
    parent = None
    with path.open("w", encoding="utf-8") as fh:
        for i in range(2 * calls):
            n = i // 2
            at = (datetime(2026, 1, 1) + timedelta(minutes=10 * n)).strftime("%Y-%m-%dT%H:%M:%S.000Z")
            if i % 2:
                write_1h, write_5m = (40, 0) if n < 10 else (0, 6_000) if n % 20 == 0 else (0, 0)
                usage = {
                    "input_tokens": 10, "output_tokens": 3, "cache_read_input_tokens": 0 if write_5m else 6_000,
                    "cache_creation_input_tokens": write_1h + write_5m,
                    "cache_creation": {"ephemeral_1h_input_tokens": write_1h, "ephemeral_5m_input_tokens": write_5m},
                }  # fmt: skip
                message: dict[str, Any] = {
                    "id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": f"done {i}"}], "stop_reason": "end_turn", "usage": usage,
                }  # fmt: skip
            else:
                message = {"role": "user", "content": f"step {i}"}
            line = {
                "type": "assistant" if i % 2 else "user", "sessionId": "s-ttl", "uuid": f"u{i:06d}",
                "parentUuid": parent, "cwd": "/repo", "version": "2.1.0", "message": message, "timestamp": at,
            }  # fmt: skip
            fh.write(json.dumps(line) + "\n")
            parent = line["uuid"]


def transcript_in(tmp_path: Path) -> tuple[Path, Path]:
    """(the folder of a transcript to write, its path)."""
    root = tmp_path / "fx"
    root.mkdir()
    return root, root / "s.jsonl"


def small_chunks(monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    """``chunk`` calls a chunk, and no lanes (engine.store.cost_lanes): the worker or the serial pass."""
    monkeypatch.setattr(sql_store, "HELD_ROWS", chunk)
    monkeypatch.setattr(cost_lanes, "LANE_MIN_CALLS", 10**9)


def imported(folder: Path, paths: list[Path], root: Path, *, feed: bool) -> dict[str, list[tuple[Any, ...]]]:
    folder.mkdir()
    db = folder / "out.db"
    with open_store(db) as store:
        if feed:
            with store.cost_worker() as started:
                assert started
                import_files(paths, store, on_error=lambda p, e: None)
        else:
            import_files(paths, store, on_error=lambda p, e: None)
    return table_rows(db, root)


def both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paths: list[Path], root: Path, chunk: int
) -> tuple[dict[str, Any], dict[str, Any], FeedSpy]:
    """(rows priced here, rows priced by the worker, the spy), ``chunk`` calls a chunk, no lanes."""
    small_chunks(monkeypatch, chunk)
    serial = imported(tmp_path / "serial", paths, root, feed=False)
    spy = FeedSpy(monkeypatch)
    fed = imported(tmp_path / "fed", paths, root, feed=True)
    return serial, fed, spy


def test_real_fixtures_priced_by_the_worker_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "fx"
    shutil.copytree(FIXTURES / "real_agents", root)
    serial, fed, spy = both_ways(tmp_path, monkeypatch, folder_files(root), root, chunk=3)
    assert len(serial["request_costs"]) > 100  # rows were priced
    assert fed == serial
    assert spy.taken >= 50  # most sessions' rows came from the worker
    assert not any(f.broken for f in spy.feeds)


@pytest.mark.parametrize(
    ("writes_1h_until", "writes_5m_from", "untimed_from", "minutes", "taken"),
    [
        (10, 150, None, 0, True),  # 1h writers early, 5-minute ones from call 150
        # ten minutes apart: the 1h TTL the early writers left keeps the cache warm chunk after chunk
        (10, 150, None, 10, True),
        (0, 0, None, 10, True),  # 5-minute writers only: every call finds the cache expired
        (10, 150, 150, 0, False),  # calls without times: their messages' are read by the store
    ],
)
def test_generated_session_priced_by_the_worker_gives_the_same_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writes_1h_until: int,
    writes_5m_from: int,
    untimed_from: int | None,
    minutes: int,
    taken: bool,
) -> None:
    root, path = transcript_in(tmp_path)
    session_lines(
        path, 200, writes_1h_until=writes_1h_until, writes_5m_from=writes_5m_from, untimed_from=untimed_from
    )
    if minutes:
        spaced(path, minutes)
    serial, fed, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert fed == serial
    assert len(serial["request_costs"]) - 1 == 200
    assert (spy.taken, spy.refused) == ((1, 0) if taken else (0, 1))
    assert not Path(spy.feeds[0].spool).exists()  # the chunks it spilled to disk, removed with it


def test_the_ttl_in_force_is_carried_from_chunk_to_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The 1h TTL the first calls left judges the rebuild a chunk later (not the cache expiring after ten
    minutes); the 5-minute one that rebuild left judges the next."""
    root, path = transcript_in(tmp_path)
    rebuilt_after_a_pause(path, 120)
    serial, fed, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert fed == serial and spy.taken == 1
    costs = serial["request_costs"]
    cause = {row[costs[0].index("call_index")]: row[costs[0].index("cache_cause")] for row in costs[1:]}
    assert cause[20] not in (None, "ttl_expired")  # the 1h cache of call 9, chunks before, still warm
    assert cause[40] == "ttl_expired"  # call 20 wrote for five minutes


def test_a_session_continued_by_a_second_import_is_priced_from_its_stored_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker starts from what the database holds of the session (its last row, its last cache
    writer, a compaction stored after it): a grown file's new calls, as the serial pass prices them."""
    root, path = transcript_in(tmp_path)
    small_chunks(monkeypatch, 16)
    spy = FeedSpy(monkeypatch)
    results = {}
    for way in ("serial", "fed"):
        (tmp_path / way).mkdir()
        db = tmp_path / way / "out.db"
        session_lines(path, 100, writes_1h_until=10, writes_5m_from=60)
        with open_store(db) as store:
            import_files([path], store)
        session_lines(path, 180, writes_1h_until=10, writes_5m_from=60)  # the same first 100, grown
        with open_store(db) as store:
            if way == "fed":
                with store.cost_worker():
                    import_files([path], store)
            else:
                import_files([path], store)
        results[way] = table_rows(db, root)
    assert results["fed"] == results["serial"]
    assert len(results["serial"]["request_costs"]) - 1 == 180
    assert spy.taken == 1


def test_rows_are_refused_when_the_database_reads_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the worker assumed of the stored session differs once the transaction commits (here: a
    read that says otherwise): its rows are dropped and the session priced here, the same rows."""
    root, path = transcript_in(tmp_path)
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    read = cost_feed.read_before
    reads = 0

    def drifting(*args: Any) -> Any:
        nonlocal reads
        reads += 1
        before = read(*args)
        return before if reads == 1 else cost_feed._Before(**{**before.__dict__, "writer_1h": True})

    monkeypatch.setattr(cost_feed, "read_before", drifting)
    serial, fed, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert fed == serial
    assert (spy.taken, spy.refused) == (0, 1)


def test_a_worker_that_dies_is_priced_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker gone before it answers: the store prices every session itself, nothing waits."""
    root, path = transcript_in(tmp_path)
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    monkeypatch.setattr(cost_feed, "_serve", lambda *args: os._exit(3))
    serial, fed, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert fed == serial
    assert spy.feeds[0].broken and spy.taken == 0


def test_a_worker_that_never_answers_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root, path = transcript_in(tmp_path)
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    monkeypatch.setattr(cost_feed, "_serve", lambda *args: __import__("time").sleep(3600))
    monkeypatch.setattr(cost_feed, "TAKE_WAIT_S", 1.0)
    serial, fed, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert fed == serial
    feed = spy.feeds[0]
    assert feed.broken and not feed.process.is_alive()


def test_no_worker_where_the_process_may_not_fork(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cost_lanes, "forkable", lambda: False)
    with open_store(tmp_path / "out.db") as store, store.cost_worker() as started:
        assert started is False


def test_a_parallel_import_prices_in_the_worker_beside_its_parsing_pool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``ctxdesk import``'s way: the cost worker forked before the parsing processes, every file
    written here; the same rows as a serial import, most sessions' from the worker."""
    from engine.importers.parallel import import_files_parallel

    root = tmp_path / "fx"
    shutil.copytree(FIXTURES / "real_agents", root)
    paths = folder_files(root)
    serial = imported(tmp_path / "serial", paths, root, feed=False)
    spy = FeedSpy(monkeypatch)
    (tmp_path / "fed").mkdir()
    with open_store(tmp_path / "fed" / "out.db") as store:
        import_files_parallel(
            paths, store, {}, workers=2, on_error=lambda p, e: None, min_bytes=0, cost_worker_bytes=0
        )
    assert table_rows(tmp_path / "fed" / "out.db", root) == serial
    assert len(spy.feeds) == 1 and spy.taken >= 50 and not spy.feeds[0].broken


def test_an_interrupted_import_writes_the_rows_of_what_it_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """^C after a file committed: its calls' rows, priced by the worker, are written before the
    interrupt goes on (a file imported is not read again: a missing row would stay missing)."""
    monkeypatch.setattr(sql_store, "HELD_ROWS", 16)
    path = tmp_path / "s.jsonl"
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    spy = FeedSpy(monkeypatch)
    with pytest.raises(KeyboardInterrupt), open_store(tmp_path / "out.db") as store, store.cost_worker():
        import_files([path], store)
        raise KeyboardInterrupt
    with open_store(tmp_path / "out.db") as store, store.transaction() as conn:
        assert conn.execute("SELECT count(*) FROM request_costs").fetchone()[0] == 120
    assert spy.taken == 1 and not spy.feeds[0].process.is_alive()


def test_a_session_written_again_before_its_rows_are_in_is_priced_after_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's rows of a transaction are written at a later commit; a session written again
    before then is not fed (the worker would start from rows not in yet): its earlier rows are
    written first, then its new calls priced here, as the serial pass prices them."""
    root, path = transcript_in(tmp_path)
    small_chunks(monkeypatch, 16)
    spy = FeedSpy(monkeypatch)
    results = {}
    for way in ("serial", "fed"):
        (tmp_path / way).mkdir()
        db = tmp_path / way / "out.db"
        with open_store(db) as store, store.cost_worker() if way == "fed" else contextlib.nullcontext():
            for calls in (100, 140, 180):  # the file grows between imports of one block
                rebuilt_after_a_pause(path, calls)
                import_files([path], store)
        results[way] = table_rows(db, root)
    assert results["fed"] == results["serial"]
    assert len(results["serial"]["request_costs"]) - 1 == 180
    # the first import's and the third's from the worker; the second's priced here (the first's were
    # not in when it wrote)
    assert (spy.taken, spy.refused) == (2, 0)


def test_the_worker_of_a_killed_writer_ends(tmp_path: Path) -> None:
    """The writer killed outright (no ``finally`` runs): its worker, waiting for work, sees it gone and
    ends within seconds instead of waiting forever."""
    script = (
        "from engine.store import cost_lanes\n"
        "from engine.store.factory import open_store\n"
        "cost_lanes.forkable = lambda: True\n"
        f"with open_store({str(tmp_path / 'out.db')!r}) as store, store.cost_worker():\n"
        "    print(store._cost_feed.process.pid, flush=True)\n"
        "    input()\n"
    )
    workers = workers_of_killed_writer(script)
    assert len(workers) == 1
    assert still_running(workers) == []
