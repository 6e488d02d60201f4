"""Run every benchmark: ``python -m bench [--quick] [--only NAME ...] [--out DIR] [--no-setup]``.

Writes ``summary.md`` (and ``summary.json``) to bench/results/ (or ``--out``) and prints the
tables. Each benchmark measures its own baseline in the same run and reports ratios to it.
A benchmark module exposes ``run(quick: bool)`` returning a Table, a list of Tables or Markdown
text; one without ``run`` but with ``main`` is run as ``python -m bench.NAME [--quick]`` and its
output quoted. A benchmark that fails is reported in the summary and the exit code is 1.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import RESULTS_DIR, ROOT
from bench.report import Table, render_table

#: (name, module), in running order; the compaction benchmark reuses the guard's corpus.
BENCHMARKS = (
    ("guard", "bench.bench_guard"),
    ("tokens", "bench.bench_tokens"),
    ("compaction", "bench.bench_compaction"),
    ("accuracy", "bench.bench_accuracy"),
    ("dashboard", "bench.bench_dashboard"),
    ("fact_retention", "bench.bench_fact_retention"),
    ("real_facts", "bench.bench_real_facts"),
    ("cost", "bench.bench_cost"),
    ("proxy", "bench.bench_proxy"),
    ("otel", "bench.bench_otel"),
    ("import", "bench.bench_import"),
    ("import", "bench.bench_from_all"),
    ("store_pg", "bench.bench_store_pg"),
    ("run_turn", "bench.bench_run_turn"),
    ("reliability", "bench.bench_reliability"),
    ("reliability", "bench.bench_proxy_memory"),
    ("scale", "bench.bench_scale"),
    ("cache_policy", "bench.bench_cache_policy"),
    ("headroom", "bench.bench_headroom"),
)
EXTERNAL_TIMEOUT_S = 1_800


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench", description="Run ctxdesk's benchmarks.")
    parser.add_argument("--quick", action="store_true", help="small sizes (the smoke test's mode)")
    parser.add_argument(
        "--only", nargs="+", choices=list(dict.fromkeys(n for n, _ in BENCHMARKS)), help="run only these"
    )
    parser.add_argument("--out", type=Path, default=RESULTS_DIR, help="directory for summary.md/.json")
    parser.add_argument(
        "--no-setup",
        action="store_true",
        help="do not create bench/.venv for LangChain; use it only if it is already there",
    )
    return parser.parse_args(argv)


def langchain_python(no_setup: bool) -> tuple[str | None, str | None]:
    """(bench/.venv's python, None) or (None, why the LangChain comparison is skipped)."""
    from bench.setup_env import SetupError, ensure_venv, is_ready, venv_python

    if no_setup:
        if is_ready():
            return str(venv_python()), None
        return None, "bench/.venv absent and --no-setup given (python -m bench.setup_env creates it)"
    try:
        return str(ensure_venv()), None
    except SetupError as exc:
        return None, f"bench/.venv could not be made ({exc})"


def run_module(name: str, module_name: str, args: argparse.Namespace, extra: dict[str, Any]) -> list[Any]:
    """Tables (or Markdown text) from one benchmark module; raises what the benchmark raised."""
    module = importlib.import_module(module_name)
    run = getattr(module, "run", None)
    if run is None:
        return [run_external(module_name, args.quick)]
    parameters = inspect.signature(run).parameters
    kwargs = {k: v for k, v in extra.items() if k in parameters}
    result = run(quick=args.quick, **kwargs) if "quick" in parameters else run(**kwargs)
    return result if isinstance(result, list | tuple) else [result]


def run_external(module_name: str, quick: bool) -> str:
    command = [sys.executable, "-m", module_name, *(["--quick"] if quick else [])]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=EXTERNAL_TIMEOUT_S
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command[1:])} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return done.stdout.strip() + "\n"


def render(part: Any) -> str:
    if isinstance(part, Table):
        return render_table(part)
    if hasattr(part, "title") and hasattr(part, "columns") and hasattr(part, "rows"):
        return render_table(Table(part.title, list(part.columns), [list(r) for r in part.rows]))
    return str(part).rstrip() + "\n"


def git_commit() -> str:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        )
    except OSError:
        return "unknown"
    return done.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    selected = [(n, m) for n, m in BENCHMARKS if not args.only or n in args.only]
    extra: dict[str, Any] = {}
    if any(n == "guard" for n, _ in selected):
        extra["venv_python"], extra["venv_note"] = langchain_python(args.no_setup)

    sections: list[str] = []
    data: list[dict[str, Any]] = []
    failed: list[str] = []
    for name, module_name in selected:
        if importlib.util.find_spec(module_name) is None:
            sections.append(f"### {name}\n\nNot run: {module_name} is not in this tree yet.\n")
            data.append({"benchmark": name, "status": "absent"})
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            parts = run_module(name, module_name, args, extra)
        except Exception as exc:  # one failing benchmark must not hide the others' results
            failed.append(name)
            traceback.print_exc()
            sections.append(f"### {name}\n\nFAILED: {type(exc).__name__}: {exc}\n")
            data.append({"benchmark": name, "status": "failed", "error": f"{type(exc).__name__}: {exc}"})
            continue
        seconds = time.perf_counter() - started
        sections += [render(p) for p in parts]
        data.append(
            {
                "benchmark": name,
                "status": "ok",
                "seconds": round(seconds, 1),
                "tables": [p.as_dict() if isinstance(p, Table) else {"markdown": str(p)} for p in parts],
            }
        )

    header = (
        "## ctxdesk benchmarks\n\n"
        f"{'Quick sizes' if args.quick else 'Full sizes'}; commit {git_commit()}; "
        f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC; Python {platform.python_version()} on "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs. Regenerate with `python -m bench`.\n"
    )
    markdown = header + "\n" + "\n".join(sections)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "summary.md").write_text(markdown, encoding="utf-8")
    (args.out / "summary.json").write_text(json.dumps(data, indent=2, default=str), encoding="utf-8")
    print(markdown)
    print(f"wrote {args.out / 'summary.md'}", file=sys.stderr)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
