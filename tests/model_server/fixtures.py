"""Request logs kept as test fixtures: bodies' ``system`` and ``tools`` stored once, by hash.

Real agents send the same ~100 KB system prompt and tool definitions with every call, so a
fixture's ``requests.jsonl`` replaces them with ``{"$shape": sha256}`` and keeps the value in
``<fixtures root>/_shapes/<sha256>.json``; :func:`load_request_log` restores the exact bodies.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

SHAPED_KEYS = ("system", "tools")
LOG_NAME = "requests.jsonl"
SHAPES_DIR = "_shapes"


def store_request_log(records: list[dict[str, Any]], scenario_dir: Path) -> Path:
    """Write ``records`` (the server's log) to ``scenario_dir/requests.jsonl`` with shared shapes."""
    shapes = scenario_dir.parent / SHAPES_DIR
    shapes.mkdir(parents=True, exist_ok=True)
    lines = []
    for record in records:
        body = record.get("body")
        if isinstance(body, dict):
            body = dict(body)
            for key in SHAPED_KEYS:
                if key in body:
                    text = json.dumps(body[key], ensure_ascii=False, sort_keys=True)
                    digest = hashlib.sha256(text.encode()).hexdigest()
                    path = shapes / f"{digest}.json"
                    if not path.exists():
                        path.write_text(text + "\n", encoding="utf-8")
                    body[key] = {"$shape": digest}
            record = {**record, "body": body}
        lines.append(json.dumps(record, ensure_ascii=False))
    out = scenario_dir / LOG_NAME
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def load_request_log(scenario_dir: Path) -> list[dict[str, Any]]:
    """The request log of a fixture scenario, with exact bodies."""
    shapes = scenario_dir.parent / SHAPES_DIR
    records = []
    for line in (scenario_dir / LOG_NAME).read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        record = json.loads(line)
        body = record.get("body")
        if isinstance(body, dict):
            for key in SHAPED_KEYS:
                value = body.get(key)
                if isinstance(value, dict) and set(value) == {"$shape"}:
                    body[key] = json.loads((shapes / f"{value['$shape']}.json").read_text(encoding="utf-8"))
        records.append(record)
    return records
