"""OpenCode and Kilo CLI fixtures: the real ``opencode`` / ``kilo`` CLI run offline against the
scripted Chat Completions server, its own database kept beside the server's request log.

    python scripts/real_agents_opencode.py [--agent opencode|kilo] [--scenario NAME] [--out tests/fixtures/real_agents]

Kilo CLI is a fork of OpenCode: the same flags, configuration and database, under its own name
(``~/.config/kilo/kilo.json``, ``$XDG_DATA_HOME/kilo/kilo.db``, ``KILO_*`` variables).

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
import shutil
import sqlite3
import sys
from dataclasses import dataclass, replace
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

MODEL = "local/gpt-4o"


@dataclass(frozen=True)
class App:
    """What differs between OpenCode and its fork Kilo CLI."""

    name: str  # the CLI, the npm peer and the folders under ~/.config and ~/.local/share
    config_name: str
    env_prefix: str

    @property
    def database(self) -> Path:
        return Path(self.name) / f"{self.name}.db"


APPS = {
    "opencode": App("opencode", "opencode.json", "OPENCODE"),
    "kilo": App("kilo", "kilo.json", "KILO"),
}


def scenarios(repo: Path) -> dict[str, list[Turn]]:
    readme = str(repo / "README.md")
    tools_resume = [
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
    ]
    return {
        "tools-resume": tools_resume,
        # the summary call (no tools) gets the default "OK.", never a turn's scripted reply
        "compact": [
            Turn(t.prompt, tuple(replace(r, when=has_tools) for r in t.replies)) for t in tools_resume
        ],
        # the provider refuses a prompt as too long: OpenCode compacts (overflow) and retries
        "overflow": [
            Turn(
                "Look at this repository.",
                (
                    ChatReply(
                        tool_calls=(("bash", {"command": "ls -a", "description": "List"}),), when=has_tools
                    ),
                    chat_error(
                        400,
                        "context_length_exceeded",
                        "This model's maximum context length is 8000 tokens. However, your messages resulted in 8600 tokens.",
                        when=has_tools,
                    ),
                    ChatReply(text="It holds README.md and main.py.", when=has_tools),
                ),
                fails=True,  # OpenCode answers, and still exits 1 for the refused call
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
                                {"description": "Find hello", "prompt": SUB_TASK, "subagent_type": "general"},
                            ),
                        ),
                        when=is_parent,
                    ),
                    ChatReply(tool_calls=(("grep", {"pattern": "hello"}),), when=is_sub),
                    ChatReply(text="main.py prints hello.", when=is_sub),
                    ChatReply(text="The sub-agent found it: main.py prints hello.", when=is_parent),
                ),
            ),
            Turn(
                "Thanks. What else is in the repository?",
                (
                    ChatReply(
                        tool_calls=(("bash", {"command": "ls", "description": "List"}),), when=is_parent
                    ),
                ),
            ),
        ],
    }


#: The sub-agent's task in the subagent scenario: its calls are told from the parent's by it.
SUB_TASK = "Find the file that prints hello."
#: Model limits per app and scenario (``models.<id>.limit``).
#: Kilo's prompts are ~5k tokens longer than OpenCode's; both compact after the third call of
#: ``compact`` (the server counts characters / 4, so the thresholds sit between calls 2 and 3).
LIMITS: dict[tuple[str, str], dict[str, int]] = {
    ("opencode", "compact"): {"context": 10_700, "output": 2_000},
    ("kilo", "compact"): {"context": 15_745, "output": 2_000},
}


def sent_text(request: RecordedRequest) -> str:
    return json.dumps((request.body or {}).get("messages", [])[1:])


def is_sub(request: RecordedRequest) -> bool:
    return SUB_TASK in sent_text(request) and "task" not in sent_text(request)


def has_tools(request: RecordedRequest) -> bool:
    """A call of the agent (a compaction's summary call is sent no tools)."""
    return bool((request.body or {}).get("tools"))


def is_parent(request: RecordedRequest) -> bool:
    return not is_sub(request)


def config(base_url: str, limit: dict[str, int] | None = None) -> dict[str, object]:
    return {
        "$schema": "https://opencode.ai/config.json",
        "provider": {
            "local": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "Scripted",
                "options": {"baseURL": f"{base_url}/v1", "apiKey": "scripted"},
                "models": {"gpt-4o": {"name": "gpt-4o", **({"limit": limit} if limit else {})}},
            }
        },
        "model": MODEL,
        "autoupdate": False,
        "share": "disabled",
    }


def run_opencode(
    name: str, out: Path = FIXTURES, *, scratch: Path = SCRATCH, app: App = APPS["opencode"]
) -> Path:
    """Run scenario ``name`` with the real CLI; returns the fixture folder written."""
    binary = npm_bin(app.name)
    if binary is None:
        raise SystemExit(f"{app.name} is not installed: python -m bench.peers install")
    workspace = make_workspace(f"{app.name}-{name}", scratch)
    turns = scenarios(workspace.repo)[name]
    server = chat_server(workspace)
    settings = workspace.home / ".config" / app.name / app.config_name
    settings.parent.mkdir(parents=True)
    session_id = None
    with server:
        settings.write_text(
            json.dumps(config(server.base_url, LIMITS.get((app.name, name))), indent=1), encoding="utf-8"
        )
        quiet = (
            "DISABLE_AUTOUPDATE",
            "DISABLE_MODELS_FETCH",
            "DISABLE_LSP_DOWNLOAD",
            "DISABLE_DEFAULT_PLUGINS",
        )
        env = base_env(workspace, **{f"{app.env_prefix}_{flag}": "1" for flag in quiet})
        for turn in turns:
            server.queue(*turn.replies)
            cmd = [str(binary), "run", "--pure", "--auto", "--format", "json", "-m", MODEL]
            cmd += ["--title", "Scripted run"] if session_id is None else ["--session", session_id]
            stdout = run_cli([*cmd, turn.prompt], workspace, env, check=not turn.fails)
            session_id = session_id or _session_id(stdout)
        leftover = server.pending
    if leftover:
        raise RuntimeError(f"{app.name} {name}: {len(leftover)} scripted replies were never asked for")
    target = fresh_target(out / app.name / name)
    keep_database(workspace, target, app)
    keep_config(settings, target, app)
    keep_server_side(server, workspace, target)
    return target


def _session_id(stdout: str) -> str:
    for line in stdout.splitlines():
        if line.startswith("{"):
            found = json.loads(line).get("sessionID")
            if found:
                return found
    raise RuntimeError(f"opencode run printed no sessionID: {stdout[-500:]}")


def keep_config(settings: Path, target: Path, app: App) -> Path:
    """The app's config as the run used it, beside its database as XDG folders sit side by side
    (``<target>/config/<app>/`` by ``<target>/data/<app>/``: where the importer looks for a copied
    database's model limits, engine.importers.formats.opencode.config)."""
    kept = target / "config" / app.name / app.config_name
    kept.parent.mkdir(parents=True)
    shutil.copyfile(settings, kept)
    return kept


def keep_database(workspace: Workspace, target: Path, app: App) -> Path:
    """The app's database, compacted into the fixture (its write-ahead log folded in)."""
    source = workspace.home / ".local" / "share" / app.database
    kept = target / "data" / app.database
    kept.parent.mkdir(parents=True)
    with sqlite3.connect(source) as conn:
        conn.execute("VACUUM INTO ?", (str(kept),))
    conn.close()
    return repack(kept)


#: The fixture's page size: the same rows in small pages (most of OpenCode's ~30 tables are empty,
#: and each table and index takes a page: 4 KB pages make a 300 KB file of a few KB of rows).
FIXTURE_PAGE_SIZE = 512


def repack(database: Path) -> Path:
    """Rewrite ``database`` with small pages and no write-ahead log (its rows unchanged)."""
    conn = sqlite3.connect(database)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
        conn.execute(f"PRAGMA page_size={FIXTURE_PAGE_SIZE}")
        conn.execute("VACUUM")
    finally:
        conn.close()
    return database


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--agent", choices=sorted(APPS), action="append", help="only these CLIs (default: both)"
    )
    parser.add_argument("--scenario", action="append", help="run only these scenarios")
    parser.add_argument("--out", type=Path, default=FIXTURES)
    parser.add_argument(
        "--scratch", type=Path, default=SCRATCH, help="where the scratch HOME and repository go"
    )
    args = parser.parse_args(argv)
    for agent in args.agent or sorted(APPS):
        for name in args.scenario or list(scenarios(Path("/repo"))):
            print(agent, name, "->", run_opencode(name, args.out, scratch=args.scratch, app=APPS[agent]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
