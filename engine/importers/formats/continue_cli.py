"""Continue CLI sessions (npm ``@continuedev/cli``, ``cn``: ``~/.continue/sessions/<id>.json``).

One JSON object, ``{sessionId, title, workspaceDirectory, history, usage}``; each ``history`` item
is ``{message, contextItems, toolCallStates}``. ``message`` is what was sent, in OpenAI Chat
Completions' shape (``toolCalls`` for ``tool_calls``); an assistant message's ``usage`` is the
provider's answer for the call that produced it (``prompt_tokens`` the whole prompt,
``prompt_tokens_details.cached_tokens`` the cache reads). The tool results are not messages of
their own: each is a ``toolCallStates`` entry of the assistant message that asked for it, its
``output`` items' ``content`` the text sent back (one ``tool`` message per call, in the order
asked). Neither the system prompt (rebuilt each run, with the git status at its start) nor the
tool definitions are kept: their size is measured from the provider's count.
``sessions.json`` beside the sessions lists them (id, title, date, folder).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import as_count, build_message, provider_of
from engine.importers.utc_times import utc_text
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock

INDEX = "sessions.json"


def is_continue_session(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("sessionId"), str)
        and isinstance(value.get("history"), list)
        and "workspaceDirectory" in value
    )


def chat_usage(raw: Any) -> ProviderUsage | None:
    """A Chat Completions ``usage`` (``prompt_tokens`` the whole prompt, cache reads included)."""
    if not isinstance(raw, dict) or raw.get("prompt_tokens") is None:
        return None
    details = raw.get("prompt_tokens_details") if isinstance(raw.get("prompt_tokens_details"), dict) else {}
    return ProviderUsage.from_prompt_total(
        as_count(raw.get("prompt_tokens")),
        as_count(raw.get("completion_tokens")),
        cache_read=as_count(details.get("cached_tokens")),
        cache_write=as_count(details.get("cache_write_tokens")),
    )


def result_text(state: dict[str, Any]) -> str:
    """What a tool call's state sends back: its output items' text."""
    output = state.get("output")
    if isinstance(output, str):
        return output
    items = output if isinstance(output, list) else []
    return "\n".join(str(i.get("content") or "") for i in items if isinstance(i, dict))


def parse_continue_session(value: dict[str, Any], *, key: str) -> ParsedSession:
    session_id = value["sessionId"]
    session = ParsedSession(key=f"continue:{session_id}", messages=[], shared_key=True)
    models: dict[str, int] = {}
    for index, item in enumerate(value["history"]):
        where = f"history[{index}]"
        message = item.get("message") if isinstance(item, dict) else None
        if not isinstance(message, dict):
            raise SourceProblem(f"{where}: no message")
        role = message.get("role")
        if role == "user":
            text = _text(message.get("content"))
            session.messages.append(ParsedMessage(build_message("user", text, where=where)))
        elif role == "assistant":
            usage = message.get("usage") if isinstance(message.get("usage"), dict) else {}
            model = usage.get("model") if isinstance(usage.get("model"), str) else None
            if model:
                models[model] = models.get(model, 0) + 1
            blocks: list[Any] = []
            if _text(message.get("content")):
                blocks.append(TextBlock(text=_text(message.get("content"))))
            calls = [c for c in message.get("toolCalls") or [] if isinstance(c, dict)]
            for call in calls:
                function = call.get("function") if isinstance(call.get("function"), dict) else {}
                blocks.append(
                    ToolUseBlock(
                        id=str(call.get("id")), name=str(function.get("name")), input=_args(function)
                    )
                )
            info = CallInfo(usage=chat_usage(usage), model=model)
            session.messages.append(
                ParsedMessage(build_message("assistant", blocks or "", where=where), call=info)
            )
            states = {
                str(s.get("toolCallId")): s for s in item.get("toolCallStates") or [] if isinstance(s, dict)
            }
            results = [
                ToolResultBlock(
                    tool_use_id=str(c.get("id")),
                    content=result_text(states[str(c.get("id"))]),
                    is_error=states[str(c.get("id"))].get("status") == "errored",
                )
                for c in calls
                if str(c.get("id")) in states
            ]
            if results:
                session.messages.append(
                    ParsedMessage(build_message("user", results, where=where, meta={"from_tool_calls": True}))
                )
        elif role == "system":
            session.system_prompt = _text(message.get("content"))
        else:
            raise SourceProblem(f"{where}: unknown role {role!r}")
    if not session.messages:
        raise SourceProblem("a Continue CLI session with no messages")
    session.model = max(models, key=lambda m: models[m]) if models else None
    session.provider = provider_of(session.model)
    session.unlogged_prefix_in = "system"
    session.notes.append(
        "Continue CLI keeps neither its system prompt nor its tool definitions "
        "(their size is measured from the provider's count, as the system prompt's)"
    )
    if isinstance(value.get("title"), str) and value["title"] != "Untitled Session":
        session.title = value["title"][:120]
    facts = {"continue_session_id": session_id, "cwd": value.get("workspaceDirectory")}
    total = value.get("usage") if isinstance(value.get("usage"), dict) else {}
    if isinstance(total.get("totalCost"), int | float):
        session.metadata["agent_cost_usd"] = round(float(total["totalCost"]), 6)
        session.metadata["agent_cost_source"] = "Continue CLI session usage.totalCost"
    session.metadata.update({k: v for k, v in facts.items() if v})
    return session


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(p.get("text") or "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    return ""


def _args(function: dict[str, Any]) -> dict[str, Any]:
    raw = function.get("arguments")
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw) if isinstance(raw, str) and raw else {}
    except json.JSONDecodeError:
        return {"input": raw}
    return value if isinstance(value, dict) else {"input": value}


def sniff(doc: Document) -> bool:
    return doc.path.suffix == ".json" and is_continue_session(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    session = parse_continue_session(doc.value, key=key)
    created = date_created(doc.path.parent / INDEX, doc.value["sessionId"])
    if created is not None:  # the session file keeps no time: when it started, from the list beside it
        session.messages[0].message.meta.setdefault("timestamp", created)
    return [session]


def date_created(index: Path, session_id: str) -> str | None:
    """The session's ``dateCreated`` in ``sessions.json`` (epoch milliseconds, written once when the
    session is first saved), as UTC text; None when the list is missing, unreadable or lacks it."""
    try:
        stat = index.stat()
    except OSError:
        return None
    return _dates_created(str(index), stat.st_mtime_ns, stat.st_size).get(session_id)


@functools.lru_cache(maxsize=8)
def _dates_created(index: str, mtime_ns: int, size: int) -> dict[str, str]:
    """{session id: dateCreated as UTC text} of one version of a ``sessions.json`` (read once for all
    the sessions beside it)."""
    del mtime_ns, size  # the version's key
    try:
        entries = json.loads(Path(index).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return {}
    found: dict[str, str] = {}
    for entry in entries if isinstance(entries, list) else []:
        if not isinstance(entry, dict) or not isinstance(entry.get("sessionId"), str):
            continue
        value = entry.get("dateCreated")
        if isinstance(value, str) and value.isdigit():
            value = int(value)
        when = utc_text(value) if isinstance(value, int) and not isinstance(value, bool) else None
        if when is not None:
            found.setdefault(entry["sessionId"], when)
    return found


def accompanies(path: Path) -> bool:
    """The list of sessions beside them: not a session."""
    return path.name == INDEX and path.parent.name == "sessions"


def _roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CONTINUE_GLOBAL_DIR"]) if env.get("CONTINUE_GLOBAL_DIR") else home / ".continue"
    return [base / "sessions"]


def _sessions(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.json") if p.name != INDEX and p.is_file())


FORMAT = ImportFormat(
    name="continue",
    agent="Continue CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="`~/.continue/sessions/<session>.json` (+ `sessions.json`: when each started)",
    locations=Locations(roots=_roots, files_under=_sessions),
    accompanies=accompanies,
)
