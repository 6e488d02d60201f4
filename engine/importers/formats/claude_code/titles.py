"""What a Claude Code thread is called: the first real prompt (not a tool result, a caveat or a
command wrapper), else a slash command with arguments, else Claude Code's own summary line."""

from __future__ import annotations

import re
from collections.abc import Sequence

from engine.importers.formats.claude_code.thread import Line
from engine.importers.parsing.parsed import ParsedSession
from engine.messages import Message, TextBlock, is_user_input

TITLE_CHARS = 80
_NOT_A_PROMPT = ("<command-", "<local-command-", "Caveat:", "<task-notification>", "[Request interrupted")
_COMMAND_NAME = re.compile(r"<command-name>(.*?)</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)


def prompt_text(message: Message) -> str:
    """A user message's own text: its first text block (attachment text follows it)."""
    first = next((b.text for b in message.blocks if isinstance(b, TextBlock)), message.text)
    return first.strip()


def is_real_prompt(message: Message) -> bool:
    """A user's own prompt: not a tool result, not Claude Code's caveats or command wrappers."""
    if not is_user_input(message) or message.meta.get("isMeta") or message.meta.get("isCompactSummary"):
        return False
    if message.meta.get("origin") == "task-notification":
        return False
    first = prompt_text(message)
    return bool(first) and not first.startswith(_NOT_A_PROMPT)


def _command(message: Message) -> str | None:
    """``/name args`` of a slash-command prompt that has arguments (the user's real request)."""
    text = prompt_text(message)
    name, args = _COMMAND_NAME.search(text), _COMMAND_ARGS.search(text)
    if message.meta.get("isMeta") or not name or not args or not args.group(1).strip():
        return None
    return f"{name.group(1).strip()} {args.group(1).strip()}"


def title_of_thread(session: ParsedSession, lines: Sequence[Line]) -> str | None:
    """The first real prompt (or slash command with arguments), else Claude Code's summary line."""
    for pm in session.messages:
        text = prompt_text(pm.message) if is_real_prompt(pm.message) else _command(pm.message)
        if text:
            text = " ".join(text.split())
            return text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1].rstrip() + "…"
    summaries = [str(o["summary"]) for _, o in lines if o.get("type") == "summary" and o.get("summary")]
    return summaries[-1] if summaries else None


def set_title(session: ParsedSession, lines: Sequence[Line]) -> None:
    title = title_of_thread(session, lines)
    session.title = title
    if title:
        session.metadata["title"] = title
