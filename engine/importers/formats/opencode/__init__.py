"""OpenCode (and its fork Kilo CLI): every session in one SQLite database,
``$XDG_DATA_HOME/opencode/opencode.db`` (``~/.local/share/opencode/opencode.db``).

The ``message`` table holds one row per user prompt and per assistant step (its ``data`` JSON:
role, model, ``tokens`` with the provider's usage), ``part`` the pieces of each message in order
(text, reasoning, tool calls with their input, output and status, step markers, compaction and
sub-task markers). A session's history is rebuilt the way OpenCode sends it (its
``MessageV2.toModelMessages``): ignored text left out, a completed tool's output (or the
"cleared" note once OpenCode compacted it), a failed tool's error, an unfinished tool marked
interrupted, and history restarting at the last finished compaction. Each assistant step is one
model call. The system prompt and tool definitions are not stored: their size is measured from
the provider's count. A session started by the ``task`` tool is a child of its parent.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from pathlib import Path

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations, write_ahead_log
from engine.importers.formats.opencode.config import (
    OUTPUT_TOKEN_MAX,
    is_config_file,
    model_limits,
    session_models,
)
from engine.importers.formats.opencode.database import Rows, app_of, read_database
from engine.importers.formats.opencode.history import parse_rows
from engine.importers.parsing.parsed import ParsedSession, SourceProblem
from engine.model_table import load_model_table


def sniff(doc: Document) -> bool:
    """OpenCode's database, and any other SQLite file but Kilo CLI's: reading it then says which
    of OpenCode's tables it lacks (the one SQLite format ctxdesk reads besides Kilo's)."""
    return doc.database and app_of(doc.path) != "kilo"


def parse(doc: Document, key: str) -> list[ParsedSession]:
    app = app_of(doc.path) or "opencode"
    rows = read_database(doc.path)
    sessions = parse_rows(rows, app)
    if not sessions:
        raise SourceProblem(
            f"an {'OpenCode' if app == 'opencode' else 'Kilo CLI'} database with no session messages"
        )
    apply_config_limits(sessions, rows, doc.path, app)
    for session in sessions:
        attach_summaries(session)
    return sessions


def attach_summaries(session: ParsedSession) -> None:
    """Each compaction's summary: the text of the summarizer's reply right after its marker (what the
    session went on from, beside the marker, in the compaction's snapshot)."""
    for marker, reply in itertools.pairwise(session.messages):
        call = reply.call
        if marker.compaction is not None and call is not None and call.details.get("compaction_call"):
            text = reply.message.text.strip()
            if text:
                marker.compaction.setdefault("summary", text)


def apply_config_limits(sessions: list[ParsedSession], rows: Rows, database: Path, app: str) -> None:
    """Each session's window as the app's config sets it for the model it used (its automatic
    compaction's point is the limit: :mod:`engine.importers.formats.opencode.config`); sessions of
    models the config gives no limit keep the model table's window, less the reserve OpenCode keeps
    below it (the model's output limit, at most 32,000: 168,000 for a 200,000-token Claude model
    that may write 64,000, where the table's own reserve made it 135,744)."""
    folders = [str(r["directory"]) for r in rows.sessions if r.get("directory")]
    limits = model_limits(database, app, folders)
    used = session_models(rows.messages)
    table = load_model_table()
    for session in sessions:
        limit = limits.get(used.get(session.key, ("", "")))
        usable = limit.usable_tokens() if limit is not None else 0
        if limit is None or not usable:
            known = table.lookup(session.model) if session.model else None
            if known is not None:
                session.output_reserve = min(known.max_output_tokens or OUTPUT_TOKEN_MAX, OUTPUT_TOKEN_MAX)
            continue
        session.context_window = limit.context
        session.output_reserve = limit.context - usable  # the limit is the point it compacts at
        session.notes.append(
            f"window from {limit.path}: {limit.context:,} tokens, output {limit.output:,}; "
            f"{'OpenCode' if app == 'opencode' else 'Kilo CLI'} compacts at {usable:,}"
        )


def data_roots(app: str) -> Callable[[Mapping[str, str], Path], list[Path]]:
    """``roots(env, home)`` for an OpenCode-like app: ``$XDG_DATA_HOME/<app>``, else ``~/.local/share/<app>``."""

    def roots(env: Mapping[str, str], home: Path) -> list[Path]:
        base = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
        return [base / app]

    return roots


def databases_under(root: Path) -> list[Path]:
    """``<app>.db`` and channel databases (``opencode-dev.db``) in an app's data folder."""
    return sorted(p for p in root.glob("*.db") if p.is_file() and not p.name.startswith("."))


FORMAT = ImportFormat(
    name="opencode",
    agent="OpenCode",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"database"}),
    files="`~/.local/share/opencode/opencode.db` (SQLite; model limits from `~/.config/opencode/opencode.json`)",
    locations=Locations(roots=data_roots("opencode"), files_under=databases_under),
    companions=write_ahead_log,
    accompanies=lambda path: is_config_file(path, "opencode"),
)
