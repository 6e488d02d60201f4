"""The report's data: pydantic models of a report (``report_version`` 2: 1 plus costs and the
project roll-up) and of a diff (``report_version`` 1).

These models are the report's contract: their JSON Schema is ``docs/report.schema.json``
(``python -m engine.report --schema``), checked in CI. Building and rendering live beside them.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from engine.events import COMPONENTS, ComponentsBasis, ComponentTokens, ProviderUsage
from engine.findings import Finding
from engine.report.costs import ProjectCostReport, SessionCostReport

REPORT_VERSION = 2
DIFF_VERSION = 1

UsedSource = Literal["provider", "estimate"]
ChangeStatus = Literal["kept", "added", "removed", "summarized", "changed"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, json_schema_serialization_defaults_required=True)


class Components(_Frozen):
    """Tokens of one request by component: our measure by the session's tokenizer, reconciled to the
    provider's count where the call had one (engine.components.reconcile)."""

    system: int = Field(description="Assembled system prompt.")
    skills: int = Field(description="Skill prompts.")
    tools: int = Field(description="Tool definitions sent.")
    summary: int = Field(description="Injected compaction summary.")
    conversation: int = Field(description="History messages, tool-result content excluded.")
    tool_results: int = Field(description="Tool-result content in the history.")
    unattributed: int = Field(
        0, description="Prompt tokens the provider counted that no component accounts for (harness text)."
    )
    total: int = Field(description="Sum of the components.")

    @classmethod
    def of(cls, tokens: ComponentTokens) -> Components:
        return cls(**{name: getattr(tokens, name) for name in COMPONENTS}, total=tokens.total)


class Usage(_Frozen):
    """The provider's own count of one request (exact)."""

    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_creation_input_tokens: int
    prompt_tokens: int = Field(description="input + cache reads + cache writes: the whole prompt.")

    @classmethod
    def of(cls, usage: ProviderUsage) -> Usage:
        return cls(**usage.model_dump(), prompt_tokens=usage.prompt_tokens)


class RequestPoint(_Frozen):
    """One model request: what it sent by component, and how full the window was."""

    event_seq: int = Field(description="seq of the request event in context_events.")
    turn_index: int
    message_seq: int | None = Field(description="Transcript seq the event names (importers: the reply).")
    components: Components | None = Field(
        description="What the request sent by component: reconciled to the provider's count where the call has "
        "one (see components_basis), else our estimate by the session's tokenizer."
    )
    components_basis: ComponentsBasis | None = Field(
        None,
        description="'exact' (the provider's tokenizer, adding up to its count), 'reconciled' (our measure made to "
        "add up to the provider's count, the rest 'unattributed'), 'estimate' (no provider count); None: not recorded.",
    )
    estimate_tokens: int | None = Field(
        None,
        description="Our own estimate of the prompt before the provider answered (what the guard judged).",
    )
    provider_usage: Usage | None = Field(description="The provider's count, when the source kept it.")
    used_tokens: int = Field(description="Prompt tokens: the provider's count when known, else our estimate.")
    used_source: UsedSource = Field(description="'provider' (exact) or 'estimate' (tokenizer).")
    used_pct: float | None = Field(description="used_tokens as a percentage of limit_tokens.")
    limit_tokens: int | None = Field(description="Effective limit: window - output reserve - buffer.")
    messages_sent: int | None = Field(
        None, description="Transcript messages the request sent, less what compactions removed (engine.sent)."
    )


class TurnPoint(RequestPoint):
    """One turn: the breakdown of its last request (as the dashboard's timeline shows it)."""

    requests: int = Field(description="Model requests made in the turn.")
    peak_used_pct: float | None = Field(description="Highest used_pct of the turn's requests.")


class ReportEvent(_Frozen):
    """A guard, compaction, offload, deferral or other non-request context event."""

    seq: int
    turn_index: int | None
    kind: str
    trigger: str | None
    outcome: str | None
    reason: str | None
    projected_tokens: int | None
    limit_tokens: int | None
    message_seq: int | None
    details: dict[str, Any]


class Limit(_Frozen):
    """The limit used for percentages, and where it came from."""

    limit_tokens: int | None
    context_window: int | None
    source: str = Field(
        description="'request events' (a recorded limit), 'model window in request events' (the recorded "
        "window less the recorded output reserve and buffer), or the settings source of the context window."
    )
    note_threshold: float
    compact_threshold: float
    hard_block_threshold: float


class SessionReport(_Frozen):
    """One session or sub-agent thread (each has its own context window)."""

    id: str
    parent_session_id: str | None = Field(description="Set for a sub-agent thread.")
    title: str | None
    model: str | None
    provider: str | None
    source: str
    tokenizer: str = Field(description="Tokenizer of every estimated number in this session.")
    exact: bool = Field(description="True when that tokenizer is exact for the model (estimates otherwise).")
    message_count: int
    request_count: int
    limit: Limit
    turns: list[TurnPoint]
    requests: list[RequestPoint]
    events: list[ReportEvent]
    findings: list[Finding]
    peak_usage_pct: float | None = Field(description="Highest used_pct over all requests.")
    peak_used_tokens: int | None
    peak_turn_index: int | None
    peak_source: UsedSource | None
    findings_tokens: int = Field(description="Sum of the findings' tokens.")
    findings_money: float | None = Field(description="Sum of the findings' money, where priced.")
    costs: SessionCostReport | None = Field(
        None,
        description="Cost by part and cache analysis of every call with provider usage (report_version 2).",
    )


class Report(_Frozen):
    """A ctxdesk report (``report_version`` 2): one entry per session or sub-agent thread, and the
    cost roll-up of them all."""

    report_version: Literal[2] = REPORT_VERSION
    generator: str = Field(description="ctxdesk and its version.")
    source: str = Field(description="What was reported on: a transcript file, or DB[:SESSION].")
    sessions: list[SessionReport]
    peak_usage_pct: float | None = Field(description="Highest peak_usage_pct over the sessions.")
    findings_count: int
    project: ProjectCostReport | None = Field(
        None, description="Cost of every reported session: per root session, day, model (report_version 2)."
    )


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema of :class:`Report` (``docs/report.schema.json`` is this, checked in CI)."""
    schema = Report.model_json_schema(mode="serialization")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"ctxdesk-report-v{REPORT_VERSION}",
        **schema,
    }


def schema_text() -> str:
    return json.dumps(report_json_schema(), indent=2, ensure_ascii=False) + "\n"


class DiffSide(_Frozen):
    """One context compared: a session's current context, or one of its snapshots."""

    spec: str = Field(description="As given: DB:SESSION or DB:SESSION@SNAPSHOT_ID.")
    session_id: str
    snapshot_id: int | None
    description: str
    tokenizer: str
    exact: bool
    message_count: int
    components: Components
    summary: str | None


class MessageChange(_Frozen):
    """One message of either side and what became of it."""

    status: ChangeStatus
    a_index: int | None = Field(description="Position in A's message list.")
    b_index: int | None = Field(description="Position in B's message list.")
    role: str
    kind: str
    a_tokens: int | None
    b_tokens: int | None
    content_hash: str = Field(description="sha256 of role + content (B's for changed messages).")
    preview: str


class DiffReport(_Frozen):
    """Two contexts side by side, per component and message by message (by content hash)."""

    report_version: Literal[1] = DIFF_VERSION
    a: DiffSide
    b: DiffSide
    component_delta: dict[str, int] = Field(description="B - A per component, and total.")
    counts: dict[str, int] = Field(description="Messages per change status.")
    tokens: dict[str, int] = Field(
        description="Tokens per change status: B's count for kept, added and changed, A's for removed and summarized."
    )
    comparable: bool = Field(description="False when the sides were counted by different tokenizers.")
    changes: list[MessageChange]
