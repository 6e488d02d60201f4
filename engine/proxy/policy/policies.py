"""In-flight control policies for proxied requests (all off unless the settings file turns them on).

Settings shape (a public interface)::

    [policies]                                   # every model; [models."NAME".policies] and
    guard = { action = "compact" }               # [providers."ID".policies] override per policy
    clear_tool_results = { trigger = 30000, keep = 2, exclude_tools = ["Skill", "Agent", "Task"] }

:func:`plan_edits` is pure apart from the session's sticky state: from a request body, the
policies and that state it returns the body to forward (or a refusal in the provider's own error
shape) and every edit with tokens before and after. It is a few steps, each its own function, over
the request's canonical messages where a decision needs them: the engine's own clearing
(``engine.compaction.clearing``), compaction (``engine.compaction.operations.compact``) and
the guard's arithmetic (``engine.guard.evaluate_target``), with the request's
:class:`~engine.proxy.wire.WireApi` rendering each change back into the body. Cleared tool results
stay cleared on later requests, with the same placeholder bytes, so the forwarded prefix stays
byte-stable and provider caching keeps hitting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.limit import Limit
from engine.messages import ToolResultBlock, ToolUseBlock
from engine.policy_settings import ClearToolResultsPolicy, Policies
from engine.proxy.policy.compaction_policy import compact_history
from engine.proxy.policy.edits import (
    Edit,
    PolicyOutcome,
    SessionPolicyState,
    call_limit,
    prompt_tokens,
    result_ref,
)
from engine.proxy.policy.read_result import offload_note
from engine.proxy.wire import WireApi, wire_for
from engine.proxy.wire.shared import ToolResult
from engine.settings import ResolvedModelSettings
from engine.tokens import Tokenizer

if TYPE_CHECKING:
    pass


@dataclass(frozen=True)
class CacheClock:
    """Whether the provider's prompt cache outlived the pause before this request."""

    idle_s: float | None = None
    lifetime_s: int | None = None

    @property
    def cold(self) -> bool:
        return self.idle_s is not None and self.lifetime_s is not None and self.idle_s > self.lifetime_s


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
    wire = wire_for(api)
    if wire is None or not wire.edited or not policies.active:
        return PolicyOutcome()
    clock = cache_clock(wire, body, state, now)
    limit = call_limit(resolved)
    items = list(body.get(wire.history_key) or [])
    results = wire.tool_results(items)
    before = prompt_tokens(wire, body, tokenizer)
    as_sent = before - sum(saved for _, saved in already_saved(results, state, tokenizer))
    # measured on the prompt as it is sent: results cleared or offloaded on earlier requests stay their
    # placeholders, so a history the agent re-sends whole is not "over" while what the model gets is not
    over_limit = limit is not None and as_sent > limit.tokens
    clear = policies.clear_tool_results
    native = None
    if clear is not None and clear.native:  # the provider clears: the body's history is left as it is
        native = wire.with_native_clearing(body, clear)
        clear = None
    if clear is None and policies.guard is not None and policies.guard.action == "compact" and over_limit:
        clear = ClearToolResultsPolicy(trigger=0, keep=1)  # the guard's compaction: clear all but the last
    blobs: list[tuple[str, str, str | None]] = []
    offloaded_now = offload(policies, results, state, blobs)
    newly = clear_results(
        wire, items, results, clear, state, tokenizer, body, as_sent, over_limit, clock, blobs
    )
    new_body, after = sticky_body(wire, body, items, results, state, tokenizer, before)
    edits = described_edits(policies, results, state, tokenizer, offloaded_now, newly, before, after, clock)
    if policies.compaction is not None and limit is not None:
        compact_edit, compacted_body = compact_history(
            wire, new_body or body, policies.compaction, tokenizer, limit, state
        )
        if compact_edit is not None:
            new_body, after = compacted_body, compact_edit.after_tokens
            edits.append(compact_edit)
    betas: tuple[str, ...] = ()
    if native is not None:
        asked, betas = native
        new_body = {**(new_body or body), "context_management": asked["context_management"]}
        edits.append(native_edit(asked, after))
    refusal = guard_refusal(wire, policies, limit, after)
    if refusal is not None and limit is not None:  # (a refusal needs a limit)
        edits.append(Edit("guard", f"prompt {after:,} tokens > limit {limit.tokens:,}", before, after))
    serve = refusal is None and any(r.tool_use_id in state.offloaded for r in results)
    # compaction needs the model's window: a model the settings do not know is told, not compacted
    skipped = ("compaction",) if policies.compaction is not None and limit is None else ()
    if policies.clear_tool_results is not None and policies.clear_tool_results.native and native is None:
        skipped += ("clear_tool_results.native",)  # this API has no provider-side clearing
    return PolicyOutcome(
        body=new_body, refusal=refusal, edits=tuple(edits), blobs=tuple(blobs), skipped=skipped,
        serve_read_result=serve, betas=betas,
    )  # fmt: skip


def native_edit(asked: Mapping[str, Any], tokens: int) -> Edit:
    """The request asked the provider to clear tool results itself (what it cleared, if anything,
    is recorded from its answer): the body's history is unchanged, so it is no compaction of ours."""
    (edit,) = [e for e in asked["context_management"]["edits"] if e.get("type") == "clear_tool_uses_20250919"]
    reason = (
        f"asked the provider to clear old tool results itself (clear_tool_uses_20250919: over "
        f"{edit['trigger']['value']:,} input tokens, keep {edit['keep']['value']})"
    )
    return Edit("clear_tool_results", reason, tokens, tokens, ({"native": True, "edit": edit, "new": False},))


def cache_clock(
    wire: WireApi, body: Mapping[str, Any], state: SessionPolicyState, now: float | None
) -> CacheClock:
    """How long the session idled and how long its cache lives (the session's clock moves to ``now``)."""
    from engine.prompt.cache_policy import SHORTEST_CACHE_S, cache_lifetime_s

    idle = now - state.last_request_at if now is not None and state.last_request_at is not None else None
    # the body is searched for 1-hour breakpoints only after a pause no cache outlives
    lifetime = cache_lifetime_s(wire.provider, body) if idle is not None and idle > SHORTEST_CACHE_S else None
    clock = CacheClock(idle, lifetime)
    state.cache_cold = clock.cold
    if now is not None:
        state.last_request_at = now
    return clock


def already_saved(
    results: Sequence[ToolResult], state: SessionPolicyState, tokenizer: Tokenizer
) -> list[tuple[int, int]]:
    """(item index, tokens saved) of each result sent as its placeholder (cleared or offloaded earlier)."""
    return [(r.index, tokenizer.count(r.text) - tokenizer.count(state.cleared[r.tool_use_id]))
            for r in results if r.tool_use_id in state.cleared]  # fmt: skip


def offload(
    policies: Policies,
    results: Sequence[ToolResult],
    state: SessionPolicyState,
    blobs: list[tuple[str, str, str | None]],
) -> list[ToolResult]:
    """The offload policy: each result over ``threshold_bytes`` becomes its preview and a reference."""
    if policies.offload is None:
        return []
    done: list[ToolResult] = []
    for r in results:
        text = r.text
        if (
            r.tool_use_id not in state.cleared
            and len(text.encode("utf-8")) > policies.offload.threshold_bytes
        ):
            ref = result_ref(r.content)
            state.cleared[r.tool_use_id] = offload_note(r.name, text, ref)
            state.offloaded.add(r.tool_use_id)
            blobs.append((ref, text, r.name))
            done.append(r)
    return done


def clear_results(
    wire: WireApi, items: list[Any], results: Sequence[ToolResult], clear: ClearToolResultsPolicy | None,
    state: SessionPolicyState, tokenizer: Tokenizer, body: Mapping[str, Any], as_sent: int, must: bool,
    clock: CacheClock, blobs: list[tuple[str, str, str | None]],
) -> list[ToolResult]:  # fmt: skip
    """The clear_tool_results policy, over the trigger (or when the prompt ``must`` shrink): the
    engine's clearing on the history as sent, each new placeholder kept in ``state``."""
    if clear is None or not (as_sent > clear.trigger or must):
        return []
    keep = {r.tool_use_id for r in results[len(results) - clear.keep :]} if clear.keep else set()
    candidates = [
        r for r in results
        if r.tool_use_id not in state.cleared and r.tool_use_id not in keep and (r.name or "") not in clear.exclude_tools
    ]  # fmt: skip
    if not candidates or sum(tokenizer.count(r.text) for r in candidates) < clear.clear_at_least:
        return []
    if clear.cache_aware and not clearing_pays(
        clear, items, candidates, results, state, tokenizer, body, must, clock
    ):
        return []
    texts, inputs = engine_clearing(wire, items, clear, state, tokenizer)
    newly = [r for r in results if r.tool_use_id in texts]
    for r in newly:
        state.cleared[r.tool_use_id] = texts[r.tool_use_id]
        blobs.append((result_ref(r.content), r.text, r.name))
    state.cleared_inputs.update(inputs)
    return newly


def engine_clearing(
    wire: WireApi,
    items: list[Any],
    clear: ClearToolResultsPolicy,
    state: SessionPolicyState,
    tokenizer: Tokenizer,
) -> tuple[dict[str, str], dict[str, dict[str, Any]]]:
    """The placeholders (by call id) and cleared inputs the engine's clearing gives the history as
    sent (offloaded results kept as their previews)."""
    from engine.compaction.clearing import plan_clear_tool_results
    from engine.compaction.config import ClearToolResults
    from engine.compaction.result import PlanContext

    messages = wire.to_messages(wire.with_results(items, state.cleared))
    config = ClearToolResults(
        trigger=None, keep=clear.keep, clear_at_least=clear.clear_at_least,
        exclude_tools=tuple(clear.exclude_tools), clear_tool_inputs=clear.clear_tool_inputs,
    )  # fmt: skip
    result = plan_clear_tool_results(
        messages, config, PlanContext(target_tokens=0, tokenizer=tokenizer), keep_ids=state.offloaded
    )
    texts: dict[str, str] = {}
    inputs: dict[str, dict[str, Any]] = {}
    for i in result.cleared:
        for old, new in zip(messages[i].blocks, result.messages[i].blocks, strict=True):
            if new is old:
                continue
            if isinstance(new, ToolResultBlock):
                texts[new.tool_use_id] = new.text
            elif isinstance(new, ToolUseBlock):
                inputs[new.id] = new.input
    return texts, inputs


def clearing_pays(
    policy: ClearToolResultsPolicy, items: list[Any], candidates: Sequence[ToolResult], results: Sequence[ToolResult],
    state: SessionPolicyState, tokenizer: Tokenizer, body: Mapping[str, Any], must: bool, clock: CacheClock,
) -> bool:  # fmt: skip
    """clear_tool_results' ``cache_aware``: the batch pays for the cache rebuild (engine.prompt.cache_policy),
    measured on the history as sent (results cleared earlier count as their placeholders); a cache
    gone cold has nothing to rebuild. ``"strict"`` clears only then, or when the prompt ``must``
    shrink to fit: no warm prefix is ever rewritten."""
    from engine.prompt.cache_policy import CacheRates, plan_request_clearing

    if policy.cache_aware == "strict":
        return clock.cold or must
    model = body.get("model") if isinstance(body.get("model"), str) else None
    decision = plan_request_clearing(
        items, min(r.index for r in candidates), sum(tokenizer.count(r.text) for r in candidates),
        count=tokenizer.count, rates=CacheRates.for_model(model), must_clear=must,
        already_saved=already_saved(results, state, tokenizer), cache_cold=clock.cold,
    )  # fmt: skip
    return decision.clear


def sticky_body(
    wire: WireApi, body: dict[str, Any], items: list[Any], results: Sequence[ToolResult], state: SessionPolicyState,
    tokenizer: Tokenizer, before: int,
) -> tuple[dict[str, Any] | None, int]:  # fmt: skip
    """The body with every result cleared or offloaded so far as its placeholder (None: nothing is),
    read_result offered when a result is offloaded, and its tokens."""
    ids = {r.tool_use_id for r in results}
    if not ids & state.cleared.keys():
        return None, before
    items = wire.with_results(items, {i: t for i, t in state.cleared.items() if i in ids})
    if inputs := {i: v for i, v in state.cleared_inputs.items() if i in ids}:
        items = wire.with_inputs(items, inputs)
    new_body = {**body, wire.history_key: items}
    if ids & state.offloaded:
        new_body["tools"] = wire.with_read_result(body.get("tools"))
    return new_body, prompt_tokens(wire, new_body, tokenizer)


def described_edits(
    policies: Policies, results: Sequence[ToolResult], state: SessionPolicyState, tokenizer: Tokenizer,
    offloaded_now: Sequence[ToolResult], newly: Sequence[ToolResult], before: int, after: int, clock: CacheClock,
) -> list[Edit]:  # fmt: skip
    """The offload and clearing edits this request carries (made now, or sent again)."""
    edits: list[Edit] = []
    offloaded = [r for r in results if r.tool_use_id in state.offloaded]
    if offloaded:
        threshold = policies.offload.threshold_bytes if policies.offload else None
        reason = (
            f"{len(offloaded_now)} tool result(s) over {threshold:,} bytes offloaded; "
            f"{len(offloaded)} in this request are previews with a read_result reference"
            if threshold is not None else "offloaded"
        )  # fmt: skip
        new = {r.tool_use_id for r in offloaded_now}
        edits.append(
            Edit(
                "offload",
                reason,
                before,
                after,
                tuple(_change(r, r.tool_use_id in new, tokenizer) for r in offloaded),
            )
        )
    cleared = [r for r in results if r.tool_use_id in state.cleared and r.tool_use_id not in state.offloaded]
    if cleared:
        fresh = {r.tool_use_id for r in newly}
        reason = (
            f"{len(newly)} more tool result(s) cleared: prompt {before:,} tokens over the trigger"
            if newly
            else "tool results cleared earlier stay cleared (the sent prefix stays byte-stable)"
        )
        if newly and clock.cold and clock.idle_s is not None and clock.lifetime_s is not None:
            reason += (
                f"; the prompt cache had expired (idle {clock.idle_s / 60:.0f} min > {clock.lifetime_s // 60} min), "
                "so clearing rebuilt nothing extra"
            )
        edits.append(Edit("clear_tool_results", reason, before, after,
                          tuple(_change(r, r.tool_use_id in fresh, tokenizer) for r in cleared)))  # fmt: skip
    return edits


def _change(result: ToolResult, new: bool, tokenizer: Tokenizer) -> dict[str, Any]:
    return {"tool_use_id": result.tool_use_id, "tool_name": result.name, "tokens": tokenizer.count(result.text),
            "ref": result_ref(result.content), "new": new}  # fmt: skip


def guard_refusal(
    wire: WireApi, policies: Policies, limit: Limit | None, tokens: int
) -> tuple[int, dict[str, Any]] | None:
    """The guard: a prompt over the limit is refused with the provider's own 400 (agents handle it)."""
    from engine.guard import GuardCounters, evaluate_target

    if (
        policies.guard is None
        or limit is None
        or evaluate_target(GuardCounters(current=tokens), limit.tokens).fits
    ):
        return None
    message = f"prompt is too long: {tokens} tokens > {limit.tokens} maximum"
    return 400, wire.error_body(message, error_type="invalid_request_error", code="context_length_exceeded")
