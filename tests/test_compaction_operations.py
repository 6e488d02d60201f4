"""force_compact, restore_snapshot and the compact_context tool on a real SessionStore in tmp_path."""

from __future__ import annotations

import re

import anthropic
import pytest
from anthropic_server import FakeAnthropicServer, overloaded

from engine.compaction import (
    COMPACT_CONTEXT_TOOL,
    AnthropicSummarizer,
    OfflineSummarizer,
    force_compact,
    restore_snapshot,
    run_compact_context_tool,
)
from engine.compaction.operations import history_seqs
from engine.compaction.result import measure
from engine.errors import NotFoundError, SummarizerUnavailableError, ValidationError
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer

TOKENIZER = get_tokenizer("o200k_base")
BIG = "0123456789 abcdefghij " * 120


def turn(n: int) -> list[Message]:
    return [
        user(f"Request {n}: check src/module_{n}.py. Never delete data/keep_{n}.csv."),
        assistant(f"Reading module {n}.", tool_use(f"t{n}", "shell_exec", command=f"cat src/module_{n}.py")),
        tool_result(f"t{n}", BIG),
        assistant(f"We decided to use approach {n}."),
    ]


def history(turns: int, start: int = 0) -> list[Message]:
    return [m for n in range(start, start + turns) for m in turn(n)]


@pytest.fixture
def store(tmp_path):
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


@pytest.fixture
def session(store) -> str:
    sid = store.create_session(title="compaction", model="gpt-4o", tokenizer="o200k_base")
    store.append_messages(sid, history(8), tokenizer=TOKENIZER)
    return sid


def written(store: SessionStore, sid: str) -> tuple[int, int, int]:
    """(snapshots, events, cached summaries) of a session."""
    return len(store.list_snapshots(sid)), len(store.list_events(sid)), len(store.list_context_states(sid))


def test_force_compact_writes_snapshot_and_event_and_leaves_the_transcript(store, session):
    transcript = store.load_transcript(session)
    report = force_compact(store, session, target_tokens=2500, summarizer=OfflineSummarizer())
    assert store.load_transcript(session) == transcript
    assert not report.noop and report.fits
    assert report.strategies_run == ("clear_tool_results", "summarize")
    assert (report.before_count, report.after_count) == (32, len(report.result.messages))

    snapshot = store.get_snapshot(report.snapshot_id)
    assert snapshot.through_seq == 31
    assert snapshot.messages == list(report.result.messages)
    assert snapshot.summary == report.summary
    assert snapshot.tokens == report.after_tokens
    assert snapshot.strategy == "chain"
    assert snapshot.event_id == report.event_id

    (event,) = store.list_events(session, kind="compaction")
    assert event.id == report.event_id
    assert (event.trigger, event.outcome) == ("manual", "compacted")
    d = event.details
    assert d["strategies_run"] == ["clear_tool_results", "summarize"]
    assert d["removed_message_seqs"] == list(report.removed_message_seqs) == list(report.result.removed)
    assert d["snapshot_id"] == report.snapshot_id
    assert (d["before_tokens"], d["after_tokens"]) == (report.before_tokens, report.after_tokens)
    assert (d["before_count"], d["after_count"]) == (32, report.after_count)
    assert d["before"] == measure(transcript, None, TOKENIZER).as_dict()
    assert d["after"]["summary"] == TOKENIZER.count(report.summary)
    assert d["summary"] == report.summary
    assert event.components.total == report.after_tokens


def test_resume_loads_the_snapshot_then_later_messages(store, session):
    report = force_compact(store, session, target_tokens=2500, summarizer=OfflineSummarizer())
    later = turn(99)
    store.append_messages(session, later, tokenizer=TOKENIZER)
    messages, summary, through = store.load_resume_history(session)
    assert messages == [*report.result.messages, *later]
    assert summary == report.summary
    assert through == 31


def test_placeholders_name_the_transcript_seq(store, session):
    force_compact(store, session, strategy="clear_tool_results", target_tokens=3000, keep=1)
    messages, _, _ = store.load_resume_history(session)
    assert '"shell_exec" (transcript seq 2)' in messages[2].text


def test_a_second_compaction_maps_removed_messages_back_to_transcript_seqs(store, session):
    first = force_compact(store, session, strategy="clear_tool_results", target_tokens=3000, keep=0)
    assert first.removed_message_seqs == () and first.result.cleared
    store.append_messages(session, history(2, start=8), tokenizer=TOKENIZER)
    second = force_compact(store, session, strategy="truncate", target_tokens=1000)
    removed = second.removed_message_seqs
    assert removed == tuple(range(len(removed)))  # the cleared snapshot messages map back by tool id
    messages, _, through = store.load_resume_history(session)
    assert through == 39
    assert history_seqs(store, session, messages, through) == list(range(len(removed), 40))


def test_dry_run_writes_nothing_even_on_a_read_only_store(store, session, tmp_path):
    report = force_compact(store, session, target_tokens=2500, dry_run=True, summarizer=OfflineSummarizer())
    assert report.dry_run and not report.noop
    assert report.snapshot_id is None and report.event_id is None
    assert written(store, session) == (0, 0, 0)
    with SessionStore(tmp_path / "sessions.db", read_only=True) as ro:
        again = force_compact(ro, session, target_tokens=2500, dry_run=True, summarizer=OfflineSummarizer())
    assert again.result.messages == report.result.messages


def test_a_noop_records_only_its_event(store, session):
    report = force_compact(store, session, target_tokens=10**6)
    assert report.noop and report.snapshot_id is None
    (event,) = store.list_events(session)
    assert event.outcome == "noop"
    assert "already within target" in event.reason
    assert store.list_snapshots(session) == []


def test_summarizer_failure_raises_and_writes_nothing(store, session):
    with (
        FakeAnthropicServer(overloaded()) as server,
        anthropic.Anthropic(api_key="k", base_url=server.base_url, max_retries=0, timeout=5) as client,
        pytest.raises(SummarizerUnavailableError) as info,
    ):
        summarizer = AnthropicSummarizer(client=client)
        force_compact(store, session, strategy="summarize", target_tokens=1000, summarizer=summarizer)
    assert info.value.status == 529
    assert written(store, session) == (0, 0, 0)
    assert store.load_resume_history(session)[0] == store.load_transcript(session)


def test_an_empty_session_is_a_validation_error(store):
    sid = store.create_session(title="empty")
    with pytest.raises(ValidationError):
        force_compact(store, sid)
    assert written(store, sid) == (0, 0, 0)


def test_sandwich_caches_its_summary_by_transcript_seqs_and_a_new_strategy_clears_it(store, session):
    report = force_compact(store, session, strategy="sandwich", target_tokens=2000)
    (state,) = store.list_context_states(session)
    assert (state.strategy, state.level, state.range_start, state.range_end) == ("sandwich", 0, 5, 27)
    assert state.summary == report.summary
    assert state.summarizer == "offline"
    store.append_messages(session, history(3, start=8), tokenizer=TOKENIZER)
    force_compact(store, session, strategy="truncate", target_tokens=1000)
    assert store.list_context_states(session) == []


def test_tree_summary_stores_every_level(store, session):
    force_compact(store, session, strategy="tree_summary", target_tokens=2000, leaf_turns=2, fanout=2)
    levels = sorted({s.level for s in store.list_context_states(session, strategy="tree_summary")})
    assert levels == [0, 1, 2]


def test_restore_snapshot_makes_an_older_snapshot_current(store, session):
    first = force_compact(store, session, strategy="clear_tool_results", target_tokens=3000)
    force_compact(store, session, strategy="truncate", target_tokens=800)
    restored = restore_snapshot(store, session, first.snapshot_id)
    old = store.get_snapshot(first.snapshot_id)
    assert restored.strategy == "restore"
    assert (restored.messages, restored.summary, restored.through_seq) == (
        old.messages,
        old.summary,
        old.through_seq,
    )
    assert store.load_resume_history(session)[0] == old.messages
    (event,) = store.list_events(session, kind="restore")
    assert event.details["restored_snapshot_id"] == first.snapshot_id
    assert restored.event_id == event.id


def test_restore_snapshot_refuses_another_sessions_snapshot(store, session):
    other = store.create_session(title="other")
    store.append_messages(other, history(4), tokenizer=TOKENIZER)
    report = force_compact(store, other, target_tokens=1000)
    with pytest.raises(NotFoundError):
        restore_snapshot(store, session, report.snapshot_id)


# -- the compact_context tool ----------------------------------------------------------------------


def test_compact_context_tool_definition():
    assert COMPACT_CONTEXT_TOOL["name"] == "compact_context"
    schema = COMPACT_CONTEXT_TOOL["input_schema"]
    assert set(schema["properties"]) == {"instructions", "strategy"}
    assert schema["properties"]["instructions"]["type"] == "string"
    assert "chain" in schema["properties"]["strategy"]["enum"]
    assert "emergency" not in schema["properties"]["strategy"]["enum"]
    assert "required" not in schema


def test_compact_context_tool_reports_what_changed(store, session):
    text = run_compact_context_tool(store, session, {"instructions": "focus on module 7"}, target_tokens=2500)
    (event,) = store.list_events(session, kind="compaction")
    d = event.details
    assert text == (
        f"Compacted {d['before_count']} → {d['after_count']} messages, "
        f"{d['before_tokens']:,} → {d['after_tokens']:,} tokens (clear_tool_results, summarize)."
    )
    assert event.trigger == "tool"
    assert d["instructions"] == "focus on module 7"
    assert "Focus requested: focus on module 7" in d["summary"]


def test_compact_context_tool_says_when_nothing_was_compacted(store, session):
    text = run_compact_context_tool(store, session, {}, target_tokens=10**6)
    assert re.fullmatch(r"Nothing compacted \(32 messages, [\d,]+ tokens\): already within target .*\.", text)


@pytest.mark.parametrize(
    "tool_input",
    [{"strategy": "emergency"}, {"strategy": "zip"}, {"instructions": 3}, {"extra": True}],
    ids=["emergency-not-offered", "unknown-strategy", "non-string-instructions", "unknown-field"],
)
def test_compact_context_tool_rejects_bad_input(store, session, tool_input):
    with pytest.raises(ValidationError):
        run_compact_context_tool(store, session, tool_input)
    assert written(store, session) == (0, 0, 0)
