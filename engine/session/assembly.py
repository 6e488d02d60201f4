"""Request assembly: what the next request would send, and what each component costs.

Pure over its inputs (prompt sections, summary, tool definitions, running history totals): no
store, no clock, no model call. Prompt degradations come back as events in the result; the
session manager records the events of the request it actually sends, once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from engine.budget import ContextBudget, HistoryTotals
from engine.components import measure_request
from engine.events import ComponentTokens, ContextEvent
from engine.guard import FINAL_REPORT_TOOL
from engine.prompt import (
    SECTION_COMPONENT,
    SECTION_SEPARATOR,
    SUMMARY_TITLE,
    AssembledPrompt,
    PromptSection,
    build_prompt_or_concat,
)
from engine.settings import ResolvedModelSettings
from engine.tokens import Tokenizer

#: What the model reads in the context status section during a forced final turn.
FINAL_TURN_NOTE = (
    "[Context window nearly full: no other tool can run in this turn. Call final_report now with "
    "what was done, what was found, and what remains.]"
)


@dataclass(frozen=True)
class RequestView:
    """One request as it would be sent: prompt, tools, what each component costs, and the events
    its assembly produced (a degraded prompt), to be recorded only if it is sent."""

    prompt: AssembledPrompt
    tools: tuple[dict[str, Any], ...]
    components: ComponentTokens
    budget: ContextBudget
    note: str | None
    final: bool
    events: tuple[ContextEvent, ...] = ()


class ToolTokens:
    """Tokens of the tool definitions sent, recounted only when the set changed."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._seen: tuple[tuple[dict[str, Any], ...], int] = ((), 0)

    def count(self, tools: tuple[dict[str, Any], ...]) -> int:
        seen, tokens = self._seen
        if tools != seen:
            tokens = self.tokenizer.count_tools(tools)
            self._seen = (tools, tokens)
        return tokens


def prompt_sections(
    system_prompt: str, sections: Sequence[PromptSection], skills: Sequence[str]
) -> list[PromptSection]:
    """A session's fixed prompt: its base instructions, further sections, then each skill."""
    return [
        *([PromptSection("base_instructions", system_prompt)] if system_prompt else []),
        *sections,
        *(PromptSection("skills", text) for text in skills),
    ]


def assemble_request(
    sections: Sequence[PromptSection],
    *,
    summary: str | None,
    status: Sequence[str],
    tools: tuple[dict[str, Any], ...],
    tool_tokens: ToolTokens,
    totals: HistoryTotals,
    offloaded_bytes: int,
    settings: ResolvedModelSettings,
    note: str | None,
    final: bool,
) -> RequestView:
    """The request for ``settings``' model: sections, the summary and the context-status lines
    (``status``, plus the final-turn note when ``final``) assembled and measured."""
    parts = list(sections)
    if summary:
        title = None if summary.startswith(SUMMARY_TITLE) else SUMMARY_TITLE
        parts.append(PromptSection("summary", summary, title=title))
    lines = [line for line in status if line]
    if final:
        lines.append(FINAL_TURN_NOTE)
    if lines:
        parts.append(PromptSection("context_status", "\n".join(lines)))
    prompt, events = build_prompt_or_concat(parts, tokenizer=tool_tokens.tokenizer)
    blocks: dict[str, list[str]] = {"system": [], "skills": [], "summary": []}
    for section, text in zip(prompt.sections, prompt.blocks, strict=True):
        blocks[SECTION_COMPONENT[section.kind]].append(text)
    components = measure_request(
        tool_tokens.tokenizer,
        system=blocks["system"],
        skills=blocks["skills"],
        summary=SECTION_SEPARATOR.join(blocks["summary"]) or None,
        tools=(),
        messages=totals,
        offloaded_bytes=offloaded_bytes,
    ).model_copy(update={"tools": tool_tokens.count(tools)})  # count_tools, as measured, once per set
    budget = ContextBudget.from_settings(settings, components)
    return RequestView(prompt, tools, components, budget, note, final, tuple(events))


def assemble_view(
    sections: Sequence[PromptSection],
    *,
    final: bool,
    plan_note: str | None,
    active_tools: Sequence[dict[str, Any]],
    **measure: Any,
) -> RequestView:
    """The next request: the active tools and the deferral plan's note, or only final_report in a
    final turn; assembled again with the context-status note when its budget says one is due.
    ``measure`` are :func:`assemble_request`'s summary, tool_tokens, totals, offloaded_bytes and
    settings."""

    def assemble(note: str | None) -> RequestView:
        return assemble_request(
            sections,
            status=[line for line in (note, None if final else plan_note) if line],
            tools=(FINAL_REPORT_TOOL,) if final else tuple(active_tools),
            note=note,
            final=final,
            **measure,
        )

    view = assemble(None)
    return view if view.budget.note_text is None else assemble(view.budget.note_text)
