"""GitHub Copilot CLI fixtures: the real ``copilot`` CLI run offline against the scripted Chat
Completions server (its "bring your own key" provider), its session events kept beside the
server's request log.

    python scripts/real_agents_copilot.py [--scenario NAME] [--out tests/fixtures/real_agents]

Copilot CLI takes an OpenAI-compatible provider from ``COPILOT_PROVIDER_BASE_URL`` /
``COPILOT_PROVIDER_API_KEY`` / ``COPILOT_MODEL`` and, with ``COPILOT_OFFLINE=true``, contacts no
GitHub server (no sign-in needed). ``copilot -p PROMPT --allow-all-tools`` runs one prompt;
``--resume=<session id>`` continues a session. Each session is a folder
``~/.copilot/session-state/<session id>/`` whose ``events.jsonl`` is kept (with ``workspace.yaml``).
"""

from __future__ import annotations

import argparse
import json
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
from tests.model_server.core import RecordedRequest
from tests.model_server.openai_chat import ChatReply, chat_error, chat_text, chat_tool_calls

MODEL = "gpt-4o"
KEPT = ("events.jsonl", "workspace.yaml")


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    return {
        "tools-resume": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        text="Listing the files and reading the README first.",
                        tool_calls=(
                            ("bash", {"command": "ls -a", "description": "List the files"}),
                            ("view", {"path": readme}),
                        ),
                    ),
                    chat_tool_calls(
                        (
                            "bash",
                            {
                                "command": "echo 'Usage: run `make test`.' >> README.md",
                                "description": "Add usage",
                            },
                        )
                    ),
                    chat_text("I added a usage line to README.md."),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    chat_tool_calls(("bash", {"command": "git diff", "description": "Show the change"})),
                    chat_text("The diff adds one line: Usage: run `make test`."),
                ),
            ),
        ],
        "compact": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        tool_calls=(("bash", {"command": "ls -a", "description": "List the files"}),),
                        pad_tokens=PAD,
                        when=is_agent_turn,
                    ),
                    ChatReply(text=SUMMARY, when=is_summary),
                    ChatReply(
                        tool_calls=(
                            (
                                "bash",
                                {
                                    "command": "echo 'Usage: run `make test`.' >> README.md",
                                    "description": "Add",
                                },
                            ),
                        ),
                        when=is_agent_turn,
                    ),
                    ChatReply(text="I added a usage line to README.md.", when=is_agent_turn),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    ChatReply(
                        tool_calls=(("bash", {"command": "git diff", "description": "Show the change"}),),
                        when=is_agent_turn,
                    ),
                    ChatReply(text="The diff adds one line.", when=is_agent_turn),
                ),
            ),
        ],
        "provider-error": [
            Turn(
                "Say hello.",
                (chat_error(400, "invalid_request_error", "scripted: this request was refused"),),
                fails=True,
            ),
            Turn("Try again.", (chat_text("Hello."),)),
        ],
        "subagent": [
            Turn(
                "Find where hello is printed, with a sub-agent.",
                (
                    ChatReply(
                        tool_calls=(
                            (
                                "task",
                                {
                                    "description": "Find hello",
                                    "prompt": SUB_TASK,
                                    "agent_type": "general-purpose",
                                    "name": "finder",
                                },
                            ),
                        ),
                        when=is_parent,
                    ),
                    ChatReply(
                        tool_calls=(("bash", {"command": "grep -l hello *.py", "description": "Find it"}),),
                        when=is_sub,
                    ),
                    ChatReply(text="main.py prints hello.", when=is_sub),
                    ChatReply(text="The sub-agent found it: main.py prints hello.", when=is_parent),
                ),
            ),
        ],
    }


#: The sub-agent's task in the subagent scenario: its calls are told from the parent's by it.
SUB_TASK = "Find the file that prints hello."


def is_sub(request: RecordedRequest) -> bool:
    messages = (request.body or {}).get("messages") or []
    first_user = next((m for m in messages if m.get("role") == "user"), {})
    return SUB_TASK in json.dumps(first_user.get("content"))


#: Prompt tokens the compact scenario's first reply reports beyond the request's size (as cache
#: reads): past Copilot's own prompt limit (64,000 for this model), so it compacts.
PAD = 52_000


SUMMARY = "Summary: the user wants a usage line in README.md; the files were listed."


def is_summary(request: RecordedRequest) -> bool:
    """Copilot's compaction call: the history, then its request for a summary."""
    messages = (request.body or {}).get("messages") or [{}]
    return str(messages[-1].get("content", "")).startswith("Please create a detailed summary")


def is_agent_turn(request: RecordedRequest) -> bool:
    return not is_summary(request)


def is_parent(request: RecordedRequest) -> bool:
    return not is_sub(request)


def run_copilot(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = npm_bin("copilot")
    if binary is None:
        raise SystemExit("copilot is not installed: python -m bench.peers install")
    workspace = make_workspace(f"copilot-{name}", scratch)
    server = chat_server(workspace)
    session_id = None
    with server:
        env = base_env(
            workspace,
            COPILOT_PROVIDER_BASE_URL=f"{server.base_url}/v1",
            COPILOT_PROVIDER_API_KEY="scripted",
            COPILOT_MODEL=MODEL,
            COPILOT_OFFLINE="true",
        )
        for turn in scenarios(workspace.repo)[name]:
            server.queue(*turn.replies)
            cmd = [str(binary), "-p", turn.prompt, "--allow-all-tools"]
            if session_id:
                cmd.append(f"--resume={session_id}")
            run_cli(cmd, workspace, env, check=not turn.fails)
            session_id = session_id or _session_id(workspace)
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"copilot {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "copilot" / name)
    states = workspace.home / ".copilot" / "session-state"
    for folder in sorted(p for p in states.iterdir() if p.is_dir() and not p.name.startswith(".")):
        for kept in KEPT:
            if (folder / kept).is_file():
                (target / "session-state" / folder.name).mkdir(parents=True, exist_ok=True)
                (target / "session-state" / folder.name / kept).write_bytes((folder / kept).read_bytes())
    keep_server_side(server, workspace, target)
    return target


def _session_id(workspace: Workspace) -> str:
    states = workspace.home / ".copilot" / "session-state"
    (folder,) = [p for p in states.iterdir() if p.is_dir() and not p.name.startswith(".")]
    return folder.name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(scenarios(Path("/repo"))):
        print("copilot", name, "->", run_copilot(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
