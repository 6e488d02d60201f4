"""Codex CLI rollouts (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``).

Each line is ``{"timestamp", "type", "payload"}``: ``session_meta`` (id, cwd, CLI version, the
base instructions sent as the first developer message), ``turn_context`` (the model of the
turn), ``response_item`` (what the model saw or produced: messages, reasoning, function /
custom tool calls and their outputs, local shell calls), ``event_msg`` (``token_count`` with
the call's ``last_token_usage`` and the ``model_context_window``) and ``compacted`` (a
compaction: later calls send its replacement history). The items one response produced
form one assistant message; the next ``token_count`` is that call's usage. Reasoning is
encrypted, so its size comes from the usage (``reasoning_tokens``). A resumed run appends to
the same file and continues the same session. Rollouts from before the envelope (items on
their own lines after a ``{"id", "instructions"}`` header) read the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from engine.events import ProviderUsage
from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations, head_lines
from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import (
    as_count,
    as_json_text,
    build_message,
    openai_text,
    provider_of,
    tool_arguments,
)
from engine.messages import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock

Line = tuple[int, Any]
#: A stated window beyond this is not a window (ignored).
MAX_WINDOW = 10**9
ENVELOPE_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context", "compacted"})
ITEM_TYPES = frozenset(
    {
        "message", "reasoning", "function_call", "function_call_output", "custom_tool_call",
        "custom_tool_call_output", "local_shell_call", "web_search_call", "tool_search_call",
        "tool_search_output",
    }
)  # fmt: skip
_CWD = re.compile(r"<cwd>([^<]+)</cwd>")
_OUTPUT_ITEMS = ("function_call_output", "custom_tool_call_output", "tool_search_output")


def is_codex_line(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("type"), str) and value["type"] in ENVELOPE_TYPES and "payload" in value:
        return True
    return "instructions" in value and "id" in value and "timestamp" in value and "type" not in value


def parse_codex(lines: Sequence[Line], *, key: str) -> list[ParsedSession]:
    reader = RolloutReader(key)
    for number, value in lines:
        try:
            reader.read(value)
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=number) from exc
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise SourceProblem(
                f"line {number}: cannot read Codex line ({type(exc).__name__}: {exc})", line=number
            ) from exc
    return [reader.finish()]


class RolloutReader:
    """Reads a rollout line by line into one ParsedSession (``read``, then ``finish``); also
    reads bare Responses items (``read_item``), as OpenAI Responses input lists hold them."""

    def __init__(self, key: str) -> None:
        self.session = ParsedSession(key=key, messages=[])
        self.model: str | None = None
        self.window: int | None = None
        self.open_reply: ParsedMessage | None = None  # the assistant message of the call in progress
        self.awaiting_usage: list[ParsedMessage] = []
        self.last_totals: Any = None
        self.timestamp: str | None = None
        self.pending_compaction: dict[str, Any] | None = None

    # -- lines ---------------------------------------------------------------------------------
    def read(self, value: Any) -> None:
        if not isinstance(value, dict):
            raise SourceProblem(f"expected a JSON object, found {type(value).__name__}")
        self.timestamp = value.get("timestamp") if isinstance(value.get("timestamp"), str) else self.timestamp
        kind = value.get("type")
        payload = value.get("payload")
        if kind not in ENVELOPE_TYPES:  # the pre-envelope layout
            if "instructions" in value and "id" in value:
                self._meta(value)
            elif kind in ITEM_TYPES:
                self.read_item(value)
            return
        if not isinstance(payload, dict):
            raise SourceProblem(f"{kind} line without an object payload")
        if kind == "session_meta":
            self._meta(payload)
        elif kind == "turn_context":
            self.model = str(payload.get("model") or self.model or "") or None
            self.session.model = self.session.model or self.model
        elif kind == "response_item":
            self.read_item(payload)
        elif kind == "event_msg":
            self._event(payload)
        elif kind == "compacted":
            self._compacted(payload)

    def _meta(self, payload: dict[str, Any]) -> None:
        if self.session.metadata.get("codex_session_id"):
            return  # a resumed run repeats the header
        base = payload.get("base_instructions")
        instructions = base.get("text") if isinstance(base, dict) else base
        instructions = instructions or payload.get("instructions")
        if isinstance(instructions, str) and instructions:
            self.session.system_prompt = instructions
        session_id = payload.get("id") or payload.get("session_id")
        if isinstance(session_id, str) and session_id:
            self.session.key = session_id
        git = payload.get("git") if isinstance(payload.get("git"), dict) else None
        meta = {
            "codex_session_id": session_id,
            "cwd": payload.get("cwd"),
            "cli_version": payload.get("cli_version"),
            "originator": payload.get("originator"),
            "model_provider": payload.get("model_provider"),
            "git": git,
            "started_utc": payload.get("timestamp"),
        }
        self.session.metadata.update({k: v for k, v in meta.items() if v})
        if isinstance(payload.get("model"), str):
            self.model = self.session.model = payload["model"]
        self._window(payload.get("context_window"))

    def _window(self, value: Any) -> None:
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= MAX_WINDOW:
            self.window = value
            self.session.context_window = value

    def _event(self, payload: dict[str, Any]) -> None:
        kind = payload.get("type")
        if kind == "task_started":
            self._window(payload.get("model_context_window"))
        elif kind == "token_count":
            info = payload.get("info")
            if not isinstance(info, dict):
                return
            self._window(info.get("model_context_window"))
            totals = info.get("total_token_usage")
            if totals is not None and totals == self.last_totals:
                return  # the same count reported twice
            self.last_totals = totals
            last = info.get("last_token_usage")
            if isinstance(last, dict) and self.awaiting_usage:
                call = self.awaiting_usage[-1].call
                assert call is not None
                call.usage, reasoning = codex_usage(last)
                if reasoning:
                    call.details["reasoning_tokens"] = reasoning
                call.context_window = self.window
                self.awaiting_usage.clear()  # older replies without a count keep none
        elif kind == "context_compacted":
            self.pending_compaction = self.pending_compaction or {}

    def _compacted(self, payload: dict[str, Any]) -> None:
        self._close_reply()
        summary = payload.get("message")
        history = payload.get("replacement_history")
        details: dict[str, Any] = {
            "summary": summary if isinstance(summary, str) else None,
            "source": "codex",
        }
        before = len(self.session.messages)
        if isinstance(history, list) and history:
            for item in history:
                if isinstance(item, dict):
                    self.read_item(item, replay=True)
            self._close_reply()
        elif isinstance(summary, str) and summary:
            message = build_message("user", summary, where="compacted", meta={"compaction_summary": True})
            self.session.messages.append(ParsedMessage(message))
        if len(self.session.messages) > before:
            first = self.session.messages[before]
            first.starts_context = True
            first.compaction = details

    # -- response items ------------------------------------------------------------------------
    def read_item(self, item: dict[str, Any], *, replay: bool = False) -> None:
        """One Responses item (message, reasoning, tool call or output); ``replay``: a compaction's
        replacement history, sent again by later calls but produced by no call of its own."""
        kind = item.get("type")
        where = f"{kind} item"
        if kind == "message":
            role = item.get("role")
            content = _message_content(item.get("content"), where)
            if role == "assistant":
                self._reply_blocks(
                    [TextBlock(text=content)] if isinstance(content, str) else content, item, replay
                )
                return
            self._close_reply()
            meta = {"openai_role": role} if role != "user" else {}
            if item.get("id"):
                meta["item_id"] = item["id"]
            if self.timestamp:
                meta["timestamp"] = self.timestamp
            self.session.messages.append(
                ParsedMessage(build_message("user", content, where=where, meta=meta))
            )
        elif kind == "reasoning":
            summary = "\n".join(
                str(p.get("text") or "") for p in item.get("summary") or [] if isinstance(p, dict)
            )
            content = item.get("content")
            if isinstance(content, list):
                summary = "\n".join(
                    [summary, *(str(p.get("text") or "") for p in content if isinstance(p, dict))]
                ).strip()
            encrypted = item.get("encrypted_content")
            block = ThinkingBlock(thinking=summary, signature=None)
            self._reply_blocks(
                [block], item, replay, encrypted=encrypted if isinstance(encrypted, str) else None
            )
        elif kind in (
            "function_call",
            "custom_tool_call",
            "local_shell_call",
            "web_search_call",
            "tool_search_call",
        ):
            self._reply_blocks([self._tool_use(item)], item, replay)
        elif kind in _OUTPUT_ITEMS:
            self._close_reply()
            call_id = item.get("call_id")
            if not call_id:
                raise SourceProblem(f"{where} without a call_id")
            result = ToolResultBlock(tool_use_id=str(call_id), content=_output_text(item.get("output")))
            last = self.session.messages[-1] if self.session.messages else None
            if (
                last is not None
                and last.message.role == "user"
                and last.message.tool_result_ids
                and not last.starts_context
            ):
                last.message = last.message.with_content([*last.message.blocks, result])
            else:
                meta = {"timestamp": self.timestamp} if self.timestamp else {}
                self.session.messages.append(
                    ParsedMessage(build_message("user", [result], where=where, meta=meta))
                )

    def _tool_use(self, item: dict[str, Any]) -> ToolUseBlock:
        kind = item["type"]
        call_id = str(item.get("call_id") or item.get("id") or "")
        if kind == "function_call":
            return ToolUseBlock(
                id=call_id, name=str(item.get("name") or ""), input=tool_arguments(item.get("arguments"))
            )
        if kind == "custom_tool_call":
            return ToolUseBlock(
                id=call_id, name=str(item.get("name") or ""), input={"input": item.get("input") or ""}
            )
        if kind == "local_shell_call":
            action = item.get("action") if isinstance(item.get("action"), dict) else {}
            return ToolUseBlock(id=call_id, name="local_shell", input=action)
        body = {k: v for k, v in item.items() if k not in ("type", "id", "call_id", "status")}
        return ToolUseBlock(id=call_id, name=kind.removesuffix("_call"), input=body)

    def _reply_blocks(
        self, blocks: list[Any], item: dict[str, Any], replay: bool, encrypted: str | None = None
    ) -> None:
        if self.open_reply is None:
            meta: dict[str, Any] = {}
            if self.timestamp:
                meta["timestamp"] = self.timestamp
            call = None if replay else CallInfo(model=self.model, context_window=self.window)
            if call is not None and self.timestamp:
                call.details["call_utc"] = self.timestamp
            message = build_message("assistant", blocks, where=f"{item.get('type')} item", meta=meta)
            self.open_reply = ParsedMessage(message, call=call)
            self.session.messages.append(self.open_reply)
            if call is not None:
                self.awaiting_usage.append(self.open_reply)
        else:
            reply = self.open_reply
            reply.message = reply.message.with_content([*reply.message.blocks, *blocks])
        if encrypted:
            meta = dict(self.open_reply.message.meta)
            meta["encrypted_reasoning_chars"] = meta.get("encrypted_reasoning_chars", 0) + len(encrypted)
            self.open_reply.message = self.open_reply.message.model_copy(update={"meta": meta})

    def _close_reply(self) -> None:
        self.open_reply = None

    def finish(self) -> ParsedSession:
        session = self.session
        session.model = session.model or self.model
        session.provider = provider_of(session.model) or ("openai" if session.model else None)
        session.unlogged_prefix_in = "tools"
        if not session.messages:
            raise SourceProblem("a Codex rollout with no conversation items (only session metadata)")
        if any(pm.call is not None and pm.call.usage is not None for pm in session.messages):
            session.notes.append(
                "a rollout does not keep the tool definitions Codex sent (their size is measured from the "
                "provider's count)"
            )
        if not session.metadata.get("cwd"):
            for pm in session.messages[:4]:
                found = _CWD.search(pm.message.text)
                if found:
                    session.metadata["cwd"] = found.group(1).strip()
                    break
        return session


def _message_content(raw: Any, where: str) -> Any:
    """Message parts as sent: one text block per part (not joined), images and others kept."""
    if isinstance(raw, list) and len(raw) > 1:
        return [
            TextBlock(text=str(p.get("text") or ""))
            if isinstance(p, dict) and p.get("type") in ("input_text", "output_text", "text")
            else b
            for p in raw
            for b in _blocks_of(openai_text([p], where=where))
        ]
    return openai_text(raw, where=where)


def _blocks_of(content: Any) -> list[Any]:
    return [TextBlock(text=content)] if isinstance(content, str) else list(content)


def codex_usage(raw: dict[str, Any]) -> tuple[ProviderUsage, int]:
    """(usage, reasoning tokens) of Codex's ``last_token_usage``: input includes cached input,
    output includes reasoning."""
    total_input = as_count(raw.get("input_tokens"))
    cached = min(total_input, as_count(raw.get("cached_input_tokens")))
    usage = ProviderUsage(
        input_tokens=total_input - cached,
        output_tokens=as_count(raw.get("output_tokens")),
        cache_read_input_tokens=cached,
        cache_creation_input_tokens=as_count(raw.get("cache_write_input_tokens")),
    )
    return usage, as_count(raw.get("reasoning_output_tokens"))


def _output_text(raw: Any) -> str:
    if isinstance(raw, str):
        return raw
    if isinstance(raw, dict):
        content = raw.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "\n".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in content)
    if isinstance(raw, list):
        return "\n".join(str(p.get("text") or "") if isinstance(p, dict) else str(p) for p in raw)
    return "" if raw is None else as_json_text(raw)


def sniff(doc: Document) -> bool:
    if doc.lines is not None:
        return any(is_codex_line(v) for v in head_lines(doc))
    return is_codex_line(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_codex(doc.lines if doc.lines is not None else ((1, doc.value),), key=key)


def roots(env: Mapping[str, str], home: Path) -> list[Path]:
    base = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
    return [base / "sessions", base / "archived_sessions"]


def files_under(root: Path) -> list[Path]:
    return sorted(root.rglob("rollout-*.jsonl"))


FORMAT = ImportFormat(
    name="codex",
    agent="Codex CLI",
    sniff=sniff,
    parse=parse,
    files="`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl` (default `~/.codex`; also `archived_sessions/`)",
    locations=Locations(roots=roots, files_under=files_under),
)
