"""Live runs of one Codex or Gemini CLI scenario take turns: their scratch folder is fixed, and two
test sessions running the same scenario at once overwrote each other's chats and request log (the
live Gemini compression test then found 5 calls in the file and 2 of them in the log)."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

from scripts.real_agents_codex_gemini import one_run_at_a_time


@one_run_at_a_time("test-scratch-lock")
def _run(name: str, journal: Path) -> Path:
    with journal.open("a") as fh:
        fh.write(f"start {name}\n")
    time.sleep(1.0)  # long beside a process start: without the lock the two runs overlap
    with journal.open("a") as fh:
        fh.write(f"end {name}\n")
    return journal


def test_two_processes_running_one_scenario_take_turns(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    context = multiprocessing.get_context("spawn")
    runs = [context.Process(target=_run, args=("same", journal)) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(30)
    assert [r.exitcode for r in runs] == [0, 0]
    assert journal.read_text().splitlines() == ["start same", "end same"] * 2


def test_a_run_returns_what_the_runner_returns(tmp_path: Path) -> None:
    assert _run("alone", tmp_path / "j") == tmp_path / "j"
