"""docs/schema.md is generated from engine/store/schema.py and must not drift from it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from engine.store.schema import TABLES_V1, schema_markdown

DOCS = Path(__file__).resolve().parents[1] / "docs" / "schema.md"


def test_schema_docs_match_the_code() -> None:
    assert DOCS.read_text(encoding="utf-8") == schema_markdown(), (
        "docs/schema.md is out of date; regenerate it with "
        "`python -m engine.store.schema > docs/schema.md` and commit the result"
    )


def test_every_table_and_column_is_documented() -> None:
    text = schema_markdown()
    for table in TABLES_V1:
        assert f"## `{table.name}`" in text
        assert table.doc
        for column in table.columns:
            assert column.doc, f"{table.name}.{column.name} has no description"
            assert f"| `{column.name}` |" in text


def test_documented_columns_are_the_created_columns(tmp_path: Path) -> None:
    from engine.store import SessionStore

    SessionStore(tmp_path / "s.db").close()
    with sqlite3.connect(tmp_path / "s.db") as conn:
        for table in TABLES_V1:
            created = [r[1] for r in conn.execute(f"PRAGMA table_info({table.name})")]
            assert created == [c.name for c in table.columns], table.name
