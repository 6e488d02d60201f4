"""A parsed Claude Code session keeps no small object of its decoded lines: a kept string or count
would pin the memory of its whole line (pymalloc frees a pool only when every object in it is
gone), and a 100k-line session held all its lines' 160 MB after the parse (#33)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.bench_reliability import claude_code_lines
from engine.importers.detect import detect
from engine.importers.documents import read_document


def small_objects(value: Any, into: dict[int, Any]) -> None:
    """Every string and int (past the interpreter's shared small ints) reachable from ``value``."""
    stack = [value]
    seen: set[int] = set()
    while stack:
        item = stack.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        if type(item) is str or (type(item) is int and not -5 <= item <= 256):
            into[id(item)] = item
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list | tuple | set | frozenset):
            stack.extend(item)
        elif hasattr(item, "__dict__") or hasattr(type(item), "__slots__"):
            stack.extend(vars(item).values() if hasattr(item, "__dict__") else ())
            stack.extend(
                getattr(item, name) for name in getattr(type(item), "__slots__", ()) if hasattr(item, name)
            )
            stack.append(getattr(item, "__pydantic_private__", None))


def test_parsed_messages_hold_none_of_the_decoded_lines_small_objects(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    claude_code_lines(path, 600)  # usage counts past 256 from line 493 on
    doc = read_document(path)
    decoded: dict[int, Any] = {}
    for _, obj in doc.lines or ():
        small_objects(obj, decoded)
    sessions = detect(doc).parse(doc, "key")
    messages = sessions[0].messages
    kept: dict[int, Any] = {}
    small_objects(messages, kept)  # with their calls
    assert len(messages) == 600 and any(pm.message.id == "msg_599" for pm in messages)
    assert any(type(v) is int and v > 256 for v in kept.values())  # the counts past 256 are kept...
    assert {"done 599", "msg_599", "u00000599", "step 598: run the check"} <= set(kept.values())
    # ...as copies, like every text, id and time
    shared = [v for k, v in kept.items() if k in decoded and decoded[k] is v]
    assert [
        v for v in shared if type(v) is int or v.startswith(("u0", "msg_", "step", "done", "2026-"))
    ] == []
