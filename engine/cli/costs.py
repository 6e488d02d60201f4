"""``ctxdesk costs``: what every session of a database cost, rolled up, and the stored per-call rows.

Read-only by default (computed from the events); ``--refresh`` writes ``request_costs``.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from engine.cli.common import EXIT_OK, open_read_only


def cmd_costs(args: argparse.Namespace, out: TextIO) -> int:
    from engine.report import project_cost_report, project_cost_text
    from engine.store import SessionStore
    from engine.store.costs import project_costs, refresh_request_costs

    if args.refresh:
        with SessionStore(args.db) as store:
            written = refresh_request_costs(store)
            sessions = project_costs(store)
        print(f"request_costs: {written:,} row(s) written", file=out)
    else:
        with open_read_only(args.db) as store:
            sessions = project_costs(store)
    report = project_cost_report(sessions)
    if args.format == "json":
        print(report.model_dump_json(indent=2), file=out)
    else:
        print("\n".join(project_cost_text(report)), file=out)
        if report.totals.unpriced_calls:
            models = sorted({r["model"] or "?" for s in sessions for r in s.rows if not r["priced_as"]})
            print(f"unknown models (priced at $0): {json.dumps(models)}", file=out)
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "costs", help="cost per session, day and model, and cache rebuilds by cause (list prices)"
    )
    p.add_argument("db", metavar="DB")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument(
        "--refresh", action="store_true", help="recompute and store the per-call rows (request_costs table)"
    )
    p.set_defaults(run=cmd_costs)
