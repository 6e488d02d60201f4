"""bench.user_history: a user's history grown from the real transcripts, each copy a session of its own."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.user_history import FIXTURES, build_history
from engine.importers import folder_files, import_files
from engine.store import SessionStore

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
MESSAGE_ID = re.compile(r'"id":\s*"(msg_[A-Za-z0-9]+)"')


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory):
    return build_history(tmp_path_factory.mktemp("history") / "home", 2)


def test_the_history_is_laid_out_where_each_agent_keeps_its_sessions(history) -> None:
    claude, codex = history.files["claude"], history.files["codex"]
    assert claude and codex and history.files["other"]
    assert all(p.parent.parent == history.claude_dir / "projects" and p.suffix == ".jsonl" for p in claude)
    assert all(
        p.is_relative_to(history.codex_dir / "sessions") and p.name.startswith("rollout-") for p in codex
    )
    assert 2e6 <= history.bytes_of() < 2e6 + 30e6  # stops at the first copy past the size


def test_the_same_size_and_seed_give_the_same_bytes(history, tmp_path: Path) -> None:
    again = build_history(tmp_path / "home", 2)
    ours = {p.relative_to(history.home): p.read_bytes() for p in history.all_files}
    theirs = {p.relative_to(again.home): p.read_bytes() for p in again.all_files}
    assert ours == theirs


def test_every_copy_has_ids_of_its_own(history) -> None:
    """No copy shares a session id or a provider message id with another copy or with its source."""
    sources = {
        *(
            m
            for p in FIXTURES.rglob("*.jsonl")
            for m in UUID.findall(p.read_text(encoding="utf-8", errors="replace"))
        )
    }
    seen: dict[str, Path] = {}
    for path in history.files["claude"]:
        text = path.read_text(encoding="utf-8")
        ids = set(UUID.findall(text)) | set(MESSAGE_ID.findall(text))
        assert not ids & sources
        for found in ids:
            assert seen.setdefault(found, path) == path, f"{found} in {path} and {seen[found]}"


def test_every_copy_imports_as_a_session_of_its_own(history, tmp_path: Path) -> None:
    files = folder_files(history.home)
    with SessionStore(tmp_path / "h.db") as store:
        results = import_files(files, store)
        sessions = store.list_sessions()
    top_level = [r for r in results if r.sessions]
    assert len(top_level) == len(files)
    # one session per transcript, plus Claude Code's sub-agents: never two copies merged into one
    assert len({s.source_path for s in sessions if s.parent_session_id is None}) == len(files)


def test_a_long_codex_rollout_repeats_its_turns_with_fresh_call_ids(tmp_path: Path) -> None:
    from bench.user_history import _codex_copy, _Fresh

    source = next((FIXTURES / "codex" / "tools-resume").rglob("rollout-*.jsonl"))
    long = _codex_copy(source, tmp_path, _Fresh(0, 1), 1, long_mb=0.5)
    lines = [json.loads(line) for line in long.read_text(encoding="utf-8").splitlines()]
    assert long.stat().st_size >= 500_000
    assert sum(1 for line in lines if line["type"] == "session_meta") == 1
    calls = [
        line["payload"]["call_id"]
        for line in lines
        if line["type"] == "response_item" and "call_id" in line["payload"]
        and line["payload"].get("type") == "function_call"
    ]  # fmt: skip
    assert calls and len(calls) == len(set(calls))


def test_the_repeated_share_counts_long_strings_seen_before(tmp_path: Path) -> None:
    from bench.user_history import repeated_text_share

    long = "a" * 300
    (tmp_path / "one.jsonl").write_text(
        json.dumps({"text": long, "short": "x" * 10}) + "\n" + json.dumps({"more": [long]}) + "\n"
    )
    (tmp_path / "two.json").write_text(json.dumps({"deep": {"list": [long, "c" * 300]}}))
    files = [tmp_path / "one.jsonl", tmp_path / "two.json"]
    # 4 long strings of 300 characters, 2 seen before; short ones left out
    assert repeated_text_share(files) == 600 / 1200
    assert repeated_text_share(files, min_chars=100) == 600 / 1200
    assert repeated_text_share(files[:1]) == 300 / 600
    assert repeated_text_share(files, min_chars=400) == 0.0
