"""The cyclic collector paused while a file is parsed or written (engine/importers/collector.py):
paused inside, back to the state it had once the outermost pause ends, whatever happens inside."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.importers import import_file
from engine.importers.collector import collector_paused
from engine.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "s.db")


@pytest.fixture
def collector_state() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


@pytest.mark.usefixtures("collector_state")
@pytest.mark.parametrize("enabled_before", [True, False], ids=["enabled before", "disabled before"])
def test_the_collector_is_off_inside_and_as_before_after(enabled_before: bool) -> None:
    (gc.enable if enabled_before else gc.disable)()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():  # nested: the inner end does not turn it back on
            assert not gc.isenabled()
        assert not gc.isenabled()
    assert gc.isenabled() is enabled_before


@pytest.mark.usefixtures("collector_state")
def test_an_error_inside_still_turns_the_collector_back_on() -> None:
    gc.enable()
    with pytest.raises(ValueError), collector_paused():
        raise ValueError("a file that failed to parse")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_overlapping_pauses_of_two_threads_end_when_the_last_ends() -> None:
    gc.enable()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: list[bool] = []

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with collector_paused():
            second_in.set()
            first_out.wait(5)
            seen.append(gc.isenabled())  # the first thread's pause ended: still off for this one

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert seen == [False]
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_an_import_leaves_the_collector_on(store: SessionStore) -> None:
    gc.enable()
    path = next((FIXTURES / "real_agents" / "claude-code" / "finish" / "transcripts").glob("*.jsonl"))
    result = import_file(path, store)
    assert result.sessions and gc.isenabled()
