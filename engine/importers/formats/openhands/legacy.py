"""Resolver / evaluation output of old OpenHands (V0): ``history`` as [action, observation]
pairs, or flat (each observation right after its action, an action's arguments at its top
level: OpenHands' own resolver mock output), with no tool-call metadata or per-call usage.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine.importers.formats import SNIFF_LINES
from engine.importers.formats.openhands.events import agent_costs, event_meta, observation_text
from engine.importers.parsing.parsed import CallInfo, ParsedMessage, ParsedSession, SourceProblem
from engine.importers.parsing.readers import build_message, provider_of
from engine.messages import TextBlock, ToolResultBlock, ToolUseBlock


def parse_openhands_legacy(value: dict[str, Any], *, key: str) -> ParsedSession:
    """Resolver / evaluation output of old OpenHands: ``history`` is a list of
    [action, observation] pairs (or flat: each observation after its action), actions without ``tool_call_metadata`` (``run`` with a
    ``command``, ``run_ipython`` with ``code``, ``read``, ``write``, ``browse``...). Each agent
    action is one model call (its ``thought`` the text, the action a tool use answered by
    the paired observation); the task is the first user message (``args.content``, or a
    top-level ``content`` / ``message``, or the record's ``instruction``)."""
    messages: list[ParsedMessage] = []
    instruction = value.get("instruction")
    skipped: Counter[str] = Counter()
    acted = False  # an agent action came: a message without a source is the agent's from then on
    for index, pair in enumerate(_as_pairs(value["history"])):
        where = f"history[{index}]"
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise SourceProblem(f"{where}: expected an [action, observation] pair")
        action, observation = pair
        if not isinstance(action, dict) or not isinstance(observation, dict):
            raise SourceProblem(f"{where}: the action or observation is not an object")
        kind = action.get("action")
        args = action.get("args") if isinstance(action.get("args"), dict) else _flat_args(action)
        if kind == "message":
            text = str(args.get("content") or action.get("content") or action.get("message") or "")
            if action.get("source") == "user" or (action.get("source") is None and not acted):
                if text:
                    messages.append(
                        ParsedMessage(build_message("user", text, where=where, meta=event_meta(action)))
                    )
            elif text:
                messages.append(
                    ParsedMessage(
                        build_message("assistant", text, where=where, meta=event_meta(action)),
                        call=CallInfo(details={"usage_not_recorded": True}),
                    )
                )
            continue
        if kind in (None, "null", "change_agent_state", "recall") or action.get("source") not in (
            None,
            "agent",
        ):
            skipped[str(kind)] += 1
            continue
        acted = True
        call_id = f"oh-{action.get('id', index)}"
        thought = str(args.get("thought") or "")
        use = ToolUseBlock(
            id=call_id, name=str(kind), input={k: v for k, v in args.items() if k != "thought"}
        )
        blocks = [TextBlock(text=thought), use] if thought else [use]
        messages.append(
            ParsedMessage(
                build_message("assistant", blocks, where=where, meta=event_meta(action)),
                call=CallInfo(details={"usage_not_recorded": True}),
            )
        )
        if kind == "finish":
            continue
        result = ToolResultBlock(tool_use_id=call_id, content=observation_text(observation))
        messages.append(
            ParsedMessage(build_message("user", [result], where=where, meta=event_meta(observation)))
        )
    if (
        isinstance(instruction, str)
        and instruction
        and not any(pm.message.role == "user" and not pm.message.tool_result_ids for pm in messages[:1])
    ):
        messages.insert(0, ParsedMessage(build_message("user", instruction, where="instruction")))
    if not messages:
        raise SourceProblem("an OpenHands history with no messages or actions")
    metrics = value.get("metrics") if isinstance(value.get("metrics"), dict) else {}
    meta = value.get("metadata") if isinstance(value.get("metadata"), dict) else {}
    llm = meta.get("llm_config") if isinstance(meta.get("llm_config"), dict) else {}
    model = llm.get("model") if isinstance(llm.get("model"), str) else None
    session = ParsedSession(key=key, messages=messages, model=model, provider=provider_of(model))
    session.title = issue_title(value.get("issue"))
    agent_costs(session, metrics)
    extra = {
        "instance_id": value.get("instance_id"),
        "issue": (value.get("issue") or {}).get("title") if isinstance(value.get("issue"), dict) else None,
        "success": value.get("success"),
        "accumulated_cost": metrics.get("accumulated_cost"),
        "error": value.get("error"),
        "legacy_history": True,
    }
    session.metadata.update({k: v for k, v in extra.items() if v is not None})
    session.notes.append("legacy OpenHands history: no per-call usage or tool schemas in the file")
    session.notes.extend(f"skipped {n} {kind!r} action(s)" for kind, n in sorted(skipped.items()))
    return session


#: Keys of a flat (V0) action that are bookkeeping, not what the model produced.
_ACTION_BOOKKEEPING = frozenset(
    {
        "action", "id", "timestamp", "source", "message", "cause", "is_confirmed", "action_risk",
        "confirmation_state", "security_risk", "keep_prompt", "kernel_init_code", "images_urls",
        "wait_for_response", "blocking", "hidden", "timeout",
    }
)  # fmt: skip


def _flat_args(action: dict[str, Any]) -> dict[str, Any]:
    """A V0 action's arguments, kept at its top level (``command``, ``code``, ``thought``...)."""
    return {k: v for k, v in action.items() if k not in _ACTION_BOOKKEEPING}


def _as_pairs(history: list[Any]) -> list[Any]:
    """[action, observation] pairs: as they are, or from a flat V0 history where each
    observation follows its action (an action without one, ``finish``, pairs with nothing)."""
    if not history or isinstance(history[0], list | tuple):
        return history
    pairs: list[Any] = []
    i = 0
    while i < len(history):
        event = history[i]
        following = history[i + 1] if i + 1 < len(history) else None
        if isinstance(following, dict) and "observation" in following and "action" not in following:
            pairs.append([event, following])
            i += 2
        else:
            pairs.append([event, {}])
            i += 1
    return pairs


def is_openhands_flat_v0(value: Any) -> bool:
    """Resolver output of old OpenHands with a flat ``history``: actions (their arguments at the
    top level) each followed by its observation, no ids, sources or tool-call metadata."""
    if not isinstance(value, dict) or not isinstance(value.get("history"), list) or not value["history"]:
        return False
    head = value["history"][:SNIFF_LINES]
    return (
        all(isinstance(e, dict) and ("action" in e or "observation" in e) for e in head)
        and "action" in head[0]
        and not any("source" in e or "tool_call_metadata" in e or "id" in e for e in head)
    )


def is_openhands_legacy(value: Any) -> bool:
    """OpenHands resolver output of old: ``history`` of [action, observation] pairs, or flat."""
    if not isinstance(value, dict) or not isinstance(value.get("history"), list) or not value["history"]:
        return False
    first = value["history"][0]
    if isinstance(first, list | tuple):
        return len(first) == 2 and all(isinstance(e, dict) for e in first)
    return is_openhands_flat_v0(value)


def issue_title(issue: Any) -> str | None:
    """``Add MIT license (neubig/pr-viewer#5)``: the resolved issue, when the output names it."""
    if not isinstance(issue, dict) or not isinstance(issue.get("title"), str) or not issue["title"]:
        return None
    where = f"{issue.get('owner')}/{issue.get('repo')}#{issue.get('number')}" if issue.get("repo") else None
    return f"{issue['title']} ({where})" if where else issue["title"]
