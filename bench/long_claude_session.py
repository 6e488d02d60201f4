"""A long Claude Code 2.1.3xx session for the import benchmark: every call has its ``api-request``
line (``base`` = the call before, ``keep`` = all it sent, ``tail`` = the reply and the new tool
result), so each request sends the whole history again, as Claude Code records it. The system and
tool definitions are a real run's (tests/fixtures/real_agents/claude-code/compact_auto)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from engine.importers.formats.claude_code.replay import message_hash

SHAPE_SOURCE = (
    Path(__file__).resolve().parents[1]
    / "tests/fixtures/real_agents/claude-code/compact_auto/transcripts/005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl"
)
VERSION = "2.1.330"
MODEL = "claude-sonnet-4-5"


def long_claude_session(path: Path, calls: int) -> None:
    """Write a session of ``calls`` calls (each reads a file: a tool use and its 12-line result)."""
    shape = next(
        o for o in map(json.loads, SHAPE_SOURCE.read_text(encoding="utf-8").splitlines())
        if o.get("type") == "api-request-shape"
    )  # fmt: skip
    session = f"long-{calls}"
    ids = uuid.uuid5(uuid.NAMESPACE_OID, session)
    common = {
        "sessionId": session,
        "version": VERSION,
        "cwd": "/repo",
        "isSidechain": False,
        "userType": "external",
    }
    lines: list[dict[str, Any]] = [{**shape, "sessionId": session}]
    user: dict[str, Any] = {
        "role": "user",
        "content": [{"type": "text", "text": "Read every module and report."}],
    }
    parent = str(uuid.uuid5(ids, "prompt"))
    lines.append(
        {**common, "type": "user", "uuid": parent, "parentUuid": None, "timestamp": _time(0), "message": user}
    )
    sent: list[dict[str, Any]] = []
    base: str | None = None
    reply: dict[str, Any] | None = None
    for i in range(calls):
        request = str(uuid.uuid5(ids, f"request-{i}"))
        tail = [user] if reply is None else [reply, user]
        lines += [
            {"type": "api-request-blob", "sessionId": session, "hash": message_hash(m), "message": m}
            for m in tail
        ]
        lines.append({
            **common, "type": "api-request", "id": request, "timestamp": _time(i), "querySource": "sdk",
            "shapeHash": shape["shapeHash"], "params": {"model": MODEL, "max_tokens": 32000},
            "base": base, "keep": len(sent), "tail": [message_hash(m) for m in tail],
        })  # fmt: skip
        sent, base = sent + tail, request
        tool = f"toolu_{i:06d}"
        reply = {"role": "assistant", "content": [
            {"type": "text", "text": f"Reading module {i} to see what it holds."},
            {"type": "tool_use", "id": tool, "name": "Read", "input": {"file_path": f"/repo/src/module_{i}.py"}},
        ]}  # fmt: skip
        usage = {"input_tokens": 10, "cache_read_input_tokens": 1000 + 150 * i, "cache_creation_input_tokens": 150,
                 "output_tokens": 40}  # fmt: skip
        answer = str(uuid.uuid5(ids, f"reply-{i}"))
        lines.append({
            **common, "type": "assistant", "uuid": answer, "parentUuid": parent, "timestamp": _time(i),
            "requestRef": request, "requestId": f"req_{i}",
            "message": {"id": f"msg_{i}", "type": "message", "model": MODEL, **reply, "stop_reason": "tool_use",
                        "usage": usage},
        })  # fmt: skip
        user = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool, "content": "\n".join(
            f"{k}\tdef function_{i}_{k}(x):  return x * {k}" for k in range(12))}]}  # fmt: skip
        parent = str(uuid.uuid5(ids, f"result-{i}"))
        lines.append({
            **common, "type": "user", "uuid": parent, "parentUuid": answer, "timestamp": _time(i), "message": user,
            "sourceToolAssistantUUID": answer,
        })  # fmt: skip
    path.write_text("".join(json.dumps(o) + "\n" for o in lines), encoding="utf-8")


def _time(i: int) -> str:
    return f"2026-11-24T{7 + i // 3600:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z"
