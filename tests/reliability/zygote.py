"""A pre-imported process that forks workload children on request, so a test can kill -9 many.

Parent side: :class:`Zygote` starts ``python -m tests.reliability.zygote`` once (engine and the
corpus imported once), then ``spawn(workload, **kwargs)`` forks a child running
``tests.reliability.workloads.<workload>`` and returns its pid; the test kills that pid with
SIGKILL and ``reap(pid)`` collects it. The zygote is single-threaded, so forking it is safe.

Protocol, one JSON object per line: ``{"op": "spawn", "workload": ..., "kwargs": {...}}`` ->
``{"pid": N}``; ``{"op": "reap", "pid": N}`` -> ``{"status": ..., "signal": ...}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 120


class Zygote:
    """The parent's handle on a zygote process (a context manager; closing ends it)."""

    def __init__(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.reliability.zygote"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )
        ready = self._read()
        if ready.get("ready") is not True:
            raise RuntimeError(f"zygote did not start: {ready}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"zygote exited with {self.proc.wait(timeout=START_TIMEOUT_S)}")
        return json.loads(line)

    def _ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def spawn(self, workload: str, **kwargs: Any) -> int:
        return int(self._ask({"op": "spawn", "workload": workload, "kwargs": kwargs})["pid"])

    def reap(self, pid: int) -> dict[str, Any]:
        """Wait for a child; ``signal`` is the signal that ended it (9 after a kill -9), or None."""
        return self._ask({"op": "reap", "pid": pid})

    def kill(self, pid: int) -> dict[str, Any]:
        os.kill(pid, signal.SIGKILL)
        return self.reap(pid)

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _serve() -> None:
    from tests.reliability import workloads

    workloads.preload()
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        if request["op"] == "spawn":
            pid = os.fork()
            if pid == 0:
                code = 0
                try:
                    getattr(workloads, request["workload"])(**request["kwargs"])
                except BaseException as exc:  # report and leave: the parent checks the progress file
                    sys.stderr.write(f"workload {request['workload']} failed: {exc!r}\n")
                    code = 1
                finally:
                    os._exit(code)
            print(json.dumps({"pid": pid}), flush=True)
        elif request["op"] == "reap":
            _, status = os.waitpid(request["pid"], 0)
            print(
                json.dumps(
                    {
                        "status": os.waitstatus_to_exitcode(status),
                        "signal": os.WTERMSIG(status) if os.WIFSIGNALED(status) else None,
                    }
                ),
                flush=True,
            )


if __name__ == "__main__":
    _serve()
