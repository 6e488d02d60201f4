"""The fast lane's list of slow tests (tests/conftest.py ``SLOW_TESTS``) names tests that exist: a renamed or
removed test would otherwise fall back into the fast lane, or leave a dead entry, without anyone noticing."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import SLOW_TESTS, item_cost, longest_groups_first, xdist_group

TESTS = Path(__file__).resolve().parent


def _test_functions(module: Path) -> set[str]:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    return {
        node.name
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test_")
    }


@pytest.mark.parametrize("module", sorted(SLOW_TESTS))
def test_every_listed_slow_test_is_a_test_of_its_module(module: str) -> None:
    path = TESTS / module
    assert path.is_file(), f"SLOW_TESTS names {module}, which is not in tests/"
    missing = SLOW_TESTS[module] - _test_functions(path)
    assert not missing, f"SLOW_TESTS names tests {sorted(missing)} that {module} does not define"


def test_the_slow_list_is_sorted_by_module() -> None:
    assert list(SLOW_TESTS) == sorted(SLOW_TESTS)


# -- the xdist groups and their order ---------------------------------------------------------------------

#: Scripts that run a real agent CLI in a fixed scratch folder per scenario (under /tmp/ctxdesk-real-agents,
#: so the paths recorded in its files never vary), and the runners tests call them by.
FIXED_SCRATCH_RUNNERS = {
    "make_real_agent_fixtures.py": ("make_claude_code_fixtures",),
    "make_why_fixtures.py": ("make_why_fixtures",),
    "real_agents_codex_gemini.py": ("run_codex", "run_gemini"),
}


def test_the_scripts_with_a_fixed_scratch_folder_are_the_listed_ones() -> None:
    scripts = TESTS.parent / "scripts"
    fixed = {
        p.name
        for p in scripts.glob("*.py")
        if re.search(r"\bSCRATCH\s*/|\bscratch_workspace\(", p.read_text(encoding="utf-8"))
    }
    assert fixed == set(FIXED_SCRATCH_RUNNERS)


@pytest.mark.parametrize("runner", sorted(r for runners in FIXED_SCRATCH_RUNNERS.values() for r in runners))
def test_a_fixed_scratch_runner_is_called_from_one_module(runner: str) -> None:
    """Peer tests run on xdist workers by module: two modules running one scenario at once would overwrite
    each other's scratch folder, so a runner with a fixed folder belongs to one module."""
    callers = [
        p.relative_to(TESTS).as_posix()
        for p in sorted(TESTS.rglob("*.py"))
        if p.name != "test_lanes.py" and re.search(rf"\b{runner}\b", p.read_text(encoding="utf-8"))
    ]
    assert len(callers) <= 1, (runner, callers)


def _item(
    nodeid: str, *keywords: str, fixtures: tuple[str, ...] = (), cost: int | None = None, group: str = ""
) -> object:
    """What xdist_group and the costs read of a collected test."""
    marks = {"cost": pytest.mark.cost(cost).mark} if cost else {}
    if group:
        marks["xdist_group"] = pytest.mark.xdist_group(group).mark
    return SimpleNamespace(
        nodeid=nodeid, keywords=set(keywords), fixturenames=list(fixtures), get_closest_marker=marks.get
    )


@pytest.mark.parametrize(
    ("item", "group"),
    [
        pytest.param(_item("tests/test_a.py::test_x"), "tests/test_a.py", id="a test: its module"),
        pytest.param(_item("tests/test_a.py::test_x[1]", "peer"), "tests/test_a.py", id="peer: its module"),
        pytest.param(
            _item("tests/browser/test_b.py::test_x", "browser", fixtures=("page", "served_real", "tmp_path")),
            "browser:served_real",
            id="browser: the server it shares",
        ),
        pytest.param(
            _item("tests/browser/test_b.py::test_own", "browser", fixtures=("page",)),
            "browser:tests/browser/test_b.py::test_own",
            id="browser, its own server: itself",
        ),
        pytest.param(
            _item(
                "tests/browser/test_b.py::test_walk[1]", "browser", fixtures=("served_real",), group="walk-1"
            ),
            "walk-1",
            id="its own xdist_group mark",
        ),
    ],
)
def test_a_test_is_grouped_with_the_fixtures_it_shares(item: object, group: str) -> None:
    assert xdist_group(item) == group


def test_the_longest_groups_go_first_each_whole_and_in_its_own_order() -> None:
    items = [
        _item("tests/test_a.py::test_1"),
        _item("tests/test_a.py::test_2"),
        _item("tests/test_b.py::test_1", "slow", "apptest"),
        _item("tests/browser/test_c.py::test_walk", "browser", fixtures=("served_real",), cost=900),
        _item("tests/test_b.py::test_2"),
        _item("tests/browser/test_c.py::test_page", "browser", fixtures=("served",)),
    ]
    ordered = longest_groups_first(items, [xdist_group(i) for i in items])
    assert [i.nodeid for i in ordered] == [
        "tests/browser/test_c.py::test_walk",
        "tests/browser/test_c.py::test_page",
        "tests/test_b.py::test_1",
        "tests/test_b.py::test_2",
        "tests/test_a.py::test_1",
        "tests/test_a.py::test_2",
    ]
    assert item_cost(items[5]) > item_cost(items[2]) > item_cost(items[0])


def test_a_declared_cost_puts_a_group_of_few_cheap_tests_first() -> None:
    """The quick bench run: a few slow-lane tests on one 7-minute module fixture."""
    items = [
        _item("tests/browser/test_c.py::test_page", "browser", fixtures=("served",)),
        _item("tests/test_bench.py::test_1", "slow", cost=420),
        _item("tests/test_bench.py::test_2", "slow", cost=420),
    ]
    ordered = longest_groups_first(items, [xdist_group(i) for i in items])
    assert [i.nodeid for i in ordered] == [
        "tests/test_bench.py::test_1",
        "tests/test_bench.py::test_2",
        "tests/browser/test_c.py::test_page",
    ]
