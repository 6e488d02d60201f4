"""The Summarizer protocol: what compaction needs from a summarizer (implementations in
:mod:`engine.compaction.summarizers` and :mod:`engine.compaction.offline`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from engine.compaction.config import DEFAULT_SUMMARY_MAX_TOKENS
from engine.messages import Message


@runtime_checkable
class Summarizer(Protocol):
    """Anything that can summarize messages. ``name`` is recorded with every cached summary."""

    @property
    def name(self) -> str: ...

    def summarize(
        self,
        messages: Sequence[Message],
        *,
        instructions: str | None = None,
        max_tokens: int = DEFAULT_SUMMARY_MAX_TOKENS,
    ) -> str: ...
