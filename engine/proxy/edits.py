"""What a policy decides about one request, as values: the session's sticky state, each edit
with tokens before and after, and the outcome (the body to forward or a refusal). Shared by the
planners of every API (:mod:`engine.proxy.policies`, :mod:`engine.proxy.openai_policies`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.proxy import apis
from engine.tokens import Tokenizer

if TYPE_CHECKING:
    from engine.compaction import CompactionResult
    from engine.messages import Message
    from engine.policy_settings import CompactionPolicy
    from engine.settings import ResolvedModelSettings


@dataclass
class SessionPolicyState:
    """What stays decided for one agent session: tool results cleared (by tool_use id) and their refs."""

    cleared: dict[str, str] = field(default_factory=dict)  # tool_use id -> placeholder text
    offloaded: set[str] = field(default_factory=set)  # tool_use ids whose result is a preview + ref
    compacted_keys: list[Any] = field(default_factory=list)  # message keys the compacted prefix replaces
    compacted: list[Any] = field(default_factory=list)  # that prefix, rendered once (same bytes each time)
    last_request_at: float | None = None  # when the session's previous request was planned (monotonic s)


@dataclass(frozen=True)
class Edit:
    policy: str
    reason: str
    before_tokens: int
    after_tokens: int
    changes: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class PolicyOutcome:
    """The body to forward (None: unchanged), a refusal to answer instead, and what was done."""

    body: dict[str, Any] | None = None
    refusal: tuple[int, dict[str, Any]] | None = None
    edits: tuple[Edit, ...] = ()
    blobs: tuple[tuple[str, str, str | None], ...] = ()  # (ref, original content, tool name) to keep
    skipped: tuple[str, ...] = ()
    serve_read_result: bool = False  # the request offers read_result: the proxy answers its calls

    @property
    def changed(self) -> bool:
        return self.body is not None


def result_ref(content: Any) -> str:
    """A tool result's reference: stable for the same content, so placeholders are byte-stable."""
    return (
        "res_"
        + hashlib.sha256(json.dumps(content, ensure_ascii=False, sort_keys=True).encode()).hexdigest()[:16]
    )


def content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return json.dumps(content, ensure_ascii=False)


def messages_key_of(api: str) -> str:
    return "input" if api == apis.OPENAI_RESPONSES else "messages"


def placeholder(name: str | None, content: Any, ref: str) -> str:
    size = len(content_text(content).encode("utf-8"))
    return f"[ctxdesk cleared this tool result ({name or 'tool'}, {size:,} bytes, ref {ref}) to save context]"


def prompt_tokens(api: str, body: Mapping[str, Any], tokenizer: Tokenizer) -> int:
    from engine.budget import measure_components

    view = apis.request_view(api, body)
    return measure_components(
        tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
    ).total


def compact_history(
    api: str, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer,
    resolved: ResolvedModelSettings, state: SessionPolicyState, *, head: Sequence[Any], rest: Sequence[Any],
    keys: list[Any], converted: Callable[[], list[Message]], render: Callable[[CompactionResult], list[Any]],
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy over ``rest``, the history after the ``head`` no API compacts (its
    items' ``keys``; ``converted`` gives its messages, asked only when compaction runs): reuse the compacted prefix while the agent
    re-sends the history it replaced; compact again when the prompt passes ``trigger`` of the
    window. ``render`` gives a compaction's history in the API's shape."""
    from engine.compaction import OfflineSummarizer
    from engine.compaction.operations import compact

    key = messages_key_of(api)
    before = prompt_tokens(api, body, tokenizer)
    current, reused = body, False
    n = len(state.compacted_keys)
    if n and keys[:n] == state.compacted_keys:
        current, reused = {**body, key: [*head, *state.compacted, *rest[n:]]}, True
    tokens = prompt_tokens(api, current, tokenizer) if reused else before
    threshold = int(resolved.budget_tokens * policy.trigger)
    if tokens <= threshold:
        if not reused:
            return None, body
        return Edit("compaction", "the compacted history is sent again while the agent re-sends it", before, tokens,
                    ({"strategy": policy.strategy, "reused": True, "replaced_messages": n},)), current  # fmt: skip
    result = compact(
        converted(), strategy=policy.strategy, target_tokens=max(1, threshold // 2), tokenizer=tokenizer,
        summarizer=OfflineSummarizer(),
    )  # fmt: skip
    if result.after_tokens >= result.before_tokens:
        return None, current if reused else body
    state.compacted_keys = keys
    state.compacted = render(result)
    compacted = {**body, key: [*head, *state.compacted]}
    after = prompt_tokens(api, compacted, tokenizer)
    reason = f"prompt {tokens:,} tokens over {policy.trigger:.0%} of the window ({threshold:,}): compacted with {policy.strategy}"
    changes = ({"strategy": policy.strategy, "strategies_run": list(result.strategies_run), "reused": False,
                "replaced_messages": len(rest), "sent_messages": len(state.compacted),
                "summary": result.summary},)  # fmt: skip
    return Edit("compaction", reason, before, after, changes), compacted
