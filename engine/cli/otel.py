"""``ctxdesk otel [--port 4318] [--db DB]``: an OTLP/HTTP receiver for Claude Code, Codex and Gemini CLI
telemetry, recording their calls, usage, failed calls and tool results as sessions in DB (127.0.0.1 only)."""

from __future__ import annotations

import argparse
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from typing import TextIO

from engine.cli.common import EXIT_OK, UsageError


def cmd_otel(args: argparse.Namespace, out: TextIO) -> int:
    from engine.cli.importing import default_db
    from engine.otel import OtelReceiver
    from engine.store.factory import configured_database, open_store, redact_url

    db = args.db or configured_database(getattr(args, "settings", None)) or default_db()
    with open_store(db) as store:
        receiver = OtelReceiver(store, port=args.port)
        try:
            receiver.bind()
        except OSError as exc:
            raise UsageError(f"cannot listen on 127.0.0.1:{args.port}: {exc.strerror or exc}") from exc
        print(
            f"ctxdesk otel: OTLP/HTTP on http://127.0.0.1:{receiver.bound_port} (/v1/logs, /v1/traces, /v1/metrics)"
            f" recording into {redact_url(str(db))}; Ctrl-C stops",
            file=out,
            flush=True,
        )
        # uvicorn finishes the requests in flight, then re-raises the signal it caught: a stop, not a crash
        with _stop_on_sigterm(), suppress(KeyboardInterrupt):
            receiver.run()
        print("ctxdesk otel: stopped", file=out, flush=True)
    return EXIT_OK


@contextmanager
def _stop_on_sigterm() -> Iterator[None]:
    """SIGTERM (a service manager, ``kill``) stops the receiver as Ctrl-C does: cleanly, exit 0."""

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "otel", help="receive agents' OpenTelemetry (OTLP/HTTP, protobuf or JSON) into a session database"
    )
    p.add_argument(
        "--port",
        type=int,
        default=4318,
        help="port on 127.0.0.1 (default 4318, OTLP/HTTP's; 0: any free port, printed)",
    )
    p.add_argument(
        "--db", default=None, help="session database (file or postgresql:// URL; default as for import)"
    )
    p.set_defaults(run=cmd_otel)
