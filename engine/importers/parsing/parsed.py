"""What a parser hands the writer (mutable, internal) and what an import returns (frozen, public).

A parser turns one source file into :class:`ParsedSession` values: messages in canonical
form, each optionally carrying the model call that produced it (:class:`CallInfo`). The
writer persists them; :class:`ImportResult` reports what was written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from engine.events import ComponentTokens, ProviderUsage
from engine.messages import Message

if TYPE_CHECKING:
    from engine.store.payloads import RequestRecord


class SourceProblem(Exception):
    """A parser's complaint about the file it reads; ``import_file`` turns it into ImportFormatError."""

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.line = line
        super().__init__(message)


@dataclass(frozen=True)
class ThinkingRule:
    """How many of the latest user turns a call sent their thinking for (None: all of them)."""

    keep_turns: int | None

    @property
    def keeps_all(self) -> bool:
        return self.keep_turns is None


@dataclass(frozen=True, slots=True)
class Sent:
    """The parsed messages one call sent, as indexes: ``head`` (after a compaction, its summary
    and the segment it kept), then ``start`` up to ``end`` (exclusive), without ``excluded``."""

    head: tuple[int, ...]
    start: int
    end: int
    excluded: frozenset[int] = frozenset()

    def indexes(self) -> list[int]:
        return [i for i in (*self.head, *range(self.start, self.end)) if i not in self.excluded]

    def __len__(self) -> int:
        if not self.excluded:  # most calls
            return len(self.head) + max(0, self.end - self.start)
        gone = sum(1 for i in self.excluded if i in self.head or self.start <= i < self.end)
        return len(self.head) + max(0, self.end - self.start) - gone


@dataclass(slots=True)
class CallInfo:
    """One model call: its provider usage when the source kept it, and per-call overrides.

    ``system_prompt`` / ``tools`` are set when the call sent its own (Anthropic request logs);
    ``None`` means the session's. A parser that rebuilds each request (Claude Code) also sets
    what it sent (``sent``, ``thinking_rule``), its measured ``components``, the ``exact_request``
    when the file recorded the request byte for byte, and ``limit_tokens`` when the harness
    states its own limit; the writer uses each one it finds set.
    """

    usage: ProviderUsage | None = None
    model: str | None = None
    system_prompt: str | None = None
    tools: list[dict[str, Any]] | None = None
    details: dict[str, Any] = field(default_factory=dict)
    context_window: int | None = None
    #: The harness's own prompt limit for this call (Claude Code: where it compacts itself).
    limit_tokens: int | None = None
    #: Components the parser measured on the request it rebuilt (None: the writer measures).
    components: ComponentTokens | None = None
    #: The request exactly as sent, when the file recorded it (Claude Code 2.1.3xx api-request lines).
    exact_request: RequestRecord | None = None
    #: Which parsed messages the call sent, and whose thinking, as the parser rebuilt it.
    sent: Sent | None = None
    thinking_rule: ThinkingRule | None = None


@dataclass(slots=True)
class ParsedMessage:
    """A message, the call that produced it (assistant messages), and calls made right after it
    whose reply the source did not keep. ``starts_context`` marks a compaction boundary: later
    calls did not send the messages before it; ``compaction`` (details) records a compaction
    event at it."""

    message: Message
    call: CallInfo | None = None
    pending_calls: list[CallInfo] = field(default_factory=list)
    starts_context: bool = False
    compaction: dict[str, Any] | None = None
    #: (the message counted, the tokenizer's id, conversation tokens, tool-result tokens): the parse's
    #: count of it (``Tokenizer.count_message_parts``), handed to the writer (:meth:`counted_parts`).
    counted: tuple[Message, str, int, int] | None = None

    def counted_parts(self, tokenizer_id: str) -> tuple[int, int] | None:
        """The parse's (conversation, tool-result) tokens of this message by tokenizer
        ``tokenizer_id``; None when it counted another (replaced since, or by another tokenizer)."""
        counted = self.counted
        if counted is None or counted[0] is not self.message or counted[1] != tokenizer_id:
            return None
        return counted[2], counted[3]


@dataclass
class SavedOutput:
    """A tool output the agent saved beside its transcript: ``store.put_blob`` arguments."""

    tool_use_id: str
    content: bytes
    tool_name: str | None
    preview: str | None
    source_path: str | None


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
    #: The window the source itself states (Codex's model_context_window); None: from the model.
    context_window: int | None = None
    #: The reply reserve the agent itself keeps below the window (Claude Code's 20,000 for its
    #: compaction summary); None: the model's or the user's settings decide.
    output_reserve: int | None = None
    #: A model name to choose the tokenizer by when ``model`` is unknown (a run directory's hint).
    tokenizer_model: str | None = None
    #: The component ("system" or "tools") of what every call sent that the file does not keep;
    #: the writer measures it from the provider's count at the first call with usage.
    unlogged_prefix_in: str | None = None
    #: The session's title when the parser knows it (Claude Code's own); None: from its first prompt.
    title: str | None = None
    #: Every model call in order (pending ones included), when the parser lists them (Claude Code).
    calls: list[CallInfo] = field(default_factory=list)
    #: Outputs the agent saved beside its transcript, written as offloaded blobs of their results.
    blobs: list[SavedOutput] = field(default_factory=list)
    #: ``key`` is the agent's own id of the session (Claude Code's session and sub-agent ids): a
    #: file read later with the same key continues that session, whichever file holds it, instead
    #: of making a copy (a sub-agent file passed alone, then with its session, or twice).
    shared_key: bool = False
    #: Sessions with the same lineage descend from one conversation (Claude Code: the uuid of its
    #: first message line); ``forked`` marks one that copied another's history (``--fork-session``):
    #: the writer links it to its origin (``metadata["forked_from"]``).
    lineage_key: str | None = None
    forked: bool = False


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
    #: Messages this import added (all of them on a first import; what is new on a re-import).
    added_messages: int = 0
    context_window: int | None = None
    #: The project (working directory) the session ran in, when the source says.
    project: str | None = None
    #: The last call's prompt (the provider's count when it gave one, else our estimate) and its limit.
    last_prompt_tokens: int | None = None
    last_limit_tokens: int | None = None
    #: The call that came closest to its limit: its prompt and that limit (None: no limit known).
    peak_prompt_tokens: int | None = None
    peak_limit_tokens: int | None = None

    @property
    def peak_share(self) -> float | None:
        """The largest share of its limit any call's prompt took (1.0 = the whole limit)."""
        if self.peak_prompt_tokens is None or not self.peak_limit_tokens:
            return None
        return self.peak_prompt_tokens / self.peak_limit_tokens


class ImportResult(_Frozen):
    """What ``import_file`` wrote for one file."""

    path: str
    format: str
    sessions: tuple[ImportedSession, ...]
    notes: tuple[str, ...] = ()
    #: imported (first time), updated (the file grew: only new messages added), unchanged (skipped).
    status: str = "imported"

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
        if self.status == "unchanged":
            return f"{name} [{self.format}]: unchanged since the last import"
        added = sum(s.added_messages for s in self.sessions)
        growth = f" ({added} new)" if self.status == "updated" else ""
        return (
            f"{name} [{self.format}]: {len(self.sessions)} session(s){extra}, "
            f"{self.message_count} messages{growth}, {self.request_count} requests"
        )
