"""``ctxdesk report`` and ``ctxdesk diff``: thin wrappers over engine.report."""

from __future__ import annotations

import argparse
from typing import TextIO


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from engine.cli.common import session_in
    from engine.report import run_report

    target, db = session_in(args.target, args.session, args.db)
    return run_report(
        target, db=_team_database(db, target, args.settings), fmt=args.format, out_path=args.out, fail_over=args.fail_over,
        fail_on_findings=args.fail_on_findings, settings_path=args.settings, stdout=out,
    )  # fmt: skip


def _team_database(db: str | None, target: str | None, settings: str | None) -> str | None:
    """``--db``, else $CTXDESK_DB (or settings ``database``) when TARGET names no file: a session id."""
    from engine.errors import NotFoundError
    from engine.report import split_target
    from engine.store.factory import configured_database

    if db is not None or target is None:
        return db
    try:
        split_target(target)
    except NotFoundError:
        return configured_database(settings)
    return None


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    from engine.report import run_diff

    return run_diff(
        args.a,
        args.b,
        db=args.db or _team_database(None, args.a, args.settings),
        snapshots=args.snapshots,
        fmt=args.format,
        out_path=args.out,
        stdout=out,
    )


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "report", help="per-turn breakdown, context events and findings (text, JSON, HTML)"
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="SESSION_OR_FILE",
        help="transcript file, DB[:SESSION], or SESSION with --db",
    )
    p.add_argument("session", nargs="?", metavar="SESSION", help="a session of DB (as DB:SESSION)")
    p.add_argument("--db", default=None, metavar="DB", help="session database holding SESSION")
    p.add_argument(
        "--format",
        choices=("text", "json", "html"),
        default="text",
        help="output format (default %(default)s)",
    )
    p.add_argument("--out", default=None, metavar="FILE", help="write the report here (default: stdout)")
    p.add_argument(
        "--fail-over",
        type=float,
        default=None,
        metavar="PERCENT",
        help="exit 3 if peak usage is over PERCENT of the limit",
    )
    p.add_argument(
        "--fail-on-findings",
        type=int,
        default=None,
        metavar="N",
        help="exit 3 if there are N or more findings",
    )
    p.set_defaults(run=cmd_report)

    p = commands.add_parser("diff", help="two sessions or snapshots side by side, per component and message")
    p.add_argument("a", metavar="A", help="DB:SESSION or DB:SESSION@SNAPSHOT_ID (SESSION[@ID] with --db)")
    p.add_argument("b", nargs="?", metavar="B", help="the other side (omit with --snapshots)")
    p.add_argument("--db", default=None, metavar="DB", help="session database holding both sides")
    p.add_argument(
        "--snapshots", action="store_true", help="compare A's latest snapshot with the state before it"
    )
    p.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default %(default)s)"
    )
    p.add_argument("--out", default=None, metavar="FILE", help="write the diff here (default: stdout)")
    p.set_defaults(run=cmd_diff)
