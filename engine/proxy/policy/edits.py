"""What a policy decides about one request, as values: the session's sticky state, each edit
with tokens before and after, the outcome (the body to forward or a refusal), the call's limit,
and a request's prompt count (each distinct history item counted once). Read by the planner
(:mod:`engine.proxy.policy.policies`), the request path (:mod:`engine.proxy.policy.controller`) and the recorder.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from engine.limit import Limit
from engine.tokens import REPLY_PRIMING_TOKENS, Tokenizer

if TYPE_CHECKING:
    from engine.proxy.wire import WireApi
    from engine.settings import ResolvedModelSettings


@dataclass
class SessionPolicyState:
    """What stays decided for one agent session: tool results cleared (by tool_use id) and their refs."""

    cleared: dict[str, str] = field(default_factory=dict)  # tool_use id -> placeholder text
    cleared_inputs: dict[str, dict[str, Any]] = field(
        default_factory=dict
    )  # tool_use id -> its cleared input
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
    betas: tuple[str, ...] = ()  # provider beta flags the edited request needs (added to its anthropic-beta)

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


def prompt_tokens(wire: WireApi, body: Mapping[str, Any], tokenizer: Tokenizer) -> int:
    """Tokens of a request as sent: system, tools and messages, as ``measure_components`` counts the
    request's view. Where each history item is one message (Anthropic, Chat Completions) each
    distinct item is counted once (an agent re-sends its whole history on every request): a
    policy's planning costs about the new messages, not a parse and count of the 200k-token prompt."""
    from engine.budget import measure_components

    if not wire.per_item:
        view = wire.request_view(body)
        return measure_components(
            tokenizer=tokenizer, system=view.system, tools=view.tools, messages=view.messages
        ).total
    raw = [m for m in body.get(wire.history_key) or [] if m is not None]
    system = [wire.is_system(m) for m in raw]
    view = wire.request_view({**body, wire.history_key: [m for m, s in zip(raw, system, strict=True) if s]})
    head = measure_components(tokenizer=tokenizer, system=view.system, tools=view.tools).total
    talk = results = 0
    for item, in_system in zip(raw, system, strict=True):
        if not in_system:
            t, r = _message_parts(wire, item, tokenizer)
            talk, results = talk + t, results + r
    return head + talk + results + (REPLY_PRIMING_TOKENS if talk or results else 0)


#: (conversation, tool-result) tokens of history items seen, FIFO-bounded, by (api, tokenizer, the
#: item's 64-bit hash): no message text is kept alive (a collision, ~1e-11 here, would skew one count).
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


def _message_parts(wire: WireApi, raw: Any, tokenizer: Tokenizer) -> tuple[int, int]:
    key = (wire.name, tokenizer.id, hash(_frozen(raw)))
    parts = _MESSAGE_PARTS.get(key)
    if parts is None:
        parts = tokenizer.count_message_parts(wire.one_message(raw))
        with _MESSAGE_PARTS_LOCK:
            if len(_MESSAGE_PARTS) >= _MESSAGE_PARTS_MAX:
                for old in list(_MESSAGE_PARTS)[: _MESSAGE_PARTS_MAX // 2]:  # the oldest half
                    _MESSAGE_PARTS.pop(old, None)
            _MESSAGE_PARTS[key] = parts
    return parts
