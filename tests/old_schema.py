"""A database of an older schema, for the migration tests: the store opened with every migration
but one (on SQLite and PostgreSQL alike), as a database written before that migration was."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from engine.store import SessionStore, pg_schema
from engine.store import schema as schema_module
from engine.store.factory import open_store


@contextmanager
def opened_without(monkeypatch: pytest.MonkeyPatch, target: str, migration: str) -> Iterator[SessionStore]:
    """``target`` opened (created) with every migration of both backends but ``migration``."""
    with monkeypatch.context() as patch:
        for module, name in ((schema_module, "MIGRATIONS"), (pg_schema, "PG_MIGRATIONS")):
            patch.setattr(module, name, tuple(m for m in getattr(module, name) if m[0] != migration))
        with open_store(target) as old:
            yield old
