"""The ``ctxdesk`` command line: one module per command, each with ``register(commands)``.

Each command imports what it needs when it runs, so ``--help`` and ``--version`` work
without the heavier layers. Errors of ours (:class:`ContextDeskError`) are caught here only,
printed as one ``ctxdesk: error: ...`` line; exit 2 for usage errors, 1 for the others.
A new command is a new module here with ``register(commands)`` (its parser, ``set_defaults(run=...)``),
listed in :data:`COMMAND_MODULES`.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from engine.cli.common import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    PROG,
    SAMPLE_DATA_DIR,
    UsageError,
)
from engine.cli.dashboard import DB_PATHS_ENV_VAR, dashboard_app_path, dashboard_command, dashboard_env
from engine.errors import ContextDeskError
from engine.textfmt import format_table

#: Command modules under engine.cli, in the order ``--help`` lists them.
COMMAND_MODULES = (
    "dashboard", "demo", "inspect", "compact", "costs", "export", "importing", "migrate", "models", "otel", "proxy",
    "report", "why",
)  # fmt: skip

__all__ = [
    "DB_PATHS_ENV_VAR",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_USAGE",
    "PROG",
    "SAMPLE_DATA_DIR",
    "UsageError",
    "build_parser",
    "dashboard_app_path",
    "dashboard_command",
    "dashboard_env",
    "format_table",
    "main",
]


def _version() -> str:
    from engine import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Inspect and control what fills an LLM agent's context window.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument(
        "--settings", metavar="TOML", default=None,
        help="settings file (default: $CTXDESK_SETTINGS, else ~/.config/ctxdesk/settings.toml if present)",
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:
        importlib.import_module(f"engine.cli.{name}").register(commands)
    return parser


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None) -> int:
    """Run one ctxdesk command; returns the exit code (the console script exits with it)."""
    from engine.redact import install_log_redaction

    install_log_redaction()  # whatever a command logs (a provider's error echoing a key) is redacted
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version, or a usage error argparse already printed
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    run: Callable[[argparse.Namespace, TextIO], int] = args.run
    try:
        return run(args, out or sys.stdout)
    except UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ContextDeskError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return EXIT_ERROR
    except BrokenPipeError:  # `ctxdesk inspect ... | head`
        return EXIT_OK
    except KeyboardInterrupt:  # ^C: what was committed before stays (an import goes on where it stopped)
        print(f"\n{PROG}: interrupted; what was written before stays", file=sys.stderr)
        return EXIT_INTERRUPTED
