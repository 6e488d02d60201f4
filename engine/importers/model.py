"""What a parser hands the writer (mutable, internal) and what an import returns (frozen, public).

A parser turns one source file into :class:`ParsedSession` values: messages in canonical
form, each optionally carrying the model call that produced it (:class:`CallInfo`). The
writer persists them; :class:`ImportResult` reports what was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict

from engine.events import ProviderUsage
from engine.messages import Message

#: Formats ``detect_format`` can return; the session source is ``import:<format>``.
FORMATS = ("claude-code", "openai", "swe-agent", "openhands", "anthropic")


class SourceProblem(Exception):
    """A parser's complaint about the file it reads; ``import_file`` turns it into ImportFormatError."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


@dataclass
class CallInfo:
    """One model call: its provider usage when the source kept it, and per-call overrides.

    ``system_prompt`` / ``tools`` are set when the call sent its own (Anthropic request logs);
    ``None`` means the session's.
    """

    usage: ProviderUsage | None = None
    model: str | None = None
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedMessage:
    """A message, the call that produced it (assistant messages), and calls made right after it
    whose reply the source did not keep. ``starts_context`` marks a compaction boundary: later
    calls did not send the messages before it."""

    message: Message
    call: CallInfo | None = None
    pending_calls: list[CallInfo] = field(default_factory=list)
    starts_context: bool = False


@dataclass
class ParsedSession:
    key: str
    messages: list[ParsedMessage]
    model: str | None = None
    provider: str | None = None
    system_prompt: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)
    parent_key: str | None = None
    notes: list[str] = field(default_factory=list)


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True)


class ImportedSession(_Frozen):
    """One session written by an import, with our estimate beside the provider's count."""

    session_id: str
    parent_session_id: str | None
    title: str | None
    model: str | None
    tokenizer: str
    tokens_exact: bool
    message_count: int
    request_count: int
    usage_count: int
    transcript_tokens: int
    last_estimate_tokens: int | None
    last_provider_prompt_tokens: int | None


class ImportResult(_Frozen):
    """What ``import_file`` wrote for one file."""

    path: str
    format: str
    sessions: tuple[ImportedSession, ...]
    notes: tuple[str, ...] = ()

    @property
    def session_ids(self) -> list[str]:
        return [s.session_id for s in self.sessions]

    @property
    def message_count(self) -> int:
        return sum(s.message_count for s in self.sessions)

    @property
    def request_count(self) -> int:
        return sum(s.request_count for s in self.sessions)

    def __str__(self) -> str:
        name = self.path.rsplit("/", 1)[-1]
        sub = sum(1 for s in self.sessions if s.parent_session_id)
        extra = f" ({sub} sub-agent)" if sub else ""
        return (
            f"{name} [{self.format}]: {len(self.sessions)} session(s){extra}, "
            f"{self.message_count} messages, {self.request_count} requests"
        )
