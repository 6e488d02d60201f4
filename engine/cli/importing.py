"""``ctxdesk import``: read agents' transcripts into a session database.

Files, folders (every transcript under them) or ``--from AGENT`` (where the agent keeps its
sessions). Running it again adds only what is new. A file that cannot be imported is an
error (exit 1) when named on the command line, a warning when found in a folder; a new
database is removed again when nothing could be imported into it.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from engine.cli.common import EXIT_ERROR, EXIT_OK, ProgressPrinter, UsageError


class AgentChoices(Sequence[str]):
    """``--from`` values: every registered agent with a place of its own, then ``all``. Read from
    the importers' registry when argparse first checks or lists them: importing every format
    module (~0.6 s) is not paid by commands run without ``--from`` (``ctxdesk dashboard``)."""

    def _names(self) -> tuple[str, ...]:
        from engine.importers import AGENTS

        return (*AGENTS, "all")

    def __getitem__(self, index: int) -> str:  # type: ignore[override]
        return self._names()[index]

    def __len__(self) -> int:
        return len(self._names())


FROM_CHOICES = AgentChoices()
#: ``--from``'s metavar: a named one keeps argparse from listing the choices when the option is
#: declared (which would import the registry); its help lists them (``%(choices)s``) when shown.
FROM_METAVAR = "AGENT"
#: The database ``--from`` imports into when no --db is given.
DEFAULT_DB = Path("~/.local/share/ctxdesk/agents.db")


def default_db() -> Path:
    import os

    base = os.environ.get("XDG_DATA_HOME")
    return (Path(base) / "ctxdesk" / "agents.db") if base else DEFAULT_DB.expanduser()


def collect_paths(files: list[str], agent: str | None) -> tuple[list[Path], list[Path]]:
    """(files named explicitly, files found in folders or agent locations)."""
    from engine.importers import agent_files, folder_files

    named: list[Path] = []
    found: list[Path] = []
    for item in files:
        path = Path(item)
        if path.is_dir():
            found.extend(folder_files(path))
        elif path.is_file():
            named.append(path)
        elif path.exists():  # a FIFO, a device: reading it could block forever
            raise UsageError(f"not a regular file: {item}")
        else:
            raise UsageError(f"no such file or folder: {item}")
    if agent:
        found.extend(agent_files(agent))
    return named, found


def run_import(
    db: str | Path,
    named: list[Path],
    found: list[Path],
    *,
    model: str | None,
    err: TextIO,
    live: bool = False,
    settings: Any = None,
) -> tuple[list[Any], list[tuple[Path, str]]]:
    """Import into ``db``; (results, [(file, why it was skipped)]). Raises the first error of a
    named file; removes a database this call created when it fails or imports nothing."""
    from engine.errors import ContextDeskError
    from engine.importers import ImportProgress, import_files, pool_size
    from engine.store.factory import is_database_url, open_store

    existed = is_database_url(str(db)) or Path(db).exists()
    skipped: list[tuple[Path, str]] = []
    printer = ProgressPrinter(err)
    progress = FileProgress(
        printer, skipped, ImportProgress.of([*named, *found]), None if is_database_url(str(db)) else Path(db)
    )
    workers = pool_size()
    try:
        with open_store(db) as store:
            results = import_files(
                named, store, model=model, on_progress=progress, settings=settings, workers=workers
            )
            results += import_files(
                found,
                store,
                model=model,
                on_progress=progress,
                on_error=lambda p, e: skipped.append((p, str(e))),
                live=live,
                settings=settings,
                workers=workers,
            )
    except (ContextDeskError, OSError):
        progress.finish()
        if not existed:
            remove_database(db)
        raise
    finally:
        printer.finish()
    progress.finish()
    if not existed and not any(r.sessions for r in results):
        remove_database(db)
    return results, skipped


def remove_database(db: str | Path) -> None:
    """Remove a database file this import created (and its WAL files); a path that is no file is left alone."""
    for suffix in ("", "-wal", "-shm", "-journal", ".import-status.json"):
        path = Path(f"{db}{suffix}")
        if path.is_file():
            path.unlink()


def cmd_import(args: argparse.Namespace, out: TextIO) -> int:
    if not args.files and not args.agent:
        raise UsageError("give transcript files or folders, or --from AGENT")
    from engine.settings import load_settings
    from engine.store.factory import configured_database, redact_url

    db = (
        args.db or configured_database(getattr(args, "settings", None)) or default_db()
    )  # a file or a team's postgresql:// URL
    named, found = collect_paths(args.files, args.agent)
    if not named and not found:
        where = f" for {args.agent}" if args.agent else ""
        raise UsageError(f"no transcript files found{where}")
    # Sessions found where an agent keeps them may be being written right now.
    settings = load_settings(getattr(args, "settings", None))  # its windows apply to imported sessions too
    results, skipped = run_import(
        db, named, found, model=args.model, err=sys.stderr, live=bool(args.agent), settings=settings
    )
    report(results, skipped, out, verbose=args.verbose)
    imported = [r for r in results if r.sessions]
    unchanged = sum(1 for r in results if r.status == "unchanged")
    print(
        f"{redact_url(str(db))}: {len(imported)} file(s) imported or updated, {unchanged} unchanged, {len(skipped)} skipped",
        file=out,
    )
    if not results and skipped:
        return EXIT_ERROR
    return EXIT_OK


def report(
    results: list[Any], skipped: list[tuple[Path, str]], out: TextIO, *, verbose: bool = False
) -> None:
    by_project: dict[str, list[str]] = {}
    for result in results:
        for s in result.sessions:
            added = f", {s.added_messages:,} new" if result.status == "updated" else ""
            line = (
                f"{result.path}: {result.format} session {s.session_id} ({s.title or 'untitled'}): "
                f"{counted(s.message_count, 'message')}{added}, {counted(s.request_count, 'request')}"
                f"{context_summary(s)}"
            )
            by_project.setdefault(getattr(s, "project", None) or "", []).append(line)
        if verbose or len(results) == 1:
            for note in result.notes:
                print(f"{result.path}: note: {note}", file=out)
    for project, lines in sorted(by_project.items()):
        if len(by_project) > 1:
            print(f"project {project or '(unknown)'}: {len(lines)} session(s)", file=out)
        for line in lines:
            print(f"  {line}" if len(by_project) > 1 else line, file=out)
    if verbose:
        for _path, why in skipped:
            print(f"skipped {why}", file=out)
    elif skipped:
        print(
            f"{len(skipped)} file(s) skipped: not transcripts or unreadable (--verbose lists why)", file=out
        )


def counted(n: int, noun: str) -> str:
    """``1 request``, ``2 requests``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def context_summary(session: Any) -> str:
    """What a session's calls sent: the last call's prompt and the peak share of the limit
    (", last prompt 36,541 tokens, peak 78% of 200,000"); empty without calls."""
    if session.last_prompt_tokens is None:
        return ""
    text = f", last prompt {session.last_prompt_tokens:,} tokens"
    share = session.peak_share
    if share is None:
        return text + " (limit unknown: give --model or a window in the settings)"
    return text + f", peak {share:.0%} of {session.peak_limit_tokens:,}"


class FileProgress:
    """on_progress for a batch of files: files, MB, rate and time left, saying of the last file
    whether it was imported or skipped (the batch's ``on_error`` records a skipped file before
    its progress is reported). A bar redrawn in place on a terminal; elsewhere a plain line at
    most every ``every`` seconds (and the last). Kept beside ``db`` for the dashboard too."""

    def __init__(
        self,
        printer: Any,
        skipped: list[tuple[Path, str]],
        progress: Any = None,
        db: Path | None = None,
        *,
        every: float = 1.0,
    ) -> None:
        from engine.importers import ImportProgress

        self.printer, self.skipped, self.db, self.every = printer, skipped, db, every
        self.progress = progress if progress is not None else ImportProgress(sizes=[])
        self._reported = 0
        self._printed = self._saved = float("-inf")

    def __call__(self, done: int, total: int, label: str) -> None:
        import time

        from engine.importers import progress_line, write_status

        failed = len(self.skipped) > self._reported and self.skipped[-1][0].name == label
        self._reported = len(self.skipped)
        self.progress.file_done(skipped=failed)
        now = time.monotonic()
        files, files_total = (
            self.progress.files_done,
            max(self.progress.files_total, self.progress.files_done),
        )
        last = files >= files_total
        show = last or failed or now - self._printed >= (0.1 if self.printer.tty else self.every)
        save = self.db is not None and (last or now - self._saved >= 0.5)
        if not (show or save):
            return  # most files of a long batch: nothing to say yet
        status = self.progress.status(now)
        if show:
            verb = "skipped" if failed else "imported"
            if self.printer.tty:  # one line redrawn in place: the bar first, the name cut to fit
                name = label if len(label) <= 40 else label[:39] + "…"
                self.printer.write(f"{progress_line(status, bar=True)} · {verb} {name}")
            else:
                line = progress_line(status, bar=False)
                self.printer.write(f"[{files}/{files_total}] {verb} {label} · {line}")
            self._printed = now
        if save:
            write_status(self.db, status)
            self._saved = now

    def finish(self) -> None:
        """The import ended (done or failed): the dashboard's status says so."""
        from engine.importers import write_status

        self.progress.finished = True
        if self.db is not None:
            write_status(self.db, self.progress.status())


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser(
        "import",
        help="import transcripts (files, folders, or an agent's own sessions) into a session database",
    )
    p.add_argument("files", nargs="*", metavar="FILE_OR_DIR")
    p.add_argument(
        "--from", dest="agent", choices=FROM_CHOICES, metavar=FROM_METAVAR,
        help="import every session the agent keeps where it keeps them (the README's agents table lists "
        "each agent's folders): %(choices)s",
    )  # fmt: skip
    p.add_argument(
        "--db", metavar="DB", help=f"session database to write (default with --from: {DEFAULT_DB})"
    )
    p.add_argument("--model", help="the model, for files that do not name it")
    p.add_argument("--verbose", "-v", action="store_true", help="print every import note")
    p.set_defaults(run=cmd_import)


def start_following(
    agent: str,
    db: Path | None = None,
    *,
    err: TextIO,
    settings_path: str | None = None,
    background: bool = False,
) -> tuple[Path, Any]:
    """Import ``agent``'s sessions into ``db`` (default: the agents database), then follow them:
    returns (db, a started ImportFollower to stop when done). ``background``: return at once
    with the database created, the import running in a process of its own (its progress in
    :func:`engine.importers.progress.status_path`) and the follower started after it."""
    from engine.importers import ImportFollower
    from engine.settings import load_settings

    db = db or default_db()
    settings = load_settings(settings_path)  # --settings, $CTXDESK_SETTINGS or the default file
    if background:
        from engine.store import SessionStore

        db.parent.mkdir(parents=True, exist_ok=True)
        SessionStore(db).close()  # what is imported so far is there to open at once
        job = BackgroundImport(db, agent, ImportFollower(db, agent, settings=settings), settings_path)
        job.start()
        print(f"importing {agent} sessions into {db} in the background", file=err)
        return db, job
    _, found = collect_paths([], agent)
    if found:
        results, skipped = run_import(db, [], found, model=None, err=err, live=True, settings=settings)
        print(
            f"{db}: {sum(len(r.sessions) for r in results)} session(s) imported, {len(skipped)} skipped",
            file=err,
        )
    else:
        print(f"no {agent} sessions found yet; following for new ones", file=err)
        from engine.store import SessionStore

        SessionStore(db).close()  # an empty database the dashboard can open
    follower = ImportFollower(db, agent, settings=settings)
    follower.start()
    return db, follower


class BackgroundImport(threading.Thread):
    """``ctxdesk import --from AGENT`` in a process of its own (its parsing workers are forked
    from a process with no server threads), then ``follower`` started on what it imported."""

    def __init__(self, db: Path, agent: str, follower: Any, settings_path: str | None = None) -> None:
        super().__init__(name=f"ctxdesk-import-{agent}", daemon=True)
        self.db, self.agent, self.follower = db, agent, follower
        settings = ["--settings", settings_path] if settings_path else []
        self.command = [
            sys.executable,
            "-m",
            "engine.cli",
            *settings,
            "import",
            "--from",
            agent,
            "--db",
            str(db),
        ]
        self.process: subprocess.Popen[bytes] | None = None
        self._stopped = threading.Event()

    def run(self) -> None:
        if self._stopped.is_set():
            return
        self.process = subprocess.Popen(  # its progress goes to the status file, not this terminal
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.process.wait()
        if not self._stopped.is_set():
            self.follower.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stopped.set()
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
        if self.follower.is_alive():
            self.follower.stop(timeout)
        if self.is_alive():
            self.join(timeout)
