"""A batch of files parsed in worker processes while this process writes them, in order.

Parsing (reading, JSON, rebuilding what each call sent) needs no database, so it runs on
every core; writing stays here, one file at a time in the order given, so session ids,
forks and continuations come out exactly as a serial import makes them. At most a few
parsed files wait for the writer at once, so memory stays bounded by those files.
"""

from __future__ import annotations

import contextlib
import gc
import multiprocessing
import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path
from typing import Any

from engine.errors import ImportFormatError
from engine.importers.api import ProgressCallback, current_state, parse_file, write_parsed
from engine.importers.collector import collector_paused
from engine.importers.lineages import Lineages
from engine.importers.parsing.parsed import ImportResult, ParsedSession
from engine.settings import Settings
from engine.store import SessionStore
from engine.tokenizer_names import EXACT_ENCODINGS
from engine.tokens import get_encoding

#: Below this many bytes to read, starting worker processes costs more than it saves.
PARALLEL_MIN_BYTES = 8 * 1024 * 1024
#: Parsed files waiting for the writer, per worker (bounds the memory they hold).
QUEUED_PER_WORKER = 2
#: How often a parsing worker checks that the writer is still there (seconds).
ORPHAN_CHECK_S = 2.0
#: Files ahead of the writer may be parsed while they add up to at most this many bytes (a big file
#: is parsed before the writer reaches it), at most MAX_QUEUED of them.
LOOKAHEAD_BYTES = 32 * 1024 * 1024
MAX_QUEUED = 64
#: From this many bytes to read, the calls are priced in a worker process while this one writes
#: (the store's ``cost_worker``); below, forking it costs more than it saves.
COST_WORKER_MIN_BYTES = 8 * 1024 * 1024

#: (format, sessions) of a parsed file, or the message and line of the ImportFormatError it raised.
_Parsed = tuple[str, list[ParsedSession]] | tuple[None, tuple[str, int | None]]


def pool_size() -> int:
    """The cores this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def import_files_parallel(
    paths: Sequence[Path],
    store: SessionStore,
    known: dict[str, dict[str, Any]],
    *,
    workers: int,
    on_progress: ProgressCallback | None = None,
    on_error: Callable[[Path, ImportFormatError], None] | None = None,
    model: str | None = None,
    live: bool = False,
    settings: Settings | None = None,
    min_bytes: int = PARALLEL_MIN_BYTES,
    cost_worker_bytes: int = COST_WORKER_MIN_BYTES,
) -> list[ImportResult]:
    """:func:`engine.importers.import_files` with ``workers`` parsing processes; the same results.

    An unchanged file costs a stat here and is never sent to a worker. A batch with less than
    ``min_bytes`` to read is parsed in this process; from ``cost_worker_bytes`` the calls are priced
    in a worker process meanwhile.
    """
    lineages = Lineages(store)
    results: list[ImportResult] = []
    # Each path's state (a stat) or its error, and whether it must be read, decided up front.
    plan: list[tuple[Path, dict[str, Any] | ImportFormatError, ImportResult | None]] = []
    folders: dict[str, str] = {}  # resolved folders, for the files' source paths
    for path in paths:
        try:
            state, unchanged = current_state(path, known, folders)
        except ImportFormatError as exc:
            plan.append((path, exc, None))
            continue
        plan.append((path, state, unchanged))
    to_read = [p for p, s, done in plan if done is None and isinstance(s, dict)]
    volume = sum(s["bytes"] for _, s, done in plan if done is None and isinstance(s, dict))
    with contextlib.ExitStack() as stack:
        if workers > 1 and volume >= cost_worker_bytes:
            # forked first, while this process runs no thread (the pool starts some)
            stack.enter_context(store.cost_worker())
        pool = _pool(workers) if workers > 1 and len(to_read) > 1 and volume >= min_bytes else None
        _write_all(
            plan,
            pool,
            store,
            results,
            workers=workers,
            on_progress=on_progress,
            on_error=on_error,
            model=model,
            live=live,
            settings=settings,
            lineages=lineages,
        )
    return results


def _write_all(
    plan: list[tuple[Path, dict[str, Any] | ImportFormatError, ImportResult | None]],
    pool: ProcessPoolExecutor | None,
    store: SessionStore,
    results: list[ImportResult],
    *,
    workers: int,
    on_progress: ProgressCallback | None,
    on_error: Callable[[Path, ImportFormatError], None] | None,
    model: str | None,
    live: bool,
    settings: Settings | None,
    lineages: Lineages,
) -> None:
    """Write the planned files in order (appending to ``results``), each parsed by ``pool`` when given."""
    to_read = [p for p, s, done in plan if done is None and isinstance(s, dict)]
    try:
        pending: deque[tuple[Path, Future[_Parsed]]] = deque()

        sizes = {p: s["bytes"] for p, s, done in plan if done is None and isinstance(s, dict)}
        ahead = list(reversed(to_read))

        def refill() -> None:
            # a few files ahead, more while they are small: a big file is parsed before the writer needs it
            while pool is not None and ahead:
                queued = sum(sizes[p] for p, _ in pending)
                if len(pending) >= workers * QUEUED_PER_WORKER and (
                    len(pending) >= MAX_QUEUED or queued + sizes[ahead[-1]] > LOOKAHEAD_BYTES
                ):
                    return
                path = ahead.pop()
                pending.append((path, pool.submit(_parse_in_worker, path, model, live)))

        refill()
        for done, (path, state, unchanged) in enumerate(plan, start=1):
            try:
                if isinstance(state, ImportFormatError):
                    raise state
                if unchanged is not None:
                    results.append(unchanged)
                else:
                    with collector_paused():  # one pause from parse to write (engine.importers.collector)
                        fmt, parsed = _next_parsed(path, pending, model, live)
                        refill()
                        results.append(
                            write_parsed(
                                path, store, fmt, parsed, state, settings=settings, lineages=lineages
                            )
                        )
                        del parsed
            except ImportFormatError as exc:
                if on_error is None:
                    raise
                on_error(path, exc)
            if on_progress is not None:
                on_progress(done, len(plan), path.name)
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


def _next_parsed(
    path: Path, pending: deque[tuple[Path, Future[_Parsed]]], model: str | None, live: bool
) -> tuple[str, list[ParsedSession]]:
    """The parsed file ``path``: from its worker when one took it, else parsed here."""
    outcome = (
        pending.popleft()[1].result() if pending and pending[0][0] == path else _parse(path, model, live)
    )
    fmt, parsed = outcome
    if fmt is None:
        message, line = parsed  # type: ignore[misc]
        raise ImportFormatError(message, path=str(path), line=line)
    return fmt, parsed  # type: ignore[return-value]


def _parse(path: Path, model: str | None, live: bool) -> _Parsed:
    """Parse one file (here, or in a worker). Its ImportFormatError comes back as plain values (an
    exception with keyword arguments does not survive pickling)."""
    try:
        fmt, sessions = parse_file(path, model=model, live=live)
    except ImportFormatError as exc:
        where = f"{exc.path or ''}{'' if exc.line is None else f':{exc.line}'}"
        text = str(exc)
        return None, (text[len(where) + 2 :] if where and text.startswith(where + ": ") else text, exc.line)
    return fmt, sessions


def _parse_in_worker(path: Path, model: str | None, live: bool) -> _Parsed:
    """:func:`_parse` in a worker, after one collection of the cycles the last file left there (the
    collector is off in a worker: :func:`_worker_start`). Not in this process, whose collector runs.
    Its messages hashed there too (a file parsed here is hashed where the writer needs it, if it does)."""
    gc.collect()
    fmt, sessions = outcome = _parse(path, model, live)
    if fmt is not None:
        for session in sessions:
            for parsed in session.messages:  # type: ignore[union-attr]
                # Hashed here, not by the writer: the digest is cached on the message and travels with
                # it (pickled with the content it digests), and the writer keys every count on it.
                parsed.message.content_hash  # noqa: B018
    return outcome


def _pool(workers: int) -> ProcessPoolExecutor:
    """The parsing processes, forked once the exact encodings are built here: each would otherwise
    build its own (seconds of CPU apiece), and forked they share this process's copy's pages."""
    for name in EXACT_ENCODINGS:
        get_encoding(name)
    return ProcessPoolExecutor(
        max_workers=workers, mp_context=_context(), initializer=_worker_start, initargs=(os.getpid(),)
    )


def _worker_start(writer: int) -> None:
    """A worker runs without the cyclic collector: between parsing a file and handing it over (hashing
    its messages, pickling them) its millions of live objects were walked by collections that found
    nothing to free. Each parse starts with one collection instead, over the little the worker still
    holds (:func:`_parse_in_worker`); what it inherited from this process is frozen, never walked (and so
    never copied page by page by the collector's writes)."""
    gc.disable()
    gc.freeze()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # ^C is the writer's: it shuts the pool down
    # a writer killed outright leaves its workers waiting for work forever: each ends once it is gone
    threading.Thread(target=_end_without, args=(writer,), daemon=True).start()


def _end_without(writer: int) -> None:
    """End this worker once its parent (``writer``) is gone (reparented)."""
    while os.getppid() == writer:
        time.sleep(ORPHAN_CHECK_S)
    os._exit(1)


def _context() -> multiprocessing.context.BaseContext:
    """Workers forked from this process: they start at once with the parsers imported, and a
    caller's script needs no ``if __name__ == "__main__"`` guard (spawn and forkserver run it
    again). A worker only parses: it never touches the database or threads it inherits."""
    return multiprocessing.get_context("fork")
