"""OpenCode fixtures: the real ``opencode`` CLI run offline against the scripted Chat Completions
server, its own database kept beside the server's request log.

    python scripts/real_agents_opencode.py [--scenario NAME] [--out tests/fixtures/real_agents]

OpenCode reads a custom provider from ``opencode.json`` (``provider.<id>`` with
``npm: "@ai-sdk/openai-compatible"`` and ``options.baseURL``); ``opencode run`` takes one prompt,
``--session ID`` continues a session. It keeps every session in one SQLite database,
``$XDG_DATA_HOME/opencode/opencode.db`` (tables ``session``, ``message``, ``part``), which is
copied compacted (``VACUUM INTO``) to ``<scenario>/data/opencode/opencode.db``. ``--title`` spares
the title-generator call (a side call the database keeps only as the session's title) so each
run's calls arrive in a fixed order; ``--pure`` skips plugins it would fetch from npm.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
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

MODEL = "local/gpt-4o"
DB = Path("opencode") / "opencode.db"


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    return {
        "tools-resume": [
            Turn(
                "Look at this repository, then add a usage line to README.md.",
                (
                    ChatReply(
                        reasoning="Listing the files and reading the README first.",
                        tool_calls=(
                            ("bash", {"command": "ls -a", "description": "List the files"}),
                            ("read", {"filePath": readme}),
                        ),
                    ),
                    chat_tool_calls(
                        (
                            "edit",
                            {
                                "filePath": readme,
                                "oldString": "hello",
                                "newString": "hello\nUsage: run `make test`.",
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
                    ChatReply(
                        reasoning="One added line.", text="The diff adds one line: Usage: run `make test`."
                    ),
                ),
            ),
        ],
    }


def config(base_url: str) -> dict[str, object]:
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": "scripted"},
                "models": {"gpt-4o": {"name": "gpt-4o"}},
            }
        },
        "model": MODEL,
        "autoupdate": False,
        "share": "disabled",
    }


def run_opencode(
    name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH, binary: Path | None = None
) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = binary or npm_bin("opencode")
    if binary is None:
        raise SystemExit("opencode is not installed: python -m bench.peers install")
    workspace = make_workspace(f"opencode-{name}", scratch)
    turns = scenarios(workspace.repo)[name]
    server = chat_server(workspace)
    settings = workspace.home / ".config" / "opencode" / "opencode.json"
    settings.parent.mkdir(parents=True)
    session_id = None
    with server:
        settings.write_text(json.dumps(config(server.base_url), indent=1), encoding="utf-8")
        env = base_env(
            workspace,
            OPENCODE_DISABLE_AUTOUPDATE="1",
            OPENCODE_DISABLE_MODELS_FETCH="1",
            OPENCODE_DISABLE_LSP_DOWNLOAD="1",
            OPENCODE_DISABLE_DEFAULT_PLUGINS="1",
        )
        for turn in turns:
            server.queue(*turn.replies)
            cmd = [str(binary), "run", "--pure", "--auto", "--format", "json", "-m", MODEL]
            cmd += ["--title", "Scripted run"] if session_id is None else ["--session", session_id]
            stdout = run_cli([*cmd, turn.prompt], workspace, env)
            session_id = session_id or _session_id(stdout)
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"opencode {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / "opencode" / name)
    keep_database(workspace, target)
    keep_server_side(server, workspace, target)
    return target


def _session_id(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("{"):
            found = json.loads(line).get("sessionID")
            if found:
                return found
    raise RuntimeError(f"opencode run printed no sessionID: {stdout[-500:]}")


def keep_database(workspace: Workspace, target: Path) -> Path:
    """OpenCode's database, compacted into the fixture (its write-ahead log folded in)."""
    source = workspace.home / ".local" / "share" / DB
    kept = target / "data" / DB
    kept.parent.mkdir(parents=True)
    with sqlite3.connect(source) as conn:
        conn.execute("VACUUM INTO ?", (str(kept),))
    conn.close()
    return kept


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for name in args.scenario or list(scenarios(Path("/repo"))):
        print("opencode", name, "->", run_opencode(name, args.out, scratch=args.scratch))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
