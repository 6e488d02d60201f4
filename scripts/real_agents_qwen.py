"""Qwen Code fixtures: the real ``qwen`` CLI run offline against the scripted Chat Completions
server, its chat recording kept beside the server's request log.

    python scripts/real_agents_qwen.py [--scenario NAME] [--out tests/fixtures/real_agents]

Qwen Code (a fork of Gemini CLI) speaks OpenAI Chat Completions with ``security.auth.selectedType:
"openai"`` in ``~/.qwen/settings.json`` and ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` /
``OPENAI_MODEL``. ``qwen -p PROMPT --yolo -o json`` runs one prompt; ``--resume <session id>``
continues it. It records each session in ``~/.qwen/projects/<project>/chats/<session id>.jsonl``
(kept as ``projects/...``), and a sub-agent's in ``<project>/subagents/<session id>/agent-*.jsonl``. Besides the main agent, Qwen Code's managed memory extractor calls the
model after a reply (its own system prompt): the script answers those "OK.".
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
from tests.model_server.openai_chat import ChatReply, chat_error

MODEL = "gpt-4o"
MAIN_AGENT = "You are Qwen Code"


SUB_TASK = "Find the file that prints hello."
SUMMARY_PROMPT = "You are the component that summarizes a conversation"
SUMMARY = "<state_snapshot>The user wants a usage line in README.md; the files were listed.</state_snapshot>"
#: Prompt tokens the compress scenario's first reply reports beyond the request's size (as cache
#: reads): past Qwen Code's compression threshold (70% of its 131,072-token window).
PAD = 80_000


def _first_user(request: RecordedRequest) -> str:
    messages = (request.body or {}).get("messages") or []
    return json.dumps(next((m.get("content") for m in messages if m.get("role") == "user"), ""))


def is_summary(request: RecordedRequest) -> bool:
    """A compression's call: the history, then Qwen Code's request for a summary."""
    messages = (request.body or {}).get("messages") or [{}]
    return SUMMARY_PROMPT in json.dumps(messages[-1].get("content"))


def is_main(request: RecordedRequest) -> bool:
    """A call of the main agent (not a compression, the memory extractor, nor a sub-agent)."""
    messages = (request.body or {}).get("messages") or [{}]
    return (
        str(messages[0].get("content", "")).startswith(MAIN_AGENT)
        and SUB_TASK not in _first_user(request)
        and not is_summary(request)
    )


def is_sub(request: RecordedRequest) -> bool:
    return SUB_TASK in _first_user(request)


def main_reply(
    text: str | None = None, *calls: tuple[str, dict[str, object]], reasoning: str | None = None
) -> ChatReply:
    return ChatReply(text=text, tool_calls=tuple(calls), reasoning=reasoning, when=is_main)


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    return {
        "tools-resume": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    main_reply(
                        "Listing the files and reading the README first.",
                        ("run_shell_command", {"command": "ls -a", "description": "List the files"}),
                        ("read_file", {"file_path": readme}),
                        reasoning="I should look before editing.",
                    ),
                    main_reply(
                        None,
                        (
                            "edit",
                            {
                                "file_path": readme,
                                "old_string": "hello\n",
                                "new_string": "hello\nUsage: run `make test`.\n",
                            },
                        ),
                    ),
                    main_reply("I added a usage line to README.md."),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    main_reply(
                        None, ("run_shell_command", {"command": "git diff", "description": "Show the change"})
                    ),
                    main_reply("The diff adds one line: Usage: run `make test`."),
                ),
            ),
        ],
        "provider-error": [
            Turn(
                "Say hello.",
                (
                    chat_error(
                        400, "invalid_request_error", "scripted: this request was refused", when=is_main
                    ),
                ),
                fails=True,
            ),
            Turn("Try again.", (main_reply("Hello."),)),
        ],
        "compress": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        text="Listing the files first.",
                        tool_calls=(
                            ("run_shell_command", {"command": "ls -a", "description": "List the files"}),
                        ),
                        pad_tokens=PAD,
                        when=is_main,
                    ),
                    ChatReply(text=SUMMARY, when=is_summary),
                    main_reply(
                        None,
                        (
                            "edit",
                            {
                                "file_path": readme,
                                "old_string": "hello\n",
                                "new_string": "hello\nUsage: run `make test`.\n",
                            },
                        ),
                    ),
                    main_reply("I added a usage line to README.md."),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    main_reply(
                        None, ("run_shell_command", {"command": "git diff", "description": "Show it"})
                    ),
                    main_reply("The diff adds one line."),
                ),
            ),
        ],
        "subagent": [
            Turn(
                "Find where hello is printed, with a sub-agent.",
                (
                    main_reply(
                        None,
                        (
                            "agent",
                            {
                                "description": "Find hello",
                                "prompt": SUB_TASK,
                                "subagent_type": "general-purpose",
                            },
                        ),
                    ),
                    ChatReply(
                        tool_calls=(
                            (
                                "run_shell_command",
                                {"command": "grep -l hello *.py", "description": "Find it"},
                            ),
                        ),
                        when=is_sub,
                    ),
                    ChatReply(text="main.py prints hello.", when=is_sub),
                    main_reply("The sub-agent found it: main.py prints hello."),
                ),
            ),
        ],
    }


def run_qwen(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = npm_bin("qwen")
    if binary is None:
        raise SystemExit("qwen is not installed: python -m bench.peers install")
    workspace = make_workspace(f"qwen-{name}", scratch)
    settings = workspace.home / ".qwen" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(
        json.dumps(
            {"security": {"auth": {"selectedType": "openai"}}, "privacy": {"usageStatisticsEnabled": False}}
        ),
        encoding="utf-8",
    )
    server = chat_server(workspace)
    session_id = None
    with server:
        env = base_env(
            workspace,
            OPENAI_API_KEY="scripted",
            OPENAI_BASE_URL=f"{server.base_url}/v1",
            OPENAI_MODEL=MODEL,
            QWEN_CODE_SUPPRESS_YOLO_WARNING="1",
        )
        for turn in scenarios(workspace.repo)[name]:
            server.queue(*turn.replies)
            cmd = [str(binary), "-p", turn.prompt, "--yolo", "-o", "json"]
            if session_id:
                cmd += ["--resume", session_id]
            stdout = run_cli(cmd, workspace, env, check=not turn.fails)
            session_id = session_id or _session_id(stdout, workspace)
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"qwen {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "qwen" / name)
    projects = workspace.home / ".qwen" / "projects"
    for chat in sorted([*projects.glob("*/chats/*.jsonl"), *projects.glob("*/subagents/*/*.jsonl")]):
        kept = target / "projects" / chat.relative_to(projects)
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(chat.read_bytes())
    keep_server_side(server, workspace, target)
    return target


def _session_id(stdout: str, workspace: Workspace) -> str:
    start = stdout.find("[")
    try:
        events = json.loads(stdout[start:]) if start >= 0 else []
    except json.JSONDecodeError:
        events = []
    for event in events:
        if isinstance(event, dict) and event.get("session_id"):
            return str(event["session_id"])
    chats = sorted((workspace.home / ".qwen" / "projects").glob("*/chats/*.jsonl"))
    if len(chats) == 1:  # a failed run may print no JSON: its chat file is named by the session
        return chats[0].stem
    raise RuntimeError(f"qwen printed no session_id: {stdout[-500:]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(scenarios(Path("/repo"))):
        print("qwen", name, "->", run_qwen(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
