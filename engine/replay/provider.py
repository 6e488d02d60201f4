"""The providers' own context management, modelled from their documented shapes (pure).

- Anthropic ``clear_tool_uses_20250919`` (beta ``context-management-2025-06-27``): the server edits
  each request it receives; the client keeps sending its whole history. Over ``trigger`` input
  tokens, the results of the tool uses older than the ``keep`` most recent are replaced by a
  placeholder (``exclude_tools`` never; with ``clear_tool_inputs`` the calls' inputs too), and only
  when that frees at least ``clear_at_least`` tokens. Being stateless, the cleared span moves with
  every request past the trigger: the prefix changes from the first newly cleared result on.
- Anthropic ``compact_20260112`` (beta ``compact-2026-01-12``) and OpenAI Responses
  ``context_management: [{"type": "compaction", "compact_threshold": N}]``: over the threshold the
  server summarizes the context in a compaction iteration of its own (billed apart from the
  answer's); the client then sends the compaction block or item with what followed it, and the
  server ignores what came before it. :func:`plan_server_compaction` decides, the replay keeps the
  block between calls.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.messages import Message, ToolResultBlock, ToolUseBlock

#: What the provider leaves in place of a cleared tool result (its own words are not documented;
#: any short placeholder counts alike).
CLEARED_PLACEHOLDER = "[tool result cleared by the provider]"
CLEAR_TOOL_USES = "clear_tool_uses_20250919"
ANTHROPIC_COMPACT = "compact_20260112"
OPENAI_COMPACTION = "compaction"


class _Edit(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ClearToolUses(_Edit):
    """Anthropic's ``clear_tool_uses_20250919`` edit, its documented defaults."""

    type: Literal["clear_tool_uses_20250919"] = CLEAR_TOOL_USES
    trigger: int = Field(100_000, gt=0, description="Input tokens above which the edit applies.")
    keep: int = Field(3, ge=0, description="Most recent tool uses whose results stay.")
    clear_at_least: int = Field(0, ge=0, description="Apply only when this many input tokens are freed.")
    exclude_tools: tuple[str, ...] = Field((), description="Tools whose uses are never cleared.")
    clear_tool_inputs: bool | tuple[str, ...] = Field(
        False, description="Also clear the cleared calls' inputs: all (true) or these tools'."
    )

    @classmethod
    def from_wire(cls, edit: Mapping[str, Any]) -> ClearToolUses:
        """The edit as a request's ``context_management.edits`` entry states it."""
        fields: dict[str, Any] = {}
        for name in ("trigger", "keep", "clear_at_least"):
            value = edit.get(name)
            if isinstance(value, Mapping) and value.get("value") is not None:
                fields[name] = value["value"]
        if edit.get("exclude_tools"):
            fields["exclude_tools"] = tuple(edit["exclude_tools"])
        inputs = edit.get("clear_tool_inputs")
        if inputs is not None:
            fields["clear_tool_inputs"] = tuple(inputs) if isinstance(inputs, list) else bool(inputs)
        return cls(**fields)


class AnthropicCompact(_Edit):
    """Anthropic's server-side compaction ``compact_20260112``."""

    type: Literal["compact_20260112"] = ANTHROPIC_COMPACT
    trigger: int = Field(150_000, ge=50_000, description="Input tokens above which the server compacts.")
    instructions: str | None = Field(None, description="What the summary must keep (replaces the default).")
    pause_after_compaction: bool = Field(
        False,
        description="Stop after the compaction block: the client sends the request again (same tokens).",
    )


class OpenAICompaction(_Edit):
    """OpenAI Responses' server-side compaction (``context_management`` entry of type ``compaction``)."""

    type: Literal["compaction"] = OPENAI_COMPACTION
    compact_threshold: int = Field(gt=0, description="Rendered tokens above which the server compacts.")

    @property
    def trigger(self) -> int:
        return self.compact_threshold

    @property
    def instructions(self) -> str | None:
        return None


ServerCompaction = AnthropicCompact | OpenAICompaction


@dataclass(frozen=True)
class ClearedHistory:
    """A history after the provider's clearing; ``cleared_uses`` 0 when the edit did not apply."""

    messages: tuple[Message, ...]
    cleared_uses: int = 0
    cleared_tokens: int = 0
    reason: str = ""


def clear_tool_uses(
    history: Sequence[Message], edit: ClearToolUses, prompt_tokens: int, count: Callable[[Message], int]
) -> ClearedHistory:
    """What the server makes of one request under ``clear_tool_uses_20250919``.

    ``prompt_tokens`` is the whole request's input (the trigger's measure); ``count`` a message's tokens."""
    unchanged = ClearedHistory(tuple(history))
    if prompt_tokens <= edit.trigger:
        return unchanged
    uses = [
        b for m in history if isinstance(m.content, list) for b in m.content if isinstance(b, ToolUseBlock)
    ]
    kept = {b.id for b in uses[len(uses) - edit.keep :]} if edit.keep else set()
    clear = {b.id: b.name for b in uses if b.id not in kept and b.name not in edit.exclude_tools}
    inputs = edit.clear_tool_inputs
    clear_inputs = {i for i, name in clear.items() if inputs is True or (inputs and name in inputs)}
    out: list[Message] = []
    freed = cleared = 0
    for message in history:
        edited = _cleared(message, clear, clear_inputs)
        if edited is not message:
            freed += count(message) - count(edited)
            cleared += sum(isinstance(b, ToolResultBlock) and b.tool_use_id in clear for b in message.content)
        out.append(edited)
    if cleared == 0 or freed < edit.clear_at_least:
        return unchanged
    reason = (
        f"{CLEAR_TOOL_USES}: {prompt_tokens:,} input tokens > trigger {edit.trigger:,}: cleared {cleared} tool "
        f"result(s), {freed:,} tokens (kept the last {edit.keep})"
    )
    return ClearedHistory(tuple(out), cleared, freed, reason)


def _cleared(message: Message, clear: Mapping[str, str], clear_inputs: set[str]) -> Message:
    if not isinstance(message.content, list):
        return message
    blocks: list[Any] = []
    changed = False
    for block in message.content:
        if (
            isinstance(block, ToolResultBlock)
            and block.tool_use_id in clear
            and block.content != CLEARED_PLACEHOLDER
        ):
            block, changed = block.model_copy(update={"content": CLEARED_PLACEHOLDER}), True
        elif isinstance(block, ToolUseBlock) and block.id in clear_inputs and block.input:
            block, changed = block.model_copy(update={"input": {}}), True
        blocks.append(block)
    return message.model_copy(update={"content": blocks}) if changed else message


@dataclass(frozen=True)
class CompactionPlan:
    """The span a server-side compaction summarizes (``history[:through]``) and what stays after it."""

    through: int
    reason: str


def plan_server_compaction(
    sent: Sequence[Message], edit: ServerCompaction, prompt_tokens: int
) -> CompactionPlan | None:
    """Whether the server compacts a request of ``prompt_tokens`` input tokens, and what.

    The summary covers everything before the request's new input (the messages after the last
    assistant message), which the answer then continues from; None when under the threshold or
    nothing precedes the new input."""
    if prompt_tokens <= edit.trigger:
        return None
    through = len(sent)
    while through and sent[through - 1].role != "assistant":
        through -= 1
    if through == 0:
        return None
    return CompactionPlan(
        through,
        f"{edit.type}: {prompt_tokens:,} input tokens > trigger {edit.trigger:,}: {through} messages summarized",
    )
