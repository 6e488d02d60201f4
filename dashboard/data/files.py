"""Which session databases the dashboard shows (argv, $CTXDESK_DB_PATHS, $CTXDESK_DB, the sample
data), their labels, and the signatures that tell when one changed. No DuckDB here."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from dashboard.data import postgres
from engine.errors import NotFoundError
from engine.locations import DB_PATHS_ENV_VAR, SAMPLE_DATA_DIR
from engine.store.factory import DB_URLS_ENV_VAR, default_database

#: The bundled sample data (written by ``ctxdesk demo``), used when nothing else is given.
DEFAULT_DATA_DIR = SAMPLE_DATA_DIR


# -- which files ------------------------------------------------------------------------------


def expand_path(path: str | os.PathLike[str]) -> list[Path]:
    """A file as itself, a folder as its ``*.db`` files (sorted); a missing path raises NotFoundError.
    A ``postgresql://`` URL stays as it is (a str)."""
    if postgres.is_database_url(str(path)):
        return [str(path)]  # type: ignore[list-item]
    p = Path(path).expanduser()
    if p.is_dir():
        return sorted(f.resolve() for f in p.glob("*.db") if f.is_file())
    if p.is_file():
        return [p.resolve()]
    raise NotFoundError("no such database file or folder", path=str(p))


def script_args(argv: Sequence[str], script: Path) -> list[str]:
    """The paths given to the app: what follows ``--``, or, when ``argv[0]`` is the app script
    itself (``streamlit run app.py -- a b`` leaves ``[app.py, a, b]``), what follows it."""
    if "--" in argv:
        return [a for a in argv[list(argv).index("--") + 1 :] if a]
    if argv and Path(argv[0]).resolve() == script.resolve():
        return [a for a in argv[1:] if a]
    return []


def loaded_paths(
    argv: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    default_dir: Path = DEFAULT_DATA_DIR,
) -> list[Path]:
    """The databases to show: argv after ``--``, else $CTXDESK_DB_PATHS, else ``default_dir``.

    Each entry may be a file or a folder (all its ``*.db``); duplicates are dropped, order kept.
    """
    env = os.environ if env is None else env
    items: list[str] = []
    if argv is not None and "--" in argv:
        items = [a for a in argv[list(argv).index("--") + 1 :] if a]
    if not items and env.get(DB_PATHS_ENV_VAR):
        items = [p for p in env[DB_PATHS_ENV_VAR].split(os.pathsep) if p.strip()]
    # database URLs come by environment, never argv (ctxdesk dashboard: a password in /proc)
    items += [u.strip() for u in env.get(DB_URLS_ENV_VAR, "").splitlines() if u.strip()]
    if not items and (team := default_database(env)):  # $CTXDESK_DB: a team's postgresql:// URL
        items = [team]
    if not items:
        items = [str(default_dir)] if default_dir.is_dir() else []
    found: dict[Path, None] = {}
    for item in items:
        for path in expand_path(item):
            found.setdefault(path, None)
    return list(found)


def files_signature(paths: Iterable[Path]) -> tuple[tuple[str, int, int], ...]:
    """(path, mtime_ns, size) of each database and its WAL: changes whenever a writer commits."""
    out: list[tuple[str, int, int]] = []
    for path in paths:
        if postgres.is_database_url(str(path)):
            out.append(postgres.signature(str(path)))
            continue
        for f in (Path(path), Path(f"{path}-wal")):
            try:
                st = f.stat()
            except FileNotFoundError:
                continue
            if f.name.endswith("-wal") and not st.st_size:
                continue  # a reader's empty WAL, made and removed by every open and close: no commit
            out.append((str(f), st.st_mtime_ns, st.st_size))
    return tuple(out)


def files_identity(paths: Iterable[Path | str]) -> tuple[tuple[str, int | None], ...]:
    """(path, inode) of each database: changes when a file is replaced, not when it is written."""
    out: list[tuple[str, int | None]] = []
    for path in paths:
        try:
            out.append((str(path), Path(path).stat().st_ino))
        except (OSError, ValueError):  # a postgresql:// URL, or a file gone
            out.append((str(path), None))
    return tuple(out)


def db_labels(paths: Sequence[Path]) -> list[str]:
    """A short unique label per file: its stem, with the parent folder added when stems repeat."""
    stems = [postgres.label(str(p)) if postgres.is_database_url(str(p)) else p.stem for p in paths]
    labels = []
    for p, stem in zip(paths, stems, strict=True):
        label = stem if stems.count(stem) == 1 else f"{Path(p).parent.name}/{stem}"
        while label in labels:
            label += "'"
        labels.append(label)
    return labels
