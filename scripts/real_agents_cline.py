"""Cline CLI fixtures: the real ``cline`` CLI (npm ``cline``) run offline against the scripted Chat
Completions server, its session files kept beside the server's request log.

    python scripts/real_agents_cline.py [--scenario NAME] [--out tests/fixtures/real_agents]

``cline auth -p openai -k KEY -m MODEL -b URL`` stores an ``openai-compatible`` provider with that
base URL (``~/.cline/data/settings/providers.json``); ``cline --json PROMPT`` runs one prompt with
every tool approved; ``--id <session id>`` continues a session. Each session is a folder
``~/.cline/data/sessions/<id>/`` holding ``<id>.json`` (the run's facts) and ``<id>.messages.json``
(the conversation and the system prompt), both kept. A run starts a hub daemon of its own (``cline
--cline-hub-daemon``, the scratch HOME in its environment) that outlives it: stopped here by its pid.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
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
from tests.model_server.openai_chat import ChatReply, chat_error, chat_text, chat_tool_calls

MODEL = "gpt-4o"
PATCH = "*** Begin Patch\n*** Update File: {readme}\n@@\n hello\n+Usage: run `make test`.\n*** End Patch"


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    return {
        "tools": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        text="Listing the files and reading the README first.",
                        tool_calls=(
                            ("run_commands", {"commands": ["ls -a"]}),
                            ("read_files", {"files": [{"path": readme}]}),
                        ),
                    ),
                    chat_tool_calls(("apply_patch", {"input": PATCH.format(readme=readme)})),
                    chat_text("I added a usage line to README.md."),
                ),
            ),
        ],
        "provider-error": [
            Turn(
                "Say hello.",
                (chat_error(400, "invalid_request_error", "scripted: this request was refused"),),
                fails=True,
            ),
        ],
    }


def run_cline(name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = npm_bin("cline")
    if binary is None:
        raise SystemExit("cline is not installed: python -m bench.peers install")
    workspace = make_workspace(f"cline-{name}", scratch)
    server = chat_server(workspace)
    session_id = None
    try:
        with server:
            env = base_env(workspace)
            auth = ["auth", "-p", "openai", "-k", "scripted", "-m", MODEL, "-b", f"{server.base_url}/v1"]
            run_cli([str(binary), *auth], workspace, env)
            for turn in scenarios(workspace.repo)[name]:
                server.queue(*turn.replies)
                if session_id:  # a resumed session takes its prompt from stdin only
                    cmd, stdin = [str(binary), "--json", "--id", session_id], turn.prompt
                else:
                    cmd, stdin = [str(binary), "--json", turn.prompt], None
                run_cli(cmd, workspace, env, stdin=stdin, check=not turn.fails)
                session_id = session_id or _session_id(workspace)
            leftover = server.pending
    finally:
        stop_hub(workspace)
    if leftover:
        raise RuntimeError(f"cline {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "cline" / name)
    for folder in sorted(p for p in _sessions(workspace).iterdir() if p.is_dir()):
        for kept in (f"{folder.name}.json", f"{folder.name}.messages.json"):
            if (folder / kept).is_file():
                (target / "sessions" / folder.name).mkdir(parents=True, exist_ok=True)
                (target / "sessions" / folder.name / kept).write_bytes((folder / kept).read_bytes())
    keep_server_side(server, workspace, target)
    return target


def _sessions(workspace: Workspace) -> Path:
    return workspace.home / ".cline" / "data" / "sessions"


def _session_id(workspace: Workspace) -> str:
    (folder,) = [p for p in _sessions(workspace).iterdir() if p.is_dir()]
    return folder.name


def stop_hub(workspace: Workspace) -> None:
    """Stop the hub daemons this workspace's runs started: ``cline --cline-hub-daemon`` processes
    whose HOME is the workspace's (read from /proc; nothing else is touched)."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            environ = (proc / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"--cline-hub-daemon" in argv and f"HOME={workspace.home}".encode() in environ:
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(proc.name), signal.SIGTERM)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(scenarios(Path("/repo"))):
        print("cline", name, "->", run_cline(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
