"""The parsing processes of an import end on their own when the writer is killed outright (the OOM
killer, ``kill -9``): they waited for work forever, reparented, before. And ^C (SIGINT to the whole
terminal's process group) is the writer's to handle: a worker printed its own traceback."""

from __future__ import annotations

import os
import signal
import time

from tests.killed_writer import running, still_running, workers_of_killed_writer

SCRIPT = (
    "from engine.importers import parallel\n"
    "pool = parallel._pool(2)\n"
    "list(pool.map(abs, [1, 2, 3, 4]))\n"  # its processes started
    "print(*pool._processes, flush=True)\n"
    "input()\n"
)


def test_parsing_workers_of_a_killed_writer_end() -> None:
    workers = workers_of_killed_writer(SCRIPT)
    assert len(workers) == 2
    assert still_running(workers) == []


def test_parsing_workers_leave_ctrl_c_to_the_writer() -> None:
    alive_after_sigint: list[bool] = []

    def interrupt(workers: list[int]) -> None:
        for pid in workers:
            os.kill(pid, signal.SIGINT)
        time.sleep(1.0)
        alive_after_sigint.extend(map(running, workers))

    workers = workers_of_killed_writer(SCRIPT, before_kill=interrupt)
    assert alive_after_sigint == [True, True]
    assert still_running(workers) == []
