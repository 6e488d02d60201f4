"""docs/schema.md is generated from a freshly migrated database (every migration applied) plus the
descriptions kept in engine/store/schema.py, and must not drift from either."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.store.schema import MIGRATIONS, describe_schema, documented_tables, schema_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "schema.md"


def test_schema_docs_match_the_code() -> None:
    assert DOCS.read_text(encoding="utf-8") == schema_markdown(), (
        "docs/schema.md is out of date; regenerate it with "
        "`python -m engine.store.schema > docs/schema.md` and commit the result"
    )


def test_every_table_and_column_the_migrations_create_is_documented() -> None:
    text = schema_markdown()
    for table in describe_schema():
        assert table.doc, f"table {table.name} has no description"
        assert f"## `{table.name}`" in text
        for column in table.columns:
            if table.name != "_migrations":
                assert column.doc, f"{table.name}.{column.name} has no description"
            assert f"| `{column.name}` |" in text


def test_every_documented_table_is_created_with_its_columns_in_order(tmp_path: Path) -> None:
    from engine.store import SessionStore

    SessionStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        for table in documented_tables().values():
            created = [r[1] for r in conn.execute(f"PRAGMA table_info({table.name})")]
            assert created == [c.name for c in table.columns], table.name


def test_the_docs_name_every_migration() -> None:
    assert all(f"`{name}`" in schema_markdown() for name, _ in MIGRATIONS)
