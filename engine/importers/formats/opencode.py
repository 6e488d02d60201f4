"""OpenCode (and its fork Kilo CLI): every session in one SQLite database,
``$XDG_DATA_HOME/opencode/opencode.db`` (``~/.local/share/opencode/opencode.db``).

The ``message`` table holds one row per user prompt and per assistant step (its ``data`` JSON:
role, model, ``tokens`` with the provider's usage), ``part`` the pieces of each message in order
(text, reasoning, tool calls with their input, output and status, step markers, compaction and
sub-task markers). A session's history is rebuilt the way OpenCode sends it (its
``MessageV2.toModelMessages``): ignored text left out, a completed tool's output (or the
"cleared" note once OpenCode compacted it), a failed tool's error, an unfinished tool marked
interrupted, and history restarting at the last finished compaction. Each assistant step is one
model call. The system prompt and tool definitions are not stored: their size is measured from
the provider's count. A session started by the ``task`` tool is a child of its parent.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations
from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import build_message, provider_of
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

#: What OpenCode sends in place of a tool output it compacted, and for a call that never finished.
CLEARED_OUTPUT = "[Old tool result content cleared]"
INTERRUPTED_OUTPUT = "[Tool execution was interrupted]"
#: The user text OpenCode sends for a compaction marker and for a command the user ran as a tool.
COMPACTION_PROMPT = "What did we do so far?"
SUBTASK_PROMPT = "The following tool was executed by the user"
_TABLES = frozenset({"session", "message", "part"})
ENVIRONMENT_TAG = "<environment_details>"


def environment_details(context: dict[str, Any], info: dict[str, Any]) -> str:
    """Kilo CLI's ``<environment_details>`` for a user message (its ``injectEditorContext``): the
    message's time to the second, the folders, and the editor's files when an editor sent them."""
    created = (info.get("time") or {}).get("created")
    when = datetime.fromtimestamp(created / 1000, tz=UTC) if isinstance(created, int | float) else None
    lines = [f"Message time: {when.strftime('%Y-%m-%dT%H:%M:%SZ') if when else ''}"]
    if context.get("directory"):
        lines.append(f"Working directory: {context['directory']}")
    if context.get("worktree"):
        lines.append(f"Workspace root folder: {context['worktree']}")
    if context.get("activeFile"):
        lines.append(f"Active file: {context['activeFile']}")
    for key, title in (("visibleFiles", "Visible files:"), ("openTabs", "Open tabs:")):
        if context.get(key):
            lines += [title, *(f"  {name}" for name in context[key])]
    return "\n".join(["", "", ENVIRONMENT_TAG, *lines, "</environment_details>"])


def _kilo_folders(row: dict[str, Any]) -> dict[str, Any]:
    """The session's directory and its worktree (the directory, up one level per segment of the
    session's ``path``), as Kilo CLI derives them."""
    directory = str(row.get("directory") or "")
    ups = [".." for segment in str(row.get("path") or "").split("/") if segment]
    return {
        "directory": directory,
        "worktree": os.path.normpath(os.path.join(directory, *ups)) if ups else directory,
    }


@dataclass(frozen=True)
class Rows:
    """The rows of an OpenCode database this importer reads, in OpenCode's own order."""

    sessions: list[dict[str, Any]]
    messages: list[tuple[str, str, dict[str, Any]]]  # (id, session id, data)
    parts: list[tuple[str, dict[str, Any]]]  # (message id, data)


def _connect(path: Path) -> sqlite3.Connection:
    try:
        return sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        raise SourceProblem(f"cannot open the SQLite database ({exc})") from exc


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def app_of(path: Path) -> str | None:
    """``opencode`` or ``kilo`` (its fork, which adds its own tables) for a database holding
    OpenCode's tables, else None."""
    conn = _connect(path)
    try:
        tables = _tables(conn)
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    if not tables >= _TABLES:
        return None
    return "kilo" if any(t.startswith("kilo_") for t in tables) else "opencode"


def read_database(path: Path) -> Rows:
    """The sessions, messages and parts of an OpenCode database, read-only (OpenCode may be
    writing it: its write-ahead log is read too)."""
    conn = _connect(path)
    try:
        conn.row_factory = sqlite3.Row
        tables = _tables(conn)
        missing = _TABLES - tables
        if missing:
            raise SourceProblem(
                f"a SQLite database without OpenCode's tables (missing {', '.join(sorted(missing))})"
            )
        sessions = [dict(row) for row in conn.execute("SELECT * FROM session ORDER BY time_created, id")]
        messages = [
            (row["id"], row["session_id"], _json(row["data"], f"message {row['id']}"))
            for row in conn.execute(
                "SELECT id, session_id, data FROM message ORDER BY session_id, time_created, id"
            )
        ]
        parts = [
            (row["message_id"], _json(row["data"], f"part {row['id']}"))
            for row in conn.execute("SELECT id, message_id, data FROM part ORDER BY message_id, id")
        ]
    except sqlite3.Error as exc:
        raise SourceProblem(f"cannot read the OpenCode database ({exc})") from exc
    finally:
        conn.close()
    return Rows(sessions, messages, parts)


def _json(text: str, where: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except (TypeError, json.JSONDecodeError) as exc:
        raise SourceProblem(f"{where}: its data is not JSON ({exc})") from exc
    if not isinstance(value, dict):
        raise SourceProblem(f"{where}: its data is {type(value).__name__}, not an object")
    return value


def parse_rows(rows: Rows, app: str = "opencode") -> list[ParsedSession]:
    """One session per OpenCode session that has messages; sub-agent sessions name their parent."""
    parts: dict[str, list[dict[str, Any]]] = {}
    for message_id, data in rows.parts:
        parts.setdefault(message_id, []).append(data)
    by_session: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for message_id, session_id, data in rows.messages:
        by_session.setdefault(session_id, []).append((message_id, data))
    sessions = []
    for row in rows.sessions:
        messages = by_session.get(row["id"], [])
        session = _session(row, [(info, parts.get(mid, [])) for mid, info in messages], app)
        if session.messages:
            sessions.append(session)
    return sessions


def _session(
    row: dict[str, Any], history: list[tuple[dict[str, Any], list[dict[str, Any]]]], app: str
) -> ParsedSession:
    session = ParsedSession(
        key=str(row["id"]),
        messages=[],
        parent_key=row.get("parent_id") or None,
        title=row.get("title") or None,
    )
    models: dict[str, int] = {}
    summarised: set[str] = set()  # user messages a finished compaction summary answered
    for info in (info for info, _ in history):
        if (
            info.get("role") == "assistant"
            and info.get("summary")
            and info.get("finish")
            and not info.get("error")
        ):
            summarised.add(str(info.get("parentID")))
    for index, (info, parts) in enumerate(history):
        where = f"session {row['id']} message {index}"
        role = info.get("role")
        if role == "user":
            message = _user_message(parts, where, info, _kilo_folders(row) if app == "kilo" else None)
            if message is not None:
                starts = str(info.get("id")) in summarised or any(
                    p.get("type") == "compaction" for p in parts
                )
                session.messages.append(
                    ParsedMessage(message, starts_context=starts and _finished_compaction(info, history))
                )
        elif role == "assistant":
            model = info.get("modelID")
            if isinstance(model, str):
                models[model] = models.get(model, 0) + 1
            session.messages.extend(_assistant_messages(info, parts, where))
        else:
            raise SourceProblem(f"{where}: unknown role {role!r}")
    session.model = max(models, key=lambda m: models[m]) if models else None
    provider = next((i.get("providerID") for i, _ in history if i.get("providerID")), None)
    session.provider = provider_of(session.model) or provider
    session.unlogged_prefix_in = "system"  # OpenCode keeps neither its system prompt nor its tools
    meta = {
        "cwd": row.get("directory"),
        "title": row.get("title"),
        f"{app}_session_id": row.get("id"),
        f"{app}_version": row.get("version"),
        "agent": row.get("agent"),
        "started_utc": _utc(row.get("time_created")),
        "last_updated_utc": _utc(row.get("time_updated")),
    }
    session.metadata.update({k: v for k, v in meta.items() if v})
    session.notes.append(
        f"{'OpenCode' if app == 'opencode' else 'Kilo CLI'} does not keep the system prompt and tool definitions it sent (their size is measured "
        "from the provider's count)"
    )
    return session


def _finished_compaction(
    info: dict[str, Any], history: list[tuple[dict[str, Any], list[dict[str, Any]]]]
) -> bool:
    """A compaction marker restarts the history only once its summary finished without error."""
    return any(
        i.get("role") == "assistant" and i.get("summary") and i.get("finish") and not i.get("error")
        and i.get("parentID") == info.get("id")
        for i, _ in history
    )  # fmt: skip


def _user_message(
    parts: list[dict[str, Any]],
    where: str,
    info: dict[str, Any],
    editor_context: dict[str, Any] | None = None,
) -> Any:
    """The user message as sent. ``editor_context`` (Kilo CLI): the ``<environment_details>`` text
    Kilo appends at send time to every user message that does not carry one already."""
    blocks: list[Any] = []
    for part in parts:
        kind = part.get("type")
        if kind == "text" and not part.get("ignored"):
            blocks.append(TextBlock(text=str(part.get("text") or "")))
        elif kind == "file" and part.get("mime") not in ("text/plain", "application/x-directory"):
            # A binary attachment: sent as a file part, kept here by name (its bytes are not stored).
            blocks.append(TextBlock(text=f"[Attached {part.get('mime')}: {part.get('filename') or 'file'}]"))
        elif kind == "compaction":
            blocks.append(TextBlock(text=COMPACTION_PROMPT))
        elif kind == "subtask":
            blocks.append(TextBlock(text=SUBTASK_PROMPT))
    if not blocks:
        return None
    if editor_context is not None and not any(
        p.get("type") == "text"
        and p.get("synthetic")
        and str(p.get("text", "")).lstrip().startswith(ENVIRONMENT_TAG)
        for p in parts
    ):
        blocks.append(
            TextBlock(text=environment_details({**editor_context, **(info.get("editorContext") or {})}, info))
        )
    meta = {"id": info.get("id")} if info.get("id") else {}
    content: Any = blocks[0].text if len(blocks) == 1 else blocks
    return build_message("user", content, where=where, meta=meta)


def _assistant_messages(info: dict[str, Any], parts: list[dict[str, Any]], where: str) -> list[ParsedMessage]:
    """The model calls of one assistant message: one per step (``step-start`` ... ``step-finish``),
    each an assistant message followed by its tool results."""
    steps: list[list[dict[str, Any]]] = [[]]
    for part in parts:
        if part.get("type") == "step-start" and steps[-1]:
            steps.append([])
        steps[-1].append(part)
    error = info.get("error")
    sent_again = not error or (
        isinstance(error, dict)
        and error.get("name") == "MessageAbortedError"
        and any(p.get("type") not in ("step-start", "reasoning") for p in parts)
    )
    parsed: list[ParsedMessage] = []
    for number, step in enumerate(steps):
        finish = next((p for p in step if p.get("type") == "step-finish"), None)
        blocks, results = _step_blocks(step)
        if not blocks:
            continue
        usage_source = finish.get("tokens") if finish else (info.get("tokens") if len(steps) == 1 else None)
        call = CallInfo(usage=opencode_usage(usage_source), model=info.get("modelID"))
        reasoning = (usage_source or {}).get("reasoning") if isinstance(usage_source, dict) else None
        if reasoning:
            call.details["reasoning_tokens"] = reasoning
        created = (info.get("time") or {}).get("created")
        if created:
            call.details["call_utc"] = _utc(created)
        if info.get("summary"):
            call.details["compaction_summary"] = True
        if error:
            call.details["opencode_error"] = error
        meta = {"id": info.get("id"), "step": number} if info.get("id") else {}
        if not sent_again:
            meta["not_sent_again"] = True  # OpenCode leaves a failed reply out of later requests
        parsed.append(ParsedMessage(build_message("assistant", blocks, where=where, meta=meta), call=call))
        if results:
            parsed.append(
                ParsedMessage(build_message("user", results, where=where, meta={"from_tool_calls": True}))
            )
    return parsed


def _step_blocks(step: list[dict[str, Any]]) -> tuple[list[Any], list[ToolResultBlock]]:
    blocks: list[Any] = []
    results: list[ToolResultBlock] = []
    for part in step:
        kind = part.get("type")
        if kind == "text":
            blocks.append(TextBlock(text=str(part.get("text") or "")))
        elif kind == "reasoning":
            blocks.append(ThinkingBlock(thinking=str(part.get("text") or "")))
        elif kind == "tool":
            state = part.get("state") or {}
            call_id = str(part.get("callID") or part.get("id"))
            tool_input = state.get("input") if isinstance(state.get("input"), dict) else {}
            blocks.append(ToolUseBlock(id=call_id, name=str(part.get("tool")), input=tool_input))
            results.append(_tool_result(call_id, state))
    return blocks, results


def _tool_result(call_id: str, state: dict[str, Any]) -> ToolResultBlock:
    status = state.get("status")
    if status == "completed":
        compacted = (state.get("time") or {}).get("compacted")
        text = CLEARED_OUTPUT if compacted else str(state.get("output") or "")
        return ToolResultBlock(tool_use_id=call_id, content=text)
    if status == "error":
        return ToolResultBlock(tool_use_id=call_id, content=str(state.get("error") or ""), is_error=True)
    return ToolResultBlock(tool_use_id=call_id, content=INTERRUPTED_OUTPUT, is_error=True)


def opencode_usage(tokens: Any) -> ProviderUsage | None:
    """OpenCode's ``tokens``: ``input`` is the uncached input, ``output`` excludes ``reasoning``
    (the provider's completion tokens are their sum), ``cache.read`` / ``cache.write``."""
    if not isinstance(tokens, dict) or not any(tokens.get(k) for k in ("input", "output", "cache")):
        return None
    cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
    return ProviderUsage(
        input_tokens=_count(tokens.get("input")),
        output_tokens=_count(tokens.get("output")) + _count(tokens.get("reasoning")),
        cache_read_input_tokens=_count(cache.get("read")),
        cache_creation_input_tokens=_count(cache.get("write")),
    )


def _count(value: Any) -> int:
    return int(value) if isinstance(value, int | float) and value > 0 else 0


def _utc(millis: Any) -> str | None:
    if not isinstance(millis, int | float) or millis <= 0:
        return None
    return datetime.fromtimestamp(millis / 1000, tz=UTC).isoformat().replace("+00:00", "Z")


# -- the registry's view -----------------------------------------------------------------------


def sniff(doc: Document) -> bool:
    return doc.database and app_of(doc.path) == "opencode"


def parse(doc: Document, key: str) -> list[ParsedSession]:
    app = app_of(doc.path) or "opencode"
    sessions = parse_rows(read_database(doc.path), app)
    if not sessions:
        raise SourceProblem(
            f"an {'OpenCode' if app == 'opencode' else 'Kilo CLI'} database with no session messages"
        )
    return sessions


def data_roots(app: str) -> Callable[[Mapping[str, str], Path], list[Path]]:
    """``roots(env, home)`` for an OpenCode-like app: ``$XDG_DATA_HOME/<app>``, else ``~/.local/share/<app>``."""

    def roots(env: Mapping[str, str], home: Path) -> list[Path]:
        base = Path(env["XDG_DATA_HOME"]) if env.get("XDG_DATA_HOME") else home / ".local" / "share"
        return [base / app]

    return roots


def databases_under(root: Path) -> list[Path]:
    """``<app>.db`` and channel databases (``opencode-dev.db``) in an app's data folder."""
    return sorted(p for p in root.glob("*.db") if p.is_file() and not p.name.startswith("."))


FORMAT = ImportFormat(
    name="opencode",
    agent="OpenCode",
    sniff=sniff,
    parse=parse,
    files="`~/.local/share/opencode/opencode.db` (SQLite)",
    locations=Locations(roots=data_roots("opencode"), files_under=databases_under),
)
