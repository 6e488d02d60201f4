"""Tool execution for the session manager: the built-in tools (read_result, tool_search,
compact_context) and the agent's own handlers, large outputs offloaded to the result store.

``ToolExecutor.run_reply`` runs the tool uses of one reply through the session's guard (each
output reserved before it joins the context) and returns the results message, its events and a
final report if one was given; it records nothing: the session manager appends the message and
its events in one transaction.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from engine.compaction import COMPACT_CONTEXT_TOOL, Summarizer, run_compact_context_tool
from engine.deferral import TOOL_SEARCH_TOOL, ToolRegistry, ToolSpec, run_tool_search_tool
from engine.errors import SummarizerUnavailableError, ValidationError
from engine.events import ContextEvent
from engine.guard import FINAL_REPORT_TOOL, FINAL_REPORT_TOOL_NAME, REASON_TOKEN_BUDGET, ContextGuard
from engine.messages import Message, ToolResultBlock, ToolUseBlock
from engine.offload import READ_RESULT_TOOL, ResultStore, offload_or_inline, run_read_result_tool
from engine.settings import ResolvedModelSettings
from engine.store import SessionStore, ToolRecord
from engine.tokens import Tokenizer

logger = logging.getLogger("engine.session")

#: ctxdesk's own tools: an agent's handlers may not replace them (findings leave them out too).
BUILTIN_TOOL_NAMES = (
    READ_RESULT_TOOL["name"],
    TOOL_SEARCH_TOOL["name"],
    COMPACT_CONTEXT_TOOL["name"],
    FINAL_REPORT_TOOL_NAME,
)

ToolHandler = Callable[[dict[str, Any]], Any]
ToolOutcome = tuple[str, bool, list[ContextEvent]]
_EMPTY_RESULT = ToolResultBlock(tool_use_id="framing", content="")


def check_handlers(handlers: Mapping[str, ToolHandler] | None) -> dict[str, ToolHandler]:
    """The agent's tool handlers; ValidationError when one would replace a built-in tool."""
    out = dict(handlers or {})
    clash = sorted(set(out) & set(BUILTIN_TOOL_NAMES))
    if clash:
        raise ValidationError(f"tool handlers may not replace built-in tools {clash}", field="tool_handlers")
    return out


def tool_registry(
    tools: Sequence[dict[str, Any] | ToolSpec], tokenizer: Tokenizer, budget_tokens: int | None
) -> ToolRegistry:
    """The session's tools (definitions or :class:`ToolSpec`) and the built-ins every session has."""
    specs = [t if isinstance(t, ToolSpec) else ToolSpec.from_definition(t) for t in tools]
    builtin = [ToolSpec(definition=READ_RESULT_TOOL), ToolSpec(definition=COMPACT_CONTEXT_TOOL)]
    return ToolRegistry([*specs, *builtin], tokenizer=tokenizer, budget_tokens=budget_tokens)


def tool_records(registry: ToolRegistry, tokenizer: Tokenizer) -> list[ToolRecord]:
    """What the store keeps of every tool a session may offer (``session_tools``)."""
    specs = [*registry.tools, ToolSpec(definition=TOOL_SEARCH_TOOL), ToolSpec(definition=FINAL_REPORT_TOOL)]
    return [
        ToolRecord(
            name=s.name,
            category=s.category,
            server=s.server,
            tokens=tokenizer.count_tool(s.definition),
            definition=s.definition,
        )
        for s in specs
    ]


@dataclass(frozen=True)
class ReplyResults:
    """The tool results of one reply: the user message that carries them, the events of running
    and reserving them, and the final report when final_report was called."""

    message: Message
    events: list[ContextEvent]
    final_report: str | None


class ToolExecutor:
    """Runs one tool call of a session: built-ins first, then the agent's handlers."""

    def __init__(
        self,
        store: SessionStore,
        session_id: str,
        *,
        registry: ToolRegistry,
        results: ResultStore,
        handlers: Mapping[str, ToolHandler],
        summarizer: Summarizer,
        compaction_fields: Callable[[], dict[str, Any]],
    ) -> None:
        self.store, self.session_id = store, session_id
        self.registry, self.results, self.handlers = registry, results, check_handlers(handlers)
        self.summarizer = summarizer
        self.compaction_fields = compaction_fields
        #: Bytes of tool output held in the result store instead of the context.
        self.offloaded_bytes = 0
        #: Set when compact_context replaced the history the next request sends.
        self.history_replaced = False

    def run_reply(
        self,
        uses: Sequence[ToolUseBlock],
        guard: ContextGuard,
        settings: ResolvedModelSettings,
        *,
        turn_index: int,
        message_seq: int,
    ) -> ReplyResults:
        """Run one reply's tool uses; ``message_seq`` is the seq the results message will get."""
        tokenizer = self.results.tokenizer
        blocks: list[ToolResultBlock] = []
        events: list[ContextEvent] = []
        report: str | None = None
        # The results message's own framing goes into the next request with its first block.
        framing = tokenizer.count_message(Message(role="user", content=[_EMPTY_RESULT]))
        framing -= tokenizer.count_block(_EMPTY_RESULT)
        if framing > 0:
            guard.add_pending(framing, message_seq=message_seq)
        for use in uses:
            self.registry.record_use(use.name, turn_index)
            if use.name == FINAL_REPORT_TOOL_NAME:
                report = str(use.input.get("report") or "").strip() or "(empty final report)"
                blocks.append(
                    ToolResultBlock(
                        tool_use_id=use.id, content="Final report delivered; the session has ended."
                    )
                )
                continue
            if not guard.may_run_tools:
                text, is_error = (
                    f"Error: {use.name} was not run: the context window is full (tools_refused). "
                    "Call final_report with your final report.",
                    True,
                )
            else:
                text, is_error, tool_events = self.execute(use, settings)
                events.extend(tool_events)
            block = ToolResultBlock(tool_use_id=use.id, content=text, is_error=is_error)
            tokens = tokenizer.count_block(block)
            decision = guard.reserve_tool_output(tokens, tool_name=use.name, message_seq=message_seq)
            events.extend(decision.events)
            if not decision.accepted:
                if decision.reason == REASON_TOKEN_BUDGET:
                    block = ToolResultBlock(
                        tool_use_id=use.id,
                        content=f"Error: token_budget_exceeded: the output of {use.name} ({tokens:,} tokens) "
                        "does not fit in the remaining context and was not added. Call final_report with "
                        "your final report.",
                        is_error=True,
                    )
                # What the model reads instead still goes into the next request.
                guard.add_pending(tokenizer.count_block(block), message_seq=message_seq)
            blocks.append(block)
        return ReplyResults(Message(role="user", content=blocks), events, report)

    def execute(self, use: ToolUseBlock, settings: ResolvedModelSettings) -> ToolOutcome:
        """(text for the context, is_error, events) of one tool call."""
        name, tool_input = use.name, dict(use.input)
        if name == READ_RESULT_TOOL["name"]:
            text = run_read_result_tool(self.results, tool_input)
            return text, text.startswith("Error:"), []
        if name == TOOL_SEARCH_TOOL["name"]:
            text, events = run_tool_search_tool(self.registry, tool_input)
            return text, text.startswith("Error:"), events
        if name == COMPACT_CONTEXT_TOOL["name"]:
            return self._compact(tool_input)
        handler = self.handlers.get(name)
        if handler is None:
            known = [s.name for s in self.registry.active]
            return f"Error: unknown tool {name!r}; available: {', '.join(known)}", True, []
        try:
            output = handler(tool_input)
        except Exception as exc:  # the agent's tool code is foreign: its failure goes to the model
            logger.warning("tool %s failed: %s: %s", name, type(exc).__name__, exc)
            return f"Error: {name} failed: {type(exc).__name__}: {exc}", True, []
        content = (
            output if isinstance(output, str | bytes) else json.dumps(output, ensure_ascii=False, default=str)
        )
        text, events = offload_or_inline(
            self.results,
            content,
            tool_name=name,
            tool_use_id=use.id,
            threshold_bytes=settings.result_offload_threshold,
            tool_response_max_bytes=settings.tool_response_max_bytes,
        )
        for event in events:
            if event.kind == "offload":
                self.offloaded_bytes += int(event.details.get("size_bytes") or 0)
        return text, False, events

    def _compact(self, tool_input: dict[str, Any]) -> ToolOutcome:
        try:
            text = run_compact_context_tool(
                self.store,
                self.session_id,
                tool_input,
                summarizer=self.summarizer,
                event_fields=self.compaction_fields(),
            )
        except (ValidationError, SummarizerUnavailableError) as exc:
            return f"Error: compact_context failed: {exc}", True, []
        self.history_replaced = True
        return text, False, []
