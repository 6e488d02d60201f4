"""The importer formats: one module (or package, for Claude Code) per transcript format, each
declaring ``FORMAT = ImportFormat(...)``: its name, the agent it reads, a sniff, a parse, and
where the agent keeps its files. :mod:`engine.importers.registry` lists them in detection
order; detection, ``ctxdesk import --from``, ``locations.AGENTS`` and the README's agents table
all come from that list, so adding a format is one new module and one line in the registry.

This module defines the protocol only and imports no format (the formats import it).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.parsing.parsed import ParsedSession

#: Lines (of a JSON Lines file) a sniff looks at: a header or summary line may come first.
SNIFF_LINES = 20


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
    fingerprints files kept beside a session (re-import when they change);
    ``accompanies(path)`` says a file only accompanies a session (a folder import skips it).
    """

    name: str
    agent: str
    sniff: Callable[[Document], bool]
    parse: Callable[[Document, str], list[ParsedSession]]
    files: str
    locations: Locations | None = None
    companions: Callable[[Path], str | None] | None = None
    accompanies: Callable[[Path], bool] | None = None


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
