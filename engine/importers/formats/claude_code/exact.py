"""Calls Claude Code recorded exactly (its ``api-request`` lines, claude_code_replay): each gets its
exact request for the store (``call.exact_request``) and components counted from it; a call with
no recorded request (a compaction's summarizer) takes the system prompt and tools of the nearest one."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from engine.events import ComponentTokens
from engine.importers.formats.claude_code.replay import (
    ReplayedRequest,
    exact_components,
)
from engine.importers.formats.claude_code.requests import thinking_rule
from engine.importers.parsing.parsed import CallInfo, ParsedSession
from engine.store.payloads import RequestRecord
from engine.tokens import Tokenizer


def apply_replays(
    session: ParsedSession, calls: list[CallInfo], replays: dict[str, ReplayedRequest], tokenizer: Tokenizer
) -> int:
    """Calls Claude Code recorded get their exact request (``call.exact_request``, for the store)
    and components counted from it; the others (the summarizer of a compaction) take the system
    prompt and tools of the nearest recorded call instead of the harness-prefix estimate.
    Returns how many calls were rebuilt exactly."""
    if not replays:
        return 0
    found: list[tuple[int, ReplayedRequest]] = []
    linked: set[str] = set()
    shape_counts: dict[str, ComponentTokens] = {}
    converted: dict[int, Any] = {}  # each sent message's dict -> its message, and a message -> its slim copy
    digests: dict[int, str] = {}  # by the id of a body's system/tools list, alive while the replays are
    for k, call in enumerate(calls):
        replay = replays.get(str(call.details.get("request_ref")))
        if replay is None or replay.body is None:
            if replay is not None:
                call.details["exact_request_problem"] = replay.problem
            continue
        linked.add(replay.request_id)
        found.append((k, replay))
        rule = thinking_rule(call.model, context_management=(replay.body or {}).get("context_management"))
        components = exact_components(
            replay, tokenizer, where=f"api-request line {replay.line}", rule=rule, shape_counts=shape_counts,
            converted=converted,
        )  # fmt: skip
        offloaded = call.components.offloaded_bytes if call.components is not None else 0
        call.components = components.model_copy(update={"offloaded_bytes": offloaded})
        call.exact_request = request_record(call, replay)
        for key in ("harness_prefix_tokens", "system_is_harness_prefix"):
            call.details.pop(key, None)
        call.details.update(_exact_details(replay, digests))
        call.details["previous_thinking"] = "kept" if rule.keeps_all else "stripped"  # as the request said
    if not found:
        return 0
    for k, call in enumerate(calls):
        if call.exact_request is not None:
            continue
        _, near = min(found, key=lambda f: (abs(f[0] - k), f[0] > k))
        fixed = exact_components(near, tokenizer, shape_counts=shape_counts, converted=converted)
        old = call.components or ComponentTokens()
        call.components = old.model_copy(update={"system": fixed.system, "tools": fixed.tools})
        for key in ("harness_prefix_tokens", "system_is_harness_prefix"):
            call.details.pop(key, None)
        call.details["system_tools_from_request"] = near.request_id
    first = found[0][1].body or {}
    session.tools = [t for t in first.get("tools") or [] if isinstance(t, dict)]
    unlinked = [r for r in replays.values() if r.request_id not in linked]
    if unlinked:
        session.notes.append(
            f"{len(unlinked)} recorded request(s) with no reply in the file: imported as failed calls"
        )
    unverified = sum(1 for _, r in found if r.verified is False)
    if unverified:
        session.notes.append(f"{unverified} rebuilt request(s) differ from their recorded requestDigest")
    return len(found)


def _exact_details(replay: ReplayedRequest, digests: dict[int, str] | None = None) -> dict[str, Any]:
    """What a rebuilt request says of itself; ``digests`` memoizes the system and tools hashes by
    object (rebuilt requests share their ~100 KB system and tools lists: hashed once, not per call)."""
    body = replay.body or {}
    details: dict[str, Any] = {
        "exact_request": True,
        "request_ref": replay.request_id,
        "request_digest_verified": replay.verified,
        "query_source": replay.query_source,
        "request_messages": len(body.get("messages") or []),
        "system_sha256": _digest(body.get("system"), digests) if body.get("system") is not None else None,
        "tools_sha256": _digest(body.get("tools"), digests) if body.get("tools") is not None else None,
        "max_tokens": body.get("max_tokens"),
        "thinking": body.get("thinking"),
        "context_management": body.get("context_management"),
        "betas": replay.betas or None,
    }
    return {k: v for k, v in details.items() if v is not None}


def apply_failed(call: CallInfo, replay: ReplayedRequest, tokenizer: Tokenizer) -> None:
    """A call that got no answer, with the request it sent: its components and exact body (no usage)."""
    rule = thinking_rule(call.model, context_management=(replay.body or {}).get("context_management"))
    call.components = exact_components(replay, tokenizer, where=f"api-request line {replay.line}", rule=rule)
    failure = call.details.get("failure")
    status = (failure or {}).get("status") if failure else 200  # a refusal is an answer
    call.exact_request = request_record(call, replay, status_code=status).model_copy(
        update={"error_message": (failure or {}).get("message")}
    )
    call.details.update({k: v for k, v in _exact_details(replay).items() if k not in call.details})


def request_record(
    call: CallInfo, replay: ReplayedRequest, *, status_code: int | None = 200
) -> RequestRecord:
    """The store's record of the request ``replay`` rebuilt, with the call's usage (None for a
    failed call: the provider billed nothing)."""
    usage = call.usage
    return RequestRecord(
        api="anthropic_messages",
        source="import:claude_code",
        path="/v1/messages",
        body=replay.body,
        headers=replay.headers or None,
        status_code=status_code,
        stop_reason=call.details.get("stop_reason"),
        input_tokens=usage.input_tokens if usage else None,
        output_tokens=usage.output_tokens if usage else None,
        cache_read_input_tokens=usage.cache_read_input_tokens if usage else None,
        cache_creation_input_tokens=usage.cache_creation_input_tokens if usage else None,
        cache_creation_5m_tokens=call.details.get("cache_write_5m_tokens"),
        cache_creation_1h_tokens=call.details.get("cache_write_1h_tokens"),
        started_utc=replay.timestamp,
    )


def _digest(value: Any, digests: dict[int, str] | None) -> str:
    if digests is None:
        return _sha256_json(value)
    if id(value) not in digests:
        digests[id(value)] = _sha256_json(value)
    return digests[id(value)]


def _sha256_json(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")).hexdigest()
