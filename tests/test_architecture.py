"""The import graph of engine/ and dashboard/ follows docs/architecture.md: no cycles (lazy and
TYPE_CHECKING imports included, read with ast), no upward imports between the layers, the
dashboard and the CLI only on the public API, and no module or class grown past one concept.

A new module needs a place in :data:`LAYERS` (and a line in docs/architecture.md): the test says
so. Debts that are other owners' to pay are listed by name in the ``KNOWN_*`` sets below, each
reported to the lead; remove an entry when its debt is paid (the sets only ever shrink).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "architecture.md"

#: Layers, lowest first: a module may import its own layer and the layers below it, never above.
#: Each entry is a module or a package prefix; the longest matching prefix wins.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "foundation",
        (
            "engine.errors", "engine.messages", "engine.events", "engine.debug", "engine.textfmt",
            "engine.redact", "engine.locations", "engine.tokenizer_names", "engine.model_table",
            "engine.convert", "engine.sent", "engine.policy_settings", "engine.limit",
            "engine.call_failures", "engine.lazy", "engine.agent_versions",
        ),
    ),
    (
        "measure",
        (
            "engine.tokens", "engine.components", "engine.settings", "engine.calibration", "engine.cost",
            "engine.cache_analysis", "engine.rollup",
        ),
    ),
    ("budget", ("engine.budget", "engine.turns")),
    ("store", ("engine.store",)),
    (
        "decisions",
        (
            "engine.compaction", "engine.offload", "engine.deferral", "engine.tool_ranking", "engine.prompt",
            "engine.clients", "engine.clients_openai", "engine.wire_requests",
        ),
    ),
    ("guard", ("engine.guard",)),
    ("runtime and sources", ("engine.session", "engine.importers", "engine.proxy", "engine.otel")),
    (
        "readers",
        (
            "engine.findings", "engine.cache_findings", "engine.explain", "engine.report", "engine.demo",
            "engine.calibration_pairs", "engine.replay",
        ),
    ),
    ("apps", ("engine", "engine.cli", "dashboard")),
)  # fmt: skip

#: Modules the dashboard and the CLI may import names from besides ``engine`` itself: each
#: declares ``__all__`` and the names must be in it (docs/architecture.md, "Public API").
SUB_APIS = (
    "engine.calibration", "engine.compaction", "engine.convert", "engine.demo", "engine.events", "engine.explain",
    "engine.importers",
    "engine.locations", "engine.otel", "engine.proxy", "engine.replay", "engine.report", "engine.sent", "engine.store",
    "engine.store.factory",
)  # fmt: skip

#: Import cycles (all paid: keep it empty).
KNOWN_CYCLES: set[frozenset[str]] = set()
#: Non-public names the dashboard or CLI imports (all paid: keep it empty).
KNOWN_PRIVATE_IMPORTS: set[tuple[str, str]] = set()
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 300
#: Past the limits without saying why in their docstring ("one concept: ..."), reported to the lead.
KNOWN_LARGE: set[str] = set()


@dataclass(frozen=True)
class Import:
    source: str
    target: str
    names: tuple[str, ...]
    line: int

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.target} ({', '.join(self.names) or '*'})"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def source_files() -> dict[str, Path]:
    return {
        module_name(p): p
        for top in ("engine", "dashboard")
        for p in sorted((ROOT / top).rglob("*.py"))
        if "__pycache__" not in p.parts
    }


MODULES = source_files()


def _owner(name: str) -> str | None:
    """The module of ours a dotted name belongs to (``engine.store.SessionStore`` -> ``engine.store``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> Iterator[Import]:
    """Every import of one of our modules anywhere in ``module``: top level, inside functions,
    under ``if TYPE_CHECKING``; ``from pkg import sub`` names the submodule."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _owner(alias.name)
                if target:
                    yield Import(module, target, (), node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            if not base.startswith(("engine", "dashboard")):
                continue
            by_target: dict[str, list[str]] = {}
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in MODULES else _owner(base)
                if target:
                    by_target.setdefault(target, []).append(alias.name)
            for target, names in by_target.items():
                yield Import(module, target, tuple(names), node.lineno)


GRAPH: dict[str, list[Import]] = {m: [i for i in imports_of(m) if i.target != m] for m in MODULES}


def layer_of(module: str) -> int:
    best: tuple[int, int] | None = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[1]
            ):
                best = (index, len(prefix))
    if best is None:
        raise AssertionError(f"{module} has no layer: add it to LAYERS and docs/architecture.md")
    return best[0]


def is_app(module: str) -> bool:
    """The dashboard or the CLI: the public API's users inside this repository."""
    return module.split(".")[0] == "dashboard" or module == "engine.cli" or module.startswith("engine.cli.")


def is_version_import(imp: Import) -> bool:
    """``from engine import __version__``: the version lives in the package, read from anywhere."""
    return imp.target == "engine" and imp.names == ("__version__",)


def cycles() -> list[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for imp in GRAPH[node]:
            if is_version_import(imp):
                continue
            if imp.target not in index:
                visit(imp.target)
                low[node] = min(low[node], low[imp.target])
            elif imp.target in on_stack:
                low[node] = min(low[node], index[imp.target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(frozenset(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    return found


# -- tests -------------------------------------------------------------------------------------------


def test_the_graph_sees_lazy_and_type_checking_imports() -> None:
    targets = {i.target for i in GRAPH["engine.report.run"]}  # imports engine.report.html in a function
    assert "engine.report.html" in targets
    assert "engine.demo.script" in {i.target for i in GRAPH["engine.demo.refunds_workspace"]}  # TYPE_CHECKING


def test_every_module_has_a_layer_and_a_line_in_the_architecture_doc() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    for module in MODULES:
        layer_of(module)
    for _, prefixes in LAYERS:
        for prefix in prefixes:
            assert f"`{prefix.replace('.', '/')}" in doc or f"`{prefix}`" in doc, (
                f"{prefix} missing from {DOCS}"
            )


def test_there_are_no_import_cycles() -> None:
    found = set(cycles())
    assert found <= KNOWN_CYCLES, "import cycles: " + "; ".join(
        " <-> ".join(sorted(c)) for c in found - KNOWN_CYCLES
    )


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = [
        f"{imp} [{LAYERS[layer_of(imp.source)][0]} -> {LAYERS[layer_of(imp.target)][0]}]"
        for imports in GRAPH.values()
        for imp in imports
        if layer_of(imp.target) > layer_of(imp.source) and not is_version_import(imp)
    ]
    assert not upward, "upward imports:\n" + "\n".join(upward)


def _public_names(module: str) -> set[str] | None:
    """What ``module`` offers other packages: its ``__all__`` when it declares one, else None
    (then any name without a leading underscore)."""
    declared = getattr(importlib.import_module(module), "__all__", None)
    return None if declared is None else set(declared)


def test_the_dashboard_and_the_cli_use_only_the_public_api() -> None:
    """Apps import ``engine``'s own ``__all__`` (the API an agent developer embeds) or a public
    name of the module that owns it: one in its ``__all__`` where it has one, never an
    underscore name."""
    private: set[tuple[str, str]] = set()
    for module, imports in GRAPH.items():
        if not is_app(module):
            continue
        for imp in imports:
            if is_app(imp.target) or is_version_import(imp):
                continue
            exported = _public_names(imp.target)
            private |= {
                (imp.target, n)
                for n in imp.names or ("*",)
                if n.startswith("_") or (exported is not None and n not in exported)
            }
    assert private <= KNOWN_PRIVATE_IMPORTS, "not public in the module imported from: " + ", ".join(
        f"{m}.{n}" for m, n in sorted(private - KNOWN_PRIVATE_IMPORTS)
    )


@pytest.mark.parametrize("sub_api", SUB_APIS)
def test_every_sub_api_declares_what_it_exports(sub_api: str) -> None:
    module = importlib.import_module(sub_api)
    assert isinstance(getattr(module, "__all__", None), list | tuple), f"{sub_api} has no __all__"
    assert all(hasattr(module, name) for name in module.__all__)
    assert f"`{sub_api}`" in DOCS.read_text(encoding="utf-8")


def _too_large() -> set[str]:
    found = set()
    for path in MODULES.values():
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text)
        rel = str(path.relative_to(ROOT))
        if (
            text.count("\n") > MAX_MODULE_LINES
            and "one concept" not in (ast.get_docstring(tree) or "").lower()
        ):
            found.add(rel)
        for node in ast.walk(tree):
            too_long = isinstance(node, ast.ClassDef) and node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
            if too_long and "one concept" not in (ast.get_docstring(node) or "").lower():
                found.add(f"{rel}::{node.name}")
    return found


def test_no_module_or_class_is_past_one_concept_without_saying_why() -> None:
    found = _too_large()
    assert found <= KNOWN_LARGE, (
        f"over {MAX_MODULE_LINES} lines (module) or {MAX_CLASS_LINES} (class) without 'one concept: why' in "
        "the docstring: " + ", ".join(sorted(found - KNOWN_LARGE))
    )


#: Size debts paid (once in KNOWN_LARGE or exempted by a "one concept" docstring): each stays under
#: the limits whatever its docstring says, so a note cannot bring one back.
PAID_LARGE = (
    "dashboard/analysis/__init__.py",
    "dashboard/data/__init__.py",
    "engine/importers/formats/claude_code/session.py",
    "engine/session/manager.py",
    "engine/session/manager.py::SessionManager",
)


@pytest.mark.parametrize("entry", PAID_LARGE)
def test_a_paid_size_debt_stays_paid(entry: str) -> None:
    path, _, class_name = entry.partition("::")
    text = (ROOT / path).read_text(encoding="utf-8")
    if not class_name:
        assert text.count("\n") <= MAX_MODULE_LINES, (
            f"{path} is over {MAX_MODULE_LINES} lines again: split it"
        )
        return
    (node,) = [n for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ClassDef) and n.name == class_name]
    assert node.end_lineno - node.lineno + 1 <= MAX_CLASS_LINES, (
        f"{entry} is over {MAX_CLASS_LINES} lines again: move a job into its own module"
    )


_SQL = ("SELECT", "INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "PRAGMA", "WITH", "REPLACE")
#: Modules outside the store that still run SQL of their own (all paid: keep it empty).
KNOWN_SQL_OUTSIDE_STORE: set[str] = set()
#: Importers that read another application's own SQLite database, read-only (OpenCode keeps its
#: sessions in one): SQL on a file that is not a ctxdesk session database.
FOREIGN_DATABASE_READERS = frozenset({"engine.importers.formats.opencode.database"})


def _runs_sql(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "execute"
        ):
            first = node.args[0] if node.args else None
            text = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            if isinstance(first, ast.JoinedStr):
                text = "".join(v.value for v in first.values if isinstance(v, ast.Constant))
            if text.lstrip().upper().startswith(_SQL):
                return True
    return False


def test_the_store_owns_all_sql_of_the_engine() -> None:
    """The engine writes and reads the session database only through engine.store (the dashboard
    reads it through DuckDB, by the documented schema, and is not counted here)."""
    outside = {
        module
        for module, path in MODULES.items()
        if module.startswith("engine.") and not module.startswith("engine.store") and _runs_sql(path)
    } - FOREIGN_DATABASE_READERS
    assert outside <= KNOWN_SQL_OUTSIDE_STORE, (
        f"SQL outside engine/store: {sorted(outside - KNOWN_SQL_OUTSIDE_STORE)}"
    )
    assert _runs_sql(MODULES["engine.store.sqlite"])  # the check sees SQL where it is


def test_the_module_index_in_the_architecture_doc_is_the_code_as_it_is() -> None:
    """docs/architecture.md's module index is generated (scripts/architecture_index.py): every module, its first sentence."""
    spec = importlib.util.spec_from_file_location(
        "architecture_index", ROOT / "scripts" / "architecture_index.py"
    )
    assert spec is not None and spec.loader is not None
    index = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(index)
    doc = DOCS.read_text(encoding="utf-8")
    assert index.with_index(doc) == doc, "the module index is stale: run python scripts/architecture_index.py"
    assert all(f"- `{path.relative_to(ROOT).as_posix()}`:" in doc for path in MODULES.values())
