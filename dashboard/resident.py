"""A worker process that stays (``python -m dashboard.resident``): the reads a page makes at every
live rerun, sent to one child that keeps its imports, instead of a process started for each.

Each read of how sessions ended (:func:`dashboard.actions.endings`) started a fresh Python and
imported the engine again: ~0.3 s of processor time and 1.5 s of waiting on a busy machine, at every
rerun while an agent or an import wrote beside the page. The child here serves the same ``_do_*``
functions of :mod:`dashboard.actions` (it opens each database for one request and closes it, so it
holds no SQLite lock between requests) over its stdin and stdout: each request and reply a pickle,
framed by :class:`multiprocessing.connection.Connection`. A child that died, or answered late, is stopped and the next call starts
another; it ends with its stdin when the dashboard's process does.
"""

from __future__ import annotations

import atexit
import os
import pickle
import subprocess
import sys
import threading
from multiprocessing.connection import Connection
from typing import Any

from dashboard.actions import (
    ACTION_TIMEOUT_S,
    ActionError,
    EndingsAsk,
    EndingsReply,
    _child_env,
    _in_worker,
    reply_of,
)


class _Child:
    """The running child and the two ends of its pipes, framed by multiprocessing's Connection."""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "dashboard.resident"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(),
        )  # fmt: skip
        assert self.process.stdin is not None and self.process.stdout is not None
        self.requests = Connection(os.dup(self.process.stdin.fileno()), readable=False)
        self.replies = Connection(os.dup(self.process.stdout.fileno()), writable=False)
        self.process.stdin.close()
        self.process.stdout.close()

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.requests.close()
        self.replies.close()


class ResidentWorker:
    """One child serving requests in turn (a lock orders the callers); started on the first call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: _Child | None = None

    def call(self, name: str, *args: Any, timeout: float = ACTION_TIMEOUT_S) -> Any:
        """``_do_<name>(*args)`` in the child; a child that failed is replaced and asked once more."""
        with self._lock:
            for attempt in (1, 2):
                child = self._running()
                try:
                    child.requests.send_bytes(pickle.dumps((name, args, {})))
                    answered = child.replies.poll(timeout)
                    reply = child.replies.recv_bytes() if answered else None
                except (OSError, EOFError) as exc:
                    self._stop()
                    if attempt == 2:
                        raise ActionError(f"the worker process failed during {name}: {exc}") from exc
                    continue
                if reply is None:
                    self._stop()
                    raise ActionError(f"{name}: no reply within {timeout:g} s; the worker was stopped")
                # The reply comes from our own child process, never from the database or the network.
                return reply_of(pickle.loads(reply))
        raise AssertionError("unreachable")

    def pid(self) -> int | None:
        """The child's process id while one runs (tests check it is not the dashboard's own)."""
        running = self._child is not None and self._child.process.poll() is None
        return self._child.process.pid if running else None  # type: ignore[union-attr]

    def _running(self) -> _Child:
        if self._child is None or self._child.process.poll() is not None:
            self._stop()
            self._child = _Child()
        return self._child

    def stop(self) -> None:
        """Stop the child (the next call starts another)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._child is not None:
            self._child.stop()
            self._child = None


def _serve() -> None:
    """The child: answer requests until stdin ends (the dashboard's process is gone)."""
    requests, replies = Connection(0, writable=False), Connection(1, readable=False)
    sys.stdout = sys.stderr  # anything the engine prints must not corrupt a reply
    while True:
        try:
            request = requests.recv_bytes()
        except EOFError:
            return
        name, args, kwargs = pickle.loads(request)  # written by ResidentWorker.call in the parent
        replies.send_bytes(pickle.dumps(_in_worker(name, args, kwargs)))


#: The dashboard process's resident worker, stopped when the process exits.
RESIDENT = ResidentWorker()
atexit.register(RESIDENT.stop)


def endings(asks: dict[str, EndingsAsk]) -> dict[str, EndingsReply]:
    """How the sessions of each database (by path) ended, read again only where needed
    (:func:`dashboard.actions._do_endings`), in the resident worker: every live rerun of the Sessions page asks."""
    return RESIDENT.call("endings", {str(p): ask for p, ask in asks.items()})


if __name__ == "__main__":
    _serve()
