"""mini-swe-agent fixtures: the real ``mini`` CLI (mini-swe-agent, in its own venv) run offline
against the scripted Chat Completions server, its trajectory kept beside the server's request log.

    python scripts/real_agents_mini.py [--scenario NAME] [--out tests/fixtures/real_agents]

``mini -m openai/<model>`` reaches the endpoint in ``OPENAI_BASE_URL`` through litellm (its price
table read from the package: ``LITELLM_LOCAL_MODEL_COST_MAP``); ``-y`` runs every command without
asking; when the agent submits (``echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT``) it asks for a new
task on stdin, which continues the same run (the scenario's follow-up), and an empty line quits. The
trajectory is written where the CLI keeps its last run, ``$XDG_CONFIG_HOME/mini-swe-agent/
last_mini_run.traj.json``, and kept as ``config/mini-swe-agent/last_mini_run.traj.json``.
"""

from __future__ import annotations

import argparse
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
from tests.model_server.openai_chat import ChatReply, chat_tool_calls

MODEL = "openai/gpt-4o"
TRAJECTORY = Path("mini-swe-agent") / "last_mini_run.traj.json"
SUBMIT = ("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})


@dataclass(frozen=True)
class Scenario:
    task: str
    typed: tuple[str, ...]  # what the user types when the agent asks for a new task
    replies: tuple[ChatReply, ...]


SCENARIOS: dict[str, Scenario] = {
    "tools-followup": Scenario(
        task="Look at this repository, then add a usage line to README.md.",
        typed=("Show me the diff.", ""),
        replies=(
            ChatReply(
                text="Let me look at the files and the README first.",
                tool_calls=(("bash", {"command": "ls -a"}), ("bash", {"command": "cat README.md"})),
            ),
            chat_tool_calls(("bash", {"command": "echo 'Usage: run `make test`.' >> README.md"})),
            ChatReply(text="The usage line is in README.md.", tool_calls=(SUBMIT,)),
            chat_tool_calls(("bash", {"command": "git diff"})),
            ChatReply(text="The diff adds one line.", tool_calls=(SUBMIT,)),
        ),
    ),
}


def run_mini(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = venv_bin("mini")
    if binary is None:
        raise SystemExit("mini-swe-agent is not installed: python -m bench.peers install")
    scenario = SCENARIOS[name]
    workspace = make_workspace(f"mini-{name}", scratch)
    server = chat_server(workspace)
    with server:
        server.queue(*scenario.replies)
        env = base_env(
            workspace,
            OPENAI_API_KEY="scripted",
            OPENAI_BASE_URL=f"{server.base_url}/v1",
            MSWEA_CONFIGURED="true",
            MSWEA_COST_TRACKING="ignore_errors",
            LITELLM_LOCAL_MODEL_COST_MAP="True",
        )
        cmd = [str(binary), "-m", MODEL, "-t", scenario.task, "-y"]
        run_cli(cmd, workspace, env, stdin="".join(f"{line}\n" for line in scenario.typed))
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"mini {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "mini-swe-agent" / name)
    kept = target / "config" / TRAJECTORY
    kept.parent.mkdir(parents=True)
    kept.write_bytes((workspace.home / ".config" / TRAJECTORY).read_bytes())
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
        print("mini-swe-agent", name, "->", run_mini(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
