"""Continue CLI fixtures: the real ``cn`` CLI (npm ``@continuedev/cli``) run offline against the
scripted Chat Completions server, its session file kept beside the server's request log.

    python scripts/real_agents_continue.py [--scenario NAME] [--out tests/fixtures/real_agents]

``cn`` takes its models from a local ``config.yaml`` (``--config``): one ``provider: openai`` model
with ``apiBase`` the server, so no Continue hub sign-in is needed. ``cn -p PROMPT --auto`` runs one
prompt with every tool allowed; ``--resume`` continues the last session of this folder. Each session
is ``~/.continue/sessions/<session id>.json`` (kept, with ``sessions.json``, the list of sessions).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from real_agents_chat import (
    FIXTURES,
    SCRATCH,
    Turn,
    Workspace,
    base_env,
    chat_server,
    fresh_target,
    keep_server_side,
    make_workspace,
    run_cli,
)

from bench.peers import npm_bin
from tests.model_server.openai_chat import ChatReply, chat_text, chat_tool_calls

MODEL = "gpt-4o"
CONFIG = """name: scripted
version: 1.0.0
schema: v1
models:
  - name: scripted
    provider: openai
    model: {model}
    apiBase: {base}
    apiKey: scripted
    roles: [chat, edit, apply]
"""


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    return {
        "tools-resume": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        text="Listing the files and reading the README first.",
                        tool_calls=(("Bash", {"command": "ls -a"}), ("Read", {"filepath": readme})),
                    ),
                    chat_tool_calls(("Bash", {"command": "echo 'Usage: run `make test`.' >> README.md"})),
                    chat_text("I added a usage line to README.md."),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    chat_tool_calls(("Bash", {"command": "git diff"})),
                    chat_text("The diff adds one line: Usage: run `make test`."),
                ),
            ),
        ],
    }


def run_continue(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = npm_bin("cn")
    if binary is None:
        raise SystemExit("cn is not installed: python -m bench.peers install")
    workspace = make_workspace(f"continue-{name}", scratch)
    server = chat_server(workspace)
    config = workspace.root / "config.yaml"
    with server:
        config.write_text(CONFIG.format(model=MODEL, base=f"{server.base_url}/v1"), encoding="utf-8")
        env = base_env(workspace, CONTINUE_CLI_DISABLE_TELEMETRY="1")
        for index, turn in enumerate(scenarios(workspace.repo)[name]):
            server.queue(*turn.replies)
            cmd = [str(binary), "-p", turn.prompt, "--config", str(config), "--auto"]
            if index:
                cmd.append("--resume")
            run_cli(cmd, workspace, env, check=not turn.fails)
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"continue {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "continue" / name)
    (target / "sessions").mkdir()
    for path in sorted(_sessions(workspace).glob("*.json")):
        (target / "sessions" / path.name).write_bytes(path.read_bytes())
    keep_server_side(server, workspace, target)
    return target


def _sessions(workspace: Workspace) -> Path:
    return workspace.home / ".continue" / "sessions"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(scenarios(Path("/repo"))):
        print("continue", name, "->", run_continue(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
