"""Summarizers: the protocol (defined in ``protocols``), the Anthropic summarizer, and how a transcript is shown to a model.

A summarizer turns messages into text that keeps decisions, facts, user requirements,
commitments and next steps. Failures raise :class:`SummarizerUnavailableError` (with the HTTP
status when there is one); an empty message list or a non-positive ``max_tokens`` raises
:class:`ValidationError` before anything is sent.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from engine.clients import OwnedSdkClient
from engine.compaction.config import DEFAULT_SUMMARY_MAX_TOKENS
from engine.compaction.protocols import Summarizer  # noqa: F401  (defined there for result.py; re-exported)
from engine.compaction.result import is_summary_message
from engine.convert import anthropic_error_detail as _error_detail
from engine.errors import SummarizerUnavailableError, ValidationError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

if TYPE_CHECKING:  # the SDK takes ~1 s to import: only an AnthropicSummarizer in use loads it
    import anthropic

DEFAULT_SUMMARY_MODEL = "claude-haiku-4-5"
DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_RETRIES = 2
#: Tool results longer than this are shown to the summarizing model as head + tail.
DEFAULT_RENDER_RESULT_CHARS = 4_000
#: Tool inputs longer than this (as JSON) are cut when shown.
RENDER_INPUT_CHARS = 1_000

#: The sections of a summary, in order: both summarizers write them, and read them back when an
#: earlier summary is folded into a new one.
SUMMARY_SECTIONS = (
    "User requests",
    "Constraints",
    "Decisions",
    "Files",
    "Commands run",
    "Errors and resolutions",
    "Facts from tool output",
    "Open tasks",
)

SUMMARY_SYSTEM_PROMPT = (
    """\
You condense part of a conversation between a user and an AI assistant that uses tools. \
Your summary replaces those messages in the assistant's context, so the assistant must be \
able to continue the work from it alone: write it as a handover.

Preserve, precisely and without inventing anything:
- what the user asked, and their requirements, constraints and preferences (keep their exact \
wording for constraints such as "never ..." or "always ...");
- decisions that were made, and why;
- what changed: each file created, edited or deleted, with the tool that changed it;
- facts learned, including those only tool output showed: file paths, names, identifiers, \
versions, settings and their values, numbers, commands and their outcomes;
- errors met, with their exact messages (the failing test's name, the compiler's own error), \
and how each was resolved (or that it is unresolved);
- commitments, open tasks and next steps.

Leave out pleasantries, repeated tool output and anything superseded. If the conversation \
starts with an earlier summary, fold its content in. Write terse markdown under these \
headings, omitting empty ones: """
    + ", ".join(f"## {title}" for title in SUMMARY_SECTIONS)
    + "."
)


def check_summarize_args(messages: Sequence[Message], max_tokens: int) -> None:
    """Raise ValidationError for an empty message list or a non-positive token budget."""
    if not messages:
        raise ValidationError("nothing to summarize: the message list is empty", field="messages", value=[])
    if not isinstance(max_tokens, int) or max_tokens <= 0:
        raise ValidationError(
            f"max_tokens must be a positive integer, got {max_tokens!r}", field="max_tokens", value=max_tokens
        )


# -- rendering a transcript as text ---------------------------------------------------------------


def clip_middle(text: str, limit: int) -> str:
    """``text`` cut to about ``limit`` characters, keeping its head and tail."""
    if limit <= 0 or len(text) <= limit:
        return text
    head = (limit * 2) // 3
    tail = limit - head
    return f"{text[:head]}\n… [{len(text) - limit:,} characters omitted] …\n{text[-tail:] if tail else ''}"


def describe_media(block: ImageBlock | DocumentBlock) -> str:
    """One line naming a media block without its data: kind, title, and where it came from."""
    source = block.source or {}
    kind = "image" if isinstance(block, ImageBlock) else "document"
    title = f' "{block.title}"' if isinstance(block, DocumentBlock) and block.title else ""
    origin = source.get("type", "unknown")
    if origin == "url":
        where = f"url {source.get('url', '')}"
    elif origin == "file":
        where = f"file {source.get('file_id', '')}"
    elif origin == "base64":
        data = source.get("data", "")
        where = f"inline {source.get('media_type', 'data')}, {len(data) * 3 // 4:,} bytes"
    elif origin == "text":
        where = f"inline text, {len(str(source.get('data', ''))):,} characters"
    else:
        where = origin
    return f"{kind}{title} ({where})"


def render_messages(messages: Sequence[Message], *, result_chars: int = DEFAULT_RENDER_RESULT_CHARS) -> str:
    """A plain-text transcript: one ``[role]`` paragraph per block, tool names beside results."""
    tool_names: dict[str, str] = {}
    parts: list[str] = []
    for message in messages:
        if is_summary_message(message):
            parts.append(f"[earlier summary]\n{message.text}")
            continue
        for block in message.blocks:
            if isinstance(block, TextBlock):
                parts.append(f"[{message.role}]\n{block.text}")
            elif isinstance(block, ThinkingBlock):
                if block.thinking:
                    parts.append(f"[assistant thinking]\n{clip_middle(block.thinking, result_chars)}")
            elif isinstance(block, ToolUseBlock):
                tool_names[block.id] = block.name
                arguments = json.dumps(block.input, ensure_ascii=False)
                parts.append(f"[assistant → tool {block.name}]\n{clip_middle(arguments, RENDER_INPUT_CHARS)}")
            elif isinstance(block, ToolResultBlock):
                name = tool_names.get(block.tool_use_id, "tool")
                status = " (error)" if block.is_error else ""
                media = [] if isinstance(block.content, str) else block.content
                extra = [describe_media(b) for b in media if isinstance(b, ImageBlock | DocumentBlock)]
                body = clip_middle(block.text, result_chars)
                if extra:
                    body += "\n" + "\n".join(f"<{line}>" for line in extra)
                parts.append(f"[{name} result{status}]\n{body}")
            elif isinstance(block, ImageBlock | DocumentBlock):
                parts.append(f"[{message.role}]\n<{describe_media(block)}>")
    return "\n\n".join(parts)


def build_summary_request(
    messages: Sequence[Message], *, instructions: str | None, result_chars: int = DEFAULT_RENDER_RESULT_CHARS
) -> str:
    """The user turn sent to a summarizing model: the transcript, then any extra instructions."""
    text = (
        f"Summarize this conversation ({len(messages)} messages):\n\n"
        f"<conversation>\n{render_messages(messages, result_chars=result_chars)}\n</conversation>"
    )
    if instructions and instructions.strip():
        text += f"\n\nAdditional instructions for this summary: {instructions.strip()}"
    return text


# -- Anthropic --------------------------------------------------------------------------------------


class AnthropicSummarizer(OwnedSdkClient):
    """Summarizes with a Claude model through the ``anthropic`` SDK.

    Pass ``client`` to reuse one (tests pass a client pointed at a local server), or
    ``api_key`` / ``base_url`` / ``timeout`` / ``max_retries`` to have one made.
    """

    def __init__(
        self,
        model: str = DEFAULT_SUMMARY_MODEL,
        *,
        client: anthropic.Anthropic | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = DEFAULT_TIMEOUT_SECONDS,
        max_retries: int = DEFAULT_MAX_RETRIES,
        result_chars: int = DEFAULT_RENDER_RESULT_CHARS,
    ) -> None:
        if not model:
            raise ValidationError("the summary model name must not be empty", field="model", value=model)
        self.model = model
        self.result_chars = result_chars
        self._use_client(client, "anthropic", "Anthropic", api_key=api_key, base_url=base_url,
                         timeout=timeout, max_retries=max_retries)  # fmt: skip

    @property
    def name(self) -> str:
        return f"anthropic:{self.model}"

    def __repr__(self) -> str:
        return f"AnthropicSummarizer({self.model!r})"

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        instructions: str | None = None,
        max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    ) -> str:
        import anthropic

        check_summarize_args(messages, max_tokens)
        client = self._client
        if getattr(client, "api_key", None) is None and getattr(client, "auth_token", None) is None:
            raise SummarizerUnavailableError(
                f"{self.name}: no Anthropic API key configured (set ANTHROPIC_API_KEY or pass api_key)",
                summarizer=self.name,
            )
        prompt = build_summary_request(messages, instructions=instructions, result_chars=self.result_chars)
        try:
            response = client.messages.create(
                model=self.model,
                max_tokens=max_tokens,
                system=SUMMARY_SYSTEM_PROMPT,
                messages=[{"role": "user", "content": prompt}],
            )
        except anthropic.APIStatusError as exc:
            raise SummarizerUnavailableError(
                f"{self.name}: HTTP {exc.status_code} {_error_detail(exc.body, exc.message)}",
                summarizer=self.name,
                status=exc.status_code,
            ) from exc
        except anthropic.APITimeoutError as exc:
            raise SummarizerUnavailableError(f"{self.name}: request timed out", summarizer=self.name) from exc
        except anthropic.APIConnectionError as exc:
            raise SummarizerUnavailableError(
                f"{self.name}: cannot reach the API ({exc})", summarizer=self.name
            ) from exc
        except anthropic.AnthropicError as exc:
            raise SummarizerUnavailableError(f"{self.name}: {exc}", summarizer=self.name) from exc
        text = "".join(getattr(b, "text", "") for b in response.content if b.type == "text").strip()
        if not text:
            raise SummarizerUnavailableError(
                f"{self.name}: the model returned no text (stop_reason {response.stop_reason})",
                summarizer=self.name,
            )
        return text
