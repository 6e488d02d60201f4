"""A pydantic model written as JSON in pieces: the same text as ``model_dump_json(indent=2)``,
without building it as one string (a report of a 200k-message session is hundreds of MB of JSON;
``render`` hands these pieces to ``write_output`` one by one)."""

from __future__ import annotations

from collections.abc import Iterator

from pydantic import BaseModel

__all__ = ["json_pieces"]

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
        if isinstance(value, BaseModel):
            yield from json_pieces(value, depth=depth + 1)
        elif isinstance(value, list) and value and all(isinstance(v, BaseModel) for v in value):
            yield "["
            for j, item in enumerate(value):
                yield ("\n" if j == 0 else ",\n") + pad + " " * _INDENT
                yield from json_pieces(item, depth=depth + 2)
            yield "\n" + pad + "]"
        else:
            yield _field_text(model, name, depth + 1)
    yield ("\n" + " " * (_INDENT * depth) + "}") if names else "}"


def _has_model_lists(model: BaseModel) -> bool:
    for name in type(model).model_fields:
        value = getattr(model, name)
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
