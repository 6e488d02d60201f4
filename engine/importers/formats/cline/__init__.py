"""Cline / Roo Code tasks (``<globalStorage>/saoudrizwan.claude-dev/tasks/<task id>/``).

``api_conversation_history.json`` is the conversation as sent: an Anthropic Messages list.
Beside it, ``ui_messages.json`` (the task's UI log) holds one ``say: api_req_started`` entry
per model call whose text is JSON with that call's ``tokensIn`` (uncached input),
``tokensOut``, ``cacheWrites``, ``cacheReads`` and ``cost``: the k-th is the usage of the k-th
assistant message. ``task_metadata.json`` names the models used (``model_usage``). The cwd is
read from the ``# Current Working Directory (...)`` line of the first environment details.
Results Cline sends as text are made tool results of their calls (:mod:`.tools`); the
costs Cline computed are summed into ``agent_cost_usd``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations
from engine.importers.formats.anthropic_api import parse_anthropic_messages
from engine.importers.formats.cline.tools import pair_text_results
from engine.importers.parsing.parsed import ParsedSession
from engine.importers.parsing.readers import as_count

_CWD = re.compile(r"# Current (?:Working Directory|Workspace Directory) \(([^)\n]+)\)")


def parse_cline_task(value: list[Any], *, key: str, path: Path) -> list[ParsedSession]:
    folder = path.parent
    metadata = _json(folder / "task_metadata.json")
    models = [
        u.get("model_id")
        for u in (metadata.get("model_usage") if isinstance(metadata, dict) else None) or []
        if isinstance(u, dict) and u.get("model_id")
    ]
    model = str(models[-1]) if models else None
    session = parse_anthropic_messages(value, key=f"cline:{folder.name}", model=model)
    for pm, raw in zip(session.messages, value, strict=True):  # newer Cline times each message (ms)
        when = utc_of_ms(raw.get("ts")) if isinstance(raw, dict) else None
        if when:
            pm.message = pm.message.model_copy(update={"meta": {**pm.message.meta, "timestamp": when}})
    paired = pair_text_results(session.messages)
    if paired:
        session.notes.append(f"{paired} tool result(s) Cline sent as text made tool results of their calls")
    session.metadata["task_id"] = folder.name
    if folder.name.isdigit():  # the task's id is its start time (ms)
        session.metadata["started_utc"] = utc_of_ms(int(folder.name))
    session.unlogged_prefix_in = "system"  # Cline's system prompt (tools described in it)
    if len(set(models)) > 1:
        session.metadata["models"] = sorted(set(map(str, models)))
    requests = _api_requests(_json(folder / "ui_messages.json"))
    replies = [pm for pm in session.messages if pm.call is not None]
    for pm, request in zip(replies, requests, strict=False):
        assert pm.call is not None
        pm.call.usage = request["usage"]
        if request.get("cost") is not None:
            pm.call.details["cline_cost"] = request["cost"]
        if request.get("ts"):
            pm.call.details["call_ts_ms"] = request["ts"]
            pm.call.details["call_utc"] = utc_of_ms(request["ts"])
    costs = [r["cost"] for r in requests if isinstance(r.get("cost"), (int, float))]
    if costs:  # what Cline itself says the task cost (its own prices), beside ours
        session.metadata["agent_cost_usd"] = round(sum(costs), 6)
        session.metadata["agent_cost_source"] = "cline ui_messages.json api_req_started cost"
    times = [t for t in (utc_of_ms(r.get("ts")) for r in requests) if t]
    if times:
        session.metadata["ended_utc"] = max(times)
    if requests:
        session.metadata["ui_api_requests"] = len(requests)
        if len(requests) != len(replies):
            session.notes.append(
                f"ui_messages.json has {len(requests)} API requests for {len(replies)} assistant messages: "
                "usage matched in order"
            )
    else:
        session.notes.append("no ui_messages.json beside the conversation: no per-request usage")
    for pm in session.messages[:2]:
        match = _CWD.search(pm.message.text)
        if match:
            session.metadata["cwd"] = match.group(1).strip()
            break
    return [session]


def utc_of_ms(ms: Any) -> str | None:
    """ISO-8601 UTC of a JavaScript timestamp (ms since the epoch); None when it is not one."""
    if not isinstance(ms, (int, float)) or isinstance(ms, bool) or not 0 < ms < 10**14:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _api_requests(ui: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for entry in ui if isinstance(ui, list) else []:
        if not isinstance(entry, dict) or entry.get("say") != "api_req_started":
            continue
        try:
            info = json.loads(entry.get("text") or "{}")
        except json.JSONDecodeError:
            continue
        if not isinstance(info, dict) or info.get("tokensIn") is None:
            continue
        out.append(
            {
                "ts": entry.get("ts"),
                "cost": info.get("cost"),
                "usage": ProviderUsage(
                    input_tokens=as_count(info.get("tokensIn")),
                    output_tokens=as_count(info.get("tokensOut")),
                    cache_read_input_tokens=as_count(info.get("cacheReads")),
                    cache_creation_input_tokens=as_count(info.get("cacheWrites")),
                ),
            }
        )
    return out


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return None


#: VS Code extension ids whose globalStorage holds Cline-style tasks.
CLINE_EXTENSIONS = ("saoudrizwan.claude-dev", "rooveterinaryinc.roo-cline", "kilocode.kilo-code")
_EDITORS = ("Code", "Code - Insiders", "VSCodium", "Cursor", "Windsurf")
TASK_FILE = "api_conversation_history.json"


def sniff(doc: Document) -> bool:
    return doc.path.name == TASK_FILE and isinstance(doc.value, list)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_cline_task(doc.value, key=key, path=doc.path)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    storages = [home / ".config" / e / "User" / "globalStorage" for e in _EDITORS]
    storages += [home / "Library" / "Application Support" / e / "User" / "globalStorage" for e in _EDITORS]
    if env.get("APPDATA"):
        storages += [Path(env["APPDATA"]) / e / "User" / "globalStorage" for e in _EDITORS]
    return [
        *(s / ext / "tasks" for s in storages for ext in CLINE_EXTENSIONS),
        home / ".cline" / "data" / "tasks",
    ]


def files_under(root: Path) -> list[Path]:
    return sorted(root.glob(f"*/{TASK_FILE}"))


FORMAT = ImportFormat(
    name="cline",
    agent="Cline / Roo Code / Kilo Code",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="VS Code `globalStorage/<extension>/tasks/<id>/api_conversation_history.json` "
    "(+ `ui_messages.json`, `task_metadata.json`); `~/.cline/data/tasks`",
    locations=Locations(roots=roots, files_under=files_under),
)
