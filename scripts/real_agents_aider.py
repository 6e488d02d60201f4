"""Aider fixtures: the real ``aider`` (aider-chat, in its own venv) run offline against the scripted
Chat Completions server, its chat log and LLM history kept beside the server's request log.

    python scripts/real_agents_aider.py [--scenario NAME] [--out tests/fixtures/real_agents]

Aider takes an OpenAI-compatible endpoint with ``--openai-api-base`` and a model ``openai/<name>``;
litellm reads its price table from the package (``LITELLM_LOCAL_MODEL_COST_MAP``). Each run reads
what the user types from stdin (no ``--message``: one process answers several inputs, so a
``/run`` command's output reaches the next call) and ``--restore-chat-history`` resumes the chat
in a later run (not streamed: ``--no-stream``, so Aider shows the provider's token count rather
than its own). ``--llm-history-file`` writes every request's messages and every reply as Aider
sent and received them. Files kept: ``.aider.chat.history.md``, ``.aider.llm.history``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_agents_chat import (
    FIXTURES,
    SCRATCH,
    base_env,
    chat_server,
    fresh_target,
    keep_server_side,
    make_workspace,
    run_cli,
)

from bench.peers import venv_bin
from tests.model_server.openai_chat import ChatReply, chat_text

MODEL = "openai/gpt-4o"
WEAK_MODEL = "openai/gpt-4o-mini"
KEPT = (".aider.chat.history.md", ".aider.llm.history")
EDIT = (
    "I will add a usage line.\n\nREADME.md\n```\n<<<<<<< SEARCH\nhello\n=======\nhello\n"
    "Usage: run `make test`.\n>>>>>>> REPLACE\n```\n"
)


@dataclass(frozen=True)
class Run:
    """One aider process: the files it is started with, the lines typed, the replies its calls get."""

    typed: tuple[str, ...]
    replies: tuple[ChatReply, ...]
    files: tuple[str, ...] = ()
    restore: bool = False
    stream: bool = True  # streamed, the provider reports no usage to Aider: it counts tokens itself
    auto_commits: bool = False  # Aider commits each edit with a message its weak model writes


SCENARIOS: dict[str, list[Run]] = {
    "edit-run-resume": [
        Run(
            typed=("Add a usage line to README.md", "/run git diff", "What does the diff show?"),
            replies=(chat_text(EDIT), chat_text("The diff adds one line: Usage: run `make test`.")),
            files=("README.md",),
        ),
        Run(
            typed=("Summarize what we did.",),
            replies=(chat_text("We added a usage line to README.md and looked at the diff."),),
            files=("README.md",),
            restore=True,
            stream=False,
        ),
    ],
    "auto-commit": [
        Run(
            typed=("Add a usage line to README.md",),
            replies=(chat_text(EDIT), chat_text("docs: add a usage line to README.md")),
            files=("README.md",),
            auto_commits=True,
        ),
    ],
}


def run_aider(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = venv_bin("aider")
    if binary is None:
        raise SystemExit("aider is not installed: python -m bench.peers install")
    workspace = make_workspace(f"aider-{name}", scratch)
    for key, value in (("user.email", "dev@example.com"), ("user.name", "dev")):  # Aider's commits
        subprocess.run(["git", "config", key, value], cwd=workspace.repo, check=True)
    server = chat_server(workspace)
    env = base_env(workspace, LITELLM_LOCAL_MODEL_COST_MAP="True", AIDER_CHECK_UPDATE="false")
    with server:
        for run in SCENARIOS[name]:
            server.queue(*run.replies)
            cmd = [
                str(binary), "--model", MODEL, "--openai-api-base", f"{server.base_url}/v1",
                "--openai-api-key", "scripted", "--yes-always", "--no-check-update", "--no-show-model-warnings",
                "--analytics-disable", "--no-pretty", "--no-fancy-input", "--no-gitignore",
                "--weak-model", WEAK_MODEL, *([] if run.auto_commits else ["--no-auto-commits"]),
                "--llm-history-file", ".aider.llm.history", *(["--restore-chat-history"] if run.restore else []), *([] if run.stream else ["--no-stream"]),
                *run.files,
            ]  # fmt: skip
            run_cli(cmd, workspace, env, stdin="".join(f"{line}\n" for line in run.typed))
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"aider {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "aider" / name)
    for kept in KEPT:
        (target / kept).write_bytes((workspace.repo / kept).read_bytes())
    keep_server_side(server, workspace, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(SCENARIOS):
        print("aider", name, "->", run_aider(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
