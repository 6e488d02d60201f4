"""In-flight control policies for proxied requests (all off unless the settings file turns them on).

Settings shape (a public interface)::

    [policies]                                   # every model; [models."NAME".policies] and
    guard = { action = "compact" }               # [providers."ID".policies] override per policy
    clear_tool_results = { trigger = 30000, keep = 2, exclude_tools = ["Skill", "Agent", "Task"] }

``plan_edits`` is pure: from a request body, the policies and the session's sticky state it
returns the body to forward (or a refusal in the provider's own error shape) and every edit
with tokens before and after. Cleared tool results stay cleared on later requests, with the
same placeholder bytes, so the forwarded prefix stays byte-stable and provider caching keeps
hitting. What differs by API is looked up per API: :data:`COMPACTION_PLANNERS` (compaction)
and :data:`READ_RESULT_ADDERS` (the read_result tool offload adds, in the API's shape); an API
without an entry reports that policy as not applied. Anthropic Messages' are here, OpenAI's in
:mod:`engine.proxy.openai_policies`. The settings file is read by
:mod:`engine.proxy.policy_file`, the request path runs :mod:`engine.proxy.controller`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from engine.policy_settings import (  # noqa: F401  (re-exported: the proxy's policy names)
    POLICY_NAMES,
    ClearToolResultsPolicy,
    CompactionPolicy,
    GuardPolicy,
    OffloadPolicy,
    Policies,
    PolicyConfig,
    split_policies,
)
from engine.proxy import apis
from engine.proxy.edits import (
    Edit,
    PolicyOutcome,
    SessionPolicyState,
    call_limit,
    compact_history,
    content_text,
    messages_key_of,
    placeholder,
    prompt_tokens,
    result_ref,
)

# OpenAI's shapes; engine.proxy.openai_policies takes the names it shares with this module from
# engine.proxy.edits and engine.proxy.read_result (importing them from here would be a cycle)
from engine.proxy.openai_policies import plan_openai_compaction, with_read_result
from engine.proxy.policy_file import PolicyFile, load_policy_file, policy_config, without_policies  # noqa: F401
from engine.proxy.read_result import (  # noqa: F401  (re-exported)
    OFFLOAD_PREVIEW_CHARS,
    READ_RESULT_NAME,
    READ_RESULT_TOOL,
    offload_note,
    read_stored,
)
from engine.settings import ResolvedModelSettings
from engine.tokens import Tokenizer

#: APIs whose requests policies edit.
POLICY_APIS = (apis.ANTHROPIC_MESSAGES, apis.OPENAI_CHAT, apis.OPENAI_RESPONSES)
#: Tool results this small are never cleared: the placeholder would cost about as much.
MIN_CLEAR_TOKENS = 64
#: Older name of :func:`engine.proxy.edits.prompt_tokens` (bench and planners of other APIs).
_prompt_tokens = prompt_tokens


@dataclass(frozen=True)
class _Result:
    tool_use_id: str
    name: str | None
    location: tuple[int, int | None]  # (message index, block index or None for a whole chat message)
    content: Any
    tokens: int


def _tool_results(api: str, messages: list[Any], tokenizer: Tokenizer) -> list[_Result]:
    names: dict[str, str] = {}
    found: list[_Result] = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            continue
        if api == apis.OPENAI_RESPONSES:
            kind = message.get("type")
            if kind in ("function_call", "custom_tool_call") and message.get("call_id"):
                names[message["call_id"]] = message.get("name")
            elif kind in ("function_call_output", "custom_tool_call_output") and message.get("call_id"):
                content = message.get("output")
                found.append(_Result(message["call_id"], names.get(message["call_id"]), (i, None), content,
                                     tokenizer.count(content_text(content))))  # fmt: skip
            continue
        if api == apis.OPENAI_CHAT:
            for call in message.get("tool_calls") or []:
                if isinstance(call, dict) and call.get("id"):
                    names[call["id"]] = (call.get("function") or {}).get("name")
            if message.get("role") == "tool" and message.get("tool_call_id"):
                content = message.get("content")
                found.append(_Result(message["tool_call_id"], names.get(message["tool_call_id"]), (i, None),
                                     content, tokenizer.count(content_text(content))))  # fmt: skip
            continue
        blocks = message.get("content")
        if not isinstance(blocks, list):
            continue
        for j, block in enumerate(blocks):
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use" and block.get("id"):
                names[block["id"]] = block.get("name")
            elif block.get("type") == "tool_result" and block.get("tool_use_id"):
                content = block.get("content")
                found.append(_Result(block["tool_use_id"], names.get(block["tool_use_id"]), (i, j), content,
                                     tokenizer.count(content_text(content))))  # fmt: skip
    return found


def _apply_cleared(api: str, messages: list[Any], results: list[_Result], state: SessionPolicyState,
                   clear_inputs: bool) -> None:  # fmt: skip
    cleared_ids = {r.tool_use_id for r in results if r.tool_use_id in state.cleared}
    for r in results:
        if r.tool_use_id not in state.cleared:
            continue
        i, j = r.location
        if j is None:
            key = "output" if api == apis.OPENAI_RESPONSES else "content"
            messages[i] = {**messages[i], key: state.cleared[r.tool_use_id]}
        else:
            blocks = list(messages[i]["content"])
            blocks[j] = {**blocks[j], "content": state.cleared[r.tool_use_id]}
            messages[i] = {**messages[i], "content": blocks}
    if not clear_inputs:
        return
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        if api == apis.OPENAI_CHAT:
            calls = message.get("tool_calls") or []
            if any(isinstance(c, dict) and c.get("id") in cleared_ids for c in calls):
                new_calls = [
                    {**c, "function": {**(c.get("function") or {}), "arguments": "{}"}} if c.get("id") in cleared_ids else c
                    for c in calls
                ]  # fmt: skip
                messages[i] = {**message, "tool_calls": new_calls}
        elif isinstance(message.get("content"), list):
            blocks = [
                {**b, "input": {}} if isinstance(b, dict) and b.get("type") == "tool_use" and b.get("id") in cleared_ids else b
                for b in message["content"]
            ]  # fmt: skip
            messages[i] = {**message, "content": blocks}


def _compaction(
    api: str, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer,
    resolved: ResolvedModelSettings, state: SessionPolicyState,
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy: reuse the compacted prefix while the agent re-sends it; compact
    the whole history again when the prompt passes ``trigger`` of the window."""
    from engine.proxy.live import message_key, render

    raw = list(body.get("messages") or [])
    converted = apis.convert_messages(api, raw)
    if len(converted) != len(raw):
        return None, body
    return compact_history(
        api, body, policy, tokenizer, resolved, state, head=[], rest=raw, keys=[message_key(m) for m in converted],
        converted=lambda: converted, render=lambda result: render(api, list(result.messages), result.summary, keep_meta=True),
    )  # fmt: skip


def _already_saved(
    results: list[_Result], state: SessionPolicyState, tokenizer: Tokenizer
) -> list[tuple[int, int]]:
    """(message index, tokens saved) of each result sent as its placeholder (cleared or offloaded earlier)."""
    return [(r.location[0], r.tokens - tokenizer.count(state.cleared[r.tool_use_id]))
            for r in results if r.tool_use_id in state.cleared]  # fmt: skip


def _clearing_pays(policy: ClearToolResultsPolicy, messages: list[Any], candidates: list[_Result],
                   results: list[_Result], state: SessionPolicyState, tokenizer: Tokenizer,
                   body: Mapping[str, Any], must: bool, cold: bool) -> bool:  # fmt: skip
    """clear_tool_results' ``cache_aware``: the batch pays for the cache rebuild (engine.prompt.cache_policy),
    measured on the history as sent (results cleared earlier count as their placeholders); a cache
    gone ``cold`` has nothing to rebuild. ``"strict"`` clears only then, or when the prompt ``must``
    shrink to fit: no warm prefix is ever rewritten."""
    from engine.prompt.cache_policy import CacheRates, plan_request_clearing

    if not candidates:
        return False
    if policy.cache_aware == "strict":
        return cold or must
    model = body.get("model") if isinstance(body.get("model"), str) else None
    first = min(r.location[0] for r in candidates)
    freed = sum(r.tokens for r in candidates)
    decision = plan_request_clearing(
        messages, first, freed, count=tokenizer.count, rates=CacheRates.for_model(model), must_clear=must,
        already_saved=_already_saved(results, state, tokenizer), cache_cold=cold,
    )  # fmt: skip
    return decision.clear


#: (api, body, policy, tokenizer, resolved, state) -> (the edit or None, the body to send).
CompactionPlanner = Callable[
    [str, dict[str, Any], CompactionPolicy, Tokenizer, ResolvedModelSettings, SessionPolicyState],
    tuple[Edit | None, dict[str, Any]],
]
#: (api, the request's tools) -> the tools with read_result added (unchanged when already offered).
ReadResultAdder = Callable[[str, list[Any] | None], list[Any]]


def with_anthropic_read_result(api: str, tools: list[Any] | None) -> list[Any]:
    """Anthropic's tools with read_result added (unchanged when it is already offered)."""
    tools = list(tools or [])
    if any(isinstance(t, dict) and t.get("name") == READ_RESULT_NAME for t in tools):
        return tools
    return [*tools, READ_RESULT_TOOL]


#: How each API's compaction is planned; an API not here reports compaction as not applied.
COMPACTION_PLANNERS: dict[str, CompactionPlanner] = {
    apis.ANTHROPIC_MESSAGES: _compaction,
    apis.OPENAI_CHAT: plan_openai_compaction,  # OpenAI's shapes
    apis.OPENAI_RESPONSES: plan_openai_compaction,  # OpenAI's shapes
}
#: The read_result tool offload adds, per API; an API not here reports offload as not applied.
READ_RESULT_ADDERS: dict[str, ReadResultAdder] = {
    apis.ANTHROPIC_MESSAGES: with_anthropic_read_result,
    apis.OPENAI_CHAT: with_read_result,  # OpenAI's shapes
    apis.OPENAI_RESPONSES: with_read_result,  # OpenAI's shapes
}


def too_long_error(api: str, tokens: int, maximum: int) -> tuple[int, dict[str, Any]]:
    """The provider's own 400 for a prompt over the window (agents already handle it)."""
    message = f"prompt is too long: {tokens} tokens > {maximum} maximum"
    if api == apis.ANTHROPIC_MESSAGES:
        return 400, {"type": "error", "error": {"type": "invalid_request_error", "message": message}}
    return 400, {"error": {"message": message, "type": "invalid_request_error", "param": "messages",
                           "code": "context_length_exceeded"}}  # fmt: skip


def plan_edits(
    api: str,
    body: dict[str, Any],
    policies: Policies,
    *,
    tokenizer: Tokenizer,
    resolved: ResolvedModelSettings | None,
    state: SessionPolicyState,
    now: float | None = None,
) -> PolicyOutcome:
    """The edits the policies make to one request (pure apart from updating ``state``).

    ``now`` (monotonic seconds, the caller's clock): with the time of the session's previous
    request it tells whether the provider's prompt cache has expired in between (cache_aware
    clearing then costs no rebuild)."""
    if api not in POLICY_APIS or not policies.active:
        return PolicyOutcome()
    from engine.prompt.cache_policy import SHORTEST_CACHE_S, cache_lifetime_s

    idle = now - state.last_request_at if now is not None and state.last_request_at is not None else None
    # the body is searched for 1-hour breakpoints only after a pause no cache outlives
    lifetime = (
        cache_lifetime_s(apis.PROVIDERS[api], body) if idle is not None and idle > SHORTEST_CACHE_S else None
    )
    cold = idle is not None and lifetime is not None and idle > lifetime
    state.cache_cold = cold
    if now is not None:
        state.last_request_at = now
    offload = policies.offload if api in READ_RESULT_ADDERS else None
    compaction = policies.compaction if api in COMPACTION_PLANNERS and resolved is not None else None
    skipped = tuple(
        n for n, applied in (("offload", offload), ("compaction", compaction))
        if getattr(policies, n) is not None and applied is None
    )  # fmt: skip
    messages_key = messages_key_of(api)
    messages = list(body.get(messages_key) or [])
    before = prompt_tokens(api, body, tokenizer)
    edits: list[Edit] = []
    blobs: list[tuple[str, str, str | None]] = []
    results = _tool_results(api, messages, tokenizer)
    clear = policies.clear_tool_results
    guard = policies.guard
    call = call_limit(resolved)
    limit = call.tokens if call is not None else None
    # Measured on the prompt as it is sent: results cleared or offloaded on earlier requests stay their
    # placeholders, so a history the agent re-sends whole is not "over" while what the model gets is not.
    as_sent = before - sum(saved for _, saved in _already_saved(results, state, tokenizer))
    over_window = limit is not None and as_sent > limit
    if clear is None and guard is not None and guard.action == "compact" and over_window:
        clear = ClearToolResultsPolicy(trigger=0, keep=1)  # the guard's compaction: clear all but the last
    offloaded_now: list[_Result] = []
    if offload is not None:
        for r in results:
            text = content_text(r.content)
            if r.tool_use_id not in state.cleared and len(text.encode("utf-8")) > offload.threshold_bytes:
                ref = result_ref(r.content)
                state.cleared[r.tool_use_id] = offload_note(r.name, text, ref)
                state.offloaded.add(r.tool_use_id)
                blobs.append((ref, text, r.name))
                offloaded_now.append(r)
    newly: list[_Result] = []
    if clear is not None and (as_sent > clear.trigger or over_window):
        keep_ids = {r.tool_use_id for r in results[len(results) - clear.keep :]} if clear.keep else set()
        candidates = [
            r for r in results
            if r.tool_use_id not in state.cleared and r.tool_use_id not in keep_ids
            and (r.name or "") not in clear.exclude_tools and r.tokens > MIN_CLEAR_TOKENS
        ]  # fmt: skip
        if sum(r.tokens for r in candidates) >= clear.clear_at_least and (
            not clear.cache_aware
            or _clearing_pays(clear, messages, candidates, results, state, tokenizer, body, over_window, cold)
        ):
            newly = candidates
    for r in newly:
        ref = result_ref(r.content)
        state.cleared[r.tool_use_id] = placeholder(r.name, r.content, ref)
        blobs.append((ref, content_text(r.content), r.name))
    sticky = any(r.tool_use_id in state.cleared for r in results)
    serve = any(r.tool_use_id in state.offloaded for r in results)
    new_body: dict[str, Any] | None = None
    after = before
    if sticky:
        _apply_cleared(api, messages, results, state, bool(clear and clear.clear_tool_inputs))
        new_body = {**body, messages_key: messages}
        if serve:
            new_body["tools"] = READ_RESULT_ADDERS[api](api, body.get("tools"))
        after = prompt_tokens(api, new_body, tokenizer)
        if offloaded_now or any(r.tool_use_id in state.offloaded for r in results):
            offloaded = [r for r in results if r.tool_use_id in state.offloaded]
            edits.append(Edit(
                "offload",
                f"{len(offloaded_now)} tool result(s) over {offload.threshold_bytes:,} bytes offloaded; "
                f"{len(offloaded)} in this request are previews with a read_result reference" if offload else "offloaded",
                before, after,
                tuple({"tool_use_id": r.tool_use_id, "tool_name": r.name, "tokens": r.tokens,
                       "ref": result_ref(r.content), "new": r in offloaded_now} for r in offloaded),
            ))  # fmt: skip
        changes = tuple(
            {"tool_use_id": r.tool_use_id, "tool_name": r.name, "tokens": r.tokens, "ref": result_ref(r.content),
             "new": r in newly}
            for r in results if r.tool_use_id in state.cleared and r.tool_use_id not in state.offloaded
        )  # fmt: skip
        reason = (
            f"{len(newly)} more tool result(s) cleared: prompt {before:,} tokens over the trigger"
            if newly
            else "tool results cleared earlier stay cleared (the sent prefix stays byte-stable)"
        )
        if newly and cold and idle is not None and lifetime is not None:
            reason += (
                f"; the prompt cache had expired (idle {idle / 60:.0f} min > {lifetime // 60} min), "
                "so clearing rebuilt nothing extra"
            )
        if changes:
            edits.append(Edit("clear_tool_results", reason, before, after, changes))
    if compaction is not None:
        source = new_body or body
        compact_edit, compacted_body = COMPACTION_PLANNERS[api](
            api, source, compaction, tokenizer, resolved, state
        )
        if compact_edit is not None:
            new_body, after = compacted_body, compact_edit.after_tokens
            edits.append(compact_edit)
    if guard is not None and limit is not None and after > limit:
        return PolicyOutcome(
            body=new_body,
            refusal=too_long_error(api, after, limit),
            edits=(
                *edits,
                Edit("guard", f"prompt {after:,} tokens > limit {limit:,}", before, after),
            ),
            blobs=tuple(blobs),
            skipped=skipped,
        )
    return PolicyOutcome(
        body=new_body, edits=tuple(edits), blobs=tuple(blobs), skipped=skipped, serve_read_result=serve
    )
