"""Lazy exports for a package's ``__init__`` (PEP 562): each public name is imported from the
module that owns it on first use, so importing the package (or one of its submodules) does not
import every layer below it."""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, owners: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose names live in ``owners`` (name ->
    owning module, or ``module:attribute`` for a name exported under another name). A name is imported once and then kept in ``namespace`` (the package's
    globals); a submodule's name imports that submodule; anything else is an AttributeError
    naming it."""

    def __getattr__(name: str) -> Any:
        owner = owners.get(name)
        if owner is None:
            if not name.startswith("_") and importlib.util.find_spec(f"{package}.{name}") is not None:
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = owner.partition(":")
        value = getattr(importlib.import_module(module), attribute or name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *owners})

    return __getattr__, __dir__
