"""The JSON ``ctxdesk why --format json`` writes, as strict models: their schema is
docs/why.schema.json (``python -m engine.explain --schema``), and every answer is checked against
them before it is written (a key too many or a word outside the vocabulary is a bug, not output).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from engine.explain.explanations import CompactionBy, CompactionTrigger, EndCause, ItemKind

SCHEMA_ID = "https://ctxdesk.dev/why.schema.json"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EndedJson(_Strict):
    cause: EndCause = Field(description="How the session ended.")
    call: int | None = Field(description="The model call it ended at, counted from 1 as the timeline does.")
    detail: str = Field(description="The evidence, in one sentence.")


class ItemJson(_Strict):
    kind: ItemKind
    text: str = Field(description="The instruction's words, the file's path, the error line, the command.")
    seq: int | None = Field(description="Transcript seq of the message it came from.")
    detail: str | None = Field(description="Why it counts as kept or dropped.")


class CompactionJson(_Strict):
    call: int | None = Field(description="The last model call before the compaction.")
    by: CompactionBy
    trigger: CompactionTrigger
    tokens_before: int | None
    tokens_after: int | None
    limit_tokens: int | None = Field(description="The limit in force, as every page shows it.")
    window_tokens: int | None = Field(description="The model's context window recorded for that call.")
    threshold_tokens: int | None = Field(
        description="The threshold in force (the agent's own, or ctxdesk's)."
    )
    instructions: str | None = Field(description="A manual compaction's instructions.")
    kept: list[ItemJson]
    dropped: list[ItemJson]


class FailedCallJson(_Strict):
    call: int
    cause: str = Field(
        description="prompt_too_long, rate_limited, overloaded, provider_error or interrupted."
    )
    status: int | None = Field(description="The provider's HTTP status.")
    message: str | None = Field(description="The provider's message, secrets redacted.")
    next: str = Field(description="What the agent did next.")


class SessionJson(_Strict):
    session_id: str
    agent: str
    title: str | None
    ended: EndedJson
    compactions: list[CompactionJson]
    failed_calls: list[FailedCallJson]


class WhyJson(_Strict):
    """``ctxdesk why --format json``."""

    sessions: list[SessionJson]


def checked(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` after validation against :class:`WhyJson` (raises pydantic's ValidationError)."""
    return WhyJson.model_validate(data).model_dump(mode="json")


def schema_text() -> str:
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": SCHEMA_ID}
    schema |= WhyJson.model_json_schema()
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"
