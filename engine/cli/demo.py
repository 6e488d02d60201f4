"""``ctxdesk demo``: regenerate the sample session databases in data/."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import TextIO

from engine.cli.common import EXIT_OK, SAMPLE_DATA_DIR


def cmd_demo(args: argparse.Namespace, out: TextIO) -> int:
    from engine.demo import generate_demo

    engine_logger = logging.getLogger("engine")
    level = engine_logger.level
    engine_logger.setLevel(logging.ERROR)  # the demo provokes its warnings (a provider rejection) on purpose
    try:
        written = generate_demo(Path(args.out), seed=args.seed)
    finally:
        engine_logger.setLevel(level)
    for path in written:
        print(f"wrote {path} ({path.stat().st_size:,} bytes)", file=out)
    return EXIT_OK


def register(commands: argparse._SubParsersAction) -> None:
    p = commands.add_parser("demo", help="generate sample session databases")
    p.add_argument(
        "--out", default=str(SAMPLE_DATA_DIR), metavar="DIR", help="output folder (default: %(default)s)"
    )
    p.add_argument("--seed", type=int, default=7, help="random seed (default %(default)s)")
    p.set_defaults(run=cmd_demo)
