"""Run real agent CLIs offline against the scripted model server and keep what they wrote.

    python scripts/make_real_agent_fixtures.py claude-code|codex|gemini [SCENARIO ...]

One function per agent (``make_claude_code_fixtures``; other agents add theirs beside it, or in
their own module registered in ``AGENTS``). Each scenario runs the real CLI with a scratch
``HOME`` and a scratch repository under /tmp, against a ``ScriptedServer`` playing the
scenario's replies, then copies into ``tests/fixtures/real_agents/<agent>/<scenario>/``:
the agent's transcript folder as written (sessions, ``<session>/subagents/``,
``<session>/tool-results/``), the CLI's stdout per run (``runs.json``) and the server's
request log (``requests.jsonl``). The CLI is ``claude`` in ``$CTXDESK_AGENTS_BIN`` (tests/real_agents.py;
the fixtures are written by Claude Code 2.1.330, which records each request in the transcript as
``api-request-shape`` / ``api-request-blob`` / ``api-request`` lines). Auto-compaction at a
threshold needs ``--autocompact <window>`` (scenario compact_auto: a reply reports a prompt near the
window); after a 400 "prompt is too long" it compacts reactively (scenario compact_reactive). In the log, the request bodies' ``system`` and ``tools``
values are stored once under ``_shapes/<sha256>.json`` and replaced by ``{"$shape": sha}``
(``model_server.fixtures.load_request_log`` restores the exact bodies): they are the same ~100 KB in every call.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

from model_server import ScriptedServer  # noqa: E402
from model_server import anthropic as A  # noqa: E402
from model_server.fixtures import load_request_log, store_request_log  # noqa: E402
from real_agents import agent_bin  # noqa: E402

FIXTURES = ROOT / "tests" / "fixtures" / "real_agents"
SCRATCH = Path("/tmp/ctxdesk-real-agents")
CLAUDE_MODEL = "claude-sonnet-4-5"
#: Claude Code's smallest auto-compact window (``--autocompact`` takes at least 100k tokens).
AUTOCOMPACT = ("--autocompact", "100000")
#: Threshold compaction over the model's whole window, lowered to a share of it by the user's setting
#: (``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``; without ``--autocompact``, ``-p`` runs compact only after a 400).
AUTOCOMPACT_FULL = ("--autocompact", "200000")
AUTOCOMPACT_PCT = {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}
#: What a user asks a manual compaction to keep (``/compact <instructions>``).
COMPACT_INSTRUCTIONS = "Keep the rule about the public API and every file name."


# -- Claude Code -----------------------------------------------------------------------------
@dataclass
class Run:
    """One CLI invocation: a prompt, optionally resuming the scenario's session."""

    prompt: str
    resume: bool = False
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    #: What changes in the repository before this run (a file edited behind the agent's back).
    before: Callable[[Path], None] | None = None


@dataclass
class Scenario:
    name: str
    runs: list[Run]
    replies: Callable[[Path], list[Any]]  # repo path -> scripted replies
    setup: Callable[[Path], None] = lambda repo: None
    default: Any = None


def _is_main(request: Any) -> bool:
    """A call of the main agent: no sub-agent task in its first message, and no compaction."""
    return not _is_sub(request) and not _is_compaction(request)


def _is_sub(request: Any) -> bool:
    """A sub-agent's call: its first user message holds the task the main agent gave it."""
    return "SUBTASK:" in A.first_user_text(request)


def _is_compaction(request: Any) -> bool:
    return "summary" in A.last_user_text(request).lower() and "<analysis>" in A.last_user_text(request)


def _files(repo: Path) -> None:
    (repo / "notes.md").write_text("# Notes\nThe parser must keep the public API.\n", encoding="utf-8")
    (repo / "app.py").write_text("def main():\n    return 42\n", encoding="utf-8")
    (repo / "util.py").write_text("def helper(x):\n    return x * 2\n", encoding="utf-8")


#: Project hooks whose output Claude Code adds to what the model reads: context on every prompt,
#: and context after each Read (folded into the tool result).
HOOKS = {
    "hooks": {
        "UserPromptSubmit": [
            {
                "hooks": [
                    {"type": "command", "command": "echo 'Hook context: the release is frozen this week.'"}
                ]
            }
        ],
        "PostToolUse": [
            {
                "matcher": "Read",
                "hooks": [
                    {
                        "type": "command",
                        "command": 'echo \'{"hookSpecificOutput": {"hookEventName": "PostToolUse", '
                        '"additionalContext": "Hook: app.py is owned by the API team."}}\'',
                    }
                ],
            }
        ],
    }
}


def _files_and_hooks(repo: Path) -> None:
    _files(repo)
    (repo / ".claude").mkdir()
    (repo / ".claude" / "settings.json").write_text(json.dumps(HOOKS, indent=1), encoding="utf-8")


def _edit_app(repo: Path) -> None:
    (repo / "app.py").write_text("def main():\n    return 43\n", encoding="utf-8")


def _main(*replies: A.Reply) -> list[A.Reply]:
    return [A.Reply(**{**r.__dict__, "when": _is_main}) for r in replies]


def _sub(*replies: A.Reply) -> list[A.Reply]:
    return [A.Reply(**{**r.__dict__, "when": _is_sub}) for r in replies]


SUMMARY = A.text(
    "<analysis>The user asked to inspect app.py and util.py.</analysis>\n<summary>\n1. Primary Request: inspect "
    "app.py and util.py; never change the public API.\n2. Files: app.py returns 42; util.py doubles x.\n"
    "3. Pending: none.\n</summary>",
    when=lambda r: _is_compaction(r),
)


def _scenarios() -> dict[str, Scenario]:
    def parallel(repo: Path) -> list[Any]:
        return _main(
            A.tool_calls(
                ("Read", {"file_path": str(repo / "app.py")}),
                ("Read", {"file_path": str(repo / "util.py")}),
                ("Bash", {"command": "ls", "description": "List files"}),
            ),
            A.text("app.py returns 42, util.py doubles its input, and the folder has three files."),
        )

    def resume(repo: Path) -> list[Any]:
        return _main(
            A.tool_calls(("Bash", {"command": "wc -l app.py", "description": "Count lines"})),
            A.text("app.py has 2 lines."),
            A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
            A.text("util.py defines helper(x), which doubles x."),
        )

    def sub_foreground(repo: Path) -> list[Any]:
        return [
            *_main(
                A.tool_calls(
                    (
                        "Agent",
                        {
                            "description": "Inspect util.py",
                            "prompt": "SUBTASK: read util.py and say what helper does.",
                            "subagent_type": "general-purpose",
                            "run_in_background": False,
                        },
                    )
                ),
                A.text("The sub-agent found that helper doubles its input."),
            ),
            *_sub(
                A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
                A.text("helper(x) returns x * 2."),
            ),
        ]

    def sub_background(repo: Path) -> list[Any]:
        return [
            *_main(
                A.tool_calls(
                    (
                        "Agent",
                        {
                            "description": "Inspect app.py",
                            "prompt": "SUBTASK: read app.py and say what main returns.",
                            "subagent_type": "general-purpose",
                            "run_in_background": True,
                        },
                    )
                ),
                A.text("The sub-agent is running in the background; I will report when it finishes."),
                A.text("The background agent reports that main returns 42."),
            ),
            *_sub(
                A.tool_calls(("Read", {"file_path": str(repo / "app.py")}), delay=1.0),
                A.text("main() returns 42."),
            ),
        ]

    def thinking(repo: Path) -> list[Any]:
        return _main(
            A.reply(
                A.thinking_block("The user wants app.py; reading it first is the cheapest way to know."),
                A.tool_use_block("Read", {"file_path": str(repo / "app.py")}),
            ),
            A.reply(
                A.thinking_block("It returns 42: a constant. Say so."), "main() returns the constant 42."
            ),
            A.reply(
                A.thinking_block("Second turn: util.py now; the previous turn's thinking is history."),
                A.tool_use_block("Read", {"file_path": str(repo / "util.py")}),
            ),
            A.reply(A.thinking_block("helper doubles x."), "helper(x) returns x * 2."),
        )

    def large_output(repo: Path) -> list[Any]:
        return _main(
            A.tool_calls(("Bash", {"command": "seq 1 36000", "description": "Print 36000 numbers"})),
            A.text("The command printed the numbers 1 to 36000 (about 190 KB), saved beside the session."),
        )

    def compact_manual(repo: Path) -> list[Any]:
        return [
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
                A.text("app.py returns 42."),
                A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
                A.text("util.py doubles x."),
            ),
            SUMMARY,
            *_main(A.text("After the compaction: app.py returns 42 and util.py doubles x.")),
        ]

    def compact_auto(repo: Path) -> list[Any]:
        near_window = {
            "input_tokens": 3,
            "cache_creation_input_tokens": 2_000,
            "cache_read_input_tokens": 93_000,
        }
        return [
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
                A.text("app.py returns 42.", usage=near_window),
            ),
            SUMMARY,
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
                A.text("util.py doubles x; app.py returned 42 before the compaction."),
            ),
        ]

    def harness_text(repo: Path) -> list[Any]:
        return _main(
            A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
            A.text("app.py returns 42."),
            A.text("app.py changed on disk: main() now returns 43."),
        )

    def compact_auto_pct(repo: Path) -> list[Any]:
        # 120,000 of the 200,000 window: past a 50% auto-compact threshold, below the default one
        past_half = {
            "input_tokens": 3,
            "cache_creation_input_tokens": 2_000,
            "cache_read_input_tokens": 118_000,
        }
        return [
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
                A.text("app.py returns 42.", usage=past_half),
            ),
            SUMMARY,
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
                A.text("util.py doubles x; app.py returned 42 before the compaction."),
            ),
        ]

    def compact_reactive(repo: Path) -> list[Any]:
        return [
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
                A.text("app.py returns 42."),
            ),
            A.prompt_too_long(when=_is_main),
            SUMMARY,
            *_main(
                A.tool_calls(("Read", {"file_path": str(repo / "util.py")})),
                A.text("util.py doubles x; app.py returned 42 before the compaction."),
            ),
        ]

    return {
        s.name: s
        for s in [
            Scenario(
                "parallel_tools",
                [Run("Read app.py and util.py and list the folder, in parallel.")],
                parallel,
                _files,
            ),
            Scenario(
                "resume",
                [Run("How many lines has app.py?"), Run("And what does util.py define?", resume=True)],
                resume,
                _files,
            ),
            Scenario(
                "subagent_foreground",
                [Run("Use a general-purpose sub-agent to inspect util.py, and wait for it.")],
                sub_foreground,
                _files,
            ),
            Scenario(
                "subagent_background",
                [Run("Start a background sub-agent to inspect app.py, and tell me what it finds.")],
                sub_background,
                _files,
            ),
            Scenario(
                "thinking",
                [Run("What does app.py return? Think first."), Run("And util.py? Think first.", resume=True)],
                thinking,
                _files,
            ),
            Scenario(
                "large_output", [Run("Run seq 1 36000 and tell me what it printed.")], large_output, _files
            ),
            Scenario(
                "compact_manual",
                [
                    Run("What does app.py return?"),
                    Run("And util.py?", resume=True),
                    Run("/compact", resume=True),
                    Run("Summarise what we know.", resume=True),
                ],
                compact_manual,
                _files,
            ),
            Scenario(
                "compact_manual_instructions",
                [
                    Run("What does app.py return?"),
                    Run("And util.py?", resume=True),
                    Run(f"/compact {COMPACT_INSTRUCTIONS}", resume=True),
                    Run("Summarise what we know.", resume=True),
                ],
                compact_manual,
                _files,
            ),
            Scenario(
                "compact_auto_pct",
                [
                    Run("What does app.py return?", args=AUTOCOMPACT_FULL, env=AUTOCOMPACT_PCT),
                    Run("Now read util.py.", resume=True, args=AUTOCOMPACT_FULL, env=AUTOCOMPACT_PCT),
                ],
                compact_auto_pct,
                _files,
            ),
            Scenario(
                "harness_text",
                [
                    Run("What does app.py return?"),
                    Run("Is app.py still the same?", resume=True, before=_edit_app),
                ],
                harness_text,
                _files_and_hooks,
            ),
            Scenario(
                "fork_session",
                [
                    Run("How many lines has app.py?"),
                    Run("And what does util.py define?", resume=True, args=("--fork-session",)),
                ],
                resume,
                _files,
            ),
            Scenario(
                "compact_auto",
                [
                    Run("What does app.py return?", args=AUTOCOMPACT),
                    Run("Now read util.py.", resume=True, args=AUTOCOMPACT),
                ],
                compact_auto,
                _files,
            ),
            Scenario(
                "compact_reactive",
                [Run("What does app.py return?"), Run("Now read util.py.", resume=True)],
                compact_reactive,
                _files,
            ),
        ]
    }


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "TERM", "TZ")}
    return {
        **keep,
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": "sk-ant-scripted-offline",
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "IS_SANDBOX": "1",
    }


@contextlib.contextmanager
def scenario_turn(name: str) -> Iterator[None]:
    """Runs of one scenario take turns on this machine: its scratch folder is fixed, so a second
    process running it at once (another test session) would overwrite the first one's HOME,
    transcripts and request log; it waits for the first to finish instead."""
    SCRATCH.mkdir(parents=True, exist_ok=True)
    with (SCRATCH / f"claude-code-{name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def scratch_workspace(name: str, setup: Callable[[Path], None]) -> tuple[Path, Path, Path, Path]:
    """A fresh scratch folder for one run: (work, HOME, repository set up and git-initialised,
    the server's log path); call it inside :func:`scenario_turn`. Other fixture scripts
    (scripts/make_why_fixtures.py) use it too."""
    work = SCRATCH / "claude-code" / name
    shutil.rmtree(work, ignore_errors=True)
    home, repo = work / "home", work / "repo"
    home.mkdir(parents=True)
    repo.mkdir()
    setup(repo)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    return work, home, repo, work / "server.jsonl"


def run_claude_scenario(scenario: Scenario, out_root: Path, *, timeout: float = 300) -> Path:
    """Run one scenario with the real CLI; returns the fixture folder written."""
    with scenario_turn(scenario.name):
        return _run_claude_scenario(scenario, out_root, timeout=timeout)


def _run_claude_scenario(scenario: Scenario, out_root: Path, *, timeout: float) -> Path:
    work, home, repo, log = scratch_workspace(scenario.name, scenario.setup)
    server = A.install(
        ScriptedServer(*scenario.replies(repo), default=A.text("OK."), log_path=log, name=scenario.name)
    )
    outputs: list[dict[str, Any]] = []
    session_id: str | None = None
    claude = agent_bin("claude")
    if claude is None:
        raise SystemExit(
            "Claude Code is not installed: set $CTXDESK_AGENTS_BIN to a node_modules/.bin holding claude"
        )
    with server:
        for run in scenario.runs:
            if run.before is not None:
                run.before(repo)
            cmd = [str(claude), "-p", run.prompt, "--output-format", "json", "--model", CLAUDE_MODEL]
            cmd += ["--dangerously-skip-permissions", *run.args]
            if run.resume and session_id:
                cmd += ["--resume", session_id]
            env = {**claude_env(home, server.base_url), **run.env}
            done = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=timeout)
            try:
                result = json.loads(done.stdout.strip().splitlines()[-1]) if done.stdout.strip() else {}
            except json.JSONDecodeError:
                result = {"stdout": done.stdout[-2000:]}
            result["exit_code"] = done.returncode
            if done.returncode != 0:
                result["stderr"] = done.stderr[-2000:]
            outputs.append({"prompt": run.prompt, "resume": run.resume, "result": result})
            session_id = result.get("session_id") or session_id
        leftover = [type(item).__name__ for item in server.pending]
    out = out_root / "claude-code" / scenario.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    projects = home / ".claude" / "projects"
    for project in projects.iterdir() if projects.is_dir() else []:
        shutil.copytree(project, out / "transcripts", dirs_exist_ok=True)
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    store_request_log(records, out)
    (out / "runs.json").write_text(
        json.dumps({"scratch": str(work), "runs": outputs, "unused_replies": leftover}, indent=1) + "\n",
        encoding="utf-8",
    )
    return out


def make_claude_code_fixtures(names: list[str] | None = None, out_root: Path = FIXTURES) -> list[Path]:
    scenarios = _scenarios()
    chosen = names or list(scenarios)
    unknown = [n for n in chosen if n not in scenarios]
    if unknown:
        raise SystemExit(
            f"unknown Claude Code scenario(s): {', '.join(unknown)}; known: {', '.join(scenarios)}"
        )
    return [run_claude_scenario(scenarios[n], out_root) for n in chosen]


def iter_fixture_sessions(scenario_dir: Path) -> Iterator[Path]:
    """Main session files of a Claude Code fixture scenario."""
    yield from sorted((scenario_dir / "transcripts").glob("*.jsonl"))


__all__ = [
    "AGENTS",
    "load_request_log",
    "make_claude_code_fixtures",
    "run_claude_scenario",
    "scratch_workspace",
]


def _other_agent(agent: str) -> Callable[[list[str] | None], list[Path]]:
    """Codex / Gemini CLI: scripts/real_agents_codex_gemini.py (the agents helper's), behind one entry point."""

    def make(names: list[str] | None) -> list[Path]:
        sys.path.insert(0, str(ROOT / "scripts"))
        import real_agents_codex_gemini as other

        for name in names or [None]:
            other.main(["--only", agent, *(["--scenario", name] if name else [])])
        folder = FIXTURES / agent
        return sorted(p for p in folder.iterdir() if p.is_dir() and (not names or p.name in names))

    return make


def _chat_agents() -> dict[str, Callable[[list[str] | None], list[Path]]]:
    """OpenCode, Kilo CLI, Aider, mini-swe-agent, Copilot CLI, Qwen Code: scripts/real_agents_chat.py."""
    sys.path.insert(0, str(ROOT / "scripts"))
    from real_agents_chat import fixture_makers

    return fixture_makers()


AGENTS: dict[str, Callable[[list[str] | None], list[Path]]] = {
    "claude-code": make_claude_code_fixtures,
    "codex": _other_agent("codex"),
    "gemini": _other_agent("gemini"),
    **_chat_agents(),
}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("agent", choices=sorted(AGENTS))
    parser.add_argument("scenarios", nargs="*")
    args = parser.parse_args(argv)
    for path in AGENTS[args.agent](args.scenarios or None):
        print(path.relative_to(ROOT))


if __name__ == "__main__":
    main()
