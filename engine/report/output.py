"""Where ``report --out`` / ``diff --out`` write: ``-`` (or no path) is stdout; a symlink is written
through to its target; anything that is not a regular file (a directory, a device node, a FIFO) is
refused with :class:`OutputError`; the text goes to a temporary file beside the target that is
renamed over it only when complete, and removed on any failure (a full disk included)."""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from engine.errors import OutputError

__all__ = ["STDOUT", "resolve_output", "write_output"]

#: The ``--out`` value meaning standard output.
STDOUT = "-"


def resolve_output(out_path: str) -> Path:
    """The regular file ``out_path`` names (through symlinks); OutputError if it is anything else.

    A path that does not exist yet is fine (its folder is created); a dangling symlink is written
    through to the file it points at."""
    path = Path(out_path)
    try:
        target = Path(os.path.realpath(path)) if path.is_symlink() else path
        st = os.stat(target)
    except FileNotFoundError:
        return target
    except OSError as exc:
        raise OutputError(f"cannot use the output path ({exc.strerror or exc})", path=out_path) from None
    if not stat.S_ISREG(st.st_mode):
        kind = (
            "a directory"
            if stat.S_ISDIR(st.st_mode)
            else "a FIFO"
            if stat.S_ISFIFO(st.st_mode)
            else "a device"
            if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
            else "a socket"
            if stat.S_ISSOCK(st.st_mode)
            else "not a regular file"
        )
        hint = " (use --out - for stdout)" if kind != "a directory" else ""
        raise OutputError(f"the output path is {kind}, not a regular file{hint}", path=out_path)
    return target


def write_output(text: str | Iterable[str], out_path: str | None, stdout: TextIO) -> None:
    """Write ``text`` (a string, or pieces written one by one so a large report is never one string)
    to ``out_path``, or to ``stdout`` when it is None or ``-``."""
    pieces = [text] if isinstance(text, str) else text
    if out_path is None or out_path == STDOUT:
        for piece in pieces:
            stdout.write(piece)
        return
    target = resolve_output(out_path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot create the output folder ({exc.strerror or exc})", path=out_path) from None
    mode = os.stat(target).st_mode & 0o7777 if target.exists() else None
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:  # 0o666 less the umask, as a plain open() would create it
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise OutputError(f"cannot write beside the output ({exc.strerror or exc})", path=out_path) from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as fh:
            for piece in pieces:
                fh.write(piece)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise OutputError(f"writing the output failed ({exc.strerror or exc})", path=out_path) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
