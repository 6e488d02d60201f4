"""OpenAI chat-completions message lists, and SWE-agent trajectories (whose ``history`` is one).

Leading system (or developer) messages become the session's system prompt: kept in metadata
``system_prompt`` and counted as the system component of every request, never stored as
transcript messages. Every assistant message is one model call; its ``usage`` is kept when
the message carries one (SWE-agent keeps only run totals, in ``info.model_stats``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.importers.model import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing import build_message, openai_message, openai_usage, provider_of

_SYSTEM_ROLES = ("system", "developer")


def parse_openai_messages(
    items: list[Any], *, model: str | None, where: str = "messages"
) -> tuple[str | None, list[ParsedMessage]]:
    """(system prompt, messages) of an OpenAI message list."""
    system_parts: list[str] = []
    start = 0
    while start < len(items) and isinstance(items[start], dict) and items[start].get("role") in _SYSTEM_ROLES:
        content = items[start].get("content")
        system_parts.append(content if isinstance(content, str) else _joined_text(content))
        start += 1
    parsed: list[ParsedMessage] = []
    for index in range(start, len(items)):
        raw = items[index]
        message = openai_message(raw, where=f"{where}[{index}]", index=index)
        call = None
        if message.role == "assistant":
            call = CallInfo(usage=openai_usage(raw.get("usage")), model=model)
        parsed.append(ParsedMessage(message, call=call))
    return ("\n\n".join(system_parts) if system_parts else None), parsed


def parse_openai_document(value: Any, *, key: str) -> list[ParsedSession]:
    """A JSON list of messages, or {"messages": [...], "model"?, "tools"?}."""
    if isinstance(value, list):
        items, model, tools = value, None, []
    else:
        items, model, tools = value["messages"], value.get("model"), value.get("tools") or []
    if not items:
        raise SourceProblem("the message list is empty")
    model = model or _model_in_messages(items)
    system, messages = parse_openai_messages(items, model=model)
    return [
        ParsedSession(
            key=key, messages=messages, model=model, provider=provider_of(model), system_prompt=system,
            tools=[t for t in tools if isinstance(t, dict)],
        )
    ]  # fmt: skip


def parse_swe_agent(value: dict[str, Any], *, key: str, path: Path) -> list[ParsedSession]:
    """A SWE-agent ``.traj``: ``history`` as the transcript, ``info.model_stats`` as run totals.

    When ``trajectory`` has more steps than ``history`` has assistant messages (the final
    submit step is often missing from history), the missing responses are appended from it.
    """
    history = value["history"]
    if not history:
        raise SourceProblem("the trajectory's history is empty")
    model = swe_agent_model(value, path)
    hint = None if model else run_directory_model(path)
    system, messages = parse_openai_messages(history, model=model, where="history")
    trajectory = value.get("trajectory") if isinstance(value.get("trajectory"), list) else []
    answered = sum(1 for pm in messages if pm.message.role == "assistant")
    for step in trajectory[answered:]:
        text = step.get("response") if isinstance(step, dict) else None
        if not isinstance(text, str) or not text:
            continue
        message = build_message(
            "assistant",
            text,
            where="trajectory",
            meta={"from_trajectory": True, "action": step.get("action")},
        )
        messages.append(ParsedMessage(message, call=CallInfo(model=model, details={"from_trajectory": True})))
    info = value.get("info") if isinstance(value.get("info"), dict) else {}
    metadata = {
        "instance_id": path.name.removesuffix(".traj"),
        "model_stats": info.get("model_stats"),
        "exit_status": info.get("exit_status"),
        "environment": value.get("environment") if isinstance(value.get("environment"), str) else None,
    }
    session = ParsedSession(
        key=key, messages=messages, model=model, provider=provider_of(model or hint), system_prompt=system,
        metadata={k: v for k, v in metadata.items() if v is not None}, tokenizer_model=hint,
    )  # fmt: skip
    if hint:
        session.metadata["model_hint"] = f"{path.parent.name.split('__', 1)[0]} (run directory name)"
        session.notes.append(
            f"the file names no model; its run directory says {path.parent.name.split('__', 1)[0]!r}, "
            f"a family, not a model: counted with {hint}'s tokenizer, window unknown (give --model)"
        )
    return [session]


def swe_agent_model(value: dict[str, Any], path: Path) -> str | None:
    """The model a SWE-agent run names itself (its replay config); None when it does not."""
    config = value.get("replay_config")
    if isinstance(config, dict):
        name = ((config.get("agent") or {}).get("model") or {}).get("name")
        if isinstance(name, str) and name:
            return name
    return None


def run_directory_model(path: Path) -> str | None:
    """A tokenizer hint from a run directory's ``<model>__`` prefix. Only the family is known
    (``gpt4`` runs used 8k and 128k models alike), so it never names the session's model."""
    run_dir = path.parent.name
    if "__" in run_dir:
        short = run_dir.split("__", 1)[0]
        return {"gpt4": "gpt-4", "gpt4o": "gpt-4o", "gpt35": "gpt-3.5-turbo"}.get(short, short)
    return None


def _model_in_messages(items: list[Any]) -> str | None:
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("model"), str):
            return item["model"]
    return None


def _joined_text(content: Any) -> str:
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else str(content)
