"""Scripted assistant turns for the demo's :class:`~engine.clients.ScriptedClient` (tool ids numbered
so every run is the same)."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.clients import ModelRequest
from engine.demo.agent import FINAL_TURN_REPLY
from engine.messages import Message, ToolUseBlock, assistant, tool_use
from engine.session import SessionManager


@dataclass
class Script:
    """Scripted assistant steps; tool ids are numbered so every run is the same."""

    prefix: str
    steps: list[Any] = field(default_factory=list)
    turns: list[str | Callable[[SessionManager], Any]] = field(default_factory=list)
    _n: int = 0

    def user(self, text: str) -> None:
        """Start a turn: the steps after it, up to a text-only reply, answer ``text``."""
        self.turns.append(text)

    def compact_by_hand(self, strategy: str, instructions: str) -> None:
        """Between turns, the user compacts the session (trigger ``manual``)."""
        self.turns.append(lambda manager: manager.compact(strategy, instructions=instructions))

    def call(self, name: str, **tool_input: Any) -> ToolUseBlock:
        self._n += 1
        return tool_use(f"toolu_{self.prefix}_{self._n:03d}", name, **tool_input)

    def say(self, text: str = "", *calls: ToolUseBlock) -> None:
        self.steps.append(assistant(text, *calls))

    def then(self, step: Callable[[ModelRequest], Message | str]) -> None:
        self.steps.append(step)

    def raise_(self, error: BaseException) -> None:
        self.steps.append(error)

    def read_result(self, pattern: str, text: str = "", **options: Any) -> None:
        """A read_result call on the reference in the last tool result, found at run time."""

        def step(request: ModelRequest) -> Message:
            call = self.call("read_result", ref_id=last_ref(request), pattern=pattern, **options)
            return assistant(text, call)

        self.then(step)

    def final_report(self, report: str, otherwise: str = "Done.") -> None:
        """Call final_report when the guard restricted the tools to it, else answer in text."""

        def step(request: ModelRequest) -> Message:
            if request.tool_names == [FINAL_TURN_REPLY]:
                return assistant("", self.call(FINAL_TURN_REPLY, report=report))
            return assistant(otherwise)

        self.then(step)


def last_ref(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        found = re.findall(r"\bres_[0-9a-f]{6,}\b", message.text)  # not the "res_at" of expires_at
        if found:
            return found[-1]
    raise LookupError("no stored result reference in the context")
