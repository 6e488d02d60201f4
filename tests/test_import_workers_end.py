"""The parsing processes of an import end on their own when the writer is killed outright (the OOM
killer, ``kill -9``): they waited for work forever, reparented, before."""

from __future__ import annotations

from tests.killed_writer import still_running, workers_of_killed_writer


def test_parsing_workers_of_a_killed_writer_end() -> None:
    script = (
        "from engine.importers import parallel\n"
        "pool = parallel._pool(2)\n"
        "list(pool.map(abs, [1, 2, 3, 4]))\n"  # its processes started
        "print(*pool._processes, flush=True)\n"
        "input()\n"
    )
    workers = workers_of_killed_writer(script)
    assert len(workers) == 2
    assert still_running(workers) == []
