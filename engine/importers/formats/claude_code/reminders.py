"""Reminders Claude Code 1.0.x sent but did not write to its transcript, rebuilt where the file
determines them: the TodoWrite nudge ("The TodoWrite tool hasn't been used recently ...").

Claude Code 1.0.98 and 1.0.108 (their cli.js: ``Tq5``/``Pq5`` and ``KF5``/``HF5``) add a
``todo_reminder`` attachment after a model call when, counting the assistant messages (one per
content block, as the file writes them) of what that call sent back from its end, at least
:data:`TURNS_SINCE_WRITE` come at or after the last TodoWrite call and at least
:data:`TURNS_BETWEEN_REMINDERS` since the last such reminder. The check runs on the messages
the call sent (the query loop's input, before the reply and its tool results), or on the
history before a prompt the user typed; the reminder then stays in every later request. 2.x
writes its attachments to the file (engine.importers.formats.claude_code.thread renders them).

On the two real 1.0.x transcripts in ../shared/sessions every call this rule marks grew by
~90 tokens more than the messages it added (31 of 33), and no other call did so by rule: the
provider counted the reminder's base text only, never the todo list it may append (the list
is read from a todos file the main thread does not find), so that is what is rebuilt.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from engine.importers.formats.claude_code.attachments import as_reminder, with_attachment
from engine.importers.formats.claude_code.thread import Thread
from engine.importers.parsing.parsed import ParsedMessage
from engine.messages import TextBlock, ToolUseBlock, is_user_input

#: Claude Code versions whose transcripts leave the reminder out and whose source shows the rule.
FROM_VERSION = (1, 0, 98)
UNTIL_VERSION = (2, 0, 0)
#: GxB / RPB in cli.js 1.0.98 and 1.0.108.
TURNS_SINCE_WRITE = 7
TURNS_BETWEEN_REMINDERS = 3
TODO_TOOL = "TodoWrite"
TODO_REMINDER = as_reminder(
    "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit from "
    "tracking progress, consider using the TodoWrite tool to track progress. Also consider cleaning up "
    "the todo list if has become stale and no longer matches what you are working on. Only use it if "
    "it's relevant to the current work. This is just a gentle reminder - ignore if not applicable.\n"
)


@dataclass(frozen=True)
class _Step:
    """One message as Claude Code held it in memory: an assistant one per content block (as the
    file writes them: a TodoWrite call after a text block is a message of its own)."""

    assistant: bool = False
    todo_write: bool = False
    reminder: bool = False


def sends_unlogged_reminders(version: tuple[int, ...] | None) -> bool:
    """True for the Claude Code versions whose requests carried the reminder its file leaves out."""
    return version is not None and FROM_VERSION <= version < UNTIL_VERSION


def reminder_due(steps: Sequence[_Step]) -> bool:
    """Claude Code 1.0.x's rule on the messages a check sees (``Tq5`` walks them backwards; the
    TodoWrite message itself counts, as the loop counts before it looks)."""
    since_write = since_reminder = 0
    write_found = reminder_found = False
    for step in reversed(steps):
        if step.assistant:
            if not write_found:
                since_write += 1
                write_found = step.todo_write
            if not reminder_found:
                since_reminder += 1
        elif step.reminder:
            reminder_found = True
        if write_found and reminder_found:
            break
    return since_write >= TURNS_SINCE_WRITE and since_reminder >= TURNS_BETWEEN_REMINDERS


def add_todo_reminders(thread: Thread) -> int:
    """Append the reminder to each user message that carried it; returns how many were added.

    A user message before a model call carried it when the rule held on what the check saw:
    after tool results, the messages the previous call sent; after a typed prompt, the
    history before it. A compaction starts the count again (Claude Code keeps only the
    summary and what followed)."""
    steps: list[_Step] = []
    sent_by_previous: list[_Step] = []
    added = 0
    for index, pm in enumerate(thread.messages):
        if pm.starts_context:
            steps, sent_by_previous = [], []
        message = pm.message
        if message.role == "assistant":
            if pm.call is not None and index > 0 and thread.messages[index - 1].message.role == "user":
                added += _remind_before(thread.messages[index - 1], steps, sent_by_previous)
                sent_by_previous = list(steps)
            steps += [
                _Step(assistant=True, todo_write=isinstance(b, ToolUseBlock) and b.name == TODO_TOOL)
                for b in message.blocks
            ] or [_Step(assistant=True)]
        else:
            steps.append(_Step())
    return added


def _remind_before(user: ParsedMessage, steps: list[_Step], sent_by_previous: list[_Step]) -> int:
    seen = steps[:-1] if is_user_input(user.message) else sent_by_previous
    if not seen or not reminder_due(seen):
        return 0
    user.message = with_attachment(user.message, TextBlock(text=TODO_REMINDER))
    reconstructed = [*user.message.meta.get("reconstructed", []), "todo_reminder"]
    user.message = user.message.model_copy(
        update={"meta": {**user.message.meta, "reconstructed": reconstructed}}
    )
    steps.append(_Step(reminder=True))
    return 1
