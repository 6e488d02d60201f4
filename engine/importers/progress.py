"""How far a long import is: files and bytes done, rate, time left; read by a person and the dashboard.

:class:`ImportProgress` counts what is done of a batch (the sizes are known from a stat before
anything is read); :func:`progress_line` says it in one line; the importer also keeps it in a
small JSON file beside the database (:func:`status_path`), which the dashboard reads while the
import goes on in the background.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Width of the bar drawn on a terminal.
BAR_WIDTH = 24
#: Share of the bytes done before the time left is estimated.
ESTIMATE_AFTER_SHARE = 0.02


@dataclass
class ImportProgress:
    """Files and bytes of a batch, and how many are done (in the batch's order)."""

    sizes: list[int]
    started: float = field(default_factory=time.monotonic)
    files_done: int = 0
    bytes_done: int = 0
    skipped: int = 0
    finished: bool = False
    _bytes_total: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        # summed once: the status is asked after every file (7,500 files summed each time: 0.6 s)
        self._bytes_total = sum(self.sizes)

    @classmethod
    def of(cls, paths: list[Path]) -> ImportProgress:
        return cls(sizes=[_size(p) for p in paths])

    @property
    def files_total(self) -> int:
        return len(self.sizes)

    @property
    def bytes_total(self) -> int:
        return self._bytes_total

    def file_done(self, *, skipped: bool = False) -> None:
        if self.files_done < self.files_total:
            self.bytes_done += self.sizes[self.files_done]
        self.files_done += 1
        self.skipped += int(skipped)

    def elapsed(self, now: float | None = None) -> float:
        return max(0.0, (time.monotonic() if now is None else now) - self.started)

    def rate(self, now: float | None = None) -> float | None:
        """Bytes a second so far; None before a measurable time passed."""
        elapsed = self.elapsed(now)
        return self.bytes_done / elapsed if elapsed > 0.05 and self.bytes_done else None

    def seconds_left(self, now: float | None = None) -> float | None:
        """Time left at the rate so far; None until a share of the bytes is done (the first
        small files after the start-up gave estimates of hours for a minute's import)."""
        rate = self.rate(now)
        if not rate or self.bytes_done < ESTIMATE_AFTER_SHARE * self.bytes_total:
            return None
        return (self.bytes_total - self.bytes_done) / rate

    def status(self, now: float | None = None) -> dict[str, Any]:
        """What the dashboard shows (JSON)."""
        return {
            "files_done": self.files_done,
            "files_total": self.files_total,
            "bytes_done": self.bytes_done,
            "bytes_total": self.bytes_total,
            "skipped": self.skipped,
            "bytes_per_second": self.rate(now),
            "seconds_left": self.seconds_left(now),
            "finished": self.finished,
            "pid": os.getpid(),
            "updated_unix": time.time(),
        }


def progress_line(status: dict[str, Any], *, bar: bool) -> str:
    """'[#####-----] 120/8,714 files · 412/3,300 MB · 51.2 MB/s · 57 s left' (the bar on a terminal)."""
    done, total = status["files_done"], status["files_total"]
    mb_done, mb_total = status["bytes_done"] / 1e6, status["bytes_total"] / 1e6
    parts = [f"{done:,}/{total:,} files", f"{mb_done:,.1f}/{mb_total:,.1f} MB"]
    if status.get("bytes_per_second"):
        parts.append(f"{status['bytes_per_second'] / 1e6:,.1f} MB/s")
    if status.get("finished") or done >= total:
        parts.append("done")
    elif status.get("seconds_left") is not None:
        parts.append(f"{duration(status['seconds_left'])} left")
    if status.get("skipped"):
        parts.append(f"{status['skipped']:,} skipped")
    text = " · ".join(parts)
    if not bar:
        return text
    share = status["bytes_done"] / status["bytes_total"] if status["bytes_total"] else done / max(total, 1)
    filled = round(min(1.0, share) * BAR_WIDTH)
    return f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {share:4.0%} {text}"


def duration(seconds: float) -> str:
    """'45 s', '3 min 05 s', '1 h 02 min'."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def status_path(db: str | os.PathLike[str]) -> Path:
    """The file beside a database where its running import says how far it is."""
    return Path(f"{os.fspath(db)}.import-status.json")


def write_status(db: str | os.PathLike[str], status: dict[str, Any]) -> None:
    """Replace the status file at once (a reader never sees half of it)."""
    path = status_path(db)
    partial = path.with_name(path.name + f".{os.getpid()}.tmp")
    try:
        partial.write_text(json.dumps(status))
        os.replace(partial, path)
    except OSError:  # a read-only folder, or no folder: the import goes on without telling the dashboard
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


def read_status(db: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The status an import left beside ``db``; None when there is none or it cannot be read."""
    try:
        status = json.loads(status_path(db).read_text())
    except (OSError, ValueError):
        return None
    return status if isinstance(status, dict) and "files_total" in status else None


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:  # reported when the import reaches it
        return 0
