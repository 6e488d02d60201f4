"""The one limit rule: its arithmetic, its thresholds, and its SQL form equal to the Python one."""

from __future__ import annotations

import sqlite3

import duckdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ValidationError
from engine.limit import LIMIT_SQL, Limit, recorded_limit


@pytest.mark.parametrize(
    ("limit", "tokens"),
    [
        pytest.param(Limit(200_000, 32_000, 1_000), 167_000, id="window less reserve and buffer"),
        pytest.param(Limit(200_000, 32_000, 1_000, cap=50_000), 50_000, id="a budget below it caps it"),
        pytest.param(
            Limit(200_000, 32_000, 1_000, cap=190_000), 167_000, id="a budget above it changes nothing"
        ),
        pytest.param(Limit(128_000), 128_000, id="no reserve"),
    ],
)
def test_the_limit_is_the_window_less_reserve_and_buffer_capped_by_the_budget(
    limit: Limit, tokens: int
) -> None:
    assert limit.tokens == tokens
    assert limit.columns()["limit_tokens"] == tokens


def test_thresholds_are_floored_shares_of_the_capped_limit() -> None:
    limit = Limit(131_072, 4_096, 256, cap=50_000)
    assert limit.threshold(0.95) == 47_500
    assert Limit(1_000, 1, 0).threshold(0.95) == 949  # 949.05 floored
    assert limit.share_of(25_000) == 0.5


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"window": 1_000, "output_reserve": 900, "buffer": 100}, id="nothing left"),
        pytest.param({"window": -1}, id="negative window"),
        pytest.param({"window": 1_000, "cap": 0}, id="zero budget"),
    ],
)
def test_an_impossible_limit_is_a_typed_error(kwargs: dict) -> None:
    with pytest.raises(ValidationError):
        Limit(**kwargs)


@pytest.mark.parametrize(
    ("row", "expected"),
    [
        pytest.param({"limit_tokens": 50_000, "context_window": 200_000}, 50_000, id="recorded limit wins"),
        pytest.param(
            {"context_window": 200_000, "max_output_tokens": 32_000}, 168_000, id="window less reserve"
        ),
        pytest.param({"context_window": 200_000}, 200_000, id="window alone"),
        pytest.param({}, None, id="nothing recorded"),
        pytest.param({"context_window": float("nan")}, None, id="NaN from a frame"),
        pytest.param({"context_window": 100, "max_output_tokens": 100}, None, id="no room"),
    ],
)
def test_a_recorded_call_reads_its_limit(row: dict, expected: int | None) -> None:
    assert recorded_limit(row) == expected


COLUMNS = ("limit_tokens", "context_window", "max_output_tokens", "buffer_tokens")
maybe_tokens = st.one_of(st.none(), st.integers(min_value=0, max_value=2_000_000))


@given(st.lists(st.tuples(*(maybe_tokens for _ in COLUMNS)), min_size=1, max_size=20))
def test_the_sql_rule_equals_the_python_rule_in_sqlite_and_duckdb(rows: list[tuple]) -> None:
    expected = [recorded_limit(dict(zip(COLUMNS, row, strict=True))) for row in rows]
    create = f"CREATE TABLE context_events (id INTEGER, {', '.join(c + ' BIGINT' for c in COLUMNS)})"
    insert = f"INSERT INTO context_events VALUES (?, {', '.join('?' for _ in COLUMNS)})"
    select = f"SELECT {LIMIT_SQL} FROM context_events ORDER BY id"
    numbered = [(i, *row) for i, row in enumerate(rows)]
    lite = sqlite3.connect(":memory:")
    lite.execute(create)
    lite.executemany(insert, numbered)
    assert [r[0] for r in lite.execute(select)] == expected
    duck = duckdb.connect()
    duck.execute(create)
    duck.executemany(insert, numbered)
    assert [r[0] for r in duck.execute(select).fetchall()] == expected
