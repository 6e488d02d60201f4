"""The walk of issue #34 (scripts/module_walk.py): importing a real Claude Code transcript stays in four
importer rooms, a proxied request crosses the proxy's rooms (transport, policy, recording, wire), and
neither ever calls back into a module it had left (the store's included: its SQL holds the database
instead of being its base class); and the walk counts what it says it counts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def module_walk():
    spec = importlib.util.spec_from_file_location("module_walk", ROOT / "scripts" / "module_walk.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["module_walk"] = module
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("module_walk", None)


def test_a_claude_code_import_stays_in_four_rooms_and_never_returns_to_a_module(module_walk) -> None:
    walk = module_walk.claude_code_walk()
    importers = [m for m in walk.visits if m.startswith("engine.importers.")]
    assert "engine.importers.api" in importers and "engine.importers.formats.claude_code.session" in importers
    # into the store and through its batched write, to the cost rows written after the commit
    stores = {
        "engine.store.sql_store",
        "engine.store.sqlite",
        "engine.store.event_batch",
        "engine.store.cost_writer",
    }
    assert stores <= set(walk.visits)
    assert dict(walk.returns) == {}
    # detection and companions read what other formats declare as data: none of their packages is entered
    rooms = {r for r in walk.room_visits if r == "engine.importers" or r.startswith("engine.importers.")}
    assert rooms == {
        "engine.importers",
        *(f"engine.importers.{r}" for r in ("formats", "formats.claude_code", "parsing")),
    }
    into_importers = {key: n for key, n in walk.room_returns.items() if key[1].startswith("engine.importers")}
    assert into_importers == {}


def _module_named(module_walk, name: str, source: str) -> dict:
    """The functions of ``source`` as if written in engine/<name>.py (the walk knows modules by file)."""
    namespace: dict = {}
    exec(compile(source, str(module_walk.ROOT / "engine" / f"{name}.py"), "exec"), namespace)
    return namespace


def test_a_call_back_into_a_module_on_the_stack_is_a_return_and_a_generator_is_not(module_walk) -> None:
    a = _module_named(
        module_walk,
        "walk_a",
        "def start(host):\n    return host(helper)\ndef helper():\n    return sum(x for x in range(3))\n",
    )
    b = _module_named(module_walk, "walk_b", "def host(f):\n    return f()\n")
    walk = module_walk.Walk()
    sys.setprofile(walk.profile)
    try:
        walk.measured(lambda: a["start"](b["host"]))
    finally:
        sys.setprofile(None)
    assert walk.visits == {"engine.walk_a": 2, "engine.walk_b": 1}
    assert walk.returns == {("engine.walk_a > engine.walk_b", "engine.walk_a:helper"): 1}


def test_a_proxied_request_crosses_the_proxy_in_its_four_rooms_and_never_returns_to_a_module(
    module_walk,
) -> None:
    walk = module_walk.proxy_walk()
    rooms = {r for r in walk.room_visits if r.startswith("engine.proxy")}
    assert rooms == {f"engine.proxy.{g}" for g in ("transport", "policy", "recording", "wire")}
    into_proxy = {key: n for key, n in walk.room_returns.items() if key[1].startswith("engine.proxy.")}
    assert into_proxy == {}
    # nor to a module: the shared wire pieces take values (not the API's callbacks), the writer waits on
    # the recorder's QuietTime in its own module, the store never calls back into itself from its database
    assert "engine.proxy.transport.relay" in walk.visits and "engine.proxy.recording.writer" in walk.visits
    assert {"engine.store.sql_store", "engine.store.sqlite", "engine.store.cost_writer"} <= set(walk.visits)
    assert dict(walk.returns) == {}


@pytest.mark.parametrize(
    ("module", "room"),
    [
        ("engine.proxy.transport.relay", "engine.proxy.transport"),
        ("engine.proxy.wire.__init__", "engine.proxy.wire"),
        ("engine.store.sqlite", "engine.store"),
        ("engine.tokens", "engine.tokens"),
        ("engine.importers.formats.claude_code.thread", "engine.importers.formats.claude_code"),
    ],
)
def test_a_module_is_in_its_package_s_room(module_walk, module: str, room: str) -> None:
    assert module_walk.room_of(module) == room
