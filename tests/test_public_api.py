"""The public surface: ``engine.__all__`` is sorted, importable and complete."""

from __future__ import annotations

import importlib
import inspect
import re

import engine
from engine import errors

#: Names the foundation issue promises at ``engine`` top level.
PROMISED = {
    "Message",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "ToolResultBlock",
    "ImageBlock",
    "DocumentBlock",
    "ComponentTokens",
    "ContextEvent",
    "ProviderUsage",
    "Tokenizer",
    "get_tokenizer",
    "SessionStore",
    "from_anthropic",
    "to_anthropic",
    "from_openai",
    "to_openai",
    "find_safe_boundary",
    "parse_turn_boundaries",
    "is_over_context_budget",
}


def _isort_key(name: str) -> tuple[int, list[object]]:
    """ruff RUF022's order: CONSTANTS, then Classes, then functions; natural sort within each."""
    category = 0 if name.isupper() else 1 if name[:1].isupper() else 2
    return category, [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def test_all_is_sorted_and_unique() -> None:
    assert engine.__all__ == sorted(engine.__all__, key=_isort_key)
    assert len(engine.__all__) == len(set(engine.__all__))


def test_every_exported_name_is_importable() -> None:
    module = importlib.import_module("engine")
    for name in engine.__all__:
        assert getattr(module, name, None) is not None, name


def test_promised_names_are_exported() -> None:
    assert set(engine.__all__) >= PROMISED, sorted(PROMISED - set(engine.__all__))


def test_every_error_class_is_exported() -> None:
    error_classes = {
        name
        for name, value in vars(errors).items()
        if inspect.isclass(value) and issubclass(value, errors.ContextDeskError)
    }
    assert error_classes <= set(engine.__all__), sorted(error_classes - set(engine.__all__))


def test_every_error_class_is_in_the_docstring_tree() -> None:
    tree = errors.__doc__ or ""
    for name, value in vars(errors).items():
        if inspect.isclass(value) and issubclass(value, errors.ContextDeskError):
            assert name in tree, f"{name} is missing from the tree in engine/errors.py's docstring"
