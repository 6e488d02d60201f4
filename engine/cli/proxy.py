"""``ctxdesk proxy``: record what an agent sends its model, live, through a local proxy."""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from engine.cli.common import EXIT_OK, port_number

if TYPE_CHECKING:
    from engine.otel.live import LiveExporter

DEFAULT_PROXY_PORT = 8788
DEFAULT_PROXY_DB = "ctxdesk-proxy.db"
#: The proxy's default request body limit in MiB (engine.proxy.transport.admission.MAX_BODY_BYTES, not imported
#: here: the CLI imports the proxy only when it runs).
MAX_BODY_MB = 64


def cmd_proxy(args: argparse.Namespace, out: TextIO) -> int:
    from engine.proxy import (
        ANTHROPIC_UPSTREAM,
        OPENAI_UPSTREAM,
        ProxyServer,
        Upstreams,
        check_host,
        is_loopback,
    )
    from engine.settings import settings_path

    check_host(args.host, allow_remote=args.allow_remote)
    # the recorder thread parses big bodies while the event loop relays: hand the GIL back to the
    # loop within 0.5 ms (default 5 ms) so a request never waits long behind a recording
    sys.setswitchinterval(0.0005)
    settings_file = settings_path(args.proxy_settings or args.settings)  # read (and followed) by the proxy
    upstreams = Upstreams(
        anthropic=args.anthropic_upstream or ANTHROPIC_UPSTREAM,
        openai=args.openai_upstream or OPENAI_UPSTREAM,
    )
    from engine.store.factory import configured_database, is_database_url

    # --db, else $CTXDESK_DB, else the settings' `database` (a team's postgresql:// URL), else a local file
    given = args.db or configured_database(settings_file) or DEFAULT_PROXY_DB
    db = given if is_database_url(given) else Path(given).expanduser()  # a file or a postgresql:// URL
    from engine.otel import OtelSink, otel_routes
    from engine.store.factory import open_store

    # agents' OpenTelemetry (/v1/logs, /v1/traces, /v1/metrics) recorded into the same database
    exporter = _live_exporter(args, db)  # a malformed --export-otlp URL fails before anything starts
    otel_store = open_store(db)
    server = ProxyServer(
        db,
        host=args.host,
        port=args.port,
        upstreams=upstreams,
        settings_file=settings_file,
        allow_remote=args.allow_remote,
        max_body_bytes=args.max_body_mb * 1024 * 1024,
        routes=otel_routes(OtelSink(otel_store)),
        on_recorded=exporter.submit if exporter is not None else None,
    )
    if not is_loopback(args.host):
        print(
            f"ctxdesk proxy: WARNING: listening on {args.host}: anyone who can reach it can use the API keys "
            "agents send through it",
            file=sys.stderr,
        )
    host = f"[{args.host}]" if ":" in args.host else args.host

    def tell_where() -> None:  # once the port is bound: a port in use prints only its error
        url = f"http://{host}:{server.port}"
        print(f"ctxdesk proxy listening on {url}, recording into {_shown(db)}", file=out)
        print(f"  Anthropic -> {upstreams.anthropic}   OpenAI -> {upstreams.openai}", file=out)
        if settings_file is not None:
            active = server.policy_file.config.active
            print(
                f"  settings: {settings_file} (policies {'on' if active else 'off'}; re-read when it changes)",
                file=out,
            )
        print("Point your agent at it:", file=out)
        print(f"  export ANTHROPIC_BASE_URL={url} OPENAI_BASE_URL={url}/v1", file=out)
        print(f"  OpenTelemetry (OTLP/HTTP): export OTEL_EXPORTER_OTLP_ENDPOINT={url}", file=out)
        if exporter is not None:
            print(f"  each recorded call exported as a GenAI span to {exporter.url}", file=out)
        print(f"Watch it: ctxdesk dashboard {_shown(db)}", file=out, flush=True)

    with otel_store, contextlib.suppress(KeyboardInterrupt):
        if exporter is not None:
            exporter.start()
        try:
            server.run(on_listening=tell_where)
        finally:
            if exporter is not None:  # after the recorder's last writes: they are exported too
                exporter.close()
                _tell_exported(exporter, out)
    return EXIT_OK


def _live_exporter(args: argparse.Namespace, db: str | Path) -> LiveExporter | None:
    if not args.export_otlp:
        return None
    from engine import __version__
    from engine.cli.export import _headers
    from engine.otel.live import LiveExporter

    return LiveExporter(db, args.export_otlp, headers=_headers(args.export_otlp_header), version=__version__)


def _tell_exported(exporter: LiveExporter, out: TextIO) -> None:
    stats = exporter.stats()
    lost = ""
    if stats.dropped_events or stats.failed_spans:
        lost = (
            f"; {stats.dropped_events} event(s) dropped (the collector fell behind), {stats.failed_spans} "
            f"span(s) in {stats.failed_requests} failed request(s) (last: {stats.last_error}); "
            "`ctxdesk export otlp` sends them again from the database"
        )
    print(
        f"exported {stats.exported_spans} span(s) to {stats.url} in {stats.requests} request(s){lost}",
        file=out,
    )


def _shown(db: object) -> str:
    """The database as printed: a URL or DSN without its password (every form: ``engine.store.urls``)."""
    from engine.store.factory import redact_url

    return redact_url(str(db))


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("proxy", help="record what an agent sends its model through a local proxy")
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default %(default)s: this machine)"
    )
    p.add_argument("--port", type=port_number, default=DEFAULT_PROXY_PORT, help="port (default %(default)s)")
    p.add_argument(
        "--db", default=None, metavar="DB",
        help=f"session database: a file or postgresql:// URL (default $CTXDESK_DB, settings `database`, else {DEFAULT_PROXY_DB})",
    )  # fmt: skip
    p.add_argument(
        "--anthropic-upstream", metavar="URL", help="Anthropic API (default https://api.anthropic.com)"
    )
    p.add_argument("--openai-upstream", metavar="URL", help="OpenAI API (default https://api.openai.com/v1)")
    p.add_argument(
        "--settings",
        dest="proxy_settings",
        default=None,
        metavar="FILE",
        help="settings TOML (windows, policies)",
    )
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a --host other than loopback (prints a warning)"
    )
    p.add_argument(
        "--max-body-mb", type=_positive_mb, default=MAX_BODY_MB, metavar="MB",
        help="largest request body taken, in MiB; a larger one gets a 413 in the provider's shape (default %(default)s)",
    )  # fmt: skip
    p.add_argument(
        "--export-otlp", default=None, metavar="URL",
        help="also send each recorded call, as it is recorded, as the GenAI span `ctxdesk export otlp` writes, to "
        "this OTLP/HTTP endpoint (e.g. http://127.0.0.1:6006 for Phoenix; /v1/traces is added unless given); off "
        "the request path: a slow or dead collector never slows the proxy (what it cannot take is counted)",
    )  # fmt: skip
    p.add_argument(
        "--export-otlp-header", action="append", default=[], metavar="NAME=VALUE",
        help="an HTTP header for the --export-otlp endpoint (e.g. authorization=Bearer ...); repeatable",
    )  # fmt: skip
    p.set_defaults(run=cmd_proxy)


def _positive_mb(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        number = 0
    if number <= 0:
        raise argparse.ArgumentTypeError(f"--max-body-mb must be a whole number of MiB > 0, got {value!r}")
    return number
