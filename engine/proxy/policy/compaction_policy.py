"""The compaction policy on a proxied request: over ``trigger`` of the call's limit, the history
after its system head is compacted by the engine (``engine.compaction.operations.compact``, offline:
no model call on the request path) and rendered back in the request's wire shape; while the agent
keeps re-sending the history it replaced, the same compacted prefix is sent again, byte for byte
(the provider's prompt cache keeps hitting). With ``cache_aware`` it compacts only once the cache
has expired or the prompt would not fit.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from engine.limit import Limit
from engine.policy_settings import CompactionPolicy
from engine.proxy.policy.edits import Edit, SessionPolicyState, prompt_tokens
from engine.proxy.wire import WireApi
from engine.proxy.wire.shared import identity_hash, strip_markers
from engine.tokens import Tokenizer

if TYPE_CHECKING:
    from engine.compaction import CompactionResult


def compact_history(
    wire: WireApi, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer, limit: Limit,
    state: SessionPolicyState,
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy over the history after its system head: reuse the compacted prefix
    (same bytes) while the agent re-sends the history it replaced; compact again when the prompt
    passes ``trigger`` of the limit (with ``cache_aware``, only once the cache has expired or the
    prompt would not fit: a compaction rewrites the whole cached history)."""
    from engine.compaction import OfflineSummarizer
    from engine.compaction.operations import compact

    raw = list(body.get(wire.history_key) or [])
    head_n = wire.head_length(raw)
    head, rest = raw[:head_n], raw[head_n:]
    keys = [identity_hash(item) for item in rest]
    before = prompt_tokens(wire, body, tokenizer)
    current, reused = body, False
    n = len(state.compacted_keys)
    if n and keys[:n] == state.compacted_keys:
        current, reused = {**body, wire.history_key: [*head, *state.compacted, *rest[n:]]}, True
    tokens = prompt_tokens(wire, current, tokenizer) if reused else before
    threshold = limit.threshold(policy.trigger)
    waits = bool(policy.cache_aware) and not state.cache_cold and tokens <= limit.tokens
    if tokens <= threshold or waits:
        if not reused:
            return None, body
        return Edit("compaction", "the compacted history is sent again while the agent re-sends it", before, tokens,
                    ({"strategy": policy.strategy, "reused": True, "replaced_messages": n},)), current  # fmt: skip
    converted = functools.cache(lambda: wire.to_messages(rest))
    result = compact(
        converted(), strategy=policy.strategy, target_tokens=max(1, threshold // 2), tokenizer=tokenizer,
        summarizer=OfflineSummarizer(),
    )  # fmt: skip
    if result.after_tokens >= result.before_tokens:
        return None, current if reused else body
    state.compacted_keys = keys
    state.compacted = rendered_compaction(wire, rest, converted(), result)
    compacted = {**body, wire.history_key: [*head, *state.compacted]}
    after = prompt_tokens(wire, compacted, tokenizer)
    reason = f"prompt {tokens:,} tokens over {policy.trigger:.0%} of the limit ({threshold:,}): compacted with {policy.strategy}"
    if policy.cache_aware:
        reason += (
            "; the prompt cache had expired, so the rewrite rebuilt nothing extra"
            if state.cache_cold
            else f"; it would not fit the limit ({limit.tokens:,} tokens) otherwise"
        )
    changes = ({"strategy": policy.strategy, "strategies_run": list(result.strategies_run), "reused": False,
                "replaced_messages": len(rest), "sent_messages": len(state.compacted),
                "summary": result.summary},)  # fmt: skip
    return Edit("compaction", reason, before, after, changes), compacted


def rendered_compaction(
    wire: WireApi, rest: Sequence[Any], converted: Sequence[Any], result: CompactionResult
) -> list[Any]:
    """A compaction's history in the wire's shape: the summary and the messages it rewrote rendered,
    the agent's own items it kept at the end sent exactly as the agent sent them (no cache markers)."""
    compacted = list(result.messages)
    starts = wire.message_starts(rest)
    same = 0
    if len(starts) == len(converted):
        while same < min(len(converted), len(compacted)) - 1 and converted[-1 - same] == compacted[-1 - same]:
            same += 1
    tail = starts[len(converted) - same] if same else len(rest)
    kept = len(wire.message_starts(rest[tail:]))
    rendered = wire.render(compacted[: len(compacted) - kept], result.summary, keep_meta=True)
    return [*rendered, *strip_markers(list(rest[tail:]))]
