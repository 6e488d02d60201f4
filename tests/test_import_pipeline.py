"""The import pipeline: re-import adds only what is new (and keeps what the user made on a
session), folders, ``--from`` discovery where agents keep their files, following a growing
file, and the command line's exit codes and leftovers.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import ImportFormatError
from engine.events import ContextEvent
from engine.importers import detect_format, import_file, import_files
from engine.importers.follow import ImportFollower
from engine.importers.locations import agent_files, folder_files
from engine.store import SessionStore

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CODEX_ROLLOUT = next((FIXTURES / "real_agents" / "codex" / "tools-resume").rglob("rollout-*.jsonl"))
GEMINI_CHAT = next((FIXTURES / "real_agents" / "gemini" / "tools-resume").rglob("session-*.jsonl"))
CLINE_TASK = FIXTURES / "agents" / "cline" / "1732400000000"
CLAUDE_FILE = FIXTURES / "sessions" / "claude-code__5c0375b4__head23.jsonl"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def grow(path: Path, source: Path, lines: int) -> None:
    """``path`` holds the first ``lines`` lines of ``source`` (a file being written)."""
    path.write_text(
        "".join(source.read_text(encoding="utf-8").splitlines(keepends=True)[:lines]), encoding="utf-8"
    )


def run_cli(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(args), out=out)
    return code, out.getvalue()


# -- re-import ---------------------------------------------------------------------------------


def test_a_growing_rollout_adds_only_its_new_messages_and_calls(tmp_path: Path, store: SessionStore) -> None:
    total = len(CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines())
    live = tmp_path / "rollout-live.jsonl"
    grow(live, CODEX_ROLLOUT, total // 2)
    first = import_file(live, store)
    (session,) = first.sessions
    grow(live, CODEX_ROLLOUT, total)
    second = import_file(live, store)
    assert second.status == "updated"
    assert second.sessions[0].added_messages > 0
    full = SessionStore(tmp_path / "full.db")
    reference = import_file(CODEX_ROLLOUT, full).sessions[0]
    assert store.message_count(session.session_id) == reference.message_count
    calls = store.list_events(session.session_id, kind="request")
    assert len(calls) == reference.request_count == 5  # nothing recorded twice
    assert [e.usage for e in calls] == [
        e.usage for e in full.list_events(reference.session_id, kind="request")
    ]
    full.close()


def test_reimport_keeps_manual_snapshots_and_compactions(tmp_path: Path, store: SessionStore) -> None:
    total = len(CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines())
    live = tmp_path / "rollout-live.jsonl"
    grow(live, CODEX_ROLLOUT, total // 2)
    (session,) = import_file(live, store).sessions
    messages = store.load_transcript(session.session_id)
    snapshot = store.write_snapshot(
        session.session_id,
        messages[-2:],
        through_seq=len(messages) - 1,
        summary="by hand",
        tokens=10,
        strategy="manual",
    )
    manual = store.record_event(
        session.session_id,
        ContextEvent(
            kind="compaction", trigger="manual", outcome="compacted", details={"snapshot_id": snapshot}
        ),
    )
    grow(live, CODEX_ROLLOUT, total)
    import_file(live, store)
    assert [s.id for s in store.list_snapshots(session.session_id)] == [snapshot]
    assert manual in [e.id for e in store.list_events(session.session_id, kind="compaction")]


def test_a_message_rewritten_at_the_tail_is_replaced_not_duplicated(
    tmp_path: Path, store: SessionStore
) -> None:
    lines = GEMINI_CHAT.read_text(encoding="utf-8").splitlines(keepends=True)
    # Cut right after the first copy of a model message (written again with its tool calls next).
    cut = next(i for i, line in enumerate(lines) if '"type":"gemini"' in line and "toolCalls" not in line) + 1
    live = tmp_path / GEMINI_CHAT.name
    live.write_text("".join(lines[:cut]), encoding="utf-8")
    (session,) = import_file(live, store).sessions
    live.write_text("".join(lines), encoding="utf-8")
    result = import_file(live, store)
    reference = import_file(GEMINI_CHAT, SessionStore(tmp_path / "ref.db")).sessions[0]
    assert store.message_count(session.session_id) == reference.message_count
    assert len(store.list_events(session.session_id, kind="request")) == reference.request_count
    assert any("changed" in n for n in result.notes)


def test_an_unfinished_last_line_waits_for_the_next_import(tmp_path: Path, store: SessionStore) -> None:
    text = CODEX_ROLLOUT.read_text(encoding="utf-8")
    live = tmp_path / "rollout-live.jsonl"
    live.write_text(text[: len(text) - 40], encoding="utf-8")  # the writer is mid-line
    with pytest.raises(ImportFormatError, match="malformed JSON line"):
        import_file(live, store)  # a file named on its own: a broken line is an error
    first = import_file(live, store, live=True)  # one an agent is writing: the line waits
    live.write_text(text, encoding="utf-8")
    second = import_file(live, store, live=True)
    assert first.sessions and second.status == "updated"


def test_reimporting_an_unchanged_folder_reads_no_file(tmp_path: Path, store: SessionStore) -> None:
    files = [CODEX_ROLLOUT, GEMINI_CHAT, CLINE_TASK / "api_conversation_history.json", CLAUDE_FILE]
    first = import_files(files, store)
    assert all(r.status == "imported" for r in first)
    second = import_files(files, store)
    assert [r.status for r in second] == ["unchanged"] * 4


def test_nothing_to_import_is_an_error_and_writes_nothing(tmp_path: Path, store: SessionStore) -> None:
    header_only = tmp_path / "rollout-empty.jsonl"
    header_only.write_text(
        CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8"
    )
    with pytest.raises(ImportFormatError, match="no conversation items"):
        import_file(header_only, store)
    assert store.list_sessions() == []


# -- where agents keep their files --------------------------------------------------------------


def agent_home(tmp_path: Path) -> dict[str, str]:
    """A HOME laid out as the agents lay out their files, with CODEX_HOME and CLAUDE_CONFIG_DIR."""
    home = tmp_path / "home"
    codex = tmp_path / "codex-home" / "sessions" / "2026" / "11" / "24"
    codex.mkdir(parents=True)
    shutil.copy(CODEX_ROLLOUT, codex)
    claude = tmp_path / "claude-config" / "projects" / "-home-dev-proj"
    claude.mkdir(parents=True)
    shutil.copy(CLAUDE_FILE, claude / "5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl")
    chats = home / ".gemini" / "tmp" / "repo" / "chats"
    chats.mkdir(parents=True)
    shutil.copy(GEMINI_CHAT, chats)
    tasks = home / ".config" / "Code" / "User" / "globalStorage" / "saoudrizwan.claude-dev" / "tasks"
    shutil.copytree(CLINE_TASK, tasks / CLINE_TASK.name)
    return {
        "HOME": str(home),
        "CODEX_HOME": str(tmp_path / "codex-home"),
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
    }


def test_agent_files_are_found_where_each_agent_keeps_them(tmp_path: Path) -> None:
    env = agent_home(tmp_path)
    names = {
        agent: [p.name for p in agent_files(agent, env)]
        for agent in ("claude-code", "codex", "gemini", "cline")
    }
    assert names == {
        "claude-code": ["5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl"],
        "codex": [CODEX_ROLLOUT.name],
        "gemini": [GEMINI_CHAT.name],
        "cline": ["api_conversation_history.json"],
    }
    assert len(agent_files("all", env)) == 4


def test_import_from_all_agents_groups_by_project_and_a_second_run_adds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in agent_home(tmp_path).items():
        monkeypatch.setenv(name, value)
    db = tmp_path / "agents.db"
    code, out = run_cli("import", "--from", "all", "--db", str(db))
    assert code == 0 and "4 file(s) imported or updated" in out
    with SessionStore(db, read_only=True) as store:
        projects = {
            s.source: s.metadata.get("project") for s in store.list_sessions() if not s.parent_session_id
        }
    assert projects["import:codex"] == "/tmp/ctxdesk-real-agents/codex-tools-resume/repo"
    assert projects["import:cline"] == "/home/dev/proj"
    assert projects["import:gemini"] == "/tmp/ctxdesk-real-agents/gemini-tools-resume/repo"
    code, out = run_cli("import", "--from", "all", "--db", str(db))
    assert code == 0 and "0 file(s) imported or updated, 4 unchanged" in out


def test_folder_import_skips_what_is_not_a_transcript_and_says_so(tmp_path: Path) -> None:
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(CODEX_ROLLOUT, folder)
    (folder / "notes.json").write_text('{"todo": []}', encoding="utf-8")
    shutil.copytree(CLINE_TASK, folder / "task")
    assert sorted(p.name for p in folder_files(folder)) == sorted(
        [CODEX_ROLLOUT.name, "notes.json", "api_conversation_history.json"]
    )
    code, out = run_cli("import", str(folder), "--db", str(tmp_path / "x.db"))
    assert code == 0
    assert "2 file(s) imported or updated" in out and "1 file(s) skipped" in out


def test_follower_imports_lines_appended_after_it_started(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    codex_home = tmp_path / "codex-home"
    day = codex_home / "sessions" / "2026" / "11" / "24"
    day.mkdir(parents=True)
    monkeypatch.setenv("CODEX_HOME", str(codex_home))
    live = day / CODEX_ROLLOUT.name
    total = len(CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines())
    grow(live, CODEX_ROLLOUT, total // 2)
    follower = ImportFollower(tmp_path / "agents.db", "codex", interval=0.05)
    assert follower.import_once() > 0
    grow(live, CODEX_ROLLOUT, total)
    os.utime(live, ns=(live.stat().st_atime_ns, live.stat().st_mtime_ns + 1_000_000))
    added = follower.import_once()
    assert added > 0 and follower.import_once() == 0 and not follower.errors


# -- command line -----------------------------------------------------------------------------


def test_a_failed_import_into_a_new_path_leaves_no_database(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"nothing": True}), encoding="utf-8")
    db = tmp_path / "new.db"
    code, _ = run_cli("import", str(bad), "--db", str(db))
    assert code == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("new.db")]


def test_a_failed_import_into_an_existing_database_keeps_it(tmp_path: Path) -> None:
    db = tmp_path / "kept.db"
    assert run_cli("import", str(CODEX_ROLLOUT), "--db", str(db))[0] == 0
    bad = tmp_path / "ui_messages.json"
    shutil.copy(CLINE_TASK / "ui_messages.json", bad)
    code, _ = run_cli("import", str(bad), "--db", str(db))
    assert code == 1 and db.exists()
    with SessionStore(db, read_only=True) as store:
        assert len(store.list_sessions()) == 1


def test_import_needs_something_to_import(tmp_path: Path) -> None:
    code, _ = run_cli("import", "--db", str(tmp_path / "x.db"))
    assert code == 2


def test_dashboard_from_imports_first_then_follows_appended_lines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from engine.cli import build_parser
    from engine.cli.importing import start_following

    day = tmp_path / "codex-home" / "sessions" / "2026" / "11" / "24"
    day.mkdir(parents=True)
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    live = day / CODEX_ROLLOUT.name
    total = len(CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines())
    grow(live, CODEX_ROLLOUT, total // 2)
    assert build_parser().parse_args(["dashboard", "--from", "codex"]).agent == "codex"
    db, follower = start_following("codex", err=io.StringIO())
    try:
        assert db == tmp_path / "data" / "ctxdesk" / "agents.db"
        with SessionStore(db, read_only=True) as store:
            (session,) = store.list_sessions()
            before = store.message_count(session.id)
        grow(live, CODEX_ROLLOUT, total)
        deadline = time.monotonic() + 30
        while follower.added_messages == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        with SessionStore(db, read_only=True) as store:
            assert store.message_count(session.id) > before
    finally:
        follower.stop()


def test_a_line_cache_decodes_only_appended_lines_and_gives_the_same_import(tmp_path: Path) -> None:
    from engine.importers.detect import LineCache, read_document

    lines = CODEX_ROLLOUT.read_text(encoding="utf-8").splitlines(keepends=True)
    live = tmp_path / "rollout-live.jsonl"
    live.write_text("".join(lines[:10]) + lines[10][:30], encoding="utf-8")  # mid-line
    cache = LineCache()
    first = read_document(live, live=True, cache=cache)
    assert len(first.lines) == 10
    live.write_text("".join(lines), encoding="utf-8")
    appended = read_document(live, live=True, cache=cache)
    assert cache.appended_reads == 1
    assert appended.lines == read_document(live).lines
    live.write_text("".join(lines[:5]), encoding="utf-8")  # rewritten shorter: read whole again
    assert len(read_document(live, live=True, cache=cache).lines) == 5 and cache.appended_reads == 1
    with SessionStore(tmp_path / "a.db") as store, SessionStore(tmp_path / "b.db") as reference:
        grow(live, CODEX_ROLLOUT, len(lines) // 2)
        import_files([live], store, live=True, cache=cache)
        grow(live, CODEX_ROLLOUT, len(lines))
        (result,) = import_files([live], store, live=True, cache=cache)
        (whole,) = import_files([CODEX_ROLLOUT], reference)
        assert cache.appended_reads == 3 and result.status == "updated"
        assert store.load_transcript(result.sessions[0].session_id) == reference.load_transcript(
            whole.sessions[0].session_id
        )


def _transcripts(*subs: str) -> list[Path]:
    """The transcript files of the fixture folders (their server logs and run summaries left out)."""
    found = []
    for sub in subs:
        for path in folder_files(Path(__file__).resolve().parent / "fixtures" / sub):
            try:
                detect_format(path)
            except ImportFormatError:
                continue
            found.append(path)
    return found


@pytest.mark.parametrize(
    "path", _transcripts("real_agents", "agents", "sessions"), ids=lambda p: f"{p.parent.name}/{p.name}"[-60:]
)
def test_the_stored_components_of_every_counted_call_add_up_to_the_providers_count(
    path: Path, tmp_path: Path
) -> None:
    from engine.importers.accuracy import residual_report
    from engine.store import SessionStore

    with SessionStore(tmp_path / "x.db") as store:
        report = residual_report(store, import_file(path, store).session_ids)
    assert report.mismatched == 0, report


# -- hostile files (#32.9) ---------------------------------------------------------------------------


def _cli_in_child(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``ctxdesk`` in a child process, so that a read that would block forever fails the test."""
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(FIXTURES.parents[1])},
    )  # fmt: skip


@pytest.mark.parametrize("kind", ["symlink loop", "fifo", "dangling symlink"])
def test_a_folder_with_a_file_that_cannot_be_read_imports_the_rest_and_says_why(
    tmp_path: Path, kind: str
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    shutil.copy(CODEX_ROLLOUT, folder)
    odd = folder / "odd.jsonl"
    if kind == "symlink loop":
        odd.symlink_to(odd.name)  # resolving it raised RuntimeError and aborted the whole import
    elif kind == "fifo":
        os.mkfifo(odd)  # reading it blocked the import forever
    else:
        odd.symlink_to(tmp_path / "gone.jsonl")
    db = tmp_path / "x.db"
    done = _cli_in_child("import", str(folder), "--db", str(db), "--verbose")
    assert done.returncode == 0, done.stderr
    assert "1 file(s) imported or updated" in done.stdout and "1 skipped" in done.stdout
    assert "odd.jsonl" in done.stdout  # --verbose says which and why
    with SessionStore(db) as store:
        assert len(store.list_sessions()) == 1


def test_a_fifo_named_on_the_command_line_is_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    done = _cli_in_child("import", str(fifo), "--db", str(tmp_path / "x.db"))
    assert done.returncode == 2 and "not a regular file" in done.stderr


def _jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("lines", "line", "message"),
    [
        pytest.param(['{"a": 1}', '{"b": "' + "x" * 5_000 + '"}', '{"c": 3}'], 2, "line 2 is longer than 4,096 bytes",
                     id="a long line in the middle"),
        pytest.param(['{"a": "' + "x" * 5_000 + '"}'], 1, "line 1 is longer than 4,096 bytes", id="one long line"),
        pytest.param(["{", '  "a": "' + "x" * 5_000 + '"', "}"], 1, "document is longer than 4,096 bytes",
                     id="a pretty-printed document past the cap"),
        pytest.param(["[" + ", ".join(["1"] * 3_000) + "]"], 1, "document is longer than 4,096 bytes",
                     id="a list past the cap"),
    ],
)  # fmt: skip
def test_a_line_past_the_cap_is_refused_naming_its_line(
    tmp_path: Path, lines: list[str], line: int, message: str
) -> None:
    from engine.importers.detect import read_document
    from engine.importers.parsing.parsed import SourceProblem

    path = _jsonl(tmp_path / "big.jsonl", lines)
    with pytest.raises(SourceProblem, match=message) as caught:
        read_document(path, max_line_bytes=4_096)
    assert caught.value.line == line


def test_lines_under_the_cap_read_as_before(tmp_path: Path) -> None:
    from engine.importers.detect import read_document
    from engine.importers.parsing.parsed import SourceProblem

    text = CLAUDE_FILE.read_text(encoding="utf-8")
    largest = max(len(line.encode()) for line in text.splitlines())
    small = read_document(CLAUDE_FILE, max_line_bytes=largest + 1)
    assert small.lines == read_document(CLAUDE_FILE).lines
    assert [n for n, _ in small.lines] == [n for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    with pytest.raises(SourceProblem, match="is longer than"):
        read_document(CLAUDE_FILE, max_line_bytes=largest - 1)


def test_a_raw_line_separator_inside_a_string_is_text_not_a_line_break(
    tmp_path: Path, store: SessionStore
) -> None:
    lines = CLAUDE_FILE.read_text(encoding="utf-8").splitlines()
    # a prompt with U+2028 written raw (valid JSON: only \n ends a JSON Lines line)
    first = next(k for k, line in enumerate(lines) if '"type":"user"' in line.replace(" ", ""))
    value = json.loads(lines[first])
    value["message"]["content"] = "before\u2028after"
    lines[first] = json.dumps(value, ensure_ascii=False)
    path = _jsonl(tmp_path / "sep.jsonl", lines)
    assert import_file(path, store).sessions


@pytest.mark.slow
def test_a_line_past_the_cap_costs_at_most_twice_the_cap_of_memory(tmp_path: Path) -> None:
    from engine.importers.lines import MAX_LINE_BYTES

    path = tmp_path / "huge.jsonl"
    with path.open("wb") as fh:
        fh.write(b'{"type": "user", "sessionId": "s", "uuid": "u", "message": {"role": "user", "content": "')
        chunk = b"x" * (1 << 20)
        for _ in range(MAX_LINE_BYTES // len(chunk) + 16):  # 16 MB past the cap
            fh.write(chunk)
        fh.write(b'"}}\n')
    probe = (
        "import resource, sys\n"
        "from pathlib import Path\n"
        "from engine.errors import ImportFormatError\n"
        "from engine.importers import import_file\n"
        "from engine.store import SessionStore\n"
        "base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
        "with SessionStore(sys.argv[2]) as store:\n"
        "    try:\n"
        "        import_file(Path(sys.argv[1]), store)\n"
        "    except ImportFormatError as exc:\n"
        "        print(exc)\n"
        "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base) * 1024)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(path), str(tmp_path / "x.db")], capture_output=True, text=True,
        timeout=600, env={**os.environ, "PYTHONPATH": str(FIXTURES.parents[1])},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    message, grown = done.stdout.strip().splitlines()
    assert f"{path}:1:" in message and "longer than" in message
    assert int(grown) <= 2 * MAX_LINE_BYTES


# -- what an import says (#36.7) ---------------------------------------------------------------------


def test_a_skipped_file_is_never_reported_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.json").write_text('{"todo": []}', encoding="utf-8")
    code, out = run_cli("import", str(folder), "--db", str(tmp_path / "x.db"))
    progress = capsys.readouterr().err
    assert code == 1 and "1 skipped" in out
    assert "[1/1] skipped notes.json" in progress and "imported notes.json" not in progress


def test_the_summary_gives_the_last_prompt_and_the_peak_share_of_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "x.db"
    code, out = run_cli("import", str(CLAUDE_FILE), "--db", str(db))
    assert code == 0 and "[1/1] imported" in capsys.readouterr().err
    with SessionStore(db) as store:
        (session,) = [s for s in store.list_sessions() if s.parent_session_id is None]
        requests = store.list_events(session.id, kind="request")
    last = requests[-1]
    peak = max(requests, key=lambda e: e.projected_tokens / e.limit_tokens)
    expected = (
        f"last prompt {last.usage.prompt_tokens:,} tokens, "
        f"peak {peak.projected_tokens / peak.limit_tokens:.0%} of {peak.limit_tokens:,}"
    )
    (line,) = [line for line in out.splitlines() if f"session {session.id} (" in line]
    assert line.endswith(expected)  # not the sum of every message's tokens


def test_an_unknown_model_says_its_limit_is_unknown(tmp_path: Path) -> None:
    path = tmp_path / "chat.json"
    path.write_text(
        json.dumps([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]),
        encoding="utf-8",
    )
    code, out = run_cli("import", str(path), "--db", str(tmp_path / "x.db"))
    assert code == 0 and "limit unknown" in out


@pytest.mark.parametrize(
    ("settings_text", "window", "limit", "source"),
    [
        pytest.param(None, 200_000, 135_744, "model table", id="the model table's window"),
        pytest.param(
            '[models."claude-sonnet-4-20250514"]\ncontext_window = 100000\nmax_output_tokens = 8000\n',
            100_000, None, "settings", id="the user's settings win",
        ),
    ],
)  # fmt: skip
def test_an_imported_call_records_the_limit_it_can_know(
    tmp_path: Path, settings_text: str | None, window: int, limit: int | None, source: str
) -> None:
    db = tmp_path / "x.db"
    args = ["import", str(CLINE_TASK / "api_conversation_history.json"), "--db", str(db)]
    if settings_text is not None:
        settings = tmp_path / "settings.toml"
        settings.write_text(settings_text, encoding="utf-8")
        args = ["--settings", str(settings), *args]
    assert run_cli(*args)[0] == 0
    with SessionStore(db) as store:
        (session,) = store.list_sessions()
        events = store.list_events(session.id, kind="request")
    assert events and {(e.context_window, e.details["limit_source"]) for e in events} == {(window, source)}
    from engine.settings import limit_for_model, load_settings

    expected = limit_for_model(
        "claude-sonnet-4-20250514", settings=load_settings(settings) if settings_text else None
    )
    assert {e.limit_tokens for e in events} == {limit or expected.tokens}


@pytest.mark.parametrize("path", [CLAUDE_FILE, CODEX_ROLLOUT, GEMINI_CHAT], ids=lambda p: p.name[:40])
def test_session_and_call_times_are_the_transcripts_not_the_imports(path: Path, store: SessionStore) -> None:
    (session_id, *_) = import_file(path, store).session_ids
    session = store.get_session(session_id)
    times = [
        r.message.meta["timestamp"]
        for r in store.load_messages(session_id)
        if r.message.meta.get("timestamp")
    ]
    assert times
    started, ended = session.metadata["started_utc"], session.metadata["ended_utc"]
    assert started[:19] == min(times)[:19] and ended[:19] == max(times)[:19]
    assert started < session.created_utc  # the transcript's time, not the import's
    calls = [e.details["call_utc"] for e in store.list_events(session_id, kind="request")]
    assert calls and all(started <= t <= ended for t in calls)


REAL_AGENTS = FIXTURES / "real_agents"


@pytest.mark.parametrize("agent", ["qwen", "opencode", "copilot", "kilo"])
def test_a_format_that_stamps_only_its_calls_still_says_when_its_sessions_ran(
    agent: str, store: SessionStore
) -> None:
    # Their messages carry no time of their own: the session's times were the import's
    import_files(folder_files(REAL_AGENTS / agent), store, on_error=lambda path, exc: None)
    sessions = store.list_sessions()
    assert sessions
    for session in sessions:
        calls = [e.details.get("call_utc") for e in store.list_events(session.id, kind="request")]
        stamped = sorted(t for t in calls if t)
        assert stamped, session.title
        started, ended = session.metadata["started_utc"], session.metadata["ended_utc"]
        assert started[:19] <= stamped[0][:19] and ended[:19] >= stamped[-1][:19]
        assert ended < session.created_utc  # the transcript's time, not the import's


@pytest.mark.parametrize(("agent", "label"), [("opencode", "OpenCode"), ("kilo", "Kilo CLI")])
def test_an_agents_compaction_without_its_own_count_is_at_the_last_calls_prompt(
    agent: str, label: str, store: SessionStore
) -> None:
    # OpenCode and Kilo record no tokens with a compaction: "before" was the messages alone (56 tokens
    # for a prompt the provider had refused as too long), now the prompt of the call before it
    import_files(folder_files(REAL_AGENTS / agent), store, on_error=lambda path, exc: None)
    compactions = [
        (s.id, e) for s in store.list_sessions() for e in store.list_events(s.id, kind="compaction")
    ]
    assert {e.details["trigger_kind"] for _, e in compactions} >= {"auto", "reactive"}
    for session_id, event in compactions:
        [last] = [r for r in store.list_events(session_id, kind="request") if r.seq < event.seq][-1:]
        prompt = last.details.get("provider_prompt_tokens") or last.components.total
        assert event.details["before_tokens"] == prompt > 5_000
        assert event.reason.startswith(f"{label} compacted")


def test_every_call_of_a_real_session_has_one_limit_per_model(tmp_path: Path) -> None:
    """One truth per call (#29): the calls of one session to one model are held to one limit,
    a failed call and a summarizer call included (Copilot's refused call and summary call had
    the model table's 111,360 beside the 64,000 its other calls were held to)."""
    with SessionStore(tmp_path / "agents.db") as store:
        import_files(folder_files(FIXTURES / "real_agents"), store, on_error=lambda path, exc: None)
        mixed = {}
        for session in store.list_sessions():
            limits: dict[str | None, set[int | None]] = {}
            for event in store.list_events(session.id, kind="request"):
                limits.setdefault(event.model, set()).add(event.limit_tokens)
            mixed.update({(session.id, m): sorted(v, key=str) for m, v in limits.items() if len(v) > 1})
    assert not mixed
