"""What a policy decides about one request, as values: the session's sticky state, each edit
with tokens before and after, and the outcome (the body to forward or a refusal). Shared by the
planners of every API (:mod:`engine.proxy.policies`, :mod:`engine.proxy.openai_policies`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from engine.proxy import apis
from engine.tokens import Tokenizer


@dataclass
class SessionPolicyState:
    """What stays decided for one agent session: tool results cleared (by tool_use id) and their refs."""

    cleared: dict[str, str] = field(default_factory=dict)  # tool_use id -> placeholder text
    offloaded: set[str] = field(default_factory=set)  # tool_use ids whose result is a preview + ref
    compacted_keys: list[Any] = field(default_factory=list)  # message keys the compacted prefix replaces
    compacted: list[Any] = field(default_factory=list)  # that prefix, rendered once (same bytes each time)


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
