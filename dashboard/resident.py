"""A worker process that stays (``python -m dashboard.resident``): the reads a page makes at every
live rerun, sent to one child that keeps its imports, instead of a process started for each.

Each read of how sessions ended (:func:`dashboard.actions.endings`) started a fresh Python and
imported the engine again: ~0.3 s of processor time and 1.5 s of waiting on a busy machine, at every
rerun while an agent or an import wrote beside the page. The child here serves the same ``_do_*``
functions of :mod:`dashboard.actions` (it opens each database for one request and closes it, so it
holds no SQLite lock between requests) over its stdin and stdout: each request and reply a pickle
preceded by its length. A child that died, or answered late, is stopped and the next call starts
another; it ends with its stdin when the dashboard's process does.
"""

from __future__ import annotations

import atexit
import os
import pickle
import select
import struct
import subprocess
import sys
import threading
import time
from typing import IO, Any

from dashboard.actions import (
    ACTION_TIMEOUT_S,
    ActionError,
    EndingsAsk,
    EndingsReply,
    _child_env,
    _in_worker,
    reply_of,
)

#: A frame's length: 8 bytes, big-endian.
HEADER = struct.Struct(">Q")


def _write_frame(out: IO[bytes], payload: bytes) -> None:
    out.write(HEADER.pack(len(payload)) + payload)
    out.flush()


def _read_exactly(fd: int, size: int, deadline: float | None) -> bytes:
    """``size`` bytes from ``fd``; TimeoutError past ``deadline`` (monotonic), EOFError at its end."""
    parts, left = [], size
    while left:
        if deadline is not None:
            wait = deadline - time.monotonic()
            if wait <= 0 or not select.select([fd], [], [], wait)[0]:
                raise TimeoutError("no reply in time")
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("the worker process ended")
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def _read_frame(fd: int, deadline: float | None = None) -> bytes:
    (size,) = HEADER.unpack(_read_exactly(fd, HEADER.size, deadline))
    return _read_exactly(fd, size, deadline)


class ResidentWorker:
    """One child serving requests in turn (a lock orders the callers); started on the first call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen[bytes] | None = None

    def call(self, name: str, *args: Any, timeout: float = ACTION_TIMEOUT_S) -> Any:
        """``_do_<name>(*args)`` in the child; a child that failed is replaced and asked once more."""
        with self._lock:
            for attempt in (1, 2):
                process = self._running()
                try:
                    assert process.stdin is not None and process.stdout is not None
                    _write_frame(process.stdin, pickle.dumps((name, args, {})))
                    reply = _read_frame(process.stdout.fileno(), time.monotonic() + timeout)
                except (OSError, EOFError, TimeoutError) as exc:
                    self._stop()
                    if isinstance(exc, TimeoutError):
                        raise ActionError(
                            f"{name}: no reply within {timeout:g} s; the worker was stopped"
                        ) from exc
                    if attempt == 2:
                        raise ActionError(f"the worker process failed during {name}: {exc}") from exc
                    continue
                # The reply comes from our own child process, never from the database or the network.
                return reply_of(pickle.loads(reply))
        raise AssertionError("unreachable")

    def pid(self) -> int | None:
        """The child's process id while one runs (tests check it is not the dashboard's own)."""
        return self._process.pid if self._process is not None and self._process.poll() is None else None

    def _running(self) -> subprocess.Popen[bytes]:
        if self._process is None or self._process.poll() is not None:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "dashboard.resident"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=_child_env(),
            )  # fmt: skip
        return self._process

    def stop(self) -> None:
        """Stop the child (the next call starts another)."""
        with self._lock:
            self._stop()

    def _stop(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            for pipe in (self._process.stdin, self._process.stdout):
                if pipe is not None:
                    pipe.close()
            self._process = None


def _serve() -> None:
    """The child: answer requests until stdin ends (the dashboard's process is gone)."""
    requests, out = sys.stdin.buffer.fileno(), sys.stdout.buffer
    sys.stdout = sys.stderr  # anything the engine prints must not corrupt a reply
    while True:
        try:
            request = _read_frame(requests)
        except EOFError:
            return
        name, args, kwargs = pickle.loads(request)  # written by ResidentWorker.call in the parent
        _write_frame(out, pickle.dumps(_in_worker(name, args, kwargs)))


#: The dashboard process's resident worker, stopped when the process exits.
RESIDENT = ResidentWorker()
atexit.register(RESIDENT.stop)


def endings(asks: dict[str, EndingsAsk]) -> dict[str, EndingsReply]:
    """How the sessions of each database (by path) ended, read again only where needed
    (:func:`dashboard.actions._do_endings`), in the resident worker: every live rerun of the Sessions page asks."""
    return RESIDENT.call("endings", {str(p): ask for p, ask in asks.items()})


if __name__ == "__main__":
    _serve()
