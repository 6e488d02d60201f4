"""``ctxdesk import``: read agents' transcripts into a session database."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from engine.cli.common import EXIT_OK, ProgressPrinter, UsageError


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    from engine.importers import import_files
    from engine.store import SessionStore

    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    progress = ProgressPrinter(sys.stderr)
    with SessionStore(args.db) as store:
        results = import_files([Path(f) for f in args.files], store, on_progress=progress)
    progress.finish()
    for result in results:
        for s in result.sessions:
            print(
                f"{result.path}: {result.format} session {s.session_id} ({s.title or 'untitled'}): "
                f"{s.message_count:,} messages, {s.request_count:,} requests, {s.transcript_tokens:,} tokens",
                file=out,
            )
        for note in result.notes:
            print(f"{result.path}: note: {note}", file=out)
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("import", help="import transcript files into a session database")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--db", required=True, metavar="DB", help="session database to write")
    p.set_defaults(run=cmd_import)
