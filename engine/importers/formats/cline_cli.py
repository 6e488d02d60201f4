"""Cline CLI sessions (npm ``cline`` 3.x: ``~/.cline/data/sessions/<id>/<id>.messages.json``).

Not the VS Code extension's task files (:mod:`engine.importers.formats.cline`): the CLI keeps one
JSON object, ``{version, sessionId, agent, origin, messages, system_prompt}``, whose ``messages``
are Anthropic-shaped (``text``, ``tool_use``, ``tool_result`` blocks) with the CLI's own fields:
an assistant message's ``metrics`` is the provider's count for the call that produced it
(``inputTokens`` the whole prompt, cache reads included), ``modelInfo`` its model; each tool result
is a user message of its own. What is sent differs from what is kept in two ways, both undone here:

- a user's text is kept wrapped, ``<user_input mode="act">...</user_input>``, and sent bare;
- a tool result kept as a list of ``{query, result, success}`` objects is sent as that list's
  JSON (``JSON.stringify``: no spaces, non-ASCII as is); one kept as a string is sent as it is.

An assistant message with ``metadata.displayOnly`` (``displayRole: "error"``) is an error shown,
never sent: after a user's text or a tool result, the provider refused the call made there (a failed
call); after a finished reply, no call was waiting (the CLI's own, e.g. its terminal UI left while
a request of its own was open): kept in ``metadata["cline_errors"]``. Beside the conversation,
``<id>.json`` holds the run's facts (cwd, provider, status, started and ended times). The tool
definitions are not kept: their size is measured from the provider's count.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from engine.call_failures import classify_failure, failure_details
from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import Beside, ImportFormat, Locations
from engine.importers.formats.cline import utc_of_ms
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import as_count, build_message, provider_of
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock

MESSAGES_SUFFIX = ".messages.json"
_USER_INPUT = re.compile(r'\A<user_input mode="([^"]*)">(.*)</user_input>\Z', re.DOTALL)


def is_cline_cli_session(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("messages"), list)
        and isinstance(value.get("sessionId"), str)
        and "system_prompt" in value
        and isinstance(value.get("origin"), dict)
    )


def sent_user_text(text: str) -> tuple[str, str | None]:
    """(the text sent, the mode it was typed in) of a kept user text."""
    match = _USER_INPUT.match(text)
    return (match.group(2), match.group(1)) if match else (text, None)


def sent_result_text(content: Any) -> str:
    """A kept tool result's content as the request carries it."""
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False, separators=(",", ":"))


def cli_usage(metrics: Any) -> ProviderUsage | None:
    """The provider's count an assistant message's ``metrics`` keeps (``inputTokens`` the whole
    prompt, cache reads and writes included)."""
    if not isinstance(metrics, dict) or metrics.get("inputTokens") is None:
        return None
    return ProviderUsage.from_prompt_total(
        as_count(metrics.get("inputTokens")),
        as_count(metrics.get("outputTokens")),
        cache_read=as_count(metrics.get("cacheReadTokens")),
        cache_write=as_count(metrics.get("cacheWriteTokens")),
    )


def parse_cli_session(value: dict[str, Any], *, key: str, run: dict[str, Any]) -> ParsedSession:
    """One session from the conversation object and (``run``) its ``<id>.json``, possibly empty."""
    session_id = str(value["sessionId"])
    session = ParsedSession(key=f"cline-cli:{session_id}", messages=[], shared_key=True)
    session.system_prompt = value["system_prompt"] if isinstance(value["system_prompt"], str) else None
    models: dict[str, int] = {}
    errors: list[str] = []
    for index, raw in enumerate(value["messages"]):
        if not isinstance(raw, dict):
            raise SourceProblem(f"messages[{index}]: not an object")
        where = f"messages[{index}]"
        role, when = raw.get("role"), utc_of_ms(raw.get("ts"))
        meta: dict[str, Any] = {"id": raw["id"]} if raw.get("id") else {}
        if when:
            meta["timestamp"] = when
        model = (raw.get("modelInfo") or {}).get("model") or (raw.get("modelInfo") or {}).get("id")
        if role == "assistant" and (raw.get("metadata") or {}).get("displayOnly"):
            if awaits_reply(session.messages):
                session.messages[-1].pending_calls.append(_failed_call(raw, model=model, when=when))
            else:  # shown after a finished reply: the CLI's own error (its UI left mid-request), no call
                errors.append(_text_of(raw))
            continue
        if role == "assistant":
            if isinstance(model, str):
                models[model] = models.get(model, 0) + 1
            call = CallInfo(usage=cli_usage(raw.get("metrics")), model=model)
            if when:
                call.details["call_utc"] = when
            message = build_message("assistant", _assistant_blocks(raw, where), where=where, meta=meta)
            session.messages.append(ParsedMessage(message, call=call))
        elif role == "user":
            blocks, mode = _user_blocks(raw, where)
            if mode:
                meta["mode"] = mode
            if blocks and all(isinstance(b, ToolResultBlock) for b in blocks):
                meta["from_tool_calls"] = True
            session.messages.append(ParsedMessage(build_message("user", blocks, where=where, meta=meta)))
        else:
            raise SourceProblem(f"{where}: unknown role {role!r}")
    if not session.messages:
        raise SourceProblem("a Cline CLI session with no messages")
    if errors:
        session.metadata["cline_errors"] = errors
        session.notes.append(f"{len(errors)} error(s) Cline showed after a finished reply: no model call")
    session.model = max(models, key=lambda m: models[m]) if models else run.get("model")
    session.provider = provider_of(session.model)
    session.unlogged_prefix_in = "tools"
    session.notes.append(
        "Cline CLI does not keep the tool definitions it sent (their size is measured from the provider's count)"
    )
    if isinstance(run.get("metadata"), dict) and isinstance(run["metadata"].get("title"), str):
        session.title = run["metadata"]["title"][:120]
    facts = {
        "cline_session_id": session_id,
        "cwd": run.get("cwd"),
        "agent": value.get("agent"),
        "cline_version": (value.get("origin") or {}).get("version"),
        "cline_provider": run.get("provider"),
        "status": run.get("status"),
        "started_utc": run.get("started_at"),
        "ended_utc": run.get("ended_at"),
    }
    session.metadata.update({k: v for k, v in facts.items() if v})
    return session


def _assistant_blocks(raw: dict[str, Any], where: str) -> list[Any]:
    blocks: list[Any] = []
    for part in _parts(raw, where):
        if part.get("type") == "text" and part.get("text"):
            blocks.append(TextBlock(text=str(part["text"])))
        elif part.get("type") == "tool_use":
            tool_input = part.get("input") if isinstance(part.get("input"), dict) else {}
            blocks.append(ToolUseBlock(id=str(part.get("id")), name=str(part.get("name")), input=tool_input))
    return blocks


def _user_blocks(raw: dict[str, Any], where: str) -> tuple[list[Any], str | None]:
    blocks: list[Any] = []
    mode = None
    for part in _parts(raw, where):
        if part.get("type") == "text":
            text, typed_mode = sent_user_text(str(part.get("text") or ""))
            mode = mode or typed_mode
            blocks.append(TextBlock(text=text))
        elif part.get("type") == "tool_result":
            blocks.append(
                ToolResultBlock(
                    tool_use_id=str(part.get("tool_use_id")),
                    content=sent_result_text(part.get("content")),
                    is_error=bool(part.get("is_error")),
                )
            )
    return blocks, mode


def _parts(raw: dict[str, Any], where: str) -> list[dict[str, Any]]:
    content = raw.get("content")
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        raise SourceProblem(f"{where}: content is neither text nor a list of blocks")
    return [p for p in content if isinstance(p, dict)]


def awaits_reply(messages: list[ParsedMessage]) -> bool:
    """The history ends where a model call is made: a user's text or a tool result (an error shown
    there is that call's; after an assistant's reply, no call was waiting)."""
    return bool(messages) and messages[-1].message.role == "user"


def _text_of(raw: dict[str, Any]) -> str:
    return " ".join(str(p.get("text") or "") for p in _parts(raw, "error") if p.get("type") == "text")


def _failed_call(raw: dict[str, Any], *, model: Any, when: str | None) -> CallInfo:
    """The error Cline shows when the provider refused a call: that call, failed, no usage."""
    message = _text_of(raw)
    call = CallInfo(model=model if isinstance(model, str) else None)
    call.details["failure"] = failure_details(
        classify_failure(None, None, message), status=None, message=message
    )
    if when:
        call.details["call_utc"] = when
    return call


def run_file(path: Path) -> Path:
    """The ``<id>.json`` beside ``<id>.messages.json``."""
    return path.with_name(path.name.removesuffix(MESSAGES_SUFFIX) + ".json")


def _run(path: Path) -> dict[str, Any]:
    try:
        value = json.loads(run_file(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def sniff(doc: Document) -> bool:
    return doc.path.name.endswith(MESSAGES_SUFFIX) and is_cline_cli_session(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return [parse_cli_session(doc.value, key=key, run=_run(doc.path))]


def companions(path: Path) -> str | None:
    """The run's ``<id>.json`` (its size and time), so a re-import sees it change."""
    run = run_file(Path(path))
    if not run.is_file():
        return None
    stat = run.stat()
    return hashlib.sha256(f"{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()


def accompanies(path: Path) -> bool:
    """A run's ``<id>.json``: imported with its conversation, not on its own."""
    return (
        path.name == f"{path.parent.name}.json"
        and (path.parent / f"{path.parent.name}{MESSAGES_SUFFIX}").is_file()
    )


def _roots(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("CLINE_DATA_DIR"):
        return [Path(env["CLINE_DATA_DIR"]) / "sessions"]
    base = Path(env["CLINE_DIR"]) if env.get("CLINE_DIR") else home / ".cline"
    return [base / "data" / "sessions"]


def _sessions(root: Path) -> list[Path]:
    return sorted(
        p for p in root.glob(f"*/*{MESSAGES_SUFFIX}") if p.name == f"{p.parent.name}{MESSAGES_SUFFIX}"
    )


FORMAT = ImportFormat(
    name="cline-cli",
    agent="Cline CLI",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="`~/.cline/data/sessions/<session>/<session>.messages.json` (+ `<session>.json`)",
    locations=Locations(roots=_roots, files_under=_sessions),
    companions=Beside(f"*{MESSAGES_SUFFIX}", companions),
    accompanies=accompanies,
)
