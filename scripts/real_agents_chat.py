"""Shared steps for running an agent CLI that speaks OpenAI Chat Completions against the scripted
model server, offline: a fixed scratch folder per scenario (HOME and a git repository under /tmp),
the server playing each turn's replies, and the fixture written from what the run left.

Each agent's own script (scripts/real_agents_<agent>.py) says how to configure and run its CLI
and which of its files to keep; this module keeps the server's side: ``requests.jsonl`` (the
exact bodies, ``tools`` stored once under ``_shapes``) and ``answers.json`` (the usage answered
to each request, by the request's ``seq``).
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scripts.real_agents_codex_gemini import scratch_repo  # noqa: E402
from tests.model_server import ScriptedServer, openai_chat  # noqa: E402
from tests.model_server.fixtures import store_request_log  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "real_agents"
SCRATCH = Path("/tmp/ctxdesk-real-agents")
ANSWERS = "answers.json"


@dataclass(frozen=True)
class Turn:
    """One CLI invocation: the prompt typed, and the replies its model calls get, in order."""

    prompt: str
    replies: tuple[openai_chat.ChatReply, ...]
    fails: bool = False  # the CLI exits non-zero (a reply the provider refused)


@dataclass(frozen=True)
class Workspace:
    root: Path
    home: Path
    repo: Path

    @property
    def log(self) -> Path:
        return self.root / "server.jsonl"


def make_workspace(name: str, base: Path = SCRATCH) -> Workspace:
    """A fresh ``base/name`` with a scratch HOME and a committed git repository (README.md,
    main.py). The path is fixed per scenario, so the paths the agent writes are the same each run."""
    root = base / name
    if root.exists():
        shutil.rmtree(root)
    home = root / "home"
    home.mkdir(parents=True)
    repo = scratch_repo(root)
    return Workspace(root, home, repo)


def chat_server(workspace: Workspace) -> ScriptedServer:
    """A Chat Completions server logging to the workspace; a call past the script gets "OK."."""
    return openai_chat.install(
        ScriptedServer(default=openai_chat.chat_text("OK."), log_path=workspace.log, name=workspace.root.name)
    )


def base_env(workspace: Workspace, **extra: str) -> dict[str, str]:
    """PATH and locale from here, everything else scratch: HOME, the XDG folders, PWD."""
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TZ")}
    home = workspace.home
    return {
        **keep,
        "HOME": str(home),
        "PWD": str(workspace.repo),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "NO_COLOR": "1",
        "TERM": "dumb",
        **extra,
    }


def run_cli(
    cmd: list[str],
    workspace: Workspace,
    env: dict[str, str],
    *,
    timeout: float = 300,
    stdin: str | None = None,
    check: bool = True,
) -> str:
    """Run one CLI invocation in the repository (``stdin``: what the user types, else nothing); its
    stdout, or (``check``) an error naming the exit and stderr."""
    done = subprocess.run(
        cmd,
        cwd=workspace.repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        **({"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}),
    )
    if check and done.returncode != 0:
        raise RuntimeError(
            f"{Path(cmd[0]).name} exited {done.returncode}: {(done.stderr or done.stdout)[-2000:]}"
        )
    return done.stdout


def fresh_target(out: Path) -> Path:
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    return out


def keep_server_side(server: ScriptedServer, workspace: Workspace, target: Path) -> None:
    """The request log (shapes shared with the agent's other scenarios) and the usages answered."""
    records = [json.loads(line) for line in workspace.log.read_text(encoding="utf-8").splitlines() if line]
    store_request_log(records, target)
    answers = {str(seq): usage for seq, usage in sorted(openai_chat.answered_usages(server).items())}
    (target / ANSWERS).write_text(json.dumps(answers, indent=1) + "\n", encoding="utf-8")


def load_answers(scenario_dir: Path) -> dict[int, dict[str, Any]]:
    """``answers.json`` of a fixture scenario: the usage answered, by request seq."""
    raw = json.loads((scenario_dir / ANSWERS).read_text(encoding="utf-8"))
    return {int(seq): usage for seq, usage in raw.items()}


#: The agents whose fixtures these scripts make: (script module, its run function, keyword naming the
#: agent when one script serves two).
_SCRIPTS: dict[str, tuple[str, str, dict[str, str]]] = {
    "opencode": ("real_agents_opencode", "main", {"--agent": "opencode"}),
    "kilo": ("real_agents_opencode", "main", {"--agent": "kilo"}),
    "aider": ("real_agents_aider", "main", {}),
    "mini-swe-agent": ("real_agents_mini", "main", {}),
    "copilot": ("real_agents_copilot", "main", {}),
    "qwen": ("real_agents_qwen", "main", {}),
    "cline": ("real_agents_cline", "main", {}),
    "continue": ("real_agents_continue", "main", {}),
}


def fixture_makers() -> dict[str, Callable[[list[str] | None], list[Path]]]:
    """``agent -> make(scenario names or None)``: regenerate that agent's fixtures (every scenario
    when None) and return their folders; what scripts/make_real_agent_fixtures.py dispatches to."""

    def maker(agent: str) -> Callable[[list[str] | None], list[Path]]:
        module_name, function, fixed = _SCRIPTS[agent]

        def make(names: list[str] | None) -> list[Path]:
            here = str(Path(__file__).resolve().parent)
            if here not in sys.path:
                sys.path.insert(0, here)
            module = importlib.import_module(module_name)
            args = [arg for pair in fixed.items() for arg in pair]
            args += [arg for name in names or [] for arg in ("--scenario", name)]
            getattr(module, function)(args)
            folder = FIXTURES / agent
            return sorted(
                p
                for p in folder.iterdir()
                if p.is_dir() and not p.name.startswith("_") and (not names or p.name in names)
            )

        return make

    return {agent: maker(agent) for agent in _SCRIPTS}
