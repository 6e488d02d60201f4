"""A batch imported by parsing workers equals the same batch imported serially, row by row."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine.errors import ImportFormatError
from engine.importers import folder_files, import_files
from engine.importers.parallel import import_files_parallel, pool_size
from engine.store.factory import open_store

REAL_AGENTS = Path(__file__).parent / "fixtures" / "real_agents"
#: Columns holding when the import ran (not what it read): they differ between any two runs. A
#: call whose transcript keeps no time is dated at its import (call_utc, its day, the gap to it).
IMPORT_TIME_COLUMNS = {
    "created_utc",
    "updated_utc",
    "applied_utc",
    "computed_utc",
    "call_utc",
    "day",
    "gap_s",
}
#: Ids drawn at random when a row is written (an offloaded output's ref_id), also per run.
RANDOM_ID_COLUMNS = {"ref_id"}


def table_rows(db: Path) -> dict[str, list[tuple[object, ...]]]:
    """Every table's rows in a stable order, without the import-time columns."""
    connection = sqlite3.connect(db)
    try:
        tables = [name for (name,) in connection.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows: dict[str, list[tuple[object, ...]]] = {}
        for table in tables:
            columns = [c[1] for c in connection.execute(f"PRAGMA table_info({table})")]
            kept = [c for c in columns if c not in IMPORT_TIME_COLUMNS | RANDOM_ID_COLUMNS]
            rows[table] = sorted(
                connection.execute(f"SELECT {', '.join(kept)} FROM {table}").fetchall(), key=repr
            )
        return rows
    finally:
        connection.close()


def import_into(db: Path, paths: list[Path], *, workers: int) -> tuple[list[str], list[str]]:
    """(status of each imported file, 'file: error' of each skipped one)."""
    skipped: list[str] = []
    with open_store(db) as store:
        if workers == 1:
            results = import_files(paths, store, on_error=lambda p, e: skipped.append(f"{p.name}: {e}"))
        else:
            from engine.importers import imported_files

            results = import_files_parallel(
                paths, store, imported_files(store), workers=workers, min_bytes=0,
                on_error=lambda p, e: skipped.append(f"{p.name}: {e}"),
            )  # fmt: skip
    return [f"{Path(r.path).name}: {r.status}" for r in results], skipped


def test_pool_is_sized_to_the_machine() -> None:
    assert 1 <= pool_size() <= 4096


def test_parallel_import_of_every_real_agent_fixture_equals_the_serial_one(tmp_path: Path) -> None:
    paths = folder_files(REAL_AGENTS)
    assert len(paths) > 30  # every agent's real runs
    serial = import_into(tmp_path / "serial.db", paths, workers=1)
    parallel = import_into(tmp_path / "parallel.db", paths, workers=2)
    assert parallel == serial
    serial_rows, parallel_rows = table_rows(tmp_path / "serial.db"), table_rows(tmp_path / "parallel.db")
    assert sum(len(rows) for rows in serial_rows.values()) > 1000
    for table, rows in serial_rows.items():
        assert parallel_rows[table] == rows, table


def test_parallel_reimport_of_an_unchanged_batch_reads_nothing(tmp_path: Path) -> None:
    paths = folder_files(REAL_AGENTS / "codex")
    first, not_transcripts = import_into(tmp_path / "a.db", paths, workers=2)
    statuses, skipped = import_into(tmp_path / "a.db", paths, workers=2)
    assert len(statuses) == len(first) >= 5
    assert all(s.endswith(": unchanged") for s in statuses)
    assert skipped == not_transcripts  # the folder's shape files are no transcripts, either time


def test_a_broken_file_in_a_parallel_batch_is_reported_as_the_serial_import_reports_it(
    tmp_path: Path,
) -> None:
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"type": "user"}\n{not json\n')
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    rollouts = [p for p in folder_files(REAL_AGENTS / "codex") if p.name.startswith("rollout-")][:2]
    paths = [rollouts[0], broken, empty, rollouts[1], tmp_path]  # tmp_path: a folder
    serial = import_into(tmp_path / "serial.db", paths, workers=1)
    parallel = import_into(tmp_path / "parallel.db", paths, workers=2)
    assert parallel == serial
    assert serial[0] == [f"{rollouts[0].name}: imported", f"{rollouts[1].name}: imported"]
    assert [line.split(": ")[0] for line in serial[1]] == ["broken.jsonl", "empty.json", tmp_path.name]
    assert f"{broken}:2: " in serial[1][0]  # the line that broke, as the serial import names it


def test_without_on_error_a_parallel_batch_raises_the_first_failure(tmp_path: Path) -> None:
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    rollouts = [p for p in folder_files(REAL_AGENTS / "codex") if p.name.startswith("rollout-")]
    with open_store(tmp_path / "x.db") as store:
        with pytest.raises(ImportFormatError) as raised:
            import_files_parallel([rollouts[0], broken, rollouts[1]], store, {}, workers=2, min_bytes=0)
        assert raised.value.path == str(broken)
        assert len(store.list_sessions()) >= 1  # the file before it stays imported


# --- progress: the bar, the plain lines, the dashboard's status file -------------------------

LINE_CASES = {
    "halfway": (
        dict(files_done=1, files_total=4, bytes_done=50_000_000, bytes_total=100_000_000,
             bytes_per_second=25_000_000.0, seconds_left=2.0, skipped=0, finished=False),
        "1/4 files · 50.0/100.0 MB · 25.0 MB/s · 2 s left",
    ),
    "long wait, one skipped": (
        dict(files_done=10, files_total=8714, bytes_done=3_000_000, bytes_total=3_300_000_000,
             bytes_per_second=1_000_000.0, seconds_left=3725.0, skipped=1, finished=False),
        "10/8,714 files · 3.0/3,300.0 MB · 1.0 MB/s · 1 h 02 min left · 1 skipped",
    ),
    "no rate yet": (
        dict(files_done=0, files_total=2, bytes_done=0, bytes_total=10, bytes_per_second=None,
             seconds_left=None, skipped=0, finished=False),
        "0/2 files · 0.0/0.0 MB",
    ),
    "finished": (
        dict(files_done=2, files_total=2, bytes_done=10, bytes_total=10, bytes_per_second=5.0,
             seconds_left=0.0, skipped=0, finished=True),
        "2/2 files · 0.0/0.0 MB · 0.0 MB/s · done",
    ),
}  # fmt: skip


@pytest.mark.parametrize("status, expected", LINE_CASES.values(), ids=LINE_CASES.keys())
def test_progress_line_says_files_megabytes_rate_and_time_left(status: dict, expected: str) -> None:
    from engine.importers.progress import BAR_WIDTH, progress_line

    assert progress_line(status, bar=False) == expected
    drawn = progress_line(status, bar=True)
    assert drawn.endswith(expected) and drawn.startswith("[") and drawn[BAR_WIDTH + 1] == "]"
    share = status["bytes_done"] / status["bytes_total"]
    assert drawn[1 : BAR_WIDTH + 1].count("#") == round(share * BAR_WIDTH)


@pytest.mark.parametrize(
    "seconds, words", [(0, "0 s"), (44.6, "45 s"), (185, "3 min 05 s"), (3725, "1 h 02 min"), (-3, "0 s")]
)
def test_duration_in_words(seconds: float, words: str) -> None:
    from engine.importers.progress import duration

    assert duration(seconds) == words


def test_progress_counts_each_file_by_its_size() -> None:
    from engine.importers.progress import ImportProgress

    progress = ImportProgress(sizes=[100, 300, 600], started=0.0)
    progress.file_done()
    progress.file_done(skipped=True)
    status = progress.status(now=2.0)
    assert (status["files_done"], status["bytes_done"], status["skipped"]) == (2, 400, 1)
    assert status["bytes_per_second"] == 200.0 and status["seconds_left"] == 3.0
    assert not status["finished"]


def test_no_time_left_is_guessed_from_the_first_small_files() -> None:
    from engine.importers.progress import ImportProgress

    progress = ImportProgress(sizes=[1_000, 99_000_000], started=0.0)
    progress.file_done()  # 1 kB after 2 s of start-up: at that rate 99 MB would take 55 hours
    status = progress.status(now=2.0)
    assert status["bytes_per_second"] == 500.0 and status["seconds_left"] is None


def test_cli_import_prints_plain_lines_and_leaves_a_finished_status_beside_the_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main
    from engine.importers.progress import read_status, status_path

    db = tmp_path / "agents.db"
    rollouts = [p for p in folder_files(REAL_AGENTS / "codex") if p.name.startswith("rollout-")]
    assert main(["import", *map(str, rollouts), "--db", str(db)]) == 0
    lines = capsys.readouterr().err.splitlines()
    last = f"[{len(rollouts)}/{len(rollouts)}] imported {rollouts[-1].name} · {len(rollouts)}/{len(rollouts)} files"
    assert lines[-1].startswith(last) and "\r" not in "".join(lines)  # not a terminal: plain lines
    assert len(lines) <= len(rollouts)
    status = read_status(db)
    assert status is not None and status["finished"]
    assert (status["files_done"], status["bytes_done"]) == (
        len(rollouts),
        sum(p.stat().st_size for p in rollouts),
    )
    assert status_path(db).parent == tmp_path


def test_a_database_the_import_created_and_removes_again_takes_its_status_file_with_it(
    tmp_path: Path,
) -> None:
    from engine.cli import main
    from engine.importers.progress import status_path

    notes = tmp_path / "notes" / "notes.json"
    notes.parent.mkdir()
    notes.write_text('{"hello": 1}')
    db = tmp_path / "agents.db"
    main(["import", str(notes.parent), "--db", str(db)])
    assert not db.exists() and not status_path(db).exists()


def test_status_of_a_missing_or_torn_file_is_none(tmp_path: Path) -> None:
    from engine.importers.progress import read_status, status_path

    db = tmp_path / "x.db"
    assert read_status(db) is None
    status_path(db).write_text('{"files_do')
    assert read_status(db) is None


def test_dashboard_from_opens_at_once_imports_in_the_background_then_follows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io
    import shutil
    import time

    from engine.cli.importing import start_following
    from engine.importers.progress import read_status
    from engine.store import SessionStore

    rollout = next((REAL_AGENTS / "codex" / "tools-resume").rglob("rollout-*.jsonl"))
    lines = rollout.read_text(encoding="utf-8").splitlines(keepends=True)
    day = tmp_path / "codex-home" / "sessions" / "2026" / "11" / "24"
    day.mkdir(parents=True)
    shutil.copy(next((REAL_AGENTS / "codex" / "subagents").rglob("rollout-*.jsonl")), day)
    live = day / rollout.name
    live.write_text("".join(lines[: len(lines) // 2]), encoding="utf-8")
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "codex-home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parents[1]))  # the child runs this checkout
    db, job = start_following("codex", err=io.StringIO(), background=True)
    try:
        assert db.is_file()  # there to open before anything is imported
        deadline = time.monotonic() + 120
        while not (read_status(db) or {}).get("finished") and time.monotonic() < deadline:
            time.sleep(0.2)
        status = read_status(db)
        assert (
            status is not None and status["finished"] and status["files_done"] == status["files_total"] >= 2
        )
        with SessionStore(db, read_only=True) as store:
            sessions = {s.source_path: s.id for s in store.list_sessions()}
            before = store.message_count(sessions[str(live.resolve())])
        live.write_text("".join(lines), encoding="utf-8")
        while job.follower.added_messages == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        with SessionStore(db, read_only=True) as store:
            assert store.message_count(sessions[str(live.resolve())]) > before
    finally:
        job.stop()
    assert job.process is not None and job.process.returncode == 0


def test_the_dashboard_sidebar_names_running_stopped_and_just_finished_imports(tmp_path: Path) -> None:
    import os

    from dashboard.import_status import FINISHED_SHOWN_S, imports_shown
    from engine.importers.progress import ImportProgress, write_status

    def database(name: str, status: dict) -> Path:
        db = tmp_path / name
        db.write_bytes(b"")
        write_status(db, status)
        return db

    progress = ImportProgress(sizes=[30_000_000, 10_000_000], started=0.0)
    progress.file_done()
    running = database("running.db", progress.status(now=1.0))
    stopped = database("stopped.db", {**progress.status(now=1.0), "pid": 2**22 + 1})  # past pid_max
    progress.file_done()
    progress.finished = True
    finished = database("finished.db", progress.status(now=2.0))
    ended = progress.status(now=2.0)
    old = database("old.db", {**ended, "updated_unix": ended["updated_unix"] - FINISHED_SHOWN_S - 1})
    plain = tmp_path / "plain.db"
    plain.write_bytes(b"")
    shown = imports_shown([running, stopped, finished, old, plain, tmp_path])
    assert [(s.database, s.state, s.share) for s in shown] == [
        ("running.db", "running", 0.75),
        ("stopped.db", "stopped", 0.75),
        ("finished.db", "finished", 1.0),
    ]
    assert shown[0].line == "1/2 files · 30.0/40.0 MB · 30.0 MB/s · 0 s left"
    assert progress.status()["pid"] == os.getpid()
