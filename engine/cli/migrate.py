"""``ctxdesk migrate SRC... DST``: copy SQLite session databases into a team's PostgreSQL store.

Idempotent: a rerun (or a resumed, interrupted run) copies only what is missing: new sessions, and
the rows sessions already in DST gained since (by seq). A session whose copied rows the source has
since rewritten is not merged (a warning, exit 1). A progress bar on stderr counts sessions.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from engine.cli.common import EXIT_ERROR, EXIT_OK, UsageError

BAR_WIDTH = 30


class ProgressBar:
    """on_progress(done, total, label): a bar redrawn in place on a terminal, else a line per 5%."""

    def __init__(self, stream: TextIO, prefix: str = "") -> None:
        self.stream = stream
        self.prefix = prefix
        self.tty = stream.isatty()
        self._last_pct = -5

    def __call__(self, done: int, total: int, label: str) -> None:
        pct = 100 * done // max(total, 1)
        if not self.tty and pct - self._last_pct < 5 and done != total:
            return
        self._last_pct = pct
        filled = BAR_WIDTH * done // max(total, 1)
        text = f"{self.prefix}[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} sessions {label}"
        self.stream.write(("\r\x1b[K" + text) if self.tty else text + "\n")
        if self.tty and done == total:
            self.stream.write("\n")
        self.stream.flush()


def _sources(items: list[str]) -> list[Path]:
    found: dict[Path, None] = {}
    for item in items:
        p = Path(item).expanduser()
        if p.is_dir():
            files = sorted(f for f in p.glob("*.db") if f.is_file())
            if not files:
                raise UsageError(f"no *.db files in {p}")
            found.update(dict.fromkeys(files))
        elif p.is_file():
            found[p] = None
        else:
            raise UsageError(f"no such database file or folder: {item}")
    return list(found)


def cmd_migrate(args: argparse.Namespace, out: TextIO) -> int:
    from engine.store import copy_database
    from engine.store.factory import is_database_url, open_store

    sources = _sources(args.sources)
    if not is_database_url(args.dst) and any(Path(args.dst).resolve() == s.resolve() for s in sources):
        raise UsageError("DST is one of the sources")
    diverged = 0
    with open_store(args.dst) as dst:
        for source in sources:
            report = copy_database(source, dst, on_progress=ProgressBar(sys.stderr, prefix=f"{source.name} "))
            rows = sum(n for table, n in report.rows.items() if table != "sessions")
            print(
                f"{source}: {len(report.copied)} sessions copied, {len(report.grown)} updated ({rows:,} rows), "
                f"{len(report.skipped)} already in {dst.path}",
                file=out,
            )
            for _, why in report.diverged:
                print(f"ctxdesk: warning: {why}", file=sys.stderr)
            diverged += len(report.diverged)
    if diverged:
        print(f"ctxdesk: error: {diverged} session(s) not merged (see the warnings above)", file=sys.stderr)
        return EXIT_ERROR
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "migrate",
        help="copy SQLite session databases into PostgreSQL (idempotent)",
        description="Copy every session of SQLite databases (files or folders of *.db) into DST, "
        "a postgresql:// URL or key=value DSN (or another database file). Safe to rerun: it copies new sessions "
        "and the rows sessions already in DST gained since.",
    )
    p.add_argument("sources", nargs="+", metavar="SRC", help="SQLite database file or folder")
    p.add_argument("dst", metavar="DST", help="postgresql://user@host/db (or a database file)")
    p.set_defaults(run=cmd_migrate)
