"""The ctxdesk command line, run in-process through main(argv) and as a subprocess."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine import __version__
from engine.cli import EXIT_ERROR, EXIT_USAGE, format_table, main

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


def test_usage_errors_exit_2_with_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == EXIT_USAGE
    assert main(["inspect"]) == EXIT_USAGE
    assert main(["dashboard", "--port", "0"]) == EXIT_USAGE
    capsys.readouterr()
    assert main(["inspect", "no-such-file.db"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert err.strip().splitlines() == ["ctxdesk: error: no such database file: no-such-file.db"]


def test_a_file_that_is_not_a_database_is_an_error_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "notes.db"
    bogus.write_text("not sqlite at all")
    assert main(["inspect", str(bogus)]) == EXIT_ERROR
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ctxdesk: error: not a SQLite database")


def test_format_table_aligns_numbers_right_and_text_left() -> None:
    text = format_table(("name", "tokens"), [("a", 1200), ("longer", 5), ("c", None)])
    assert text.splitlines() == [
        "name    tokens",
        "------  ------",
        "a        1,200",
        "longer       5",
        "c            -",
    ]
