"""The README's measured figures, produced by the benches now instead of copied by hand.

``python -m bench.readme_figures [--full] [--only NAME ...] [--no-setup]`` runs the benches the
README quotes (quick sizes unless ``--full``) and prints, per README place, the command that
reproduces it and the table as the bench prints it (Markdown, ready to paste), then the one-line
figures of the "Other rows" list for the rows whose tables it knows. Quick sizes are smaller than
the README's; their label says so, so a quick figure is never pasted as a full one by mistake.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import sys
import time
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bench.__main__ import git_commit, langchain_python, render, run_module
from bench.report import Table

#: (bench name, module, where its figures stand in the README), in README order.
FIGURES: tuple[tuple[str, str, str], ...] = (
    (
        "accuracy",
        "bench.bench_accuracy",
        "How good is it? — token estimates against the provider's own counts",
    ),
    ("fact_retention", "bench.bench_fact_retention", "How good is it? — compaction retention"),
    ("real_facts", "bench.bench_real_facts", "How good is it? — compaction retention on real transcripts"),
    ("guard", "bench.bench_guard", "Speed — per-turn guard evaluation, ms per turn"),
    ("import", "bench.bench_import", "Other rows — Import"),
    ("compaction", "bench.bench_compaction", "Other rows — Compaction planning"),
    ("run_turn", "bench.bench_run_turn", "Other rows — A full run_turn"),
    ("proxy", "bench.bench_proxy", "Other rows — Proxy"),
    ("store_pg", "bench.bench_store_pg", "Other rows — PostgreSQL"),
    ("reliability", "bench.bench_reliability", "Other rows — Reliability"),
    ("scale", "bench.bench_scale", "Other rows — Reliability (scale: report, offload, cost writer)"),
    ("cost", "bench.bench_cost", "Other rows — Cost"),
    ("tokens", "bench.bench_tokens", "Other rows — Token counting"),
)
#: What a quick run is good for (the lead runs the default; CI runs nothing here).
DEFAULT = ("run_turn", "scale")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.readme_figures", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--full", action="store_true", help="the README's sizes (slow); quick sizes otherwise"
    )
    parser.add_argument(
        "--only",
        nargs="+",
        choices=[name for name, _, _ in FIGURES] + ["all"],
        default=list(DEFAULT),
        help=f"benches to run ('all' for every figure of the README; default: {' '.join(DEFAULT)})",
    )
    parser.add_argument("--no-setup", action="store_true", help="do not create bench/.venv for LangChain")
    return parser.parse_args(argv)


def figure_lines(name: str, tables: Sequence[Any]) -> list[str]:
    """The README's one-line figures of a bench whose table layout this module knows."""
    table = next((t for t in tables if isinstance(t, Table)), None)
    if table is None:
        return []
    rows = [dict(zip(table.columns, row, strict=False)) for row in table.rows]
    if name == "run_turn":
        return [
            f"`run_turn` at {r['messages']} messages: {r['overhead ms/turn']} ms of ctxdesk overhead per turn "
            f"beside {r['guard alone ms/turn']} ms for the guard alone (run_turn {r['run_turn ms/turn']} ms "
            f"median, {r['best ms/turn']} ms best, {r['CPU ms/turn']} ms CPU)"
            for r in rows
        ]
    if name in ("scale", "reliability"):
        return [
            f"{r['measure']}: {r['ctxdesk']} {r['unit']} beside {r['baseline']} ({r['baseline is']}), "
            f"ratio {r['ratio']}"
            for r in rows
        ]
    return []


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wanted = {name for name, _, _ in FIGURES} if "all" in args.only else set(args.only)
    run_args = argparse.Namespace(quick=not args.full, no_setup=args.no_setup)
    extra: dict[str, Any] = {}
    if "guard" in wanted:
        extra["venv_python"], extra["venv_note"] = langchain_python(args.no_setup)
    size = (
        "full sizes" if args.full else "QUICK sizes (smaller than the README's: do not paste as full figures)"
    )
    out = [
        "## README figures",
        "",
        f"{size}; commit {git_commit()}; {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; Python "
        f"{platform.python_version()}; regenerate with `python -m bench.readme_figures"
        f"{' --full' if args.full else ''} --only {' '.join(sorted(wanted))}`.",
        "",
    ]
    failed = []
    for name, module, place in FIGURES:
        if name not in wanted:
            continue
        out += [f"### {place}", "", f"`python -m bench --only {name}{'' if args.full else ' --quick'}`", ""]
        if importlib.util.find_spec(module) is None:
            out += [f"Not run: {module} is not in this tree.", ""]
            continue
        print(f"== {name}", file=sys.stderr, flush=True)
        started = time.perf_counter()
        try:
            parts = run_module(name, module, run_args, extra)
        except Exception as exc:  # one failing bench must not hide the others' figures
            traceback.print_exc()
            failed.append(name)
            out += [f"FAILED: {type(exc).__name__}: {exc}", ""]
            continue
        out += [render(p).rstrip() for p in parts]
        lines = figure_lines(name, parts)
        out += ["", *(f"- {line}" for line in lines)] if lines else []
        out += ["", f"({time.perf_counter() - started:.0f} s)", ""]
    print("\n".join(out))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
