"""``ctxdesk why``: its JSON against docs/why.schema.json, its text, and the real agents' fixtures
and transcripts (every session says how it ended; ``unknown`` only where the file cannot tell)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.explain import explain_store
from engine.explain.json_shape import WhyJson, schema_text
from engine.importers import import_file, import_files
from engine.importers.locations import folder_files
from engine.store import SessionStore

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "docs" / "why.schema.json"
CLAUDE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
AGENT_FIXTURES = [ROOT / "tests" / "fixtures" / "real_agents", ROOT / "tests" / "fixtures" / "agents"]
SHARED_SESSIONS = ROOT.parent / "shared" / "sessions"
DEMO = ROOT / "data" / "demo-guard-limits.db"

#: Sessions whose file does not say how they ended, and why (none yet: add one only with its reason).
UNKNOWN_BECAUSE: dict[str, str] = {}


def run(argv: list[str]) -> tuple[int, str]:
    out = io.StringIO()
    return main(argv, out=out), out.getvalue()


def test_the_published_schema_is_current() -> None:
    assert SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        "run: python -m engine.explain --schema > docs/why.schema.json"
    )


def test_the_json_has_exactly_the_documented_shape() -> None:
    code, text = run(["why", str(DEMO), "--format", "json"])
    assert code == 0
    data = json.loads(text)
    WhyJson.model_validate(data)  # extra keys or words outside the vocabulary fail here
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.validate(data, json.loads(SCHEMA.read_text(encoding="utf-8")))
    session = next(s for s in data["sessions"] if s["session_id"] == "demo-small-window-final-5aacc716")
    assert set(session) == {"session_id", "agent", "title", "ended", "compactions", "failed_calls"}
    assert set(session["ended"]) == {"cause", "call", "detail"}
    assert session["ended"]["cause"] == "forced_final"
    overflow = next(s for s in data["sessions"] if s["session_id"] == "demo-gateway-overflow-5034274d")
    assert set(overflow["compactions"][0]) == {
        "call", "by", "trigger", "tokens_before", "tokens_after", "limit_tokens", "window_tokens", "threshold_tokens",
        "instructions",
        "kept", "dropped",
    }  # fmt: skip
    assert set(overflow["failed_calls"][0]) == {"call", "cause", "status", "message", "next"}
    assert overflow["compactions"][0]["trigger"] == "reactive"


def test_one_session_by_id_prefix_as_text() -> None:
    code, text = run(["why", f"{DEMO}:demo-small-window"])
    assert code == 0
    lines = text.splitlines()
    assert lines[0].startswith("demo-small-window-final-5aacc716  ctxdesk")
    assert lines[1].strip().startswith("ctxdesk's guard forced a final turn")
    assert "demo-gateway-overflow" not in text


def test_a_missing_database_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(["why", str(tmp_path / "nope.db")])
    assert code != 0
    assert "nope.db" in capsys.readouterr().err


# -- the real agents' fixtures --------------------------------------------------------------------

#: Claude Code scenario -> (end cause, [(by, trigger) of each compaction]).
CLAUDE_SCENARIOS = {
    "compact_auto": ("finished", [("agent", "auto")]),
    "compact_manual": ("finished", [("user", "manual")]),
    "compact_manual_instructions": ("finished", [("user", "manual")]),
    "compact_reactive": ("finished", [("agent", "reactive")]),
    "compact_auto_pct": ("finished", [("agent", "auto")]),
    "parallel_tools": ("finished", []),
    "resume": ("finished", []),
    "thinking": ("finished", []),
    "large_output": ("finished", []),
    # scripts/make_why_fixtures.py
    "finish": ("finished", []),
    "max_tokens": ("max_tokens", []),
    "refusal": ("refusal", []),
    "interrupt": ("interrupted", []),
    "provider_error": ("provider_error", []),
}


@pytest.mark.parametrize("scenario", sorted(CLAUDE_SCENARIOS))
def test_claude_code_fixtures_say_how_they_ended(tmp_path: Path, scenario: str) -> None:
    db = tmp_path / "why.db"
    with SessionStore(db) as store:
        for path in sorted((CLAUDE / scenario / "transcripts").glob("*.jsonl")):
            import_file(path, store)
    code, text = run(["why", str(db), "--format", "json"])
    assert code == 0
    [main_session] = [s for s in json.loads(text)["sessions"] if ":" not in s["session_id"]]
    cause, compactions = CLAUDE_SCENARIOS[scenario]
    assert main_session["ended"]["cause"] == cause
    assert [(c["by"], c["trigger"]) for c in main_session["compactions"]] == compactions


REAL = ROOT / "tests" / "fixtures" / "real_agents"
#: Codex and Gemini CLI real-run fixtures -> (end cause, [(by, trigger, threshold) of each compaction]).
OTHER_AGENTS = {
    "codex/auto-compact": ("finished", [("agent", "auto", 20_000)]),  # model_auto_compact_token_limit = 20000
    # a 400, then overloaded at the end; Codex's point: 9/10 of gpt-5.5's 272,000 (the file: 95%, 258,400)
    "codex/failed-calls": ("provider_error", [("agent", "reactive", 244_800)]),
    "codex/goal-websearch": ("interrupted", []),  # <turn_aborted>
    "gemini/compression": ("finished", [("agent", "auto", 1_048)]),  # model.compressionThreshold 0.001
    # Qwen Code 0.24: min(0.85 x 131,072, 131,072 - 20,000 - 13,000); it compacted after a 99,886-token call
    "qwen/compress": ("finished", [("agent", "auto", 98_072)]),
}


@pytest.mark.parametrize("scenario", sorted(OTHER_AGENTS))
def test_codex_and_gemini_fixtures_say_how_they_ended_and_compacted(tmp_path: Path, scenario: str) -> None:
    with SessionStore(tmp_path / "agent.db") as store:
        import_files(
            folder_files(REAL / scenario), store, on_error=lambda path, exc: None
        )  # answers.json: no transcript
        top = [s.id for s in store.list_sessions() if s.parent_session_id is None]
        sessions = explain_store(store, top).sessions
    [why] = sessions
    cause, compactions = OTHER_AGENTS[scenario]
    assert why.ended.cause == cause, why.ended.detail
    assert [(c.by, c.trigger, c.threshold_tokens) for c in why.compactions] == compactions


def test_a_prompt_gemini_cli_sends_again_after_its_compression_is_kept_not_dropped(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "agent.db") as store:
        import_files(folder_files(REAL / "gemini" / "compression"), store, on_error=lambda path, exc: None)
        [why] = explain_store(store).sessions
    [c] = why.compactions
    # the state snapshot replaced the history; "Now list the files." was pending and re-sent after it
    assert any("Now list the files." in k.text for k in c.kept), c.kept
    assert not any("Now list the files." in d.text for d in c.dropped), c.dropped
    assert "past its compaction point of 1,048" in c.sentence


def test_the_auto_compaction_fixture_reads_claude_codes_own_numbers(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "auto.db") as store:
        for path in sorted((CLAUDE / "compact_auto" / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    [c] = why.compactions
    # compactMetadata: preTokens 95,049, postTokens 2,813; run with --autocompact 100000 (not in the file)
    assert (c.tokens_before, c.tokens_after) == (95_049, 2_813)
    # Claude Code's "after" leaves out the system prompt and tools; the provider's counts on each side
    # hold them both (the usage the server answered: 95,003 prompt + 20 output before, 23,568 prompt after)
    assert (c.last_call_tokens, c.next_call_tokens) == (95_023, 23_568)
    assert (c.limit_tokens, c.window_tokens, c.threshold_tokens) == (
        180_000,  # the limit every page shows: the window less Claude Code's 20,000 summary reserve
        200_000,
        167_000,
    ) and "not recorded in the file" in c.sentence


def test_the_manual_compaction_fixture_keeps_what_the_summary_names(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "manual.db") as store:
        for path in sorted((CLAUDE / "compact_manual" / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    [c] = why.compactions
    assert {i.text.rsplit("/", 1)[-1] for i in c.kept if i.kind == "file"} == {"app.py", "util.py"}
    assert c.dropped == ()


def test_the_reactive_fixture_names_the_refused_call(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "reactive.db") as store:
        for path in sorted((CLAUDE / "compact_reactive" / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    [f] = why.failed_calls
    [c] = why.compactions
    assert (f.cause, c.trigger, c.after_failed_call) == ("prompt_too_long", "reactive", f.call)
    assert (
        why.headline
        == f"The provider refused call {f.call}: prompt is too long; Claude Code then compacted reactively, then sent call {f.call + 2}"
    )


def test_the_manual_instructions_fixture_quotes_them(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "manual.db") as store:
        for path in sorted((CLAUDE / "compact_manual_instructions" / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    [c] = why.compactions
    assert c.instructions == "Keep the rule about the public API and every file name."
    assert "with the instructions “Keep the rule about the public API and every file name.”" in c.sentence


def _unknown(store: SessionStore) -> dict[str, str]:
    return {s.session_id: s.ended.detail for s in explain_store(store).sessions if s.ended.cause == "unknown"}


def test_no_fixture_session_ends_unknown(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "all.db") as store:
        results = import_files(
            [p for f in AGENT_FIXTURES for p in folder_files(f)], store, on_error=lambda path, exc: None
        )
        assert sum(len(r.session_ids) for r in results) >= 20
        unknown = _unknown(store)
        causes = {s.ended.cause for s in explain_store(store).sessions}
    assert unknown.keys() == UNKNOWN_BECAUSE.keys(), unknown
    assert {"finished", "interrupted"} <= causes


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_no_shared_transcript_ends_unknown(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "shared.db") as store:
        import_files(folder_files(SHARED_SESSIONS), store, on_error=lambda path, exc: None)
        report = explain_store(store)
        unknown = _unknown(store)
    assert len(report.sessions) >= 10
    assert unknown.keys() == UNKNOWN_BECAUSE.keys(), unknown


def test_a_transcript_file_is_explained_without_a_database() -> None:
    transcript = next((CLAUDE / "compact_reactive" / "transcripts").glob("*.jsonl"))
    code, text = run(["why", str(transcript), "--format", "json"])
    assert code == 0
    [main_session] = [s for s in json.loads(text)["sessions"] if ":" not in s["session_id"]]
    assert [c["trigger"] for c in main_session["compactions"]] == ["reactive"]


def test_an_unknown_session_is_named_in_the_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, _ = run(["why", f"{DEMO}:no-such-session"])
    assert code == 1
    assert "no session 'no-such-session'" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.peer("claude")
@pytest.mark.parametrize(
    ("scenario", "cause"),
    [
        ("finish", "finished"),
        ("max_tokens", "max_tokens"),
        ("refusal", "refusal"),
        ("interrupt", "interrupted"),
    ],
)
def test_the_installed_claude_code_still_ends_as_its_fixture_says(
    tmp_path: Path, scenario: str, cause: str
) -> None:
    """scripts/make_why_fixtures.py run live against the installed CLI: the same end cause."""
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import make_why_fixtures

    out = make_why_fixtures.run(make_why_fixtures.scenarios()[scenario], out_root=tmp_path)
    with SessionStore(tmp_path / "live.db") as store:
        for path in sorted((out / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    assert why.ended.cause == cause, why.ended.detail


def test_a_session_is_named_the_same_way_in_why_report_and_inspect(tmp_path: Path) -> None:
    """``DB SESSION`` (as ``inspect`` takes it) and ``DB:SESSION`` (as ``why`` and ``report`` do) both
    work in all three; naming the database twice is a usage error, not a guess."""
    db, sid = str(DEMO), "demo-small-window-final-5aacc716"
    by_colon = run(["why", f"{db}:{sid}"])
    assert by_colon[0] == 0 and by_colon[1].startswith(sid)
    assert run(["why", db, sid]) == by_colon == run(["why", sid, "--db", db])
    report = run(["report", db, sid])
    assert report[0] == 0 and report == run(["report", f"{db}:{sid}"])
    inspected = run(["inspect", db, sid])
    assert inspected[0] == 0 and f"session {sid}" in inspected[1]
    assert run(["inspect", f"{db}:{sid}"]) == inspected
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert run(["why", db, sid, "--db", db])[0] == 2
    assert "name the database once" in err.getvalue()


def test_inspect_says_an_imported_session_is_imported_and_how_it_ended(tmp_path: Path) -> None:
    """An imported transcript's stored status ``active`` only means ctxdesk never closed it: ``inspect``
    shows it as ``imported`` with the ending ``why`` gives, and a session ctxdesk ran keeps its own status."""
    db = tmp_path / "imported.db"
    transcript = CLAUDE / "compact_auto" / "transcripts" / "005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl"
    with SessionStore(db) as store:
        import_file(transcript, store)
    code, listing = run(["inspect", str(db)])
    [row] = [line for line in listing.splitlines() if line.startswith("005e4ed3")]
    assert code == 0 and " imported " in row and " active " not in row
    code, shown = run(["inspect", str(db), "005e4ed3"])
    why = run(["why", str(db), "005e4ed3"])[1]
    ended = next(line.strip() for line in why.splitlines() if line.strip().startswith("ended: "))
    assert code == 0 and "status imported" in shown
    assert f"{ended} (details: ctxdesk why)" in shown.splitlines()
    ran = run(["inspect", str(DEMO), "demo-small-window-final-5aacc716"])[1]
    assert "status imported" not in ran and "ended: " not in ran
