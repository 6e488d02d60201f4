"""A Python child process and the peak memory of its own address space.

``os.wait4``'s ``ru_maxrss`` is not the child's own: Linux keeps the larger of the old and the new address
space's high-water mark across ``exec``, so the child of a 600 MB process reports at least 600 MB whatever
it used (a test run late in a large pytest process failed on that). The child therefore runs under a short
wrapper that writes ``VmHWM`` of its own address space (``/proc/self/status``) as it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_WRAPPER = """
import atexit, runpy, sys
peak_file, mode, target, *rest = sys.argv[1:]
def _write_peak():
    with open("/proc/self/status") as status:
        kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    with open(peak_file, "w") as out:
        out.write(str(kib))
atexit.register(_write_peak)
if mode == "-m":
    sys.argv = [target, *rest]
    runpy.run_module(target, run_name="__main__", alter_sys=True)
else:
    sys.argv = ["-c", *rest]
    exec(compile(target, "<string>", "exec"), {"__name__": "__main__"})
"""


@dataclass(frozen=True)
class ChildRun:
    """What a child did: exit code, its output, its own peak RSS in bytes, wall seconds."""

    code: int
    stdout: str
    stderr: str
    peak: int
    seconds: float


def run_python(
    mode: str, target: str, *args: str, cwd: Path = ROOT, capture_stdout: bool = False
) -> ChildRun:
    """``python -m TARGET ARGS`` (``mode`` "-m") or ``python -c TARGET ARGS`` (``mode`` "-c") with this
    checkout on PYTHONPATH, measured."""
    if mode not in ("-m", "-c"):
        raise ValueError(f"mode must be -m or -c, not {mode!r}")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    with tempfile.TemporaryDirectory(prefix="ctxdesk-peak-") as folder:
        peak_file = Path(folder) / "peak"
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _WRAPPER, str(peak_file), mode, target, *args],
            cwd=cwd, env=env, text=True, stderr=subprocess.PIPE,
            stdout=subprocess.PIPE if capture_stdout else subprocess.DEVNULL,
        )  # fmt: skip
        seconds = time.perf_counter() - started
        kib = int(peak_file.read_text()) if peak_file.exists() else 0
    return ChildRun(done.returncode, done.stdout or "", done.stderr, kib * 1024, seconds)
