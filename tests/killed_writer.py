"""A writer process killed outright (SIGKILL: no ``finally`` runs) and whether the worker processes it
forked end on their own (tests/test_store_cost_feed, tests/test_import_workers_end)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path


def workers_of_killed_writer(
    script: str, before_kill: Callable[[list[int]], None] | None = None
) -> list[int]:
    """Run ``script`` (it prints its workers' pids on one line, then waits on stdin), kill it, return
    the pids; ``before_kill`` is given them while the writer still runs."""
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as writer:
        try:
            line = writer.stdout.readline()  # type: ignore[union-attr]
            if before_kill is not None:
                before_kill([int(pid) for pid in line.split()])
        finally:
            writer.send_signal(signal.SIGKILL)
            writer.wait()
    return [int(pid) for pid in line.split()]


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (an ended process this container's init has not reaped yet does not)."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state


def still_running(pids: list[int], within: float = 20.0) -> list[int]:
    """Those of ``pids`` still running after waiting up to ``within`` seconds for all to end."""
    deadline = time.monotonic() + within
    while any(map(running, pids)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return [pid for pid in pids if running(pid)]
