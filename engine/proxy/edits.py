"""What a policy decides about one request, as values: the session's sticky state, each edit
with tokens before and after, and the outcome (the body to forward or a refusal). Shared by the
planners of every API (:mod:`engine.proxy.policies`, :mod:`engine.proxy.openai_policies`).
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.limit import Limit
from engine.proxy import apis
from engine.tokens import REPLY_PRIMING_TOKENS, Tokenizer

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
    cache_cold: bool = False  # the provider's cache expired before the request being planned


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


def call_limit(resolved: ResolvedModelSettings | None) -> Limit | None:
    """The one limit of a proxied call (None for a model with no known window): the compaction
    trigger, the guard's refusal and the recorded ``limit_tokens`` all compare with its ``tokens``."""
    return Limit.of_settings(resolved) if resolved is not None else None


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
    """Tokens of a request as sent: system, tools and messages, as ``measure_components`` counts the
    request's view. Anthropic and Chat Completions messages are counted once per distinct message
    (an agent re-sends its whole history on every request): a policy's planning costs about the new
    messages, not a parse and count of the 200k-token prompt."""
    from engine.budget import measure_components

    if api not in _PER_MESSAGE_APIS:
        return _view_tokens(api, body, tokenizer)
    raw = [m for m in body.get("messages") or [] if m is not None]
    in_system = [api == apis.OPENAI_CHAT and apis.is_system_message(m) for m in raw]
    system_messages = [m for m, system in zip(raw, in_system, strict=True) if system]
    view = apis.request_view(api, {**body, "messages": system_messages})
    head = measure_components(tokenizer=tokenizer, system=view.system, tools=view.tools).total
    talk = results = 0
    for message, system in zip(raw, in_system, strict=True):
        if not system:
            t, r = _message_parts(api, message, tokenizer)
            talk, results = talk + t, results + r
    return head + talk + results + (REPLY_PRIMING_TOKENS if talk or results else 0)


def _view_tokens(api: str, body: Mapping[str, Any], tokenizer: Tokenizer) -> int:
    """``prompt_tokens`` the plain way: the whole request converted, then measured."""
    from engine.budget import measure_components

    view = apis.request_view(api, body)
    return measure_components(
        tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
    ).total


#: APIs whose request messages map one to one onto ours (Responses items merge by role).
_PER_MESSAGE_APIS = frozenset({apis.ANTHROPIC_MESSAGES, apis.OPENAI_CHAT})
#: (conversation, tool-result) tokens of request messages seen, FIFO-bounded, by (api, tokenizer, the
#: message's 64-bit hash): no message text is kept alive (a collision, ~1e-11 here, would skew one count).
_MESSAGE_PARTS: dict[tuple[str, str, int], tuple[int, int]] = {}
_MESSAGE_PARTS_MAX = 20_000
_MESSAGE_PARTS_LOCK = threading.Lock()


def _frozen(value: Any) -> Any:
    """A JSON value as nested tuples: hashable and equal exactly when the value is."""
    if isinstance(value, dict):
        return ("{", *((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("[", *(_frozen(v) for v in value))
    return (type(value).__name__, value)


def _message_parts(api: str, raw: Any, tokenizer: Tokenizer) -> tuple[int, int]:
    key = (api, tokenizer.id, hash(_frozen(raw)))
    parts = _MESSAGE_PARTS.get(key)
    if parts is None:
        parts = tokenizer.count_message_parts(apis.one_message(api, raw))
        with _MESSAGE_PARTS_LOCK:
            if len(_MESSAGE_PARTS) >= _MESSAGE_PARTS_MAX:
                for old in list(_MESSAGE_PARTS)[: _MESSAGE_PARTS_MAX // 2]:  # the oldest half
                    _MESSAGE_PARTS.pop(old, None)
            _MESSAGE_PARTS[key] = parts
    return parts


def compact_history(
    api: str, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer,
    resolved: ResolvedModelSettings, state: SessionPolicyState, *, head: Sequence[Any], rest: Sequence[Any],
    keys: list[Any], converted: Callable[[], list[Message]], render: Callable[[CompactionResult], list[Any]],
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy over ``rest``, the history after the ``head`` no API compacts (its
    items' ``keys``; ``converted`` gives its messages, asked only when compaction runs): reuse the compacted prefix while the agent
    re-sends the history it replaced; compact again when the prompt passes ``trigger`` of the
    window (with ``cache_aware``, only once the cache has expired or the prompt would not fit the
    window: a compaction rewrites the whole cached history). ``render`` gives a compaction's history
    in the API's shape."""
    from engine.compaction import OfflineSummarizer
    from engine.compaction.operations import compact

    key = messages_key_of(api)
    before = prompt_tokens(api, body, tokenizer)
    current, reused = body, False
    n = len(state.compacted_keys)
    if n and keys[:n] == state.compacted_keys:
        current, reused = {**body, key: [*head, *state.compacted, *rest[n:]]}, True
    tokens = prompt_tokens(api, current, tokenizer) if reused else before
    limit = Limit.of_settings(resolved)
    threshold = limit.threshold(policy.trigger)
    waits = bool(policy.cache_aware) and not state.cache_cold and tokens <= limit.tokens
    if tokens <= threshold or waits:
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
