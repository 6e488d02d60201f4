"""Claude Code's sub-agents: legacy inline sidechains grouped into threads, and each sub-agent
session linked to its parent and to the Agent/Task tool_use that started it."""

from __future__ import annotations

from typing import Any

from engine.importers.formats.claude_code.thread import Line
from engine.importers.formats.claude_code.titles import prompt_text
from engine.importers.parsing.parsed import ParsedSession
from engine.messages import ToolUseBlock

TASK_TOOLS = ("Task", "Agent")


def side_threads(side_lines: list[Line]) -> list[list[Line]]:
    """Legacy inline sidechain lines grouped by the root of their parentUuid chain, in file order."""
    by_uuid = {o.get("uuid"): (n, o) for n, o in side_lines}
    roots: dict[str, str] = {}

    def root_of(obj: dict[str, Any]) -> str:
        path: list[str] = []
        current = obj
        while True:
            uid = current.get("uuid")
            if uid in roots:
                root = roots[uid]
                break
            path.append(uid)
            parent = by_uuid.get(current.get("parentUuid") or "")
            if parent is None or parent[1].get("uuid") in path:
                root = uid
                break
            current = parent[1]
        for uid in path:
            roots[uid] = root
        return root

    groups: dict[str, list[Line]] = {}
    for line in side_lines:
        groups.setdefault(root_of(line[1]), []).append(line)
    return [g for g in groups.values() if any(o.get("type") in ("user", "assistant") for _, o in g)]


def task_calls(main: ParsedSession) -> dict[str, ToolUseBlock]:
    """Agent/Task tool calls of the main thread, by id and by prompt."""
    calls: dict[str, ToolUseBlock] = {}
    for pm in main.messages:
        content = pm.message.content
        for block in () if isinstance(content, str) else content:  # a text holds no tool call
            if isinstance(block, ToolUseBlock) and block.name in TASK_TOOLS:
                calls.setdefault(block.id, block)
                prompt = block.input.get("prompt")
                if isinstance(prompt, str):
                    calls.setdefault("prompt:" + prompt.strip(), block)
    return calls


def link_subagent(
    sub: ParsedSession, main: ParsedSession | None, meta: dict[str, Any], task_calls: dict[str, ToolUseBlock]
) -> None:
    sub.parent_key = main.key if main else None
    prompt = next((prompt_text(pm.message) for pm in sub.messages if pm.message.role == "user"), "")
    task = task_calls.get(str(meta.get("toolUseId"))) or task_calls.get("prompt:" + prompt)
    info: dict[str, Any] = {
        "subagent_type": meta.get("agentType"),
        "description": meta.get("description"),
        "spawn_depth": meta.get("spawnDepth"),
        "prompt": prompt or None,
    }
    if task is not None:
        info.update(
            parent_tool_use_id=task.id,
            subagent_type=info["subagent_type"] or task.input.get("subagent_type"),
            description=info["description"] or task.input.get("description"),
            background=bool(task.input.get("run_in_background", False)),
        )
    sub.metadata.update({k: v for k, v in info.items() if v is not None})
    if not sub.model and main is not None:
        sub.model, sub.provider = main.model, main.provider
