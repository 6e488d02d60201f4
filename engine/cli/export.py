"""``ctxdesk export otlp DB[:SESSION] --endpoint URL``: every call, compaction and policy edit of the
sessions as OpenTelemetry GenAI spans (one trace per session), posted as OTLP/HTTP protobuf to any
collector or backend (Phoenix, Langfuse, Jaeger, an OpenTelemetry Collector)."""

from __future__ import annotations

import argparse
import os
from typing import TextIO

from engine.cli.common import EXIT_OK, UsageError

#: Where the endpoint comes from when --endpoint is not given, in order (the OpenTelemetry SDKs' variables).
ENDPOINT_ENV_VARS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")


def _headers(pairs: list[str]) -> dict[str, str]:
    headers = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--header takes NAME=VALUE, got {pair!r}")
        headers[name.strip()] = value.strip()
    return headers


def cmd_export_otlp(args: argparse.Namespace, out: TextIO) -> int:
    from engine import __version__
    from engine.otel import export_sessions
    from engine.report import open_target

    endpoint = args.endpoint or next((os.environ[v] for v in ENDPOINT_ENV_VARS if os.environ.get(v)), None)
    if not endpoint:
        raise UsageError(f"name the OTLP endpoint: --endpoint URL (or set ${ENDPOINT_ENV_VARS[1]})")
    with open_target(args.target, db=args.db) as (store, ids, label):
        result = export_sessions(
            store, ids, endpoint, headers=_headers(args.header), timeout=args.timeout, version=__version__
        )
    print(
        f"exported {label}: {result.sessions} session(s), {result.calls} call(s), "
        f"{result.spans - result.calls - result.sessions} compaction/edit span(s) -> {result.url} "
        f"({result.requests} request(s), {result.bytes_sent:,} bytes)",
        file=out,
    )
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("export", help="send sessions to an observability backend (OpenTelemetry)")
    formats = p.add_subparsers(dest="export_format", metavar="FORMAT", required=True)
    otlp = formats.add_parser(
        "otlp", help="each call as an OpenTelemetry GenAI span (+ ctxdesk.* window, limit, components, edits)"
    )
    otlp.add_argument(
        "target", nargs="?", metavar="DB[:SESSION]",
        help="a session database (and session: with its sub-agents), or a transcript file",
    )  # fmt: skip
    otlp.add_argument(
        "--db", default=None, help="session database holding SESSION (file or postgresql:// URL)"
    )
    otlp.add_argument(
        "--endpoint", default=None,
        help="OTLP/HTTP endpoint, e.g. http://127.0.0.1:6006 (Phoenix) or http://127.0.0.1:4318; /v1/traces is "
        "added unless given (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else $OTEL_EXPORTER_OTLP_ENDPOINT)",
    )  # fmt: skip
    otlp.add_argument(
        "--header", action="append", default=[], metavar="NAME=VALUE",
        help="an HTTP header for the endpoint (e.g. authorization=Bearer ...); repeatable",
    )  # fmt: skip
    otlp.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTP request (default 30)")
    otlp.set_defaults(run=cmd_export_otlp)
