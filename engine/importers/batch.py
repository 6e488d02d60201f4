"""import_files: many transcripts into one store, serially or parsed in worker processes.

Each file is its own transaction (:func:`engine.importers.api.import_file`); with ``workers`` > 1
files are parsed in a pool (:mod:`engine.importers.parallel`) and written here in order, with
the same result as a serial import.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from engine.errors import ImportFormatError
from engine.importers.api import ProgressCallback, import_file, imported_files
from engine.importers.detect import LineCache
from engine.importers.lineages import Lineages
from engine.importers.parallel import import_files_parallel
from engine.importers.parsing.parsed import ImportResult
from engine.settings import Settings
from engine.store import SessionStore


def import_files(
    paths: Iterable[str | os.PathLike[str]],
    store: SessionStore,
    *,
    on_progress: ProgressCallback | None = None,
    model: str | None = None,
    on_error: Callable[[Path, ImportFormatError], None] | None = None,
    live: bool = False,
    cache: LineCache | None = None,
    settings: Settings | None = None,
    workers: int = 1,
) -> list[ImportResult]:
    """Import several files, each in its own transaction. Without ``on_error`` it stops at the
    first file that fails (files before it stay imported) and raises its ImportFormatError;
    with it, a failing file is reported there and the others are imported. ``workers`` > 1:
    files are parsed in that many processes (:mod:`engine.importers.parallel`), the result the same."""
    paths = list(paths)
    results: list[ImportResult] = []
    known = imported_files(store)
    if workers > 1 and cache is None:  # a follower's line cache lives in this process
        return import_files_parallel(
            [Path(p) for p in paths], store, known, workers=workers, on_progress=on_progress,
            on_error=on_error, model=model, live=live, settings=settings,
        )  # fmt: skip
    lineages = Lineages(store)  # read once for the batch
    for done, path in enumerate(paths, start=1):
        try:
            results.append(
                import_file(
                    path,
                    store,
                    model=model,
                    known=known,
                    live=live,
                    cache=cache,
                    settings=settings,
                    lineages=lineages,
                )
            )
        except ImportFormatError as exc:
            if on_error is None:
                raise
            on_error(Path(path), exc)
        if on_progress is not None:
            on_progress(done, len(paths), Path(path).name)
    return results
