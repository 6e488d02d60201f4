"""The ``ctxdesk`` command line: dashboard, demo data, inspect, compact, import, models, report, diff.

Each command imports what it needs when it runs, so ``--help`` and ``--version`` work
without the heavier layers. Errors of ours (:class:`ContextDeskError`) are caught here only,
printed as one ``ctxdesk: error: ...`` line; exit 2 for usage errors, 1 for the others.
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from engine.errors import ContextDeskError
from engine.textfmt import format_table

PROG = "ctxdesk"
EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
DEFAULT_DASHBOARD_PORT = 8501
#: Environment variable the dashboard reads its database paths from (os.pathsep-separated).
DB_PATHS_ENV_VAR = "CTXDESK_DB_PATHS"
REPO_ROOT = Path(__file__).resolve().parent.parent
SAMPLE_DATA_DIR = REPO_ROOT / "data"


class UsageError(Exception):
    """A command line that parses but asks for something impossible (exit 2)."""


# -- dashboard -------------------------------------------------------------------------------


def dashboard_app_path() -> Path:
    """dashboard/app.py of this checkout or installation."""
    candidates = [REPO_ROOT / "dashboard" / "app.py"]
    try:
        import importlib.util

        spec = importlib.util.find_spec("dashboard")
        if spec is not None and spec.submodule_search_locations:
            candidates.extend(Path(p) / "app.py" for p in spec.submodule_search_locations)
    except (ImportError, ValueError):
        pass
    for path in candidates:
        if path.is_file():
            return path
    raise UsageError(f"dashboard app not found (looked for {candidates[0]})")


def default_db_paths() -> list[Path]:
    """The bundled sample databases in data/ (made by ``ctxdesk demo``)."""
    return sorted(SAMPLE_DATA_DIR.glob("*.db"))


def dashboard_command(app: Path, paths: Sequence[Path], *, port: int, headless: bool) -> list[str]:
    """The streamlit command line serving ``app`` on 127.0.0.1 over ``paths``."""
    command = [
        sys.executable, "-m", "streamlit", "run", str(app),
        "--server.address", "127.0.0.1", "--server.port", str(port),
        "--browser.gatherUsageStats", "false",
    ]  # fmt: skip
    if headless:
        command += ["--server.headless", "true"]
    return [*command, "--", *(str(p) for p in paths)]


def dashboard_env(paths: Sequence[Path], base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment for the dashboard: ``base`` (default: ours) plus $CTXDESK_DB_PATHS."""
    return {
        **(os.environ if base is None else base),
        DB_PATHS_ENV_VAR: os.pathsep.join(str(p) for p in paths),
    }


def cmd_dashboard(args: argparse.Namespace, out: TextIO) -> int:
    paths = [Path(p) for p in args.paths] or default_db_paths()
    if not paths:
        raise UsageError(
            f"no database given and no sample data in {SAMPLE_DATA_DIR}; run `ctxdesk demo` first"
        )
    missing = [str(p) for p in paths if not p.exists()]
    if missing:
        raise UsageError(f"no such file or directory: {', '.join(missing)}")
    paths = [p.resolve() for p in paths]
    command = dashboard_command(dashboard_app_path(), paths, port=args.port, headless=args.no_browser)
    env = dashboard_env(paths)
    print(f"ctxdesk dashboard on http://127.0.0.1:{args.port} over {len(paths)} path(s)", file=sys.stderr)
    try:
        return subprocess.call(command, env=env)
    except KeyboardInterrupt:
        return EXIT_OK


# -- demo ------------------------------------------------------------------------------------


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from engine.demo import generate_demo

    engine_logger = logging.getLogger("engine")
    level = engine_logger.level
    engine_logger.setLevel(logging.ERROR)  # the demo provokes its warnings (a provider rejection) on purpose
    try:
        written = generate_demo(Path(args.out), seed=args.seed)
    finally:
        engine_logger.setLevel(level)
    for path in written:
        print(f"wrote {path} ({path.stat().st_size:,} bytes)", file=out)
    return EXIT_OK


# -- inspect ---------------------------------------------------------------------------------


def _open_read_only(path: str) -> Any:
    from engine.store import SessionStore

    if not Path(path).is_file():
        raise UsageError(f"no such database file: {path}")
    return SessionStore(path, read_only=True)


def _find_session(store: Any, wanted: str) -> Any:
    """A session by id, or by a unique id prefix."""
    from engine.errors import NotFoundError

    sessions = store.list_sessions()
    exact = [s for s in sessions if s.id == wanted]
    if exact:
        return exact[0]
    matches = [s for s in sessions if s.id.startswith(wanted)]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        raise NotFoundError(f"no session {wanted!r} in the database", path=str(store.path))
    raise UsageError(f"session prefix {wanted!r} is ambiguous: {', '.join(s.id for s in matches[:5])}")


COMPONENT_HEADERS = ("system", "skills", "tools", "summary", "conversation", "tool_results")


def cmd_inspect(args: argparse.Namespace, out: TextIO) -> int:
    with _open_read_only(args.db) as store:
        if args.session is None:
            _print_session_list(store, out)
            return EXIT_OK
        session = _find_session(store, args.session)
        _print_session(store, session, out, show_all=args.all)
    return EXIT_OK


def _print_session_list(store: Any, out: TextIO) -> None:
    rows = []
    for s in store.list_sessions():
        requests = store.list_events(s.id, kind="request")
        events = store.list_events(s.id)
        last = requests[-1].components if requests and requests[-1].components else None
        rows.append(
            (
                s.id, s.title or "", s.model or "", s.status, store.message_count(s.id), len(requests),
                sum(1 for e in events if e.kind == "compaction" and e.outcome == "compacted"),
                last.total if last else None,
            )
        )  # fmt: skip
    headers = ("session", "title", "model", "status", "messages", "requests", "compactions", "last tokens")
    print(format_table(headers, rows), file=out)


def _print_session(store: Any, session: Any, out: TextIO, *, show_all: bool = False) -> None:
    print(f"session {session.id}  {session.title or ''}".rstrip(), file=out)
    print(
        f"model {session.model or '-'}  provider {session.provider or '-'}  status {session.status}  "
        f"messages {store.message_count(session.id):,}  tokenizer {session.tokenizer or '-'}",
        file=out,
    )
    events = store.list_events(session.id)
    requests = [e for e in events if e.kind == "request"]
    print(
        "\nper-component tokens of each model request (our estimate; provider = provider's count)", file=out
    )
    rows = []
    for e in requests:
        c = e.components
        values = [getattr(c, name) if c else None for name in COMPONENT_HEADERS]
        rows.append(
            (
                e.seq, e.turn_index, *values, c.total if c else None,
                e.usage.prompt_tokens if e.usage else None, e.limit_tokens, e.outcome or "",
            )
        )  # fmt: skip
    headers = ("event", "turn", *COMPONENT_HEADERS, "total", "provider", "limit", "outcome")
    print(format_table(headers, rows) if rows else "(no model requests)", file=out)

    decisions = [e for e in events if e.kind != "request" and (show_all or not _is_routine(e))]
    hidden = sum(1 for e in events if e.kind != "request") - len(decisions)
    print("\nguard, compaction and other context events", file=out)
    rows = [
        (
            e.seq, e.turn_index, e.kind, e.trigger or "", e.outcome or "", e.model or "",
            e.projected_tokens, e.limit_tokens, _clip(_event_note(e), REASON_CHARS),
        )
        for e in decisions
    ]  # fmt: skip
    headers = ("event", "turn", "kind", "trigger", "outcome", "model", "projected", "limit", "details")
    print(format_table(headers, rows) if rows else "(no context events)", file=out)
    if hidden:
        print(f"({hidden} routine guard events with outcome ok not shown; --all shows them)", file=out)


#: Characters of an event's reason or details shown in a table cell.
REASON_CHARS = 80


def _is_routine(event: Any) -> bool:
    return event.kind == "guard" and event.outcome == "ok"


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _event_note(e: Any) -> str:
    details = e.details or {}
    if e.kind == "compaction":
        note = f"{details.get('before_tokens', '?'):,} -> {details.get('after_tokens', '?'):,} tokens"
        if details.get("strategies_run"):
            note += f" via {', '.join(details['strategies_run'])}"
        return note
    if e.kind == "offload":
        return f"{details.get('tool_name', '')}: {details.get('size_bytes', 0):,} bytes stored as {details.get('ref_id', '')}"
    if e.kind == "tool_search":
        hits = [h.get("name", h) if isinstance(h, dict) else h for h in details.get("hits", [])]
        return f"{details.get('query', '')!r}: {', '.join(map(str, hits)) or 'no match'}"
    if e.kind == "guard" and details.get("tool_name"):
        return f"{e.reason or ''} ({details['tool_name']}, {details.get('tool_tokens', 0):,} tokens)".strip()
    return e.reason or ""


# -- compact ---------------------------------------------------------------------------------


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
    from engine.store import SessionStore

    if not Path(args.db).is_file():
        raise UsageError(f"no such database file: {args.db}")
    with SessionStore(args.db, read_only=args.dry_run) as store:
        session = _find_session(store, args.session)
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
    return EXIT_OK


# -- import ----------------------------------------------------------------------------------


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    from engine.importers import import_files
    from engine.store import SessionStore

    missing = [f for f in args.files if not Path(f).is_file()]
    if missing:
        raise UsageError(f"no such file: {', '.join(missing)}")
    progress = ProgressPrinter(sys.stderr)
    with SessionStore(args.db) as store:
        results = import_files([Path(f) for f in args.files], store, on_progress=progress)
    progress.finish()
    for result in results:
        for s in result.sessions:
            print(
                f"{result.path}: {result.format} session {s.session_id} ({s.title or 'untitled'}): "
                f"{s.message_count:,} messages, {s.request_count:,} requests, {s.transcript_tokens:,} tokens",
                file=out,
            )
        for note in result.notes:
            print(f"{result.path}: note: {note}", file=out)
    return EXIT_OK


class ProgressPrinter:
    """on_progress(done, total, label) for stderr: one updating line on a terminal, else a line each."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        self.tty = stream.isatty()
        self._wrote = False

    def __call__(self, done: int, total: int, label: str) -> None:
        text = f"[{done}/{total}] imported {label}"
        self.stream.write(("\r\x1b[K" + text) if self.tty else text + "\n")
        self.stream.flush()
        self._wrote = True

    def finish(self) -> None:
        if self.tty and self._wrote:
            self.stream.write("\n")
            self.stream.flush()


# -- report and diff --------------------------------------------------------------------------


def cmd_report(args: argparse.Namespace, out: TextIO) -> int:
    from engine.report import run_report

    return run_report(
        args.target, db=args.db, fmt=args.format, out_path=args.out, fail_over=args.fail_over,
        fail_on_findings=args.fail_on_findings, settings_path=args.settings, stdout=out,
    )  # fmt: skip


def cmd_diff(args: argparse.Namespace, out: TextIO) -> int:
    from engine.report import run_diff

    return run_diff(
        args.a, args.b, db=args.db, snapshots=args.snapshots, fmt=args.format, out_path=args.out, stdout=out
    )


# -- models ----------------------------------------------------------------------------------

MODEL_FIELDS = (
    "context_window", "max_output_tokens", "buffer_tokens", "context_budget", "tokenizer",
    "note_threshold", "compact_threshold", "hard_block_threshold",
    "result_offload_threshold", "tool_deferral_threshold", "tool_response_max_bytes",
)  # fmt: skip


def cmd_models(args: argparse.Namespace, out: TextIO) -> int:
    from engine.settings import load_settings, resolve_model_settings

    settings = load_settings(args.settings)
    if args.name is None:
        from engine.model_table import load_model_table

        table = load_model_table(settings.model_table_path())
        names = [n for n in settings.models] or [
            "claude-sonnet-4-6", "claude-opus-4-7", "claude-haiku-4-5", "gpt-4o", "gpt-4.1", "gpt-5",
        ]  # fmt: skip
        rows = []
        for name in names:
            r = resolve_model_settings(name, settings=settings, table=table)
            rows.append((name, r.provider or "", r.context_window, r.max_output_tokens, r.budget_tokens,
                         r.compact_tokens, r.sources["context_window"]))  # fmt: skip
        print(
            format_table(
                ("model", "provider", "window", "max output", "budget", "compact at", "window from"), rows
            ),
            file=out,
        )
        print(f"\n{len(table):,} models known ({table.source}); `ctxdesk models NAME` for one", file=out)
        return EXIT_OK
    resolved = resolve_model_settings(args.name, provider=args.provider, settings=settings)
    info = resolved.model_info
    print(f"model {resolved.model}  provider {resolved.provider or '-'}"
          + (f"  (table entry {info.name})" if info else "  (not in the model table)"), file=out)  # fmt: skip
    rows = [(field, getattr(resolved, field), resolved.sources.get(field, "")) for field in MODEL_FIELDS]
    print(format_table(("setting", "value", "from"), rows), file=out)
    derived = [
        ("effective window", resolved.effective_window), ("budget", resolved.budget_tokens),
        ("note at", resolved.note_tokens), ("compact at", resolved.compact_tokens),
        ("hard block at", resolved.hard_block_tokens), ("tool deferral above", resolved.tool_deferral_tokens),
    ]  # fmt: skip
    print("\n" + format_table(("derived", "tokens"), derived), file=out)
    return EXIT_OK


# -- parser ----------------------------------------------------------------------------------


def _version() -> str:
    from engine import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and control what fills an LLM agent's context window.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument(
        "--settings", metavar="TOML", default=None,
        help="settings file (default: $CTXDESK_SETTINGS, else ~/.config/ctxdesk/settings.toml if present)",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    p = commands.add_parser("dashboard", help="start the dashboard on localhost")
    p.add_argument(
        "paths", nargs="*", metavar="DB_OR_DIR", help="session databases or folders (default: sample data)"
    )
    p.add_argument("--port", type=_port, default=DEFAULT_DASHBOARD_PORT, help="port (default %(default)s)")
    p.add_argument("--no-browser", action="store_true", help="do not open a browser (streamlit headless)")
    p.set_defaults(run=cmd_dashboard)

    p = commands.add_parser("demo", help="generate sample session databases")
    p.add_argument(
        "--out", default=str(SAMPLE_DATA_DIR), metavar="DIR", help="output folder (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default %(default)s)")
    p.set_defaults(run=cmd_demo)

    p = commands.add_parser("inspect", help="per-component breakdown and context events of a session")
    p.add_argument("db", metavar="DB")
    p.add_argument(
        "session", nargs="?", metavar="SESSION", help="session id or unique prefix (default: list sessions)"
    )
    p.add_argument("--all", action="store_true", help="also list guard evaluations whose outcome is ok")
    p.set_defaults(run=cmd_inspect)

    p = commands.add_parser(
        "compact", help="compact a stored session (writes a snapshot; transcript untouched)"
    )
    p.add_argument("db", metavar="DB")
    p.add_argument("session", metavar="SESSION")
    p.add_argument(
        "--strategy", default=None, help="strategy or comma-separated chain (default: the configured chain)"
    )
    p.add_argument("--instructions", default=None, help="extra instructions for the summarizer")
    p.add_argument("--dry-run", action="store_true", help="show before/after without writing")
    p.set_defaults(run=cmd_compact)

    p = commands.add_parser("import", help="import transcript files into a session database")
    p.add_argument("files", nargs="+", metavar="FILE")
    p.add_argument("--db", required=True, metavar="DB", help="session database to write")
    p.set_defaults(run=cmd_import)

    p = commands.add_parser("models", help="resolved window settings and where each value came from")
    p.add_argument("name", nargs="?", metavar="NAME")
    p.add_argument("--provider", default=None, help="provider id when the name does not say")
    p.set_defaults(run=cmd_models)

    p = commands.add_parser(
        "report", help="per-turn breakdown, context events and findings (text, JSON, HTML)"
    )
    p.add_argument(
        "target",
        nargs="?",
        metavar="SESSION_OR_FILE",
        help="transcript file, DB[:SESSION], or SESSION with --db",
    )
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
    return parser


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 1..65535, got {port}")
    return port


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run one ctxdesk command; returns the exit code (the console script exits with it)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    try:
        return run(args, out or sys.stdout)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ContextDeskError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `ctxdesk inspect ... | head`
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
