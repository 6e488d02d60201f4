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
import fcntl
import json
import os
import pty
import select
import signal
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Callable
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
from tests.model_server import ScriptedServer
from tests.model_server.openai_chat import ChatReply, chat_error, chat_text, chat_tool_calls

MODEL = "gpt-4o"
TUI_TIMEOUT_S = 120
PATCH = "*** Begin Patch\n*** Update File: {readme}\n@@\n hello\n+Usage: run `make test`.\n*** End Patch"


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
                            ("run_commands", {"commands": ["ls -a"]}),
                            ("read_files", {"files": [{"path": readme}]}),
                        ),
                    ),
                    chat_tool_calls(("apply_patch", {"input": PATCH.format(readme=readme)})),
                    chat_text("I added a usage line to README.md."),
                ),
            ),
            Turn(
                "Show me the diff.",
                (
                    chat_tool_calls(("run_commands", {"commands": ["git diff"]})),
                    chat_text("The diff adds one line: Usage: run `make test`."),
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
                if session_id:
                    resume_in_tui(binary, workspace, env, session_id, turn.prompt, server)
                else:
                    run_cli([str(binary), "--json", turn.prompt], workspace, env, check=not turn.fails)
                    session_id = _session_id(workspace)
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


def resume_in_tui(
    binary: Path,
    workspace: Workspace,
    env: dict[str, str],
    session_id: str,
    prompt: str,
    server: ScriptedServer,
) -> None:
    """Continue a session: ``cline --id`` opens only the terminal UI (with ``--json`` it refuses:
    "JSON output mode requires a prompt argument"), so it runs on a pseudo-terminal, the prompt is
    typed once the session's history is drawn, and the UI is left (Ctrl+C twice) once every scripted
    reply was asked for and the session file holds the last one."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    tui_env = {**env, "TERM": "xterm-256color"}
    tui_env.pop("NO_COLOR", None)
    proc = subprocess.Popen(
        [str(binary), "--id", session_id],
        cwd=workspace.repo,
        env=tui_env,
        stdin=slave,
        stdout=slave,
        stderr=slave,
    )
    os.close(slave)
    messages = _sessions(workspace) / session_id / f"{session_id}.messages.json"
    try:
        _read_until(
            master, proc, lambda screen: b"\x1b[?2026l" in screen and len(screen) > 2000, TUI_TIMEOUT_S
        )
        _read_until(master, proc, lambda _: False, 2)  # let the UI settle before typing
        for char in prompt.encode():
            os.write(master, bytes([char]))
            time.sleep(0.02)
        time.sleep(0.5)
        os.write(master, b"\r")
        before = len(_messages(messages))
        deadline = time.monotonic() + TUI_TIMEOUT_S
        while time.monotonic() < deadline:
            _read_until(master, proc, lambda _: False, 1)
            kept = _messages(messages)
            if not server.pending and len(kept) > before and _is_final_reply(kept[-1]):
                break
        else:
            raise RuntimeError(f"cline --id {session_id}: the resumed turn did not finish")
        for _ in range(2):
            os.write(master, b"\x03")
            _read_until(master, proc, lambda _: False, 0.5)
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)


def _read_until(
    master: int, proc: subprocess.Popen[bytes], done: Callable[[bytes], bool], seconds: float
) -> bytes:
    """What the UI drew, read until ``done`` says so or ``seconds`` passed (the UI must be read, or
    it blocks writing)."""
    screen = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not done(screen) and proc.poll() is None:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                screen += os.read(master, 65536)
            except OSError:
                break
    return screen


def _messages(path: Path) -> list[dict[str, object]]:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    return value.get("messages") or []


def _is_final_reply(message: dict[str, object]) -> bool:
    content = message.get("content")
    return message.get("role") == "assistant" and not any(
        isinstance(p, dict) and p.get("type") == "tool_use" for p in content or []
    )


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
