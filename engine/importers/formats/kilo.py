"""Kilo CLI (``@kilocode/cli``, a fork of OpenCode): the same SQLite database as OpenCode, under
its own name, ``$XDG_DATA_HOME/kilo/kilo.db`` (``~/.local/share/kilo/kilo.db``), with Kilo's own
tables beside OpenCode's. Read by :mod:`engine.importers.formats.opencode`."""

from __future__ import annotations

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations, write_ahead_log
from engine.importers.formats.opencode import app_of, data_roots, databases_under, parse
from engine.importers.formats.opencode.config import is_config_file


def sniff(doc: Document) -> bool:
    return doc.database and app_of(doc.path) == "kilo"


FORMAT = ImportFormat(
    name="kilo",
    agent="Kilo CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"database"}),
    files="`~/.local/share/kilo/kilo.db` (SQLite; model limits from `~/.config/kilo/kilo.json`)",
    locations=Locations(roots=data_roots("kilo"), files_under=databases_under),
    companions=write_ahead_log,
    accompanies=lambda path: is_config_file(path, "kilo"),
)
