"""The models the import's cost pass builds without validation (engine.components.trusted: a call's
cost, its cache verdict, a copy of its components) are the models validation builds from the same
values: equal values of the same types, in field order, with the same set of given fields; its call
records (built without their frozen ``__init__``) are the records that ``__init__`` builds."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

import pytest
from pydantic import BaseModel

from engine.cache_analysis import CallRecord, analyze_cache, call_records, classify_call
from engine.components import components_with, reconcile
from engine.cost import price_call, prices_for
from engine.events import ComponentTokens, ContextEvent, ProviderUsage

T0 = dt.datetime(2025, 9, 3, tzinfo=dt.UTC)


def assert_as_validated(model: BaseModel) -> None:
    given = {k: v for k, v in model.__dict__.items() if k in model.model_fields_set}
    again = type(model)(**given)
    assert list(model.__dict__.items()) == list(again.__dict__.items())
    assert [type(v) for v in model.__dict__.values()] == [type(v) for v in again.__dict__.values()]
    assert model.model_fields_set == again.model_fields_set
    assert model == again


USAGES = [
    ProviderUsage(),
    ProviderUsage(
        input_tokens=3, output_tokens=120, cache_read_input_tokens=20_000, cache_creation_input_tokens=700
    ),
    ProviderUsage(input_tokens=250_000, output_tokens=9, cache_creation_input_tokens=1),
]
DETAILS: list[dict[str, Any] | None] = [
    None,
    {},
    {"cache_write_1h_tokens": 500},
    {"cache_write_5m_tokens": 2.0, "cache_write_1h_tokens": 10**9, "reasoning_tokens": 80.5},
    {"cache_write_1h_tokens": True, "reasoning_tokens": -4},
]


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gemini-2.5-pro", "gpt-4o", "no-such-model", None])
@pytest.mark.parametrize("details", DETAILS)
def test_a_calls_cost_is_the_validated_cost(model: str | None, details: dict[str, Any] | None) -> None:
    for usage in USAGES:
        assert_as_validated(price_call(usage, prices_for(model), model=model, details=details))


def call(
    i: int, *, read: int = 0, write: int = 0, inp: int = 10, at_s: float | None = None, **more: Any
) -> CallRecord:
    usage = ProviderUsage(
        input_tokens=inp, output_tokens=50, cache_read_input_tokens=read, cache_creation_input_tokens=write
    )
    model = more.pop("model", "claude-sonnet-4-20250514")
    prices = prices_for(model)
    return CallRecord(
        index=i, model=model, usage=usage, cost=price_call(usage, prices, model=model), prices=prices,
        at=T0 + dt.timedelta(seconds=10 * i if at_s is None else at_s), **more,
    )  # fmt: skip


SESSIONS = {
    "cold start, reads, expiry": [
        call(0, write=20_000),
        call(1, read=20_000, write=500),
        call(2, write=20_600, at_s=400),
    ],
    "no write at first, uncached prefix": [
        call(0, read=0),
        call(1, read=5_000, inp=8_000),
        call(2, read=5_000, inp=9_000),
    ],
    "model switch, unpriced model, no times": [
        call(0, write=20_000),
        call(1, write=20_300, model="no-such-model"),
        call(2, write=20_300),
    ],
    "compaction and tools": [
        call(0, write=20_000, tools_sha256="a", tool_names=("Bash",)),
        call(1, write=20_900, tools_sha256="b", tool_names=("Bash", "mcp__x")),
        call(2, write=8_000, reset_before="compaction (compact_threshold)"),
    ],
}


@pytest.mark.parametrize("calls", SESSIONS.values(), ids=SESSIONS.keys())
def test_a_calls_cache_verdict_is_the_validated_verdict(calls: list[CallRecord]) -> None:
    verdicts = analyze_cache(calls).calls
    assert {v.cause for v in verdicts} - {None}  # a rebuild among them, with its fix
    for verdict in verdicts:
        assert_as_validated(verdict)
    assert_as_validated(classify_call(None, calls[1], ttl=3_600))


def test_a_components_copy_is_pydantics_copy() -> None:
    measured = ComponentTokens(system=3_000, conversation=1_814)
    for update in ({}, {"conversation": 211}, {"tools": 5, "unattributed": 0}):
        copy = components_with(measured, update)
        expected = measured.model_copy(update=update)
        assert list(copy.__dict__.items()) == list(expected.__dict__.items())
        assert copy.model_fields_set == expected.model_fields_set
        assert copy.model_fields_set is not measured.model_fields_set
    assert_as_validated(reconcile(measured, 211))
    assert_as_validated(reconcile(measured, 9_000))


def test_a_call_record_is_the_one_its_init_builds() -> None:
    usage = ProviderUsage(input_tokens=5, cache_creation_input_tokens=900)
    events = [
        ContextEvent(kind="request", model="claude-sonnet-4-5", usage=usage, message_seq=1, turn_index=0),
        ContextEvent(kind="compaction", trigger="compact_threshold", outcome="compacted"),
        ContextEvent(
            kind="request", usage=usage, components=ComponentTokens(tools=12),
            details={"call_utc": "2026-01-01T00:00:03Z", "tool_names": ["Bash"], "system_sha256": "s"},
        ),
    ]  # fmt: skip
    stored = [e.model_copy(update={"seq": i}) for i, e in enumerate(events)]
    for record in call_records(stored, default_model="gpt-4o"):
        again = CallRecord(**{f.name: getattr(record, f.name) for f in dataclasses.fields(CallRecord)})
        assert record == again
        assert vars(record) == vars(again) and list(vars(record)) == list(vars(again))
        with pytest.raises(dataclasses.FrozenInstanceError):
            record.index = 3  # type: ignore[misc]
