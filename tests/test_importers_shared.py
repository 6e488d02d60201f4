"""Importers on the full real sessions in ../shared/sessions (counts from PROVENANCE.json)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from engine.errors import ImportFormatError
from engine.importers import accuracy_report, detect_format, import_file
from engine.importers.accuracy import residual_report
from engine.messages import ToolResultBlock, ToolUseBlock
from engine.store import SessionStore
from engine.turns import has_orphans

SHARED = Path(os.environ.get("CTXDESK_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
SESSIONS = SHARED / "sessions"
pytestmark = [
    pytest.mark.shared,
    pytest.mark.skipif(not SESSIONS.is_dir(), reason=f"full sessions not found at {SESSIONS}"),
]

CC_FE5E = SESSIONS / "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl"
CC_5C03 = SESSIONS / "claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl"
OH_EVAL = SESSIONS / "openhands__multi_swe_bench_examples_output.jsonl"
OH_GUI = SESSIONS / "openhands__tests_runtime_trajs_basic_gui_mode.json"
SWE_PYDICOM = SESSIONS / "swe-agent__pydicom__pydicom-1458.traj"
SWE_TESTREPO = SESSIONS / "swe-agent__6e44b9__sweagenttestrepo-1c2844.traj"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        (CC_FE5E, "claude-code"),
        (CC_5C03, "claude-code"),
        (OH_EVAL, "openhands"),
        (OH_GUI, "openhands"),
        (SWE_PYDICOM, "swe-agent"),
        (SWE_TESTREPO, "swe-agent"),
    ],
    ids=lambda v: v.name if isinstance(v, Path) else v,
)
def test_detect_format_of_each_shared_session(path: Path, expected: str) -> None:
    assert detect_format(path) == expected


@pytest.mark.parametrize("name", ["PROVENANCE.json", "README.md", "STYLE.md"])
def test_shared_files_that_are_not_transcripts_are_refused(store: SessionStore, name: str) -> None:
    with pytest.raises(ImportFormatError, match=re.escape(name)):
        import_file(SHARED / name, store)
    assert store.list_sessions() == []


@pytest.mark.parametrize(
    ("path", "api_ids", "pairs", "sub_agents"),
    [(CC_FE5E, 170, 167, 5), (CC_5C03, 20, 21, 2)],
    ids=["fe5e1c67", "5c0375b4"],
)
def test_claude_code_session_counts(
    store: SessionStore, path: Path, api_ids: int, pairs: int, sub_agents: int
) -> None:
    result = import_file(path, store)
    main, *subs = result.sessions
    assert len(subs) == sub_agents
    assert all(s.parent_session_id == main.session_id for s in subs)
    transcripts = {s.session_id: store.load_transcript(s.session_id) for s in result.sessions}
    assistant_ids = [m.id for t in transcripts.values() for m in t if m.role == "assistant"]
    assert len(assistant_ids) == len(set(assistant_ids)) == api_ids
    uses = {b.id for t in transcripts.values() for m in t for b in m.blocks if isinstance(b, ToolUseBlock)}
    results = {
        b.tool_use_id
        for t in transcripts.values()
        for m in t
        for b in m.blocks
        if isinstance(b, ToolResultBlock)
    }
    assert len(uses) == len(results) == pairs and uses == results
    assert not any(has_orphans(t) for t in transcripts.values())
    assert result.request_count == api_ids
    assert sum(s.usage_count for s in result.sessions) == api_ids
    raw = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert {o["message"]["id"] for o in raw if o.get("type") == "assistant"} == set(assistant_ids)


def test_claude_code_delta_accuracy_is_within_fifteen_percent(store: SessionStore) -> None:
    result = import_file(CC_FE5E, store)
    report = accuracy_report(store, result.session_ids[0], with_sub_agents=True)
    assert report.compared == report.calls == 170
    assert 0.85 < report.delta_total_ratio < 1.15
    assert report.delta_mean_abs_pct_error < 20


def test_swe_agent_pydicom_history_and_aggregate_accuracy(store: SessionStore) -> None:
    history = json.loads(SWE_PYDICOM.read_text(encoding="utf-8"))["history"]
    assert len(history) == 26
    (session,) = import_file(SWE_PYDICOM, store, model="gpt-4").sessions
    assert session.message_count == 25 and session.request_count == 12
    report = accuracy_report(store, session.session_id)
    assert report.aggregate_provider_tokens == 122612
    assert abs(report.aggregate_ratio - 1) < 0.02


def test_openhands_eval_output_one_session_per_instance_with_every_call_usage(store: SessionStore) -> None:
    result = import_file(OH_EVAL, store)
    records = [json.loads(line) for line in OH_EVAL.read_text(encoding="utf-8").splitlines()]
    assert (
        [s.usage_count for s in result.sessions]
        == [len(r["metrics"]["token_usages"]) for r in records]
        == [23, 33, 49]
    )
    for session, record in zip(result.sessions, records, strict=True):
        events = store.list_events(session.session_id, kind="request")
        with_usage = [e.usage.prompt_tokens for e in events if e.usage]
        assert with_usage == [u["prompt_tokens"] for u in record["metrics"]["token_usages"]]
        assert not has_orphans(store.load_transcript(session.session_id))
    assert max(s.last_provider_prompt_tokens for s in result.sessions) == 33459


@pytest.mark.parametrize(
    "path", sorted(SESSIONS.glob("*")) if SESSIONS.is_dir() else [], ids=lambda p: p.name
)
def test_every_counted_call_adds_up_to_the_providers_count(path: Path, store: SessionStore) -> None:
    report = residual_report(store, import_file(path, store).session_ids)
    assert report.mismatched == 0, report
    if path.name.startswith("claude-code__"):  # no harness system prompt in the file: measured, not left out
        assert report.calls and report.mean_residual_pct < 3 and report.max_residual_pct < 10, report
