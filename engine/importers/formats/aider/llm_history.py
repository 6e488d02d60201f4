"""Aider's LLM history (``--llm-history-file``, e.g. ``.aider.llm.history``): every request's
messages and every reply, as Aider sent and received them.

Each call is a ``TO LLM <local time>`` block, its messages separated by ``-------`` lines and
every line of a message prefixed with its role (``SYSTEM``, ``USER``, ``ASSISTANT``), then an
``LLM RESPONSE <local time>`` block with the reply's lines. Aider writes lines, so a message's
line endings are not kept (a trailing newline, ``\\r\\n``): :func:`as_logged` is that loss, for
comparing with what was sent.

A request interleaves Aider's framing with the conversation: its prompts first, a repository map
and the files in the chat as user/assistant pairs Aider answers itself ("Ok, ..."), a reminder
last. :func:`split_request` tells them apart, so the conversation forms one growing transcript
and each call's framing is its own system prompt.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime

#: Aider's own answers to the framing it puts in every request (aider/coders/base_prompts.py).
FRAMING_ANSWERS = frozenset(
    {
        "Ok, I won't try and edit those files without asking first.",
        "Ok, any changes I propose will be to those files.",
        "Ok, I will use these files as references.",
    }
)
#: The user message that closes example conversations Aider sends as messages.
EXAMPLES_END = "I switched to a new code base."
_BLOCK = re.compile(r"^(TO LLM|LLM RESPONSE) (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)\s*$")
_SEPARATOR = "-------"
_ROLES = ("SYSTEM", "USER", "ASSISTANT")


@dataclass
class LoggedCall:
    """One request Aider logged: when, its messages (role, content), and the reply when logged."""

    sent_at: datetime
    messages: list[tuple[str, str]] = field(default_factory=list)
    reply: str | None = None


def as_logged(content: str) -> str:
    """``content`` as Aider's log keeps it: its lines joined by ``\\n`` (line endings lost)."""
    return "\n".join(content.splitlines())


def is_llm_history(text: str) -> bool:
    first = text.lstrip().split("\n", 1)[0]
    return _BLOCK.match(first) is not None and first.startswith("TO LLM")


def parse_llm_history(text: str) -> list[LoggedCall]:
    """The calls of an LLM history file, in order (a block this reader cannot place is skipped)."""
    calls: list[LoggedCall] = []
    role: str | None = None
    lines: list[str] = []
    target: str | None = None  # "request" | "reply"

    def flush() -> None:
        nonlocal role
        if target == "request" and role is not None and calls:
            calls[-1].messages.append((role.lower(), "\n".join(lines)))
        elif target == "reply" and calls and lines:
            calls[-1].reply = "\n".join(lines)
        role = None
        lines.clear()

    for line in text.splitlines():
        block = _BLOCK.match(line)
        if block:
            flush()
            kind, when = block.groups()
            if kind == "TO LLM":
                calls.append(LoggedCall(sent_at=datetime.fromisoformat(when)))
                target = "request"
            else:
                target = "reply"
            continue
        if target == "request" and line == _SEPARATOR:
            flush()
            continue
        head, _, rest = line.partition(" ")
        if head in _ROLES:
            if target == "request" and role not in (None, head):
                flush()  # a role change without a separator (not written by Aider 0.86, kept safe)
            if target == "request":
                role = head
            lines.append(rest)
    flush()
    return calls


def split_request(messages: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(framing, conversation) of one request: the leading and trailing system messages, example
    conversations, and every user message Aider answered with one of its framing answers (the
    repository map, the files in the chat, read-only files) are framing; the rest, in order, is
    the conversation."""
    framing: set[int] = set()
    start, end = 0, len(messages)
    while start < end and messages[start][0] == "system":
        framing.add(start)
        start += 1
    while end > start and messages[end - 1][0] == "system":
        end -= 1
        framing.add(end)
    for i in range(start, end):
        role, content = messages[i]
        if role == "assistant" and content in FRAMING_ANSWERS and i > start and messages[i - 1][0] == "user":
            framing.update((i - 1, i))
        if role == "user" and content.startswith(EXAMPLES_END):
            framing.update(range(start, min(i + 2, end)))  # the examples, this message and Aider's "Ok."
    return (
        [m for i, m in enumerate(messages) if i in framing],
        [m for i, m in enumerate(messages) if i not in framing],
    )
