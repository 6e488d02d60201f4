"""Live runs of one Codex, Gemini CLI or Claude Code scenario take turns: their scratch folder is fixed,
and two test sessions running the same scenario at once overwrote each other's chats and request log
(the live Gemini compression test then found 5 calls in the file and 2 of them in the log)."""

from __future__ import annotations

import multiprocessing
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from scripts.real_agents_codex_gemini import one_run_at_a_time

ROOT = Path(__file__).resolve().parents[1]


@one_run_at_a_time("test-scratch-lock")
def _run(name: str, journal: Path) -> Path:
    with journal.open("a") as fh:
        fh.write(f"start {name}\n")
    time.sleep(1.0)  # long beside a process start: without the lock the two runs overlap
    with journal.open("a") as fh:
        fh.write(f"end {name}\n")
    return journal


def _claude_code_run(name: str, journal: Path) -> Path:
    """A Claude Code fixture runner's turn (scenario_turn, which every Claude Code fixture script takes)."""
    sys.path[:0] = [str(ROOT / "tests"), str(ROOT / "scripts")]
    import make_real_agent_fixtures

    with make_real_agent_fixtures.scenario_turn("test-scratch-lock"):
        return _run.__wrapped__(name, journal)  # type: ignore[attr-defined]


@pytest.mark.parametrize("runner", [_run, _claude_code_run], ids=["codex-gemini", "claude-code"])
def test_two_processes_running_one_scenario_take_turns(tmp_path: Path, runner: Callable[..., Path]) -> None:
    journal = tmp_path / "journal"
    context = multiprocessing.get_context("spawn")
    runs = [context.Process(target=runner, args=("same", journal)) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(30)
    assert [r.exitcode for r in runs] == [0, 0]
    assert journal.read_text().splitlines() == ["start same", "end same"] * 2


def test_a_run_returns_what_the_runner_returns(tmp_path: Path) -> None:
    assert _run("alone", tmp_path / "j") == tmp_path / "j"
