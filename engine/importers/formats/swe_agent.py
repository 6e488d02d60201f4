"""SWE-agent trajectories (``.traj``): ``history`` is an OpenAI chat message list, ``info.model_stats``
the run's totals (SWE-agent keeps no per-call usage); its ``instance_cost`` is kept as the
session's ``agent_cost_usd`` (SWE-agent's own figure, beside ours).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat
from engine.importers.formats.openai_chat import parse_openai_messages
from engine.importers.formats.openhands import is_openhands_legacy
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, provider_of


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
    cost = agent_cost(info.get("model_stats"))
    if cost is not None:  # what SWE-agent itself says this instance cost (its own prices)
        session.metadata["agent_cost_usd"] = cost
        session.metadata["agent_cost_source"] = "swe-agent info.model_stats.instance_cost"
    if hint:
        session.metadata["model_hint"] = f"{path.parent.name.split('__', 1)[0]} (run directory name)"
        session.notes.append(
            f"the file names no model; its run directory says {path.parent.name.split('__', 1)[0]!r}, "
            f"a family, not a model: counted with {hint}'s tokenizer, window unknown (give --model)"
        )
    return [session]


def agent_cost(stats: Any) -> float | None:
    """``model_stats.instance_cost`` (this instance; ``total_cost`` is the run's so far), in USD."""
    if not isinstance(stats, dict):
        return None
    cost = stats.get("instance_cost")
    if isinstance(cost, (int, float)) and not isinstance(cost, bool) and cost >= 0:
        return round(float(cost), 6)
    return None


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


def sniff(doc: Document) -> bool:
    value = doc.value
    return (
        isinstance(value, dict)
        and isinstance(value.get("history"), list)
        and ("trajectory" in value or "info" in value)
        and not is_openhands_legacy(value)  # OpenHands resolver output may carry ``info`` too
    )


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return parse_swe_agent(doc.value, key=key, path=doc.path)


FORMAT = ImportFormat(
    name="swe-agent",
    agent="SWE-agent",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="`trajectories/<user>/<run>/<instance>.traj`",
)
