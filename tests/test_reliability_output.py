"""``report --out`` / ``diff --out`` never replace what they should not: a symlink is written through
to its target, a directory / device / FIFO is refused with one error line, ``-`` is stdout, and no
temporary file is left behind on any failure (a real full tmpfs, root only). ``diff`` rejects a
snapshot id no database can hold with a typed error."""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from engine import SessionStore, get_tokenizer
from engine.errors import OutputError, ValidationError
from engine.messages import assistant, user
from engine.report import parse_side
from engine.report.output import write_output

CAN_MOUNT = hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("mount") is not None


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("db") / "s.db"
    with SessionStore(path) as store:
        session_id = store.create_session(model="gpt-4o")
        store.append_messages(
            session_id,
            [user("hello " + "x" * 200), assistant("hi"), user("again"), assistant("ok")],
            tokenizer=get_tokenizer("gpt-4o"),
        )
    return f"{path}:{session_id}"


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def test_a_symlink_is_written_through_to_its_target(tmp_path, db):
    target = tmp_path / "real" / "report.json"
    target.parent.mkdir()
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    result = _cli("report", db, "--format", "json", "--out", str(link))
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == target
    assert target.read_text().startswith("{")
    assert _leftovers(tmp_path) == [] and _leftovers(target.parent) == []


def test_a_dangling_symlink_creates_its_target(tmp_path):
    target = tmp_path / "made" / "out.txt"
    (tmp_path / "made").mkdir()
    link = tmp_path / "link.txt"
    link.symlink_to(target)
    write_output("text\n", str(link), io.StringIO())
    assert link.is_symlink() and target.read_text() == "text\n"


def test_dash_means_stdout(tmp_path, db):
    repo = str(Path(__file__).resolve().parents[1])  # this checkout's engine, installed or not
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [sys.executable, "-m", "engine.cli", "report", db, "--format", "json", "--out", "-"],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("{")
    assert list(tmp_path.iterdir()) == []


def test_pieces_and_a_single_string_write_the_same(tmp_path):
    write_output(iter(["a", "b", "c\n"]), str(tmp_path / "p.txt"), io.StringIO())
    out = io.StringIO()
    write_output(iter(["a", "b"]), "-", out)
    assert (tmp_path / "p.txt").read_text() == "abc\n" and out.getvalue() == "ab"


def test_an_existing_file_keeps_its_permissions(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("old")
    path.chmod(0o640)
    write_output("new", str(path), io.StringIO())
    assert path.read_text() == "new" and stat.S_IMODE(path.stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "symlink-to-device"])
def test_non_regular_files_are_refused_and_left_alone(tmp_path, db, kind):
    if kind == "directory":
        out = tmp_path / "folder"
        out.mkdir()
        expected = "a directory"
    elif kind == "fifo":
        out = tmp_path / "pipe"
        os.mkfifo(out)
        expected = "a FIFO"
    else:
        if not Path("/dev/full").exists():
            pytest.fail("/dev/full is missing: cannot check device nodes")
        out = Path("/dev/full")
        expected = "a device"
        if kind == "symlink-to-device":
            out = tmp_path / "dev-link"
            out.symlink_to("/dev/full")
    before = os.lstat(out)
    with pytest.raises(OutputError, match=expected):
        write_output("text", str(out), io.StringIO())
    for command in (["report", db], ["diff", db, db]):
        result = _cli(*command, "--out", str(out))
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith("ctxdesk: error:") and expected in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    after = os.lstat(out)
    assert (after.st_mode, after.st_ino) == (before.st_mode, before.st_ino)
    assert _leftovers(tmp_path) == []
    if kind == "device":
        assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_a_failure_while_rendering_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "r.txt"
    path.write_text("old")

    def pieces():
        yield "partial"
        raise ValidationError("rendering failed")

    with pytest.raises(ValidationError):
        write_output(pieces(), str(path), io.StringIO())
    assert path.read_text() == "old" and _leftovers(tmp_path) == []


@pytest.mark.parametrize("spec", ["S@99999999999999999999999", "S@9223372036854775808", "S@²", "S@-1"])
def test_a_snapshot_id_no_database_can_hold_is_a_validation_error(tmp_path, spec):
    with pytest.raises(ValidationError, match="snapshot id"):
        parse_side(spec, str(tmp_path / "x.db"))


def test_diff_with_a_huge_snapshot_id_is_one_error_line(db):
    result = _cli("diff", f"{db}@99999999999999999999999", db)
    assert result.returncode in (1, 2), result.stdout
    assert result.stderr.startswith("ctxdesk: error:") and "Traceback" not in result.stderr


@contextlib.contextmanager
def _tmpfs(target: Path, size: str):
    target.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)], check=True)
    try:
        yield target
    finally:
        subprocess.run(["umount", str(target)], check=False, capture_output=True)


@pytest.mark.skipif(not CAN_MOUNT, reason="needs root and mount (CI runs as root)")
def test_a_full_disk_leaves_the_old_report_and_no_temporary_file(tmp_path, db):
    try:
        ctx = _tmpfs(tmp_path / "small", "64k")
        small = ctx.__enter__()
    except (subprocess.CalledProcessError, OSError):
        pytest.fail("mount is present but does not work here: cannot check a full disk")
    try:
        path = small / "report.txt"
        path.write_text("old report")
        with pytest.raises(OutputError, match="writing the output failed"):
            write_output(("x" * 4096 for _ in range(64)), str(path), io.StringIO())
        assert path.read_text() == "old report" and _leftovers(small) == []
        result = _cli("report", db, "--format", "html", "--out", str(path))
        assert result.returncode == 1, result.stdout
        assert result.stderr.startswith("ctxdesk: error:") and "Traceback" not in result.stderr
        assert path.read_text() == "old report" and _leftovers(small) == []
    finally:
        ctx.__exit__(None, None, None)


@pytest.mark.parametrize("name", ["demo-coding-agent.db", "demo-guard-limits.db"])
def test_json_written_in_pieces_is_the_same_text(tmp_path, name):
    from engine.report import build_report, read_store
    from engine.report.jsonstream import json_pieces

    path = Path(shutil.copy(Path(__file__).resolve().parents[1] / "data" / name, tmp_path / name))
    with read_store(path) as store:
        report = build_report(store, [s.id for s in store.list_sessions()], source=name)
    pieces = list(json_pieces(report))
    assert len(pieces) > 100  # never one string
    assert "".join(pieces) == report.model_dump_json(indent=2)
