"""`ctxdesk demo`: sample databases made by the real session manager, and the copies in data/."""

from __future__ import annotations

import io
import shutil
from collections import Counter
from pathlib import Path

import pytest

from engine.cli import SAMPLE_DATA_DIR, main
from engine.demo import CODING_DB, LIMITS_DB, LONG_MODEL, SETTINGS_FILE
from engine.settings import load_settings
from engine.store import SessionStore

#: The sample stays small for a clone: 3.2 MB before it carried each call's exact request (model_requests,
#: payload_parts: +3.4 MB), as a session recorded by ctxdesk proxy does.
MAX_TOTAL_BYTES = 8_000_000


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    printed = io.StringIO()
    assert main(["demo", "--out", str(out)], out=printed) == 0
    assert printed.getvalue().count("wrote ") == 3
    return out


def signature(path: Path) -> dict[str, object]:
    """What a demo database says, without ids that are random by design or timestamps."""
    with SessionStore(path, read_only=True) as store:
        out: dict[str, object] = {}
        for s in store.list_sessions():
            out[s.id] = {
                "title": s.title,
                "status": s.status,
                "messages": [(m.seq, m.turn_index, m.kind, m.tokens) for m in store.load_messages(s.id)],
                "events": [
                    (
                        e.kind,
                        e.trigger,
                        e.outcome,
                        e.projected_tokens,
                        e.usage.prompt_tokens if e.usage else None,
                    )
                    for e in store.list_events(s.id)
                ],
                "blobs": sorted((b.ref_id, b.sha256) for b in store.list_blobs(s.id)),
                "snapshots": [
                    (x.through_seq, x.message_count, x.strategy) for x in store.list_snapshots(s.id)
                ],
                "requests": [
                    (r.api, r.status_code, r.message_count, r.input_tokens) for r in store.list_requests(s.id)
                ],
            }
        return out


def all_events(path: Path) -> list[tuple[str, object, object, object]]:
    with SessionStore(path, read_only=True) as store:
        return [
            (s.id, e.kind, e.trigger, e.outcome)
            for s in store.list_sessions()
            for e in store.list_events(s.id)
        ]


def test_demo_writes_two_databases_and_its_settings_under_8_mb(demo_dir: Path) -> None:
    files = sorted(p.name for p in demo_dir.iterdir())
    assert files == sorted([CODING_DB, LIMITS_DB, SETTINGS_FILE])
    assert sum(p.stat().st_size for p in demo_dir.iterdir()) < MAX_TOTAL_BYTES
    settings = load_settings(demo_dir / SETTINGS_FILE)
    assert settings.models["claude-haiku-4-5"].context_window == 16_000


def test_demo_sessions_hold_every_kind_of_event_and_both_stop_outcomes(demo_dir: Path) -> None:
    events = all_events(demo_dir / CODING_DB) + all_events(demo_dir / LIMITS_DB)
    kinds = Counter(kind for _, kind, _, _ in events)
    for kind in ("guard", "request", "compaction", "offload", "deferral", "tool_search", "note", "resume"):
        if kind == "resume":
            continue  # sessions are generated in one go; resume is covered in test_session
        assert kinds[kind] > 0, kind
    outcomes = {(kind, outcome) for _, kind, _, outcome in events}
    assert ("guard", "forced_final") in outcomes and ("guard", "skipped_provider") in outcomes
    assert ("guard", "rejected") in outcomes and ("guard", "note") in outcomes
    compaction_triggers = {
        trigger for _, kind, trigger, outcome in events if kind == "compaction" and outcome == "compacted"
    }
    assert compaction_triggers >= {"compact_threshold", "manual", "tool", "provider_error"}
    requests = {(trigger, outcome) for _, kind, trigger, outcome in events if kind == "request"}
    assert ("retry", "ok") in requests and any(o == "context_length_exceeded" for _, o in requests)


def test_demo_compactions_use_several_strategies_with_snapshots(demo_dir: Path) -> None:
    strategies = set()
    for name in (CODING_DB, LIMITS_DB):
        with SessionStore(demo_dir / name, read_only=True) as store:
            for s in store.list_sessions():
                for event in store.list_events(s.id, kind="compaction"):
                    if event.outcome == "compacted":
                        strategies.add(event.details["strategy"])
                        snapshot = store.get_snapshot(event.details["snapshot_id"])
                        assert snapshot.event_id == event.id
    assert strategies >= {"chain", "sandwich", "sliding_window", "summarize", "emergency"}


def test_demo_offloads_large_logs_and_ends_sessions_as_scripted(demo_dir: Path) -> None:
    with SessionStore(demo_dir / CODING_DB, read_only=True) as store:
        blobs = store.list_blobs()
        by_tool = Counter(b.tool_name for b in blobs)
        assert by_tool["git_log"] >= 1 and by_tool["run_tests"] >= 2
        assert any(b.size_bytes >= 40_000 for b in blobs if b.tool_name == "git_log")
        assert any(24_000 <= b.size_bytes < 30_000 for b in blobs if b.tool_name == "run_tests")
        assert store.get_blob(blobs[0].ref_id).content
        sessions = store.list_sessions()
        assert len(sessions) == 4 and all(len(store.load_transcript(s.id)) > 40 for s in sessions)
        mcp = next(s for s in sessions if "MCP" in (s.title or ""))
        assert len([t for t in store.list_tools(mcp.id) if t.category == "mcp"]) >= 30
    with SessionStore(demo_dir / LIMITS_DB, read_only=True) as store:
        statuses = {s.title: s.status for s in store.list_sessions()}
        assert list(statuses.values()).count("final") == 1
        small = next(s for s in store.list_sessions() if s.status == "final")
        assert small.settings["context_window"] == 16_000
        skipped = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="guard")
                   if e.outcome == "skipped_provider"]  # fmt: skip
        assert skipped and {e.model for e in skipped} == {"llama-3.1-8b-instant"}


def test_the_long_session_climbs_and_is_compacted_at_the_threshold_again_and_again(demo_dir: Path) -> None:
    """A sawtooth on the timeline: usage climbs past the 80% note, drops at each compaction."""
    with SessionStore(demo_dir / CODING_DB, read_only=True) as store:
        session = next(s for s in store.list_sessions() if s.model == LONG_MODEL)
        assert session.status == "active" and session.settings["context_window"] == 32_000
        messages = store.load_messages(session.id)
        assert 40 <= messages[-1].turn_index + 1 <= 60
        events = store.list_events(session.id)
        requests = [e for e in events if e.kind == "request"]
        peak_by_turn: dict[int, float] = {}
        for e in requests:
            peak_by_turn[e.turn_index] = max(
                peak_by_turn.get(e.turn_index, 0), e.projected_tokens / e.limit_tokens
            )
        compactions = [e for e in events if e.kind == "compaction" and e.outcome == "compacted"]
        threshold = [e for e in compactions if e.trigger == "compact_threshold"]
        assert len(threshold) >= 3
        for c in threshold:
            before = max(
                e.projected_tokens for e in requests if e.seq < c.seq and e.turn_index == c.turn_index
            )
            after = next(e.projected_tokens for e in requests if e.seq > c.seq)
            assert after < 0.6 * before  # the drop of the saw, at its marker
            assert c.turn_index is not None and (c.model, c.context_window) == (LONG_MODEL, 32_000)
        assert sum(peak > 0.8 for peak in peak_by_turn.values()) >= 6
        assert any(e.kind == "note" for e in events)
        assert not any(e.kind == "guard" and e.outcome in ("rejected", "forced_final") for e in events)
        # the provider's usage, with prompt caching: reads of the shared prefix and writes of the rest
        usage = [e.usage for e in requests]
        assert all(u is not None for u in usage)
        assert sum(u.cache_read_input_tokens for u in usage) > 10 * sum(u.input_tokens for u in usage)
        assert sum(u.cache_creation_input_tokens > 1_000 for u in usage) >= 3  # after each cache break
        # big outputs offloaded; the tool errors are the scripted ones, each followed by its fix
        assert {b.tool_name for b in store.list_blobs(session.id)} >= {"run_tests", "git_log", "read_file"}
        errors = [b.text for m in messages for b in m.message.blocks if getattr(b, "is_error", False)]
        assert len(errors) == 2 and "FileNotFoundError" in errors[0] and "found 0 times" in errors[1]
        # the user's constraint outlives every compaction
        assert "Never change the public API" in compactions[-1].details["summary"]


def test_the_databases_are_checkpointed_so_the_db_file_alone_holds_every_row(
    demo_dir: Path, tmp_path: Path
) -> None:
    for name in (CODING_DB, LIMITS_DB):
        wal = demo_dir / f"{name}-wal"  # readers of a WAL database may leave an empty one
        assert not wal.exists() or wal.stat().st_size == 0
        copy = tmp_path / name
        shutil.copyfile(demo_dir / name, copy)  # without the -wal, as git holds it
        assert signature(copy) == signature(demo_dir / name)


@pytest.mark.skipif(
    not (SAMPLE_DATA_DIR / CODING_DB).exists(), reason="no bundled sample data in this checkout"
)
def test_the_bundled_sample_data_is_what_ctxdesk_demo_makes(demo_dir: Path, tmp_path: Path) -> None:
    """Also the determinism check: data/ was generated by another run with the same seed."""
    for name in (CODING_DB, LIMITS_DB):
        assert signature(SAMPLE_DATA_DIR / name) == signature(demo_dir / name), (
            f"data/{name} is stale: regenerate it with `ctxdesk demo`"
        )
        alone = tmp_path / name  # what a checkout holds: the .db without a -wal
        shutil.copyfile(SAMPLE_DATA_DIR / name, alone)
        assert signature(alone) == signature(demo_dir / name), f"data/{name} has rows only in its -wal"
    assert sum(p.stat().st_size for p in SAMPLE_DATA_DIR.glob("*.db")) < MAX_TOTAL_BYTES
