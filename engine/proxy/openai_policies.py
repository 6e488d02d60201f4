"""The offload and compaction policies for OpenAI requests (Chat Completions and Responses).

``engine.proxy.policies.plan_edits`` offloads large tool results the same way for every API;
this module holds what differs for OpenAI: the ``read_result`` tool in OpenAI's shapes
(``with_read_result``), the compaction of a Chat history or of Responses ``input`` items with
the system/developer head kept verbatim and the compacted prefix re-sent byte for byte while
the agent re-sends the original (``plan_openai_compaction``), and the proxy's own
``read_result`` rounds (``serve_reads``): the model's read_result calls are answered here and
the upstream is called again, so the agent gets one answer, JSON or SSE as it asked.
"""

from __future__ import annotations

import functools
import hashlib
import json
from typing import TYPE_CHECKING, Any

from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.proxy import apis
from engine.proxy.edits import Edit, SessionPolicyState, compact_history, messages_key_of
from engine.proxy.openai_reads import serve_reads  # noqa: F401  (re-exported)
from engine.proxy.read_result import READ_RESULT_NAME, READ_RESULT_TOOL

if TYPE_CHECKING:  # the proxy's request path imports this module lazily
    from engine.compaction import CompactionResult
    from engine.policy_settings import CompactionPolicy
    from engine.settings import ResolvedModelSettings
    from engine.tokens import Tokenizer

_SYSTEM_ROLES = ("system", "developer")
_SUMMARY_NOTE = (
    "<ctxdesk-summary>\nSummary of the earlier conversation (compacted by ctxdesk):\n{}\n</ctxdesk-summary>"
)


# -- the read_result tool -------------------------------------------------------------------------


def read_result_tool(api: str) -> dict[str, Any]:
    """The proxy's read_result tool in the request's own shape."""
    spec = READ_RESULT_TOOL
    if api == apis.OPENAI_CHAT:
        function = {
            "name": spec["name"],
            "description": spec["description"],
            "parameters": spec["input_schema"],
        }
        return {"type": "function", "function": function}
    if api == apis.OPENAI_RESPONSES:
        return {"type": "function", "name": spec["name"], "description": spec["description"],
                "parameters": spec["input_schema"]}  # fmt: skip
    return dict(spec)


def _tool_name(tool: Any) -> str | None:
    if not isinstance(tool, dict):
        return None
    function = tool.get("function")
    return function.get("name") if isinstance(function, dict) else tool.get("name")


def with_read_result(api: str, tools: list[Any] | None) -> list[Any]:
    """The request's tools with read_result added (unchanged when it is already offered)."""
    tools = list(tools or [])
    if any(_tool_name(t) == READ_RESULT_NAME for t in tools):
        return tools
    return [*tools, read_result_tool(api)]


# -- compaction -----------------------------------------------------------------------------------


def _is_system(api: str, item: Any) -> bool:
    if not isinstance(item, dict) or item.get("role") not in _SYSTEM_ROLES:
        return False
    return api == apis.OPENAI_CHAT or item.get("type", "message") == "message"


def item_key(item: Any) -> str:
    """One message or item as sent, hashed: the agent's re-sent history maps onto these."""
    return hashlib.sha256(
        json.dumps(item, ensure_ascii=False, sort_keys=True, default=str).encode()
    ).hexdigest()


def _result_text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    return "\n".join(getattr(part, "text", "") for part in block.content)


def render_responses(messages: list[Message], summary: str | None) -> list[dict[str, Any]]:
    """A compacted history as Responses input items (summary first; reasoning items dropped:
    they cannot be re-sent without the provider's own encrypted content)."""
    items: list[dict[str, Any]] = []
    if summary:
        items.append({"type": "message", "role": "user",
                      "content": [{"type": "input_text", "text": _SUMMARY_NOTE.format(summary)}]})  # fmt: skip
    for message in messages:
        blocks = [TextBlock(text=message.content)] if isinstance(message.content, str) else message.content
        for block in blocks:
            if isinstance(block, TextBlock) and block.text:
                kind = "output_text" if message.role == "assistant" else "input_text"
                role = "assistant" if message.role == "assistant" else "user"
                items.append(
                    {"type": "message", "role": role, "content": [{"type": kind, "text": block.text}]}
                )
            elif isinstance(block, ToolUseBlock):
                items.append({"type": "function_call", "call_id": block.id, "name": block.name,
                              "arguments": json.dumps(block.input, ensure_ascii=False)})  # fmt: skip
            elif isinstance(block, ToolResultBlock):
                items.append({"type": "function_call_output", "call_id": block.tool_use_id,
                              "output": _result_text(block)})  # fmt: skip
            elif not isinstance(block, ThinkingBlock):
                text = json.dumps(block.model_dump(), ensure_ascii=False, default=str)
                items.append(
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
                )
    return items


def render_openai(api: str, messages: list[Message], summary: str | None) -> list[dict[str, Any]]:
    if api == apis.OPENAI_RESPONSES:
        return render_responses(messages, summary)
    from engine.proxy.live import render

    return render(api, messages, summary, keep_meta=True)


def _item_role(api: str, item: Any) -> str | None:
    """The role of the message an item joins when converted (None: not part of the history)."""
    if not isinstance(item, dict):
        return "user"
    if _is_system(api, item) or (api == apis.OPENAI_CHAT and item.get("role") in _SYSTEM_ROLES):
        return None
    if api == apis.OPENAI_CHAT:
        return str(item.get("role"))
    kind = item.get("type", "message")
    if kind == "message":
        return "assistant" if item.get("role") == "assistant" else "user"
    if kind in ("function_call", "custom_tool_call", "local_shell_call", "web_search_call", "reasoning"):
        return "assistant"
    return "user"


def message_starts(api: str, items: list[Any]) -> list[int]:
    """Where each converted message starts among ``items`` (Chat: one message per item;
    Responses: consecutive items of one role make one message)."""
    starts: list[int] = []
    previous: str | None = None
    for index, item in enumerate(items):
        role = _item_role(api, item)
        if role is None:
            continue
        if api == apis.OPENAI_CHAT or role != previous:
            starts.append(index)
        previous = role
    return starts


def _kept_tail(api: str, rest: list[Any], converted: list[Message], compacted: list[Message]) -> int:
    """Index in ``rest`` from which the compacted history keeps the agent's items unchanged (so
    they are re-sent exactly as the agent sent them); ``len(rest)`` when none are."""
    starts = message_starts(api, rest)
    if len(starts) != len(converted):
        return len(rest)
    same = 0
    while (same < min(len(converted), len(compacted)) - 1
           and converted[-1 - same] == compacted[-1 - same]):  # fmt: skip
        same += 1
    return starts[len(converted) - same] if same else len(rest)


def plan_openai_compaction(
    api: str, body: dict[str, Any], policy: CompactionPolicy, tokenizer: Tokenizer,
    resolved: ResolvedModelSettings, state: SessionPolicyState,
) -> tuple[Edit | None, dict[str, Any]]:  # fmt: skip
    """The compaction policy for OpenAI: reuse the compacted prefix (same bytes) while the agent
    re-sends the history it replaced; compact again when the prompt passes ``trigger`` of the
    window. System and developer messages at the head are never compacted."""
    raw = list(body.get(messages_key_of(api)) or [])
    head_n = 0
    while head_n < len(raw) and _is_system(api, raw[head_n]):
        head_n += 1
    head, rest = raw[:head_n], raw[head_n:]
    converted = functools.cache(lambda: apis.convert_messages(api, rest))  # only once compaction runs

    def rendered(result: CompactionResult) -> list[Any]:
        tail = _kept_tail(api, rest, converted(), list(result.messages))
        messages = list(result.messages)
        if len(rest) - tail:
            messages = messages[: len(messages) - len(message_starts(api, rest[tail:]))]
        return [*render_openai(api, messages, result.summary), *rest[tail:]]

    return compact_history(
        api, body, policy, tokenizer, resolved, state, head=head, rest=rest, keys=[item_key(item) for item in rest],
        converted=converted, render=rendered,
    )  # fmt: skip
