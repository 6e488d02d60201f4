"""Rollouts of older Codex releases (tests/fixtures/real_agents/codex/releases: the npm releases run
offline against the scripted model server, README-codex-gemini.md): each call gets the usage the
server answered it, and the "why" of a compaction is the rule of the release that made it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.explain import explain_store
from engine.explain.codex_point import codex_point
from engine.importers import import_files
from engine.importers.formats.codex.versions import counts_before_items
from engine.importers.locations import folder_files
from engine.store import SessionStore
from tests.conftest import FIXTURES

RELEASES = FIXTURES / "real_agents" / "codex" / "releases"


def _import(folder: Path, db: Path) -> SessionStore:
    store = SessionStore(db)
    import_files(folder_files(folder), store, on_error=lambda _path, _error: None)
    return store


def _calls(store: SessionStore) -> list[tuple[int, int]]:
    """(prompt, output) tokens of every call with a usage, sessions in the order they started."""
    sessions = sorted(store.list_sessions(), key=lambda s: s.metadata.get("started_utc") or "")
    return [
        (e.usage.prompt_tokens, e.usage.output_tokens)
        for s in sessions
        for e in store.list_events(s.id, kind="request")
        if e.usage is not None
    ]


@pytest.mark.parametrize("release", sorted(p.name for p in RELEASES.iterdir() if p.is_dir()))
def test_every_call_has_the_usage_the_server_answered_it(release: str, tmp_path: Path) -> None:
    """Before 0.66 Codex writes a call's token_count before the reply it counts (0.45-0.65 once more
    after it), and (0.40-0.50) a reply's parallel calls each with its output; a summarizing call
    before 0.100 has no reply item, only its count and the `compacted` line. Read in file order as
    the newer layout, each count went to the call before (the first call none, the last one's lost)."""
    answers = json.loads((RELEASES / release / "answers.json").read_text(encoding="utf-8"))
    server = [
        (a["input_tokens"], a["output_tokens"]) for _, a in sorted(answers.items(), key=lambda kv: int(kv[0]))
    ]
    store = _import(RELEASES / release, tmp_path / "r.db")
    assert _calls(store) == server


@pytest.mark.parametrize(
    ("release", "threshold", "rule"),
    [
        ("0.47.0-compact-setting", 20_000, "model_auto_compact_token_limit = 20,000"),
        # 0.49-0.99: the setting, else 9/10 of the model's window (gpt-5: 272,000; recorded 258,400)
        ("0.59.0-compact-default", 244_800, "Codex's default: 90% of the window 272,000"),
        # 0.66-0.99: a setting above 9/10 of the window is the point (from 0.100 the lesser of the two)
        ("0.66.0-compact-setting-above", 250_000, "model_auto_compact_token_limit = 250,000"),
    ],
)
def test_a_compaction_is_explained_by_the_rule_of_the_release_that_made_it(
    release: str, threshold: int, rule: str, tmp_path: Path
) -> None:
    store = _import(RELEASES / release, tmp_path / "r.db")
    (session,) = store.list_sessions()
    [why] = explain_store(store, [session.id]).sessions
    (compaction,) = why.compactions
    assert compaction.threshold_tokens == threshold and compaction.threshold_rule.startswith(rule)
    # Codex compacted once its count passed the point: the call before the summary is past it
    assert compaction.tokens_before is not None and compaction.tokens_before >= threshold


def test_the_window_a_rollout_records_and_the_order_of_its_counts_by_release() -> None:
    """0.40-0.47 record the model's whole window (gpt-5: 272,000), 0.49 on 95% of it (258,400)."""
    windows = {}
    for folder in RELEASES.iterdir():
        rollout = next(folder.rglob("rollout-*.jsonl"))
        lines = [json.loads(line) for line in rollout.read_text(encoding="utf-8").splitlines()]
        recorded = {
            (line["payload"].get("info") or {}).get("model_context_window")
            for line in lines
            if line.get("type") == "event_msg" and line["payload"].get("type") == "token_count"
        } - {None}
        version = next(line["payload"]["cli_version"] for line in lines if line.get("type") == "session_meta")
        windows[version] = recorded
        assert counts_before_items(version) == (version in ("0.40.0", "0.47.0", "0.59.0", "0.64.0"))
    assert windows == {
        "0.40.0": {272_000}, "0.47.0": {272_000}, "0.59.0": {258_400}, "0.64.0": {258_400},
        "0.66.0": {258_400}, "0.100.0": {258_400},
    }  # fmt: skip


@pytest.mark.parametrize(
    ("version", "setting", "window", "tokens"),
    [
        # before 0.49: no point of its own
        ("0.47.0", {}, 272_000, None),
        ("0.47.0", {"model_auto_compact_token_limit": 20_000}, 272_000, 20_000),
        # 0.49-0.65: a configured window does not move the default (the model's own is not recorded)
        ("0.59.0", {}, 258_400, 244_800),
        ("0.59.0", {"model_context_window": 64_000}, 60_800, None),
        ("0.59.0", {"model_auto_compact_token_limit": 260_000}, 258_400, 260_000),
        # 0.66-0.99: the configured window's 9/10; a setting above it still the point
        ("0.66.0", {"model_context_window": 64_000}, 60_800, 57_600),
        ("0.99.0", {"model_auto_compact_token_limit": 260_000}, 258_400, 260_000),
        # 0.100 on (and an unknown version): the lesser of the two
        ("0.100.0", {"model_auto_compact_token_limit": 260_000}, 258_400, 244_800),
        (None, {"model_auto_compact_token_limit": 260_000}, 258_400, 244_800),
        ("0.169.0", {"model_context_window": 64_000}, 60_800, 57_600),
    ],
)
def test_codex_point_by_release(
    version: str | None, setting: dict[str, int], window: int, tokens: int | None
) -> None:
    """What each release did in the runs (engine/explain/codex_point.py's docstring)."""
    assert codex_point(window, setting, version).tokens == tokens
