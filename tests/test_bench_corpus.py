"""The benchmark corpus is deterministic, well paired and as varied as agent traffic."""

from __future__ import annotations

import json

import pytest

from bench.corpus import KINDS, generate_history, iter_history, sample_texts
from bench.report import Table, fmt_cell, render_table
from engine.messages import ToolResultBlock, ToolUseBlock
from engine.turns import has_orphans, parse_turn_boundaries


def test_same_seed_gives_the_same_history_and_longer_is_a_prefix() -> None:
    short, long = generate_history(150), generate_history(400)
    again = generate_history(150)
    assert [m.content_hash for m in short] == [m.content_hash for m in again]
    assert [m.content_hash for m in short] == [m.content_hash for m in long[:150]]
    assert generate_history(50, seed=1)[0].content_hash != short[0].content_hash


def test_history_has_no_orphans_and_many_turns() -> None:
    history = generate_history(600)
    assert not has_orphans(history)
    assert len(parse_turn_boundaries(history)) > 20


def test_history_mixes_prose_json_arguments_long_logs_and_non_ascii() -> None:
    history = generate_history(2_000)
    uses = [b for m in history for b in m.blocks if isinstance(b, ToolUseBlock)]
    results = [b for m in history for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert {u.name for u in uses} >= {"bash", "edit_file", "read_file"}
    assert any(len(json.dumps(u.input)) > 300 for u in uses)
    assert max(len(r.text) for r in results) > 5_000
    assert any(r.text.lstrip().startswith("{") for r in results)
    assert any(not m.text.isascii() for m in history)
    assert any(r.is_error for r in results)


def test_stream_is_endless() -> None:
    stream = iter_history(seed=3)
    assert len([next(stream) for _ in range(5_000)]) == 5_000


@pytest.mark.parametrize("kind", KINDS)
def test_sample_texts_of_each_kind_have_about_the_size_asked(kind: str) -> None:
    texts = sample_texts(kind, 10, chars=1_000)
    assert len(texts) == 10
    assert all(300 < len(t) < 3_000 for t in texts)
    assert texts == sample_texts(kind, 10, chars=1_000)


def test_sample_texts_rejects_an_unknown_kind() -> None:
    with pytest.raises(ValueError, match="unknown content kind 'poetry'"):
        sample_texts("poetry", 1)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "—"),
        (True, "yes"),
        (12345, "12,345"),
        (1234.5, "1,234"),
        (12.345, "12.3"),
        (0.5, "0.50"),
        (0.0123, "0.0123"),
        ("a|b", "a\\|b"),
    ],
)
def test_cells_are_formatted_for_markdown(value: object, shown: str) -> None:
    assert fmt_cell(value) == shown


def test_a_row_must_match_the_columns() -> None:
    table = Table("t", ["a", "b"])
    table.add(1, 2.5)
    with pytest.raises(ValueError, match="row has 1 cells, table has 2 columns"):
        table.add(1)
    assert render_table(table).splitlines()[2:5] == ["| a | b |", "|---|---|", "| 1 | 2.50 |"]
