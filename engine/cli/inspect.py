"""``ctxdesk inspect``: per-component breakdown and context events of a session."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from engine.cli.common import EXIT_OK, find_session, open_read_only
from engine.textfmt import format_table


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    db, session = _database_and_session(args.db, args.session)
    with open_read_only(db) as store:
        if session is None:
            _print_session_list(store, out)
            return EXIT_OK
        found = find_session(store, session)
        _print_session(store, found, out, show_all=args.all)
    return EXIT_OK


def _print_session_list(store: Any, out: TextIO) -> None:
    rows = []
    for s in store.list_sessions():
        requests = store.list_events(s.id, kind="request")
        events = store.list_events(s.id)
        last = requests[-1].components if requests and requests[-1].components else None
        rows.append(
            (
                s.id, s.title or "", s.model or "", shown_status(s), store.message_count(s.id), len(requests),
                sum(1 for e in events if e.kind == "compaction" and e.outcome == "compacted"),
                last.total if last else None,
            )
        )  # fmt: skip
    headers = ("session", "title", "model", "status", "messages", "requests", "compactions", "last tokens")
    print(format_table(headers, rows), file=out)


def is_imported(session: Any) -> bool:
    """A session read from an agent's transcript (source ``import:<format>``), not run or recorded by ctxdesk."""
    return str(session.source).startswith("import:")


def shown_status(session: Any) -> str:
    """The status to print: an imported session's stored ``active`` only means ctxdesk never closed it (the
    transcript cannot say whether the agent still runs), so it reads ``imported``."""
    return "imported" if is_imported(session) and session.status == "active" else session.status


def ended_line(store: Any, session_id: str) -> str:
    """How an imported session ended, as ``ctxdesk why`` and the "Why did it stop?" page say it."""
    from engine.explain import explain_store

    ended = explain_store(store, [session_id]).sessions[0].ended
    return f"ended: {ended.cause} at call {ended.call}: {ended.detail} (details: ctxdesk why)"


def _print_session(store: Any, session: Any, out: TextIO, *, show_all: bool = False) -> None:
    print(f"session {session.id}  {session.title or ''}".rstrip(), file=out)
    print(
        f"model {session.model or '-'}  provider {session.provider or '-'}  status {shown_status(session)}  "
        f"messages {store.message_count(session.id):,}  tokenizer {session.tokenizer or '-'}",
        file=out,
    )
    if is_imported(session):
        print(ended_line(store, session.id), file=out)
    from engine.events import COMPONENTS  # pydantic's import is not paid by every CLI start
    from engine.report import cost_line, event_note, is_routine, messages_sent, session_cost_report
    from engine.store.costs import session_costs

    events = store.list_events(session.id)
    requests = [e for e in events if e.kind == "request"]
    sent = messages_sent(store, session.id)
    costs = session_costs(store, session.id)
    by_event = {r["event_id"]: r for r in costs.rows}
    print(
        "\nper-component tokens of each model request (sent = transcript messages it sent; basis = how the "
        "components were known: exact, reconciled to the provider's count (the rest 'unattributed'), or our "
        "estimate; provider = provider's count; limit = the limit the call is measured against; "
        "cost = provider usage at list prices; cache = why cached tokens were written again)",
        file=out,
    )
    rows = []
    for e in requests:
        c = e.components
        values = [getattr(c, name) if c else None for name in COMPONENTS]
        cost = by_event.get(e.id)
        rows.append(
            (
                e.seq, e.turn_index, sent.get(e.seq), *values, c.total if c else None,
                e.components_basis or "",
                e.usage.prompt_tokens if e.usage else None, e.effective_limit, e.outcome or "",
                f"${cost['total_usd']:.4f}" if cost else None, (cost or {}).get("cache_cause") or "",
            )
        )  # fmt: skip
    headers = (
        "event", "turn", "sent", *COMPONENTS, "total", "basis", "provider", "limit", "outcome", "cost", "cache",
    )  # fmt: skip
    print(format_table(headers, rows) if rows else "(no model requests)", file=out)
    if costs.rows:
        print("cost: " + cost_line(session_cost_report(costs).totals), file=out)

    decisions = [e for e in events if e.kind != "request" and (show_all or not is_routine(e))]
    hidden = sum(1 for e in events if e.kind != "request") - len(decisions)
    print("\nguard, compaction and other context events", file=out)
    rows = [
        (
            e.seq, e.turn_index, e.kind, e.trigger or "", e.outcome or "", e.model or "",
            e.projected_tokens, e.effective_limit, _clip(event_note(e), REASON_CHARS),
        )
        for e in decisions
    ]  # fmt: skip
    headers = ("event", "turn", "kind", "trigger", "outcome", "model", "projected", "limit", "details")
    print(format_table(headers, rows) if rows else "(no context events)", file=out)
    if hidden:
        print(f"({hidden} routine guard events with outcome ok not shown; --all shows them)", file=out)


#: Characters of an event's reason or details shown in a table cell.
REASON_CHARS = 80


def _database_and_session(db: str, session: str | None) -> tuple[str, str | None]:
    """``DB [SESSION]``, or ``DB:SESSION`` as the other commands take it (a file named so wins)."""
    from engine.errors import NotFoundError
    from engine.report import split_target
    from engine.store.factory import is_database_url

    if session is not None or is_database_url(db):
        return db, session
    try:
        path, named = split_target(db)
    except NotFoundError:
        return db, None  # opening it says the file is missing
    return str(path), named


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("inspect", help="per-component breakdown and context events of a session")
    p.add_argument("db", metavar="DB", help="a session database (DB:SESSION names a session too)")
    p.add_argument(
        "session", nargs="?", metavar="SESSION", help="session id or unique prefix (default: list sessions)"
    )
    p.add_argument("--all", action="store_true", help="also list guard evaluations whose outcome is ok")
    p.set_defaults(run=cmd_inspect)
