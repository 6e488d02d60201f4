"""The ctxdesk command line, run in-process through main(argv) and as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine import __version__
from engine.cli import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_USAGE, format_table, main

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_help_and_version_work_as_a_subprocess() -> None:
    helped = run_cli("--help")
    assert helped.returncode == 0
    for command in ("dashboard", "demo", "inspect", "compact", "import", "models"):
        assert command in helped.stdout
    versioned = run_cli("--version")
    assert versioned.returncode == 0
    assert versioned.stdout.strip() == f"ctxdesk {__version__}"


def test_help_does_not_import_the_anthropic_sdk() -> None:
    """The SDK costs seconds to import; only a client or summarizer in use loads it."""
    code = "import sys, engine.cli; engine.cli.main(['--help']); print('anthropic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip().splitlines()[-1] == "False"


def test_usage_errors_exit_2_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert main(["inspect"]) == EXIT_USAGE
    assert main(["dashboard", "--port", "0"]) == EXIT_USAGE
    capsys.readouterr()
    assert main(["inspect", "no-such-file.db"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["ctxdesk: error: no such database file: no-such-file.db"]


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["report", "nothere.db"], id="report"),
        pytest.param(["report", "nothere.db:some-session"], id="report DB:SESSION"),
        pytest.param(["diff", "nothere.db", "nothere.db"], id="diff"),
        pytest.param(["inspect", "nothere.db"], id="inspect"),
        pytest.param(["costs", "nothere.db"], id="costs"),
    ],
)
def test_a_missing_database_is_named_once_in_one_error_line(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) in (EXIT_USAGE, EXIT_ERROR)
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("ctxdesk: error: no such") and line.count("nothere.db") == 1, line


def test_a_file_that_is_not_a_database_is_an_error_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("not sqlite at all")
    assert main(["inspect", str(bogus)]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctxdesk: error: not a SQLite database")


def test_an_interrupted_command_says_so_in_one_line_and_exits_130(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """^C during an import: one line, no traceback (the files written before stay imported)."""
    import signal

    transcript = tmp_path / "s.jsonl"
    transcript.write_text(
        '{"type": "user", "sessionId": "s", "uuid": "u1", "message": {"role": "user", "content": "hi"}}\n'
    )

    def interrupted(*args: object) -> None:
        signal.raise_signal(signal.SIGINT)  # as ^C in the terminal: Python's own handler raises

    code = main(["import", str(transcript), "--db", str(tmp_path / "out.db")], out=_Interrupting(interrupted))
    err = capsys.readouterr().err
    assert code == EXIT_INTERRUPTED == 130
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1] == "ctxdesk: interrupted; what was written before stays"


class _Interrupting:
    """An output that is interrupted at its first write (the import's first line)."""

    def __init__(self, interrupt: object) -> None:
        self.interrupt = interrupt

    def write(self, text: str) -> int:
        self.interrupt()  # type: ignore[operator]
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_format_table_aligns_numbers_right_and_text_left() -> None:
    text = format_table(("name", "tokens"), [("a", 1200), ("longer", 5), ("c", None)])
    assert text.splitlines() == [
        "name    tokens",
        "------  ------",
        "a        1,200",
        "longer       5",
        "c            -",
    ]


def test_the_cli_and_the_report_share_one_cell_formatter_with_their_own_float_format() -> None:
    from engine.report import render_table

    rows = [("a", 83.25, True), ("b", 1234.5, None)]
    assert format_table(("k", "pct", "ok"), rows).splitlines()[2:] == ["a   83.25  yes", "b  1234.5    -"]
    assert render_table(("k", "pct", "ok"), rows).splitlines()[2:] == ["a     83.2  yes", "b  1,234.5    -"]


# -- commands on a real session database ----------------------------------------------------

import os  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import urllib.request  # noqa: E402

from engine.cli import DB_PATHS_ENV_VAR, dashboard_app_path, dashboard_command, dashboard_env  # noqa: E402
from engine.clients import ScriptedClient  # noqa: E402
from engine.compaction import OfflineSummarizer  # noqa: E402
from engine.messages import assistant, tool_use  # noqa: E402
from engine.session import SessionManager  # noqa: E402
from engine.settings import Settings  # noqa: E402
from engine.store import SessionStore  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "sessions"


@pytest.fixture(scope="module")
def session_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A small session: three turns reading files, one offloaded log, compaction at the threshold."""
    path = tmp_path_factory.mktemp("cli") / "sessions.db"
    steps = []
    for turn in range(6):
        steps += [assistant("", tool_use(f"r{turn}", "read_file", path=f"m{turn}.py")), f"Read m{turn}."]
    handlers = {
        "read_file": lambda args: f"# {args['path']}\n" + "value = compute(1, 2)  # a line of code\n" * 90
    }
    settings = Settings.from_dict(
        {
            "models": {
                "claude-sonnet-4-6": {
                    "context_window": 9_000,
                    "max_output_tokens": 2_048,
                    "note_threshold": 0.5,
                    "compact_threshold": 0.7,
                }
            }
        }
    )
    tools = [
        {
            "name": "read_file",
            "description": "Read a file.",
            "input_schema": {"type": "object", "properties": {}},
        }
    ]
    with SessionStore(path) as store:
        m = SessionManager(ScriptedClient(steps), store, title="cli fixture", settings=settings, tools=tools,
                           tool_handlers=handlers, summarizer=OfflineSummarizer())  # fmt: skip
        for turn in range(6):
            m.run_turn(f"Read m{turn}.py")
        return path, m.session_id


def test_inspect_lists_sessions_then_shows_components_and_events(session_db, capsys) -> None:
    path, sid = session_db
    assert main(["inspect", str(path)]) == 0
    listing = capsys.readouterr().out
    assert sid in listing and "cli fixture" in listing
    assert main(["inspect", str(path), sid[:8]]) == 0
    shown = capsys.readouterr().out
    assert "per-component tokens" in shown and "tool_results" in shown and "conversation" in shown
    assert "compaction" in shown and "via " in shown
    assert "routine guard events" in shown
    assert main(["inspect", str(path), sid, "--all"]) == 0
    assert "turn_preflight     ok" in capsys.readouterr().out


def test_inspect_an_unknown_session_is_one_error_line(session_db, capsys) -> None:
    path, _ = session_db
    assert main(["inspect", str(path), "nope"]) == EXIT_ERROR
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ctxdesk: error: no session 'nope' in the database: {path}"
    ]


def test_compact_dry_run_writes_nothing_and_compact_writes_a_snapshot(session_db, tmp_path, capsys) -> None:
    source, sid = session_db
    path = tmp_path / "copy.db"
    shutil.copy(source, path)
    with SessionStore(path, read_only=True) as store:
        snapshots, transcript = len(store.list_snapshots(sid)), store.load_transcript(sid)
    assert main(["compact", str(path), sid, "--strategy", "sliding_window", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "before" in dry and "after" in dry and "dry run: nothing written" in dry
    with SessionStore(path, read_only=True) as store:
        assert len(store.list_snapshots(sid)) == snapshots
    assert main(["compact", str(path), sid, "--strategy", "clear_tool_results,summarize",
                 "--instructions", "keep file names"]) == 0  # fmt: skip
    done = capsys.readouterr().out
    assert "snapshot" in done and "transcript untouched" in done
    with SessionStore(path, read_only=True) as store:
        assert len(store.list_snapshots(sid)) == snapshots + 1
        assert store.load_transcript(sid) == transcript
        event = store.list_events(sid, kind="compaction")[-1]
        assert event.trigger == "manual" and event.details["instructions"] == "keep file names"


def test_compact_with_an_unknown_strategy_is_an_error(session_db, tmp_path, capsys) -> None:
    source, sid = session_db
    path = tmp_path / "copy.db"
    shutil.copy(source, path)
    assert main(["compact", str(path), sid, "--strategy", "shred"]) == EXIT_ERROR
    assert "unknown compaction strategy 'shred'" in capsys.readouterr().err


def test_import_reports_sessions_and_progress_on_stderr(tmp_path, capsys) -> None:
    files = sorted(str(p) for p in FIXTURES.glob("claude-code__*.jsonl"))
    assert files
    db = tmp_path / "imported.db"
    assert main(["import", *files, "--db", str(db)]) == 0
    captured = capsys.readouterr()
    assert f"[{len(files)}/{len(files)}] imported" in captured.err
    assert captured.out.count("claude-code session") >= len(files)
    with SessionStore(db, read_only=True) as store:
        assert len(store.list_sessions()) >= len(files)


def test_import_of_a_file_in_no_known_format_is_an_error(tmp_path, capsys) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\n")
    assert main(["import", str(junk), "--db", str(tmp_path / "x.db")]) == EXIT_ERROR
    assert capsys.readouterr().err.startswith("ctxdesk: error: ")
    assert main(["import", str(tmp_path / "missing.jsonl"), "--db", str(tmp_path / "x.db")]) == EXIT_USAGE


def test_models_shows_values_and_where_each_came_from(tmp_path, capsys) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text(
        'compact_trigger = 0.9\n[models."claude-haiku-4-5"]\ncontext_window = 16000\nmax_output_tokens = 4096\n'
    )
    assert main(["--settings", str(settings), "models", "claude-haiku-4-5"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert "16,000" in lines["context_window"] and "model:claude-haiku-4-5" in lines["context_window"]
    assert "0.9" in lines["compact_threshold"] and "defaults" in lines["compact_threshold"]
    assert "builtin" in lines["hard_block_threshold"]
    assert main(["--settings", str(settings), "models"]) == 0
    assert "claude-haiku-4-5" in capsys.readouterr().out


def test_models_with_a_broken_settings_file_is_one_error_line(tmp_path, capsys) -> None:
    settings = tmp_path / "settings.toml"
    settings.write_text("compact_trigger = 7\n")
    assert main(["--settings", str(settings), "models", "gpt-4o"]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctxdesk: error: compact_trigger")


@pytest.mark.parametrize(
    ("platform", "env", "opens"),
    [
        ("linux", {}, False),  # a server over ssh: xdg-open would start a text browser in the terminal
        ("linux", {"DISPLAY": ":0"}, True),
        ("linux", {"WAYLAND_DISPLAY": "wayland-0"}, True),
        ("darwin", {}, True),
        ("win32", {}, True),
    ],
)
def test_the_dashboard_opens_a_browser_only_where_one_can_open(platform: str, env: dict, opens: bool) -> None:
    from engine.cli.dashboard import can_open_browser

    assert can_open_browser(platform, env) is opens
    command = dashboard_command(Path("/x/app.py"), [], port=8600, headless=not opens)
    assert command[command.index("--server.headless") + 1] == ("false" if opens else "true")


def test_dashboard_command_binds_localhost_and_passes_paths_both_ways(tmp_path) -> None:
    db = tmp_path / "a.db"
    command = dashboard_command(Path("/x/app.py"), [db], port=8600, headless=True)
    assert command[1:4] == ["-m", "streamlit", "run"]
    assert command[command.index("--server.address") + 1] == "127.0.0.1"
    assert command[command.index("--server.port") + 1] == "8600"
    assert command[-2:] == ["--", str(db)]
    env = dashboard_env([db, tmp_path], base={"HOME": "/root"})
    assert env == {"HOME": "/root", DB_PATHS_ENV_VAR: f"{db}{os.pathsep}{tmp_path}"}


def test_dashboard_with_a_missing_path_is_a_usage_error(tmp_path, capsys) -> None:
    assert main(["dashboard", str(tmp_path / "missing.db")]) == EXIT_USAGE
    assert "no such file or directory" in capsys.readouterr().err


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not (REPO / "dashboard" / "app.py").exists(), reason="dashboard app not in this checkout")
def test_dashboard_serves_on_localhost(session_db) -> None:
    path, _ = session_db
    assert dashboard_app_path().name == "app.py"
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "dashboard", str(path), "--port", str(port), "--no-browser"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2) as response:
                    assert response.read().decode().strip() == "ok"
                    break
            except OSError:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else "dashboard exited"
                assert time.monotonic() < deadline, "dashboard did not come up within 60 s"
                time.sleep(0.3)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr:
            proc.stderr.close()


def test_a_folder_of_transcripts_given_to_the_dashboard_is_imported_into_the_agents_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli.dashboard import import_transcript_folders

    folder = tmp_path / "claude-code"
    shutil.copytree(
        Path(__file__).parent / "fixtures" / "real_agents" / "claude-code" / "resume" / "transcripts", folder
    )
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    agents_db = tmp_path / "data" / "ctxdesk" / "agents.db"
    dbs_folder = tmp_path / "dbs"
    dbs_folder.mkdir()
    (dbs_folder / "a.db").write_bytes(b"")

    assert import_transcript_folders([folder, dbs_folder]) == [dbs_folder, agents_db]
    with SessionStore(agents_db, read_only=True) as store:
        assert store.list_sessions()
    assert "session(s) imported" in capsys.readouterr().err
    assert import_transcript_folders([dbs_folder]) == [dbs_folder]  # a folder of databases is served as it is
