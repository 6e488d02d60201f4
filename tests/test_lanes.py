"""The fast lane's list of slow tests (tests/conftest.py ``SLOW_TESTS``) names tests that exist: a renamed or
removed test would otherwise fall back into the fast lane, or leave a dead entry, without anyone noticing."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import SLOW_TESTS

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
