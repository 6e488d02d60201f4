"""A pydantic model written as JSON in pieces: the same text as ``model_dump_json(indent=2)``,
without building it as one string (a report of a 200k-message session is hundreds of MB of JSON;
``render`` hands these pieces to ``write_output`` one by one)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from pydantic import BaseModel

__all__ = ["Deferred", "Streamed", "json_pieces"]


class Streamed:
    """A list-of-models field (in a ``model_construct``-ed model) written element by element as
    ``items()`` produces them, never held as a list."""

    def __init__(self, items: Callable[[], Iterable[BaseModel]]) -> None:
        self.items = items


class Deferred:
    """A field (in a ``model_construct``-ed model) whose value is computed when the writer
    reaches it, after every field before it is written."""

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make


_INDENT = 2


def json_pieces(model: BaseModel, *, depth: int = 0) -> Iterator[str]:
    """``model.model_dump_json(indent=2)`` in pieces: a model holding lists of models is written
    field by field and those lists element by element; any other model in one piece."""
    if not _has_model_lists(model):
        text = model.model_dump_json(indent=_INDENT)
        yield text.replace("\n", "\n" + " " * (_INDENT * depth)) if depth else text
        return
    pad = " " * (_INDENT * (depth + 1))
    names = list(type(model).model_fields)
    yield "{"
    for i, name in enumerate(names):
        value = getattr(model, name)
        yield ("\n" if i == 0 else ",\n") + f'{pad}"{name}": '
        if isinstance(value, Deferred):
            value = value.make()
            if not isinstance(value, BaseModel | list | Streamed):
                yield _field_text(model.model_copy(update={name: value}), name, depth + 1)
                continue
        if isinstance(value, BaseModel):
            yield from json_pieces(value, depth=depth + 1)
        elif isinstance(value, Streamed) or (
            isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value)
        ):
            yield from _list_pieces(value.items() if isinstance(value, Streamed) else value, pad, depth)
        else:
            yield _field_text(model, name, depth + 1)
    yield ("\n" + " " * (_INDENT * depth) + "}") if names else "}"


def _list_pieces(items: Iterable[BaseModel], pad: str, depth: int) -> Iterator[str]:
    empty = True
    for item in items:
        yield ("[\n" if empty else ",\n") + pad + " " * _INDENT
        yield from json_pieces(item, depth=depth + 2)
        empty = False
    yield "[]" if empty else "\n" + pad + "]"


def _has_model_lists(model: BaseModel) -> bool:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, Streamed | Deferred):
            return True
        if isinstance(value, BaseModel) and _has_model_lists(value):
            return True
        if isinstance(value, list) and value and isinstance(value[0], BaseModel):
            return True
    return False


def _field_text(model: BaseModel, name: str, depth: int) -> str:
    """One field's value as model_dump_json(indent=2) writes it at ``depth``."""
    text = model.model_dump_json(indent=_INDENT, include={name})
    head = f'{{\n{" " * _INDENT}"{name}": '
    if not text.startswith(head) or not text.endswith("\n}"):  # pragma: no cover - pydantic's format
        raise ValueError(f"unexpected JSON layout for field {name!r}")
    value = text[len(head) : -2]
    return value.replace("\n", "\n" + " " * (_INDENT * (depth - 1))) if "\n" in value else value
