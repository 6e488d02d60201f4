"""The importer formats: one module (or package, for Claude Code) per transcript format, each
declaring ``FORMAT = ImportFormat(...)``: its name, the agent it reads, a sniff, a parse, and
where the agent keeps its files. :mod:`engine.importers.registry` lists them in detection
order; detection, ``ctxdesk import --from``, ``locations.AGENTS`` and the README's agents table
all come from that list, so adding a format is one new module and one line in the registry.

Detection is cheap and direct: what a format declares as data (the kinds of document its sniff
takes, the names of the session files its companions belong to) is checked here, without entering
the format's module; only a format that may take the file is asked. This module defines the
protocol (and the helpers formats share) and imports no format (the formats import it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Any, Literal

from engine.importers.documents import Document, is_sqlite
from engine.importers.parsing.parsed import ParsedSession

#: Lines (of a JSON Lines file) a sniff looks at: a header or summary line may come first.
SNIFF_LINES = 20

#: What a read file is (:class:`~engine.importers.documents.Document`): Aider's Markdown text, JSON
#: Lines, one JSON value, or a SQLite database. Each document is exactly one of them.
DocumentKind = Literal["text", "lines", "json", "database"]
DOCUMENT_KINDS: frozenset[DocumentKind] = frozenset({"text", "lines", "json", "database"})


def kind_of(doc: Document) -> DocumentKind:
    """The one kind of document ``doc`` is (what :attr:`ImportFormat.reads` is checked against)."""
    if doc.database:
        return "database"
    if doc.text is not None:
        return "text"
    return "lines" if doc.lines is not None else "json"


@dataclass(frozen=True)
class Locations:
    """Where an agent writes its sessions: ``roots(env, home)`` the folders (existing or not,
    honouring the agent's own environment variables), ``files_under(root)`` the session files
    under one of them."""

    roots: Callable[[Mapping[str, str], Path], list[Path]]
    files_under: Callable[[Path], list[Path]]


@dataclass(frozen=True)
class ImportFormat:
    """One transcript format.

    ``sniff(doc)``: the document is of this format (checked in registry order, first match
    wins, so a sniff may assume the formats before it said no). ``parse(doc, key)``: its
    sessions (``key`` a stable id for files without ids of their own); raises
    :class:`~engine.importers.parsing.parsed.SourceProblem` naming what is wrong. ``agent`` and
    ``files`` are the README's agents table row; ``locations`` (agents that keep sessions in
    a place of their own) makes ``ctxdesk import --from NAME`` find them. ``companions(path)``
    fingerprints files kept beside a session (re-import when they change; :class:`Beside` when
    only session files of some name have any); ``accompanies(path)`` says a file only accompanies
    a session (a folder import skips it). ``reads``: the kinds of document the sniff can take
    (data: detection asks the sniff of no other kind of document).
    """

    name: str
    agent: str
    sniff: Callable[[Document], bool]
    parse: Callable[[Document, str], list[ParsedSession]]
    files: str
    locations: Locations | None = None
    companions: Callable[[Path], str | None] | None = None
    accompanies: Callable[[Path], bool] | None = None
    reads: frozenset[DocumentKind] = DOCUMENT_KINDS


@dataclass(frozen=True)
class Beside:
    """A format's ``companions`` when only its session files named like ``named`` have any (a glob
    matched from the right, as :meth:`PurePath.match`: ``"*.md"``, ``"chats/session-*"``): called
    as ``companions(path)``, it asks ``digest`` of such a file and says None of any other without
    entering the format's module (a new file's state asks every format's companions)."""

    named: str
    digest: Callable[[Path], str | None]

    def __call__(self, path: str | os.PathLike[str]) -> str | None:
        return self.digest(Path(path)) if PurePath(path).match(self.named) else None


def write_ahead_log(database: str | os.PathLike[str]) -> str | None:
    """The companion of a SQLite database an agent writes (OpenCode, Kilo CLI): its write-ahead log
    ``<database>-wal`` (size and time). New messages go there first, so the database file alone
    can stay unchanged while a session grows."""
    wal = Path(f"{database}-wal")
    if not wal.is_file() or not is_sqlite(Path(database)):
        return None
    stat = wal.stat()
    return f"{stat.st_size}:{stat.st_mtime_ns}"


def objects_of(doc: Document) -> list[dict[str, Any]] | None:
    """The objects a list format reads: a JSON Lines file's lines, or a JSON list's items when
    it is a non-empty list of objects; None otherwise."""
    if doc.lines is not None:
        return [v for _, v in doc.lines]
    value = doc.value
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        return value
    return None


def head_lines(doc: Document) -> Sequence[Any]:
    """The first :data:`SNIFF_LINES` line values of a JSON Lines file (empty for other files)."""
    return [v for _, v in doc.lines[:SNIFF_LINES]] if doc.lines is not None else ()


def str_in(value: Any, names: Any) -> bool:
    """``value`` is one of the string ``names`` (an unhashable value is none of them)."""
    return isinstance(value, str) and value in names
