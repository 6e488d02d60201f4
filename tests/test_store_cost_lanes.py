"""A big session's cost pass priced in two lanes (engine.store.cost_lanes) writes the rows one lane
writes: every table of real-fixture imports and of generated sessions (cache writes of both TTLs,
calls without times), with the lane used, and with it refused when its assumed start is wrong."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from engine.errors import StoreError
from engine.importers import folder_files, import_files
from engine.store import cost_lanes, sql_store
from engine.store.factory import open_store
from tests.import_rows import table_rows
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

FIXTURES = Path(__file__).parent / "fixtures"


def session_lines(
    path: Path, calls: int, *, writes_1h_until: int, writes_5m_from: int = 0, untimed_from: int | None = None
) -> None:
    """A Claude Code session of ``calls`` calls; calls before ``writes_1h_until`` write the cache
    for an hour, later ones from ``writes_5m_from`` every seventh for 5 minutes; from
    ``untimed_from`` on, lines have no time."""
    parent = None
    with path.open("w", encoding="utf-8") as fh:
        for i in range(2 * calls):
            n = i // 2
            if i % 2:
                if n < writes_1h_until:
                    split = {"ephemeral_1h_input_tokens": 40, "ephemeral_5m_input_tokens": 0}
                else:
                    split = {
                        "ephemeral_1h_input_tokens": 0,
                        "ephemeral_5m_input_tokens": 30 if n >= writes_5m_from and n % 7 == 0 else 0,
                    }
                usage = {
                    "input_tokens": 5 + n % 11, "output_tokens": 3, "cache_read_input_tokens": 100 * (n % 3),
                    "cache_creation_input_tokens": sum(split.values()), "cache_creation": split,
                }  # fmt: skip
                message: dict[str, Any] = {
                    "id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": f"done {i}"}], "stop_reason": "end_turn", "usage": usage,
                }  # fmt: skip
            else:
                message = {"role": "user", "content": f"step {i}"}
            line: dict[str, Any] = {
                "type": "assistant" if i % 2 else "user", "sessionId": "s-lanes", "uuid": f"u{i:06d}",
                "parentUuid": parent, "cwd": "/repo", "version": "2.1.0", "message": message,
            }  # fmt: skip
            if untimed_from is None or n < untimed_from:
                line["timestamp"] = f"2026-01-01T{n // 3600 % 24:02d}:{n // 60 % 60:02d}:{n % 60:02d}.000Z"
            fh.write(json.dumps(line) + "\n")
            parent = line["uuid"]


def imported_rows(folder: Path, paths: list[Path], root: Path) -> dict[str, list[tuple[Any, ...]]]:
    db = folder / "out.db"
    with open_store(db) as store:
        import_files(paths, store, on_error=lambda p, e: None)
    return table_rows(db, root)


@pytest.fixture(autouse=True)
def lanes_may_fork(monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite's worker processes keep threads other tests started (servers, watchers), so the guard
    would refuse every lane here: these tests are about the rows, the guard has its own test below."""
    monkeypatch.setattr(cost_lanes, "forkable", lambda: True)


class LaneSpy:
    """How often a lane started and how often its rows were kept."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.started = 0
        self.refusals: list[str] = []  # why, each time
        start = cost_lanes._Lane.start.__func__  # type: ignore[attr-defined]
        spy = self

        def counted_start(cls: Any, *args: Any) -> Any:
            lane = start(cls, *args)
            spy.started += lane is not None
            return lane

        monkeypatch.setattr(cost_lanes._Lane, "start", classmethod(counted_start))
        monkeypatch.setattr(cost_lanes.logger, "info", lambda msg, *args: self.refusals.append(msg % args))

    @property
    def kept(self) -> int:
        return self.started - len(self.refusals)


def both_ways(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, paths: list[Path], root: Path, chunk: int
) -> tuple[dict[str, Any], dict[str, Any], LaneSpy]:
    """(rows priced in one lane, rows priced in two, the spy of the second), ``chunk`` calls a chunk."""
    monkeypatch.setattr(sql_store, "HELD_ROWS", chunk)
    monkeypatch.setattr(cost_lanes, "LANE_MIN_CALLS", 10**9)
    (tmp_path / "one").mkdir()
    serial = imported_rows(tmp_path / "one", paths, root)
    monkeypatch.setattr(cost_lanes, "LANE_MIN_CALLS", 2)
    spy = LaneSpy(monkeypatch)
    (tmp_path / "two").mkdir()
    lanes = imported_rows(tmp_path / "two", paths, root)
    return serial, lanes, spy


def test_real_fixtures_priced_in_two_lanes_give_the_same_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "fx"
    shutil.copytree(FIXTURES / "real_agents", root)
    serial, lanes, spy = both_ways(tmp_path, monkeypatch, folder_files(root), root, chunk=2)
    assert spy.started >= 5  # the fixtures' sessions with four calls or more
    assert spy.kept >= 1
    assert serial["request_costs"][1:]  # rows were priced
    assert lanes == serial


@pytest.mark.parametrize(
    ("writes_1h_until", "writes_5m_from", "untimed_from", "lookback", "kept"),
    [
        # the first half (96 calls) ends on no writer: its last 1h writer (call 9) is found, kept
        (10, 150, None, None, True),
        # not found (looked back one call): the TTL it assumes (5m, as stored) is wrong, refused
        (10, 150, None, 1, False),
        (0, 0, None, None, True),  # 5-minute writers only
        (10, 150, 150, None, False),  # calls without times: their messages' are read here
    ],
)
def test_generated_session_priced_in_two_lanes_gives_the_same_rows(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    writes_1h_until: int,
    writes_5m_from: int,
    untimed_from: int | None,
    lookback: int | None,
    kept: bool,
) -> None:
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(
        path, 200, writes_1h_until=writes_1h_until, writes_5m_from=writes_5m_from, untimed_from=untimed_from
    )
    monkeypatch.setattr(cost_lanes, "WRITER_LOOKBACK", lookback)
    serial, lanes, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert spy.started == 1
    assert lanes == serial
    costs = serial["request_costs"]
    assert len(costs) - 1 == 200
    writes_1h = costs[0].index("cache_write_1h_tokens")
    assert sum(1 for row in costs[1:] if row[writes_1h]) == writes_1h_until
    assert spy.kept == (1 if kept else 0)
    if not kept:
        why = "it gave up" if untimed_from is not None else "its start differs"
        assert spy.refusals == [f"cost lane of s-lanes not used: {why}; priced here"]


def test_refused_lane_is_priced_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lane's rows are dropped when the first half ends elsewhere than it assumed."""
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=120)
    monkeypatch.setattr(cost_lanes, "WRITER_LOOKBACK", 1)
    serial, lanes, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert lanes == serial
    assert spy.refusals == ["cost lane of s-lanes not used: its start differs; priced here"]


def test_a_failing_first_half_ends_the_worker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's error still surfaces (the events stay, their cost rows are left to a refresh),
    and the worker pricing the second half is ended, not left waiting to send its rows."""
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(path, 3_000, writes_1h_until=10)  # the second half's rows fill the pipe: its sender waits
    monkeypatch.setattr(sql_store, "HELD_ROWS", 256)
    monkeypatch.setattr(cost_lanes, "LANE_MIN_CALLS", 2)
    lanes: list[Any] = []
    start = cost_lanes._Lane.start.__func__  # type: ignore[attr-defined]
    monkeypatch.setattr(
        cost_lanes._Lane, "start", classmethod(lambda cls, *a: lanes.append(start(cls, *a)) or lanes[-1])
    )
    calls = 0
    price_here = cost_lanes._price_here

    def failing(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise StoreError("disk full")
        price_here(*args)

    monkeypatch.setattr(cost_lanes, "_price_here", failing)
    with open_store(tmp_path / "out.db") as store:
        import_files([path], store)
        assert len(store.list_events(store.list_sessions()[0].id, kind="request")) == 3_000
    assert len(lanes) == 1 and lanes[0] is not None
    assert not lanes[0].process.is_alive()
    assert lanes[0].process.exitcode is not None


def test_a_process_with_other_threads_prices_in_one_lane(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fork copies the locks other threads hold (a dashboard's server, the proxy, a pool's threads):
    its child could wait on one forever, so no lane is started there; the rows are the same."""
    monkeypatch.undo()  # the guard itself, as the store runs it
    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)
    other.start()
    try:
        assert cost_lanes.forkable() is False
    finally:
        release.set()
        other.join()
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    monkeypatch.setattr(cost_lanes, "forkable", lambda: False)
    serial, threaded, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert threaded == serial and spy.started == 0


def test_a_worker_that_dies_unheard_is_priced_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker killed before it answers: its half is priced here (the same rows), nothing waits."""
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)

    def dying(*args: Any) -> None:
        os._exit(3)

    monkeypatch.setattr(cost_lanes, "_work", dying)
    serial, lanes, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert lanes == serial and spy.started == 1


def test_a_worker_that_never_answers_is_stopped_and_priced_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "fx"
    root.mkdir()
    path = root / "s.jsonl"
    session_lines(path, 120, writes_1h_until=10, writes_5m_from=60)
    monkeypatch.setattr(cost_lanes, "_work", lambda *args: time.sleep(3600))
    monkeypatch.setattr(cost_lanes, "LANE_WAIT_S", 1.0)
    serial, lanes, spy = both_ways(tmp_path, monkeypatch, [path], root, chunk=16)
    assert lanes == serial and spy.started == 1  # it started, was stopped, and its half priced here


@pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
def test_postgresql_prices_in_one_lane_beside_its_pools_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.undo()  # the guard itself, as the store runs it
    path = tmp_path / "s.jsonl"
    session_lines(path, 200, writes_1h_until=10, writes_5m_from=150)
    monkeypatch.setattr(sql_store, "HELD_ROWS", 16)
    monkeypatch.setattr(cost_lanes, "LANE_MIN_CALLS", 2)
    spy = LaneSpy(monkeypatch)
    with open_store(fresh_url()) as store:
        import_files([path], store)
        with store.transaction() as conn:
            count = conn.execute("SELECT count(*) FROM request_costs").fetchone()[0]
    assert count == 200 and spy.started == 0
