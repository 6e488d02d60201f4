"""``ctxdesk otel [--port 4318] [--db DB]``: an OTLP/HTTP receiver for Claude Code, Codex and Gemini CLI
telemetry, recording their calls, usage, failed calls and tool results as sessions in DB (127.0.0.1 only)."""

from __future__ import annotations

import argparse
from typing import TextIO

from engine.cli.common import EXIT_OK


def cmd_otel(args: argparse.Namespace, out: TextIO) -> int:
    from engine.cli.importing import default_db
    from engine.otel import OtelReceiver
    from engine.store.factory import configured_database, open_store, redact_url

    db = args.db or configured_database(getattr(args, "settings", None)) or default_db()
    with open_store(db) as store:
        receiver = OtelReceiver(store, port=args.port)
        print(
            f"ctxdesk otel: OTLP/HTTP on http://127.0.0.1:{args.port} (/v1/logs, /v1/traces, /v1/metrics)"
            f" recording into {redact_url(str(db))}; Ctrl-C stops",
            file=out,
            flush=True,
        )
        receiver.run()
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "otel", help="receive agents' OpenTelemetry (OTLP/HTTP, protobuf or JSON) into a session database"
    )
    p.add_argument("--port", type=int, default=4318, help="port on 127.0.0.1 (default 4318, OTLP/HTTP's)")
    p.add_argument(
        "--db", default=None, help="session database (file or postgresql:// URL; default as for import)"
    )
    p.set_defaults(run=cmd_otel)
