"""Letta agent files (``.af``): an agent's system prompt, memory blocks, tools and messages.

Two layouts: the early one (one agent at the top level: ``system``, ``core_memory`` blocks,
``tools`` with ``json_schema``, ``messages``, ``in_context_message_indices``, ``llm_config``)
and the current one (``{"agents": [...], "blocks": [...], "tools": [...]}``, agents pointing
at blocks and tools by id, ``in_context_message_ids``). Messages are OpenAI-like (``role``
system / user / assistant / tool, ``content`` parts, ``tool_calls``, ``tool_call_id``,
``tool_returns``); the first system message is the compiled system prompt (memory blocks
included), else ``system`` plus the blocks. The model's window is ``llm_config.context_window``.
An agent file keeps no usage. Messages no longer in context are imported and counted in a note;
messages are read in the order they were written (``created_at``), not the file's.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, openai_text, openai_tool_uses, provider_of
from engine.messages import TextBlock, ToolResultBlock


def _time_order(messages: list[dict[str, Any]]) -> list[int]:
    """Message indexes in the order they were written: an agent file lists them out of order
    (a reply after the one it answers); by ``created_at`` when every message has one."""
    times = []
    for message in messages:
        try:
            times.append(datetime.fromisoformat(str(message["created_at"]).replace("Z", "+00:00")))
        except (KeyError, ValueError):
            return list(range(len(messages)))
    if any(t.tzinfo is None for t in times) and any(t.tzinfo is not None for t in times):
        return list(range(len(messages)))
    return sorted(range(len(messages)), key=lambda i: (times[i], i))


def parse_letta(value: dict[str, Any], *, key: str) -> list[ParsedSession]:
    if isinstance(value.get("agents"), list):
        blocks = {b.get("id"): b for b in value.get("blocks") or [] if isinstance(b, dict)}
        tools = {t.get("id"): t for t in value.get("tools") or [] if isinstance(t, dict)}
        agents = [a for a in value["agents"] if isinstance(a, dict)]
        sessions = [
            _agent(
                agent, key=key if i == 0 else f"{key}-{i + 1}",
                blocks=[blocks[b] for b in agent.get("block_ids") or [] if b in blocks],
                tools=[tools[t] for t in agent.get("tool_ids") or [] if t in tools] or list(tools.values()),
            )
            for i, agent in enumerate(agents)
        ]  # fmt: skip
    else:
        sessions = [
            _agent(
                value,
                key=key,
                blocks=list(value.get("core_memory") or []),
                tools=list(value.get("tools") or []),
            )
        ]
    if not any(s.messages for s in sessions):
        raise SourceProblem(
            "a Letta agent file with no conversation (only the system prompt and memory): nothing to import"
        )
    return [s for s in sessions if s.messages]


def _agent(agent: dict[str, Any], *, key: str, blocks: list[Any], tools: list[Any]) -> ParsedSession:
    llm = agent.get("llm_config") if isinstance(agent.get("llm_config"), dict) else {}
    model = llm.get("model") if isinstance(llm.get("model"), str) else None
    session = ParsedSession(
        key=str(agent.get("id") or key) if agent.get("id") not in (None, "agent-0") else key, messages=[]
    )
    session.model = model
    session.provider = provider_of(model) or llm.get("model_endpoint_type") or llm.get("provider_name")
    window = llm.get("context_window")
    if isinstance(window, int) and window > 0:
        session.context_window = window
    session.tools = [
        t["json_schema"] for t in tools if isinstance(t, dict) and isinstance(t.get("json_schema"), dict)
    ]
    memory = {str(b.get("label")): b.get("value") for b in blocks if isinstance(b, dict)}
    raw_messages = [m for m in agent.get("messages") or [] if isinstance(m, dict)]
    in_context = _in_context(agent, raw_messages)
    system_prompt = next(
        (
            _text(m.get("content"), f"messages[{i}]")
            for i, m in enumerate(raw_messages)
            if m.get("role") == "system"
        ),
        None,
    )
    out_of_context = 0
    for index in _time_order(raw_messages):
        raw = raw_messages[index]
        where = f"messages[{index}]"
        role = raw.get("role")
        if index not in in_context:
            out_of_context += 1
        if role == "system":
            continue
        meta = {k: raw[k] for k in ("id", "created_at", "name") if raw.get(k)}
        if raw.get("created_at"):
            meta["timestamp"] = raw["created_at"]  # when it was written: the call's and session's time
        if index not in in_context:
            meta["in_context"] = False
        if role == "user":
            session.messages.append(
                ParsedMessage(build_message("user", _text(raw.get("content"), where), where=where, meta=meta))
            )
        elif role == "assistant":
            text = _text(raw.get("content"), where)
            uses = openai_tool_uses({"tool_calls": raw.get("tool_calls") or []}, where=where, index=index)
            content: Any = [*([TextBlock(text=text)] if text else []), *uses] if uses else text
            call = CallInfo(model=raw.get("model") if isinstance(raw.get("model"), str) else model)
            session.messages.append(
                ParsedMessage(build_message("assistant", content, where=where, meta=meta), call=call)
            )
        elif role == "tool":
            call_id = raw.get("tool_call_id")
            if not call_id:
                raise SourceProblem(f"{where}: tool message without a tool_call_id")
            text = _text(raw.get("content"), where)
            if not text:
                returns = [r for r in raw.get("tool_returns") or [] if isinstance(r, dict)]
                text = "\n".join(str(r.get("func_response") or "") for r in returns)
            result = ToolResultBlock(tool_use_id=str(call_id), content=text)
            last = session.messages[-1] if session.messages else None
            if last is not None and last.message.role == "user" and last.message.tool_result_ids:
                last.message = last.message.with_content([*last.message.blocks, result])
            else:
                session.messages.append(
                    ParsedMessage(build_message("user", [result], where=where, meta=meta))
                )
        else:
            raise SourceProblem(f"{where}: unknown role {role!r}")
    if system_prompt is None:
        parts = [str(agent.get("system") or "")]
        parts += [f"<{label}>\n{value}\n</{label}>" for label, value in memory.items() if value]
        system_prompt = "\n\n".join(p for p in parts if p) or None
    session.system_prompt = system_prompt
    session.metadata.update(
        {
            k: v
            for k, v in {
                "agent_name": agent.get("name"),
                "agent_type": agent.get("agent_type"),
                "memory_blocks": sorted(memory),
            }.items()
            if v
        }
    )
    if out_of_context:
        session.notes.append(
            f"{out_of_context} message(s) are no longer in the agent's context (evicted or summarised)"
        )
    return session


def _in_context(agent: dict[str, Any], messages: list[dict[str, Any]]) -> set[int]:
    indices = agent.get("in_context_message_indices")
    if isinstance(indices, list) and indices:
        return {i for i in indices if isinstance(i, int)}
    ids = agent.get("in_context_message_ids")
    if isinstance(ids, list) and ids:
        wanted = set(map(str, ids))
        return {i for i, m in enumerate(messages) if str(m.get("id")) in wanted}
    return {i for i, m in enumerate(messages) if m.get("in_context", True) is not False}


def _text(content: Any, where: str) -> str:
    text = openai_text(content, where=where)
    if isinstance(text, list):
        return "\n".join(b.text if isinstance(b, TextBlock) else json.dumps(b.model_dump()) for b in text)
    return text


def is_letta_agent(value: Any) -> bool:
    """A Letta agent file (``.af``): one agent with messages, or ``{"agents": [...]}``."""
    if not isinstance(value, dict):
        return False
    if isinstance(value.get("agents"), list) and value["agents"]:
        return all(isinstance(a, dict) and "messages" in a for a in value["agents"][:3]) or "blocks" in value
    return isinstance(value.get("messages"), list) and (
        "agent_type" in value or "core_memory" in value or "llm_config" in value
    )


def sniff(doc: Document) -> bool:
    return is_letta_agent(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_letta(doc.value, key=key)


FORMAT = ImportFormat(
    name="letta",
    agent="Letta",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="exported agent file `*.af`",
)
