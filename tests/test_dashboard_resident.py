"""The dashboard's resident worker (dashboard.resident): the reads every live rerun makes go to one
child process that keeps its imports (a fresh process per read cost ~0.3 s of processor time and 1.5 s
of waiting on a busy machine), with what a one-shot worker gives back, typed errors, and a child that
died replaced. Real processes, a real store of real agents' transcripts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dashboard import actions
from dashboard.resident import ResidentWorker
from tests.dashboard_real_sessions import import_claude_code_scenarios


@pytest.fixture
def worker() -> ResidentWorker:
    resident = ResidentWorker()
    yield resident
    resident.stop()


@pytest.fixture(scope="module")
def agents_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("resident") / "agents.db"
    return import_claude_code_scenarios(db, "compact_auto", "compact_reactive", "interrupt")


def test_one_child_answers_every_call_and_is_not_the_dashboard(worker: ResidentWorker) -> None:
    first = worker.call("pid")
    assert first != os.getpid() and worker.call("pid") == first == worker.pid()


def test_it_answers_what_a_one_shot_worker_answers(worker: ResidentWorker, agents_db: Path) -> None:
    """A reply bigger than a pipe's buffer (explanations in detail) arrives whole."""
    resident = worker.call("why", str(agents_db), None, True)
    assert resident == actions.why(agents_db)
    assert len(resident.sessions) >= 3


def test_an_engine_error_comes_back_typed_and_the_child_stays(worker: ResidentWorker, tmp_path: Path) -> None:
    pid = worker.call("pid")
    with pytest.raises(actions.ActionError) as raised:
        worker.call("why", str(tmp_path / "missing.db"), None, False)
    assert raised.value.kind != "ContextDeskError" and "missing.db" in str(raised.value)
    assert worker.call("pid") == pid


def test_a_child_that_died_is_replaced_on_the_next_call(worker: ResidentWorker) -> None:
    pid = worker.call("pid")
    os.kill(pid, signal.SIGKILL)
    replaced = worker.call("pid")
    assert replaced != pid and replaced == worker.pid()


def test_a_late_answer_stops_the_child(worker: ResidentWorker) -> None:
    pid = worker.call("pid")
    os.kill(pid, signal.SIGSTOP)  # alive, answering nothing
    with pytest.raises(actions.ActionError, match="no reply within"):
        worker.call("pid", timeout=0.5)
    assert worker.pid() is None
    assert worker.call("pid") != pid
