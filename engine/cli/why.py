"""``ctxdesk why DB[:SESSION] [--format text|json]`` (or ``DB SESSION``): how each session ended, why it compacted,
which calls failed (the "Why did it stop?" page, headless, for CI and scripts).

A transcript file works too (imported into a temporary database first). The JSON is
docs/why.schema.json; ``ended.cause`` and each compaction's ``trigger`` use issue #30's words.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, TextIO

from engine.cli.common import EXIT_OK, session_in

if TYPE_CHECKING:
    from engine.explain import CompactionExplanation, SessionExplanation


def cmd_why(args: argparse.Namespace, out: TextIO) -> int:
    from engine.explain import checked_json, explain_store
    from engine.report import open_target

    target, db = session_in(args.target, args.session, args.db)
    with open_target(target, db=db) as (store, ids, _label):
        report = explain_store(store, ids)
    if args.format == "json":
        print(json.dumps(checked_json(report.to_json()), indent=2, ensure_ascii=False), file=out)
        return EXIT_OK
    for i, session in enumerate(report.sessions):
        if i:
            print(file=out)
        print(why_text(session), file=out)
    return EXIT_OK


def why_text(session: SessionExplanation) -> str:
    """One session as text: the sentence first, then the ending, each compaction and failed call."""
    lines = [
        f"{session.session_id}  {session.agent_label}  {session.title or ''}".rstrip(),
        f"  {session.headline}",
    ]
    lines.append(f"  ended: {session.ended.cause} at call {session.ended.call}: {session.ended.detail}")
    for c in session.compactions:
        lines.append(f"  compaction ({c.by}, {c.trigger}): {c.sentence}")
        lines.append(f"    {compaction_facts(c)}")
        for label, items in (("kept", c.kept), ("dropped", c.dropped)):
            for item in items:
                lines.append(
                    f"    {label} {item.kind}: {item.text}" + (f" ({item.detail})" if item.detail else "")
                )
    for f in session.failed_calls:
        lines.append(f"  failed call {f.call} ({f.cause}): {f.sentence}")
    return "\n".join(lines)


def compaction_facts(c: CompactionExplanation) -> str:
    """Tokens before and after, the limit and threshold in force, how close the call came, the agent's setting."""

    def n(value: int | None) -> str:
        return f"{value:,}" if value is not None else "not recorded"

    parts = [f"tokens {n(c.tokens_before)} -> {n(c.tokens_after)}"]
    if c.last_call_tokens is not None and c.next_call_tokens is not None:  # system and tools both sides
        parts.append(
            f"provider's count {n(c.last_call_tokens)} (call before: prompt and output)"
            f" -> {n(c.next_call_tokens)} (first call after: prompt)"
        )
    parts.append(f"limit {n(c.limit_tokens)}")
    if c.threshold_tokens is None and c.threshold_rule:
        parts.append(f"threshold: {c.threshold_rule}")
    else:
        parts.append(
            f"threshold {n(c.threshold_tokens)}" + (f" ({c.threshold_rule})" if c.threshold_rule else "")
        )
    if c.share is not None:
        parts.append(f"reached {c.share:.1%} of the limit")
    if c.agent_setting:
        parts.append("agent setting " + ", ".join(f"{k} = {v}" for k, v in c.agent_setting.items()))
    if c.after_failed_call:
        parts.append(f"after failed call {c.after_failed_call}")
    return "; ".join(parts)


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "why",
        help="why each session stopped and why it compacted (the 'Why did it stop?' page as text or JSON)",
    )
    p.add_argument(
        "target", metavar="DB[:SESSION]", nargs="?", help="a session database (and session), or a transcript"
    )
    p.add_argument("session", metavar="SESSION", nargs="?", help="a session of DB (as DB:SESSION)")
    p.add_argument(
        "--db",
        default=None,
        help="the database (a file or postgresql:// URL), the positional argument then naming a session",
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(run=cmd_why)
