"""A Claude Code 2.1.3xx session's requests each send the history again, the same objects: what is
computed of a message or a tool list (its digest's JSON, its cache markers, its stored part) is
computed once and reused by identity. Each memo must give exactly what the computation gives (a
session of 1,000 calls took 52 s of CPU to import, growing with the square of its calls)."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.importers.formats.claude_code.replay import request_digest
from engine.store.payloads import _put_part, _stored_part, cache_control_positions

_TEXT = st.text(max_size=12)
_LEAF = st.none() | st.booleans() | st.integers(-(2**40), 2**40) | _TEXT
_MARKER = st.fixed_dictionaries(
    {"type": st.just("ephemeral")}, optional={"ttl": st.sampled_from(["5m", "1h"])}
)
_JSON = st.recursive(
    _LEAF,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(_TEXT.filter(lambda k: k != "cache_control"), inner, max_size=4).flatmap(
            lambda d: st.just(d) | _MARKER.map(lambda m, d=d: {**d, "cache_control": m})
        )
    ),
    max_leaves=20,
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "assistant"]), "content": _TEXT | st.lists(_JSON, max_size=3)}
)


def _markers_of_the_whole(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The markers as one walk of the whole body finds them (cache_control_positions before it kept
    what it found per object)."""
    found: list[dict[str, Any]] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict):
            marker = value.get("cache_control")
            if isinstance(marker, dict):
                found.append(
                    {"path": path or "$", "type": marker.get("type"), "ttl": marker.get("ttl", "5m")}
                )
            for key, item in value.items():
                if key != "cache_control" and isinstance(item, dict | list):
                    walk(item, f"{path}.{key}" if path else key)
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, f"{path}[{i}]")

    walk(dict(body), "")
    return found


def _requests(history: list[dict[str, Any]], tools: list[Any], extra: dict[str, Any]) -> list[dict[str, Any]]:
    """Requests each sending a longer prefix of ``history``: the same message and tool objects."""
    return [
        {"model": "m", **extra, "tools": tools, "messages": history[:n]} for n in range(1, len(history) + 1)
    ]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_MESSAGE, min_size=1, max_size=5),
    st.lists(_JSON, max_size=3),
    st.dictionaries(_TEXT, _JSON, max_size=3),
)
def test_a_digest_written_in_pieces_is_the_digest_of_the_whole(
    history: list[dict[str, Any]], tools: list[Any], extra: dict[str, Any]
) -> None:
    pieces: dict[int, Any] = {}
    for body in _requests(history, tools, extra):
        assert request_digest(body, ["beta"], pieces=pieces) == request_digest(body, ["beta"])


@settings(max_examples=150, deadline=None)
@given(st.lists(_MESSAGE, min_size=1, max_size=5), st.lists(_JSON, max_size=3), _JSON)
def test_markers_found_once_per_object_are_the_markers_of_each_body(
    history: list[dict[str, Any]], tools: list[Any], system: Any
) -> None:
    known: dict[Any, tuple[Any, Any]] = {}
    for body in _requests(history, tools, {"system": system, "": [system]}):
        whole = _markers_of_the_whole(body)
        assert cache_control_positions(body, known=known) == cache_control_positions(body) == whole
    marked = {"cache_control": {"type": "ephemeral"}, "messages": history}  # a marker on the body itself
    assert cache_control_positions(marked, known=known) == _markers_of_the_whole(marked)


def test_a_part_stored_once_per_object_has_the_digest_stored_each_time() -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE TABLE payload_parts (hash TEXT PRIMARY KEY, kind TEXT, size_bytes INTEGER, content_json TEXT,"
        " created_utc TEXT)"
    )
    stored: dict[Any, tuple[Any, Any]] = {}
    message = {"role": "user", "content": [{"type": "text", "text": "token sk-ant-api03-" + "x" * 40}]}
    first = _stored_part(conn, "?", "message", message, "now", stored)
    assert (
        first
        == _stored_part(conn, "?", "message", message, "now", stored)
        == _put_part(conn, "?", "message", message, "now")
    )
    (text,) = conn.execute("SELECT content_json FROM payload_parts").fetchone()
    assert "sk-ant-api03-x" not in text and json.loads(text)["role"] == "user"  # redacted before it is hashed
    equal_copy = json.loads(json.dumps(message))  # another object: looked up afresh, the same part
    assert _stored_part(conn, "?", "message", equal_copy, "now", stored) == first
    assert len(stored) == 2
