"""mini-swe-agent trajectories (``*.traj.json``; the ``mini`` CLI keeps its last run in
``~/.config/mini-swe-agent/last_mini_run.traj.json``).

A trajectory (``trajectory_format`` ``mini-swe-agent-1.x``) is ``{info, messages}``: the messages
exactly as the agent sends them (OpenAI chat: system, the task, assistant tool calls, tool
outputs, a user's follow-up task), each assistant message carrying in ``extra.response`` the
provider's whole answer (its ``usage``) and when it came; the last message (role ``exit``) is the
agent's own exit record, never sent. ``info`` holds the configuration (model, templates) and the
exit status. The tool definitions are not kept: their size is measured from the provider's count.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from engine.importers.documents import Document
from engine.importers.formats import ImportFormat, Locations
from engine.importers.formats.openai_chat import parse_openai_messages
from engine.importers.parsing.parsed import ParsedSession, SourceProblem
from engine.importers.parsing.readers import openai_usage, provider_of

FORMAT_PREFIX = "mini-swe-agent"
#: Keys of a trajectory's message that are the agent's bookkeeping, not what was sent.
_NOT_SENT = ("extra", "provider_specific_fields", "function_call", "refusal")


def is_trajectory(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and str(value.get("trajectory_format", "")).startswith(FORMAT_PREFIX)
        and isinstance(value.get("messages"), list)
    )


def parse_trajectory(value: dict[str, Any], *, key: str) -> ParsedSession:
    info = value.get("info") if isinstance(value.get("info"), dict) else {}
    raw = [m for m in value["messages"] if isinstance(m, dict)]
    exits = [m for m in raw if m.get("role") == "exit"]
    sent = [m for m in raw if m.get("role") != "exit"]
    if not sent:
        raise SourceProblem("a mini-swe-agent trajectory with no messages")
    config = info.get("config") if isinstance(info.get("config"), dict) else {}
    model_config = config.get("model") if isinstance(config.get("model"), dict) else {}
    configured = model_config.get("model_name")
    items = [{k: v for k, v in m.items() if k not in _NOT_SENT} for m in sent]
    system, messages = parse_openai_messages(items, model=configured)
    leading = len(items) - len(messages)
    models: dict[str, int] = {}
    for parsed, source in zip(messages, sent[leading:], strict=True):
        if parsed.call is None:
            continue
        extra = source.get("extra") if isinstance(source.get("extra"), dict) else {}
        response = extra.get("response") if isinstance(extra.get("response"), dict) else {}
        parsed.call.usage = openai_usage(response.get("usage"))
        parsed.call.model = response.get("model") or configured
        models[parsed.call.model or ""] = models.get(parsed.call.model or "", 0) + 1
        reasoning = ((response.get("usage") or {}).get("completion_tokens_details") or {}).get(
            "reasoning_tokens"
        )
        if reasoning:
            parsed.call.details["reasoning_tokens"] = reasoning
        if isinstance(extra.get("timestamp"), int | float):
            parsed.call.details["call_utc"] = _utc(extra["timestamp"])
    model = max(models, key=lambda m: models[m]) if models else configured
    session = ParsedSession(
        key=key, messages=messages, model=model or None, provider=provider_of(model), system_prompt=system
    )
    session.unlogged_prefix_in = "tools"  # the bash tool's definition is not in the trajectory
    exit_record = exits[-1] if exits else {}
    meta = {
        "mini_version": info.get("mini_version"),
        "exit_status": info.get("exit_status") or (exit_record.get("extra") or {}).get("exit_status"),
        "submission": info.get("submission"),
        "configured_model": configured,
    }
    session.metadata.update({k: v for k, v in meta.items() if v})
    session.notes.append(
        "a mini-swe-agent trajectory does not keep the tool definitions it sent (their size is measured "
        "from the provider's count)"
    )
    return session


def _utc(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).isoformat().replace("+00:00", "Z")


def sniff(doc: Document) -> bool:
    return is_trajectory(doc.value)


def parse(doc: Document, key: str) -> list[ParsedSession]:
    return [parse_trajectory(doc.value, key=key)]


def _roots(env: Mapping[str, str], home: Path) -> list[Path]:
    if env.get("MSWEA_GLOBAL_CONFIG_DIR"):
        return [Path(env["MSWEA_GLOBAL_CONFIG_DIR"])]
    base = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    return [base / "mini-swe-agent", home / "Library" / "Application Support" / "mini-swe-agent"]


def _trajectories(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*.traj.json") if p.is_file())


FORMAT = ImportFormat(
    name="mini-swe-agent",
    agent="mini-swe-agent",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"json"}),
    files="`*.traj.json` (last run: `~/.config/mini-swe-agent/last_mini_run.traj.json`)",
    locations=Locations(roots=_roots, files_under=_trajectories),
)
