"""engine.importers.lines: whole lines are decoded many at a time (one JSON array), and give
exactly what each line decoded alone gives: the same objects, the same error on the same line."""

from __future__ import annotations

import io
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.importers.lines import read_lines
from engine.importers.parsing.parsed import SourceProblem


def _read(text: str, **kwargs: object) -> list[tuple[int, object]]:
    return read_lines(io.BytesIO(text.encode("utf-8")), **kwargs).lines  # type: ignore[arg-type]


def test_lines_read_together_are_each_line_alone() -> None:
    lines = [json.dumps({"type": "user", "n": i, "message": {"content": f"step {i}"}}) for i in range(1000)]
    read = _read("\n".join(lines) + "\n")
    assert read == [(i + 1, json.loads(line)) for i, line in enumerate(lines)]


def test_lines_read_together_share_their_keys() -> None:
    # the memory the batching saves: one copy of a key for the lines decoded together
    read = _read('{"sessionId": "a", "message": {"content": "x"}}\n' * 10)
    first, second = (next(iter(obj)) for _, obj in read[:2])
    assert first == second == "sessionId"
    assert first is second


def test_lines_read_together_share_their_repeated_short_values() -> None:
    # a session's lines repeat their session id, version, type, model...: one copy for the batch
    lines = [
        json.dumps({"sessionId": "s-1", "uuid": f"u{i}", "message": {"model": "m-1", "text": f"t{i}"}})
        for i in range(5)
    ]
    read = [obj for _, obj in _read("\n".join(lines) + "\n")]
    assert read == [json.loads(line) for line in lines]
    assert all(obj["sessionId"] is read[0]["sessionId"] for obj in read)
    assert all(obj["message"]["model"] is read[0]["message"]["model"] for obj in read)
    assert len({id(obj["uuid"]) for obj in read}) == len({id(obj["message"]["text"]) for obj in read}) == 5
    long = "x" * 200  # a long value is left alone (hashing it would cost more than it saves)
    read = [obj for _, obj in _read(f'{{"body": "{long}"}}\n' * 3)]
    assert read[0]["body"] == read[1]["body"] == long
    assert read[0]["body"] is not read[1]["body"]


@pytest.mark.parametrize(
    ("bad", "error"),
    [
        # each is no object alone, yet its neighbours would close it inside one array
        (['{"a": [{}', "{}]}", "{}, {}"], "malformed JSON line (Expecting ',' delimiter"),
        (['{"a": [[', "{}]]}]"], "malformed JSON line (Expecting value"),
        # ... and one that makes up the count: the array alternates object, text, object
        (['{"a": [{}', "{}]}", '{}, "x", {}'], "malformed JSON line (Expecting ',' delimiter"),
        (['{"a": "x', 'y"}'], "malformed JSON line (Invalid control character"),
        (["{}, {}"], "malformed JSON line (Extra data"),
        (["[1]"], "expected a JSON object, found list"),
    ],
)
def test_a_line_that_is_no_object_alone_is_reported_at_its_line(bad: list[str], error: str) -> None:
    text = "\n".join(['{"ok": 1}'] * 5 + bad + ['{"ok": 2}'] * 5) + "\n"
    with pytest.raises(SourceProblem, match=re.escape(error)) as raised:
        _read(text)
    assert raised.value.line == 6


_LINES = st.one_of(
    st.dictionaries(st.text(max_size=5), st.integers() | st.text(max_size=5) | st.none(), max_size=4).map(
        json.dumps
    ),
    st.sampled_from(['{"a": [{}', "{}]}", "{}, {}", "[1]", "1", '{"a": 1} x', "", "  ", '{"a": "x', 'y"}']),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_LINES, max_size=40))
def test_read_lines_gives_what_json_loads_gives_line_by_line(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    expected: list[tuple[int, object]] = []
    failed_at = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            failed_at = number
            break
        if not isinstance(value, dict):
            failed_at = number
            break
        expected.append((number, value))
    if failed_at is None:
        assert _read(text) == expected
    else:
        with pytest.raises(SourceProblem) as raised:
            _read(text)
        assert raised.value.line == failed_at
