"""engine's public API (#34): a deliberate ``__all__`` whose names load on first use, former
names still importable, and ``import engine`` with no process-wide side effect."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import engine

ROOT = Path(__file__).resolve().parents[1]


def _run(code: str) -> str:
    """``code`` in a fresh interpreter (imports are process-wide state), its stdout."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_all_is_exactly_the_public_map_with_no_duplicates() -> None:
    assert len(engine.__all__) == len(set(engine.__all__))
    assert set(engine.__all__) == set(engine._PUBLIC)
    assert not set(engine._PUBLIC) & set(engine._FORMER)


@pytest.mark.parametrize("name", sorted(engine._PUBLIC))
def test_every_public_name_is_the_owning_modules_object(name: str) -> None:
    owner = importlib.import_module(engine._PUBLIC[name])
    assert getattr(engine, name) is getattr(owner, name)


@pytest.mark.parametrize("name", sorted(engine._FORMER))
def test_every_former_name_still_imports_from_its_owner(name: str) -> None:
    owner = importlib.import_module(engine._FORMER[name])
    assert getattr(engine, name) is getattr(owner, name)
    assert name not in engine.__all__


def test_an_unknown_name_is_an_attribute_error_naming_it() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = engine.no_such_name  # type: ignore[attr-defined]
    with pytest.raises(ImportError):
        exec("from engine import no_such_name", {})


def test_star_import_gives_exactly_the_public_names() -> None:
    namespace: dict[str, object] = {}
    exec("from engine import *", namespace)
    assert set(namespace) - {"__builtins__"} == set(engine.__all__)


def test_readme_and_docs_imports_from_engine_are_public() -> None:
    """What the README and docs/*.md tell a user to import from ``engine`` is in ``__all__``."""
    import re

    texts = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    told = set()
    for path in texts:
        for match in re.finditer(r"from engine import ([\w, ]+)", path.read_text(encoding="utf-8")):
            told |= {n.strip() for n in match.group(1).split(",") if n.strip()}
    told -= {"__version__"}
    assert told, "the README shows how to import the engine"
    assert told <= set(engine.__all__), sorted(told - set(engine.__all__))


def test_import_engine_loads_no_layer_and_keeps_the_log_record_factory() -> None:
    out = _run(
        """
        import logging, sys
        before = logging.getLogRecordFactory()
        import engine
        loaded = sorted(m for m in sys.modules if m.startswith("engine."))
        print(logging.getLogRecordFactory() is before, loaded)
        """
    )
    assert out == "True ['engine.lazy']"


def test_one_name_loads_only_its_own_layers() -> None:
    """``from engine import compact`` does not import the importers, the proxy or the store's
    readers of other formats: the dashboard's first paint and the CLI's start pay only for
    what they use."""
    out = _run(
        """
        import sys
        from engine import ContextDeskError
        print(sorted(m for m in sys.modules if m.startswith("engine.")))
        """
    )
    assert out == "['engine.errors', 'engine.lazy']"


def test_install_log_redaction_is_an_explicit_call() -> None:
    out = _run(
        """
        import logging
        before = logging.getLogRecordFactory()
        from engine import install_log_redaction
        unchanged = logging.getLogRecordFactory() is before
        install_log_redaction()
        print(unchanged, logging.getLogRecordFactory() is before)
        """
    )
    assert out == "True False"


def test_a_submodule_is_reachable_as_an_attribute() -> None:
    assert _run("import engine; print(engine.settings.load_settings.__module__)").startswith(
        "engine.settings"
    )


def test_reading_import_progress_loads_no_format_module() -> None:
    """The dashboard reads an import's progress file at every page run: that must not import
    the registry's format modules (they load when a file is detected or parsed)."""
    out = _run(
        """
        import sys
        from engine.importers import progress_line, read_status, status_path
        print(sorted(m for m in sys.modules if m.startswith("engine.importers.")))
        """
    )
    assert out == "['engine.importers.progress']"


def test_importers_names_are_their_owners_objects() -> None:
    import engine.importers as importers

    for name in importers.__all__:
        owner = importlib.import_module(importers._OWNERS[name])
        assert getattr(importers, name) is getattr(owner, name)
    assert set(importers.__all__) == set(importers._OWNERS)
    with pytest.raises(AttributeError, match="nothing_here"):
        _ = importers.nothing_here  # type: ignore[attr-defined]
