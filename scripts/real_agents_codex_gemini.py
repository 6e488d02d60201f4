"""Codex CLI and Gemini CLI fixtures: run the real clients offline against the scripted model
server, then keep what they wrote (rollout / chat files) beside the server's request log.

    python scripts/real_agents_codex_gemini.py [--only codex|gemini] [--scenario NAME] [--out tests/fixtures/real_agents]

Every run uses a scratch HOME, CODEX_HOME and repository under /tmp; nothing touches a user folder.
Scenarios: Codex tools-resume, auto-compact, subagents, subagent-fork, goal-websearch, failed-calls;
Gemini CLI tools-resume, compression, subagents (tests/fixtures/real_agents/README-codex-gemini.md).
Each keeps what the CLI wrote, the server's request log (tool definitions once, in ``_shapes/``),
the usage it answered (``answers.json``) and the agent's own settings where a scenario sets some.
"""

from __future__ import annotations

import argparse
import fcntl
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.peers import agents_bin  # noqa: E402
from tests.model_server import gemini as gemini_api  # noqa: E402
from tests.model_server import openai_responses  # noqa: E402
from tests.model_server.core import read_log  # noqa: E402
from tests.model_server.fixtures import store_request_log  # noqa: E402
from tests.model_server.openai_responses import When  # noqa: E402

AGENTS_BIN = agents_bin()
OUT = ROOT / "tests" / "fixtures" / "real_agents"
SCRATCH = Path("/tmp/ctxdesk-real-agents")
from tests.model_server.core import ScriptedServer  # noqa: E402

CODEX_SCENARIOS: dict[str, list[tuple[str, list[Any]]]] = {
    # (prompt, replies for the calls of that run); runs after the first resume the same session.
    "tools-resume": [
        (
            "Look at this repository, then add a usage line to README.md.",
            [
                [
                    {"type": "reasoning", "summary": "Listing the files and reading the README first."},
                    {"type": "function_call", "name": "exec_command", "arguments": {"cmd": "ls -la"}},
                    {"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}},
                ],
                [
                    {
                        "type": "custom_tool_call",
                        "name": "apply_patch",
                        "input": "*** Begin Patch\n*** Update File: README.md\n@@\n hello\n+Usage: run `make test`.\n"
                        "*** End Patch\n",
                    }
                ],
                [{"type": "message", "text": "I added a usage line to README.md."}],
            ],
        ),
        (
            "Show me the diff.",
            [
                [{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "git diff"}}],
                [
                    {"type": "reasoning", "summary": "The diff has one added line."},
                    {"type": "message", "text": "The diff adds one line: Usage: run `make test`."},
                ],
            ],
        ),
    ],
}


def codex_root_agent(request: Any) -> bool:
    """A request of the main agent (Codex names the agent in its turn metadata header)."""
    return '"agent_name":"/root"' in request.headers.get("x-codex-turn-metadata", "")


def codex_sub_agent(request: Any) -> bool:
    return not codex_root_agent(request)


CODEX_SCENARIOS["auto-compact"] = [
    # The first reply reports 30,000 more prompt tokens (as cache reads): past the 20,000 limit,
    # Codex compacts mid-turn (its summary prompt, then the replacement history) and goes on.
    (
        "Look at this repository, then add a usage line to README.md.",
        [
            {
                "output": [{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}}],
                "pad": 30_000,
            },
            [{"type": "message", "text": "SUMMARY: the user wants a usage line in README.md, which holds `hello`."}],
            [
                {
                    "type": "custom_tool_call",
                    "name": "apply_patch",
                    "input": "*** Begin Patch\n*** Update File: README.md\n@@\n hello\n+Usage: run `make test`.\n"
                    "*** End Patch\n",
                }
            ],
            [{"type": "message", "text": "I added a usage line to README.md."}],
        ],
    ),
    ("Show me the diff.", [[{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "git diff"}}],
                           [{"type": "message", "text": "One line was added."}]]),
]  # fmt: skip

CODEX_SCENARIOS["subagents"] = [
    # multi_agent_v2: the main agent spawns /root/counter (its own rollout, parent_thread_id) and
    # waits for it; replies go to the agent that asks (by the turn metadata's agent_name).
    (
        "Count the files in this repository with a helper agent.",
        [
            When(
                [{"type": "function_call", "namespace": "collaboration", "name": "spawn_agent",
                  "arguments": {"task_name": "counter", "message": "Count the files in the repository.",
                                "fork_turns": "none"}}],
                codex_root_agent,
            ),
            When([{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "ls | wc -l"}}], codex_sub_agent),
            When([{"type": "message", "text": "There are 2 files."}], codex_sub_agent),
            When(
                [{"type": "function_call", "namespace": "collaboration", "name": "wait_agent",
                  "arguments": {"timeout_ms": 20000}}],
                codex_root_agent,
            ),
            When([{"type": "message", "text": "The helper counted 2 files."}], codex_root_agent),
        ],
    )
]  # fmt: skip

CODEX_SCENARIOS["subagent-fork"] = [
    # spawn_agent with the default fork_turns ("all"): the sub-agent's rollout copies its parent's
    # history (a second session_meta, the parent's items, a turn_aborted) and Codex sends the
    # unanswered spawn call with the output "aborted" (not in either rollout).
    (
        "Read the README, then have a helper count the files.",
        [
            When([{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}}], codex_root_agent),
            When(
                [{"type": "function_call", "namespace": "collaboration", "name": "spawn_agent",
                  "arguments": {"task_name": "counter", "message": "Count the files in the repository."}}],
                codex_root_agent,
            ),
            When([{"type": "message", "text": "There are 2 files."}], codex_sub_agent),
            When(
                [{"type": "function_call", "namespace": "collaboration", "name": "wait_agent",
                  "arguments": {"timeout_ms": 20000}}],
                codex_root_agent,
            ),
            When([{"type": "message", "text": "The README says hello; the helper counted 2 files."}], codex_root_agent),
        ],
    )
]  # fmt: skip

CODEX_SCENARIOS["goal-websearch"] = [
    # create_goal answers with a second output item that has no call_id (goal_objective); a
    # web_search_call the model made (sent with an empty id; Codex writes its own id).
    (
        "Set a goal to add a usage line, then search the web for make test conventions.",
        [
            [{"type": "function_call", "name": "create_goal", "arguments": {"objective": "Add a usage line to README.md"}}],
            [
                {"type": "raw", "item": {"type": "web_search_call", "id": "", "status": "completed",
                                         "action": {"type": "search", "query": "make test conventions"}}},
                {"type": "message", "text": "I set the goal and searched: `make test` is the usual entry point."},
            ],
        ],
    )
]  # fmt: skip

CODEX_SCENARIOS["failed-calls"] = [
    # A 400 context_length_exceeded ends the first turn (Codex logs it and marks its window full);
    # the resumed run compacts first (summary prompt), then answers; the third run gets only 500s
    # (Codex retries, then gives up and logs the error).
    (
        "Read the README.",
        [
            [{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}}],
            {"error": {"status": 400, "code": "context_length_exceeded", "type": "invalid_request_error",
                       "message": "Your input exceeds the context window of this model. Please adjust your input "
                       "and try again."}},
        ],
    ),
    (
        "Try again, briefly.",
        [
            [{"type": "message", "text": "SUMMARY: the user asked to read README.md; it holds `hello`."}],
            [{"type": "message", "text": "The README says hello."}],
        ],
    ),
    ("And once more.", []),
]  # fmt: skip

#: Extra config.toml lines per scenario.
CODEX_CONFIG: dict[str, str] = {
    "auto-compact": "model_context_window = 64000\nmodel_auto_compact_token_limit = 20000\n",
    "subagents": "\n[features]\nmulti_agent_v2 = true\n",
    "subagent-fork": "\n[features]\nmulti_agent_v2 = true\n",
}
#: Extra [model_providers.local] lines per scenario (fewer retries: a smaller request log).
CODEX_PROVIDER_CONFIG: dict[str, str] = {"failed-calls": "request_max_retries = 1\nstream_max_retries = 1\n"}
#: Runs that end in an error (the CLI exits non-zero).
CODEX_FAILING_RUNS = {("failed-calls", 0), ("failed-calls", 2)}

GEMINI_SCENARIOS: dict[str, list[tuple[str, list[Any]]]] = {
    "tools-resume": [
        (
            "Look at this repository, then add a usage line to README.md.",
            [
                [
                    {"thought": "**Exploring** I will list the directory and read the README together."},
                    {"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}},
                    {"functionCall": {"name": "read_file", "args": {"file_path": "README.md"}}},
                ],
                [
                    {
                        "functionCall": {
                            "name": "replace",
                            "args": {
                                "file_path": "README.md",
                                "old_string": "hello\n",
                                "new_string": "hello\nUsage: run `make test`.\n",
                                "instruction": "Add a usage line.",
                            },
                        }
                    }
                ],
                ["I added a usage line to README.md."],
            ],
        ),
        (
            "Show me the diff.",
            [
                [
                    {
                        "functionCall": {
                            "name": "run_shell_command",
                            "args": {"command": "git diff", "description": "diff"},
                        }
                    }
                ],
                [{"thought": "One added line."}, {"text": "The diff adds one line: Usage: run `make test`."}],
            ],
        ),
    ],
}


GEMINI_SCENARIOS["compression"] = [
    # model.compressionThreshold = 0.001 (of a 1,048,576-token window): at the second run, Gemini CLI
    # compresses mid-turn (two side calls: the <state_snapshot> and its verification) and rewrites
    # the chat as snapshot + "Got it" + the turn in progress; the third run resumes from that.
    ("Read the README.", [[{"functionCall": {"name": "read_file", "args": {"file_path": "README.md"}}}],
                          ["It says hello."]]),
    ("Now list the files.", [[{"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}}],
                             ["Two files."]]),
    ("Thanks, and the diff?", [["No diff yet."]]),
]  # fmt: skip

GEMINI_SCENARIOS["subagents"] = [
    # invoke_agent starts codebase_investigator: its chat is chats/<session id>/<agent id>.jsonl
    # (kind "subagent"); it ends with complete_task; the parent's tool call names its agentId.
    (
        "Investigate the codebase with a helper agent.",
        [
            [{"functionCall": {"name": "invoke_agent", "args": {
                "agent_name": "codebase_investigator",
                "prompt": "List the files in the repository and say what they are."}}}],
            [{"functionCall": {"name": "list_directory", "args": {"dir_path": "."}}}],
            [{"functionCall": {"name": "complete_task", "args": {"report": {
                "SummaryOfFindings": "Two files: README.md (a greeting) and main.py (prints hello).",
                "ExplorationTrace": ["list_directory ."],
                "RelevantLocations": [{"FilePath": "main.py", "Reasoning": "the program", "KeySymbols": []}]}}}}],
            ["The helper found two files: README.md and main.py."],
        ],
    )
]  # fmt: skip

#: settings.json keys per scenario (besides API-key auth).
GEMINI_SETTINGS: dict[str, dict[str, Any]] = {"compression": {"model": {"compressionThreshold": 0.001}}}


def scratch_repo(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    (repo / "README.md").write_text("hello\n", encoding="utf-8")
    (repo / "main.py").write_text('print("hello")\n', encoding="utf-8")
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    return repo


def _run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 180, check: bool = True) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )
    if check and done.returncode != 0:
        raise RuntimeError(f"{cmd[0]} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def one_run_at_a_time(agent: str) -> Callable[[Callable[..., Path]], Callable[..., Path]]:
    """A scenario's runs take turns on this machine: its scratch folder is fixed (scratch_root), so
    a second process running the same scenario at once (another test session) would overwrite the
    first one's HOME, chats and request log; it waits for the first to finish instead."""

    def wrap(run: Callable[..., Path]) -> Callable[..., Path]:
        @functools.wraps(run)
        def locked(name: str, *args: Any, **kwargs: Any) -> Path:
            SCRATCH.mkdir(parents=True, exist_ok=True)
            with (SCRATCH / f"{agent}-{name}.lock").open("w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                return run(name, *args, **kwargs)

        return locked

    return wrap


@one_run_at_a_time("codex")
def run_codex(
    name: str,
    runs: list[tuple[str, list[Any]]],
    out: Path,
    *,
    model: str = "gpt-5.5",
    codex: Path | None = None,
    config: str | None = None,
) -> Path:
    """Run ``runs`` with ``codex`` (the installed one by default) and keep what it wrote under
    ``out/codex/name``; ``config``: the scenario's own config.toml lines (default: CODEX_CONFIG's)."""
    config = CODEX_CONFIG.get(name) if config is None else config
    root = scratch_root(f"codex-{name}")
    home, codex_home = root / "home", root / "codex"
    home.mkdir()
    codex_home.mkdir()
    repo = scratch_repo(root)
    log = root / "requests.jsonl"
    server = openai_responses.install(ScriptedServer(log_path=log))
    with server:
        (codex_home / "config.toml").write_text(
            f'model = "{model}"\nmodel_provider = "local"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n'
            + (config or "")
            + '\n[model_providers.local]\nname = "local"\n'
            f'base_url = "{server.base_url}/v1"\nwire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n'
            + CODEX_PROVIDER_CONFIG.get(name, ""),
            encoding="utf-8",
        )
        env = {
            "PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home),
            "LOCAL_API_KEY": "scripted", "NO_COLOR": "1",
        }  # fmt: skip
        session_id = None
        for n, (prompt, replies) in enumerate(runs):
            server.queue(*replies)
            args = (
                ["exec", "--json", prompt]
                if session_id is None
                else ["exec", "--json", "resume", session_id, prompt]
            )
            failing = (name, n) in CODEX_FAILING_RUNS
            stdout = _run([str(codex or AGENTS_BIN / "codex"), *args], cwd=repo, env=env, check=not failing)
            for line in stdout.splitlines():
                if line.startswith("{") and json.loads(line).get("type") == "thread.started":
                    session_id = json.loads(line)["thread_id"]
        if server.pending:
            raise RuntimeError(f"codex {name}: {len(server.pending)} scripted replies were not asked for")
        answers = openai_responses.answered_usages(server)
    config = (codex_home / "config.toml").read_text(encoding="utf-8")
    rollouts = sorted((codex_home / "sessions").rglob("rollout-*.jsonl"))
    target = out / "codex" / name
    _reset(target)
    for rollout in rollouts:
        relative = rollout.relative_to(codex_home)
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text(_scrub(rollout.read_text(encoding="utf-8"), root), encoding="utf-8")
    store_request_log(list(read_log(log)), target)  # tool definitions kept once, in ../_shapes
    _write_answers(target, answers)
    if config or name in CODEX_PROVIDER_CONFIG:  # the agent's own settings (the rollout does not record them)
        (target / "config.toml").write_text(
            re.sub(r"127\.0\.0\.1:\d+", "127.0.0.1:PORT", config), encoding="utf-8"
        )
    shutil.rmtree(root)
    return target


def _write_answers(target: Path, answers: dict[int, dict[str, Any]]) -> None:
    """The usage the server answered to each request (by its seq in requests.jsonl)."""
    (target / "answers.json").write_text(
        json.dumps({str(k): v for k, v in sorted(answers.items())}, indent=1) + "\n", encoding="utf-8"
    )


@one_run_at_a_time("gemini")
def run_gemini(name: str, runs: list[tuple[str, list[Any]]], out: Path) -> Path:
    root = scratch_root(f"gemini-{name}")
    home = root / "home"
    (home / ".gemini").mkdir(parents=True)
    settings = {"security": {"auth": {"selectedType": "gemini-api-key"}}, **GEMINI_SETTINGS.get(name, {})}
    (home / ".gemini" / "settings.json").write_text(json.dumps(settings), encoding="utf-8")
    repo = scratch_repo(root)
    log = root / "requests.jsonl"
    server = gemini_api.install(ScriptedServer(log_path=log))
    with server:
        env = {
            "PATH": os.environ["PATH"], "HOME": str(home), "GOOGLE_GEMINI_BASE_URL": server.base_url,
            "GEMINI_API_KEY": "scripted", "GEMINI_CLI_TRUST_WORKSPACE": "true", "NO_COLOR": "1",
            "GEMINI_TELEMETRY_ENABLED": "false",
        }  # fmt: skip
        session_id = None
        for prompt, replies in runs:
            server.queue(*replies)
            args = ["-p", prompt, "-o", "json", "--yolo"]
            if session_id is not None:
                args += ["--resume", session_id]
            stdout = _run([str(AGENTS_BIN / "gemini"), *args], cwd=repo, env=env)
            start = stdout.find("{")
            session_id = session_id or json.loads(stdout[start:]).get("session_id")
        if server.pending:
            raise RuntimeError(f"gemini {name}: {len(server.pending)} scripted replies were not asked for")
        answers = gemini_api.answered_usages(server)
    chats = sorted(p for p in (home / ".gemini" / "tmp").rglob("chats/**/*.json*") if p.is_file())
    target = out / "gemini" / name
    _reset(target)
    for chat in chats:
        relative = chat.relative_to(home / ".gemini")
        (target / relative).parent.mkdir(parents=True, exist_ok=True)
        (target / relative).write_text(_scrub(chat.read_text(encoding="utf-8"), root), encoding="utf-8")
    if name in GEMINI_SETTINGS:  # the agent's own settings (the chat does not record them)
        (target / "settings.json").write_text(json.dumps(settings, indent=1) + "\n", encoding="utf-8")
    store_request_log(list(read_log(log)), target)  # tool declarations kept once, in ../_shapes
    _write_answers(target, answers)
    shutil.rmtree(root)
    return target


def scratch_root(name: str) -> Path:
    """A fixed scratch folder per scenario (recreated), so paths in the files and in the request
    log are the same on every run and the server's usage (from request sizes) can be recomputed."""
    root = SCRATCH / name
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    return root


def _reset(target: Path) -> None:
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)


def _scrub(text: str, root: Path) -> str:
    """Files are kept as written (the scratch folder's path is fixed)."""
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", choices=("codex", "gemini"))
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--scenario", help="run only this scenario")
    args = parser.parse_args(argv)
    if args.only in (None, "codex"):
        for name, runs in CODEX_SCENARIOS.items():
            if args.scenario and name != args.scenario:
                continue
            print("codex", name, "->", run_codex(name, runs, args.out))
    if args.only in (None, "gemini"):
        for name, runs in GEMINI_SCENARIOS.items():
            if args.scenario and name != args.scenario:
                continue
            print("gemini", name, "->", run_gemini(name, runs, args.out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
