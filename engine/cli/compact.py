"""``ctxdesk compact``: compact a stored session (snapshot written, transcript untouched)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from engine.cli.common import EXIT_OK, UsageError, find_session
from engine.textfmt import format_table


def parse_strategy_option(text: str | None) -> str | dict[str, Any]:
    """``--strategy``: one strategy name, or a comma-separated chain of them."""
    if not text:
        return "chain"
    names = [n.strip() for n in text.split(",") if n.strip()]
    if len(names) == 1:
        return names[0]
    return {"type": "chain", "steps": [{"type": n} for n in names]}


def cmd_compact(args: argparse.Namespace, out: TextIO) -> int:
    from engine.compaction import force_compact
    from engine.store.factory import is_database_url, open_store

    db, session_ref = args.db, args.session
    if session_ref is None:
        if not args.live or db is None:
            raise UsageError("usage: ctxdesk compact DB SESSION, or ctxdesk compact --live [DB] SESSION")
        db, session_ref = _proxy_database(args), db
    if not is_database_url(db) and not Path(db).is_file():
        raise UsageError(f"no such database file: {db}")
    with open_store(db, read_only=args.dry_run) as store:
        session = find_session(store, session_ref)
        report = force_compact(
            store,
            session.id,
            strategy=parse_strategy_option(args.strategy),
            instructions=args.instructions,
            dry_run=args.dry_run,
        )
    before, after = report.result.before_components, report.result.after_components
    rows = [
        (name, getattr(before, name), getattr(after, name))
        for name in ("summary", "conversation", "tool_results")
    ]
    rows.append(("total", report.before_tokens, report.after_tokens))
    rows.append(("messages", report.before_count, report.after_count))
    outcome = "nothing to compact" if report.noop else f"compacted with {', '.join(report.strategies_run)}"
    print(f"session {session.id}: {outcome} ({report.reason})", file=out)
    print(format_table(("", "before", "after"), rows), file=out)
    if args.dry_run:
        print("dry run: nothing written", file=out)
    elif report.snapshot_id is not None:
        print(
            f"snapshot {report.snapshot_id} written (event {report.event_id}); transcript untouched", file=out
        )
        if args.live:
            print(
                "live: a `ctxdesk proxy` recording into this database sends the compacted history in place of "
                "the one the agent re-sends, from the agent's next request on (until the transcript is restored)",
                file=out,
            )
    return EXIT_OK


def _proxy_database(args: argparse.Namespace) -> str:
    """The database ``ctxdesk proxy`` records into by default ($CTXDESK_DB, settings, ctxdesk-proxy.db)."""
    from engine.cli.proxy import DEFAULT_PROXY_DB
    from engine.settings import settings_path
    from engine.store.factory import configured_database

    return configured_database(settings_path(getattr(args, "settings", None))) or DEFAULT_PROXY_DB


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "compact", help="compact a stored session (writes a snapshot; transcript untouched)"
    )
    p.add_argument("db", metavar="DB", nargs="?", help="the database (with --live: default the proxy's)")
    p.add_argument("session", metavar="SESSION", nargs="?")
    p.add_argument(
        "--live",
        action="store_true",
        help="a session `ctxdesk proxy` is serving: the proxy sends the compacted history from its next request on",
    )
    p.add_argument(
        "--strategy", default=None, help="strategy or comma-separated chain (default: the configured chain)"
    )
    p.add_argument("--instructions", default=None, help="extra instructions for the summarizer")
    p.add_argument("--dry-run", action="store_true", help="show before/after without writing")
    p.set_defaults(run=cmd_compact)
