"""Hostile variants of real transcripts: every failure is a typed ctxdesk error naming the file, and a
failed import into a new path leaves no file behind.

Hypothesis mutates the bundled fixtures (derived from real agents' files and the real-client runs):
a value somewhere replaced by another type, a huge or non-finite number, a lone surrogate, deep nesting,
truncation at a random byte, another encoding. Derandomized, so CI sees the same cases every run.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import SessionStore, import_files
from engine.errors import ContextDeskError

FIXTURES = Path(__file__).parent / "fixtures"
TRANSCRIPT_SUFFIXES = {".json", ".jsonl", ".traj", ".md", ".af"}
MAX_FIXTURE_BYTES = 400_000


def _transcripts() -> list[Path]:
    roots = [FIXTURES / "sessions", FIXTURES / "real_agents", FIXTURES / "agents"]
    found = []
    for root in roots:
        for path in sorted(root.rglob("*")):
            if (
                path.is_file()
                and path.suffix in TRANSCRIPT_SUFFIXES
                and path.stat().st_size <= MAX_FIXTURE_BYTES
                and "request" not in path.name  # server request logs are not transcripts
                and not path.name.startswith("README")
            ):
                found.append(path)
    return found


TRANSCRIPTS = _transcripts()

HOSTILE_VALUES: list[Any] = [
    {"x": 1},
    [1, [2, [3]]],
    1e20,
    10**30,
    -1,
    float("inf"),
    float("nan"),
    "\ud800",
    "",
    None,
    True,
    0,
    "x" * 10_000,
]


def _paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every path to a node of a JSON value (dict keys and list indexes), the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found += _paths(child, (*prefix, key))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found += _paths(child, (*prefix, index))
    return found


def _replace(value: Any, path: tuple, new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


def _mutate_json_text(text: str, draw: Any) -> bytes:
    """Replace one node of one JSON document (a JSON Lines line, or the whole file) by a hostile value."""
    lines = text.splitlines()
    try:
        docs = [json.loads(text)]
        single = True
    except json.JSONDecodeError:
        docs = [json.loads(line) for line in lines if line.strip()]
        single = False
    index = draw(st.integers(0, len(docs) - 1))
    paths = _paths(docs[index])
    path = paths[draw(st.integers(0, len(paths) - 1))]
    new = draw(st.sampled_from(HOSTILE_VALUES))
    docs[index] = _replace(docs[index], path, new)
    out = _dumps(docs[0]) if single else "\n".join(_dumps(d) for d in docs) + "\n"
    return out.encode("utf-8", "surrogatepass")


@st.composite
def hostile_variants(draw: Any) -> tuple[Path, bytes, str]:
    source = draw(st.sampled_from(TRANSCRIPTS))
    data = source.read_bytes()
    kind = draw(st.sampled_from(["mutate", "mutate", "mutate", "truncate", "utf16", "latin1", "nest"]))
    if kind == "truncate":
        data = data[: draw(st.integers(0, max(len(data) - 1, 0)))]
    elif kind == "utf16":
        data = data.decode("utf-8", "replace").encode("utf-16")
    elif kind == "latin1":
        data = data.replace(b"e", b"\xe9")
    elif kind == "nest":
        depth = draw(st.sampled_from([1_000, 100_000]))
        data = b"[" * depth + data + b"]" * depth
    else:
        try:
            data = _mutate_json_text(data.decode("utf-8"), draw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            data = data[: len(data) // 2]  # not JSON (Aider markdown): cut it instead
    return source, data, kind


@pytest.mark.skipif(not TRANSCRIPTS, reason="no transcript fixtures in this checkout")
@settings(
    max_examples=250,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(hostile_variants())
def test_hostile_transcripts_fail_typed_naming_the_file_and_leave_no_partial_database(variant):
    source, data, kind = variant
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / f"hostile{source.suffix}"
        path.write_bytes(data)
        db = Path(folder) / "new.db"
        try:
            with SessionStore(db) as store:
                import_files([path], store)
        except ContextDeskError as exc:
            assert path.name in str(exc) or str(db) in str(exc), (kind, source.name, str(exc))
            leftovers = sorted(p.name for p in Path(folder).iterdir() if p.name.startswith("new.db"))
            assert leftovers in ([], ["new.db"]), leftovers
            if leftovers:
                with SessionStore(db, read_only=True) as store:
                    assert store.list_sessions() == [], "a failed import left sessions behind"
        except RecursionError:
            pytest.fail(f"RecursionError on {kind} of {source.name}")
