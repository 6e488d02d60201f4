"""A Claude Code message is counted once per import: the parse's count goes to the writer
(ParsedMessage.counted), even when the tokenizer's cache is smaller than the session (a million
lines: it kept only the last half million, and the writer counted the rest again)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from bench.bench_reliability import claude_code_lines
from engine import tokens
from engine.importers import import_file, parse_file
from engine.store.factory import open_store


def stored_counts(db: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        return conn.execute(
            "SELECT seq, tokens, tool_result_tokens, tokenizer FROM messages ORDER BY seq"
        ).fetchall()


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages the tokenizers count (cache misses), appended per count."""
    calls: list[int] = []
    count_parts = tokens.Tokenizer._count_parts

    def counting(self: Any, message: Any) -> tuple[int, int]:
        calls.append(1)
        return count_parts(self, message)

    monkeypatch.setattr(tokens.Tokenizer, "_count_parts", counting)
    return calls


def test_the_writer_counts_no_message_the_parse_counted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, counted: list[int]
) -> None:
    path = tmp_path / "s.jsonl"
    claude_code_lines(path, 400)
    with open_store(tmp_path / "a.db") as store:
        import_file(path, store)
    expected = stored_counts(tmp_path / "a.db")
    assert len(expected) == 400 and all(tokens_ > 0 for _, tokens_, _, _ in expected)

    monkeypatch.setattr(tokens, "_CACHE_MAX_ENTRIES", 10)  # forgets almost every count it made
    tokens.get_tokenizer("claude-sonnet-4-5").clear_cache()
    _, sessions = parse_file(path)
    assert all(pm.counted is not None for pm in sessions[0].messages)
    counted.clear()
    with open_store(tmp_path / "b.db") as store:
        import_file(path, store)
    assert len(counted) == 400  # each message once, by the parse; none by the writer
    assert stored_counts(tmp_path / "b.db") == expected


def test_a_message_replaced_after_the_parse_counted_it_is_counted_again(tmp_path: Path) -> None:
    _, sessions = parse_file(_write_lines(tmp_path))
    pm = sessions[0].messages[0]
    assert pm.counted is not None
    tokenizer_id = pm.counted[1]
    assert (
        pm.counted_parts(tokenizer_id)
        == pm.counted[2:]
        == tokens.get_tokenizer(tokenizer_id).count_message_parts(pm.message)
    )
    assert pm.counted_parts("another tokenizer") is None
    pm.message = pm.message.with_content("something else entirely")
    assert pm.counted_parts(tokenizer_id) is None


def _write_lines(folder: Path) -> Path:
    path = folder / "s.jsonl"
    claude_code_lines(path, 10)
    return path
