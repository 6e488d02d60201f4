"""Run the real Claude Code offline to the ends ``ctxdesk why`` explains, and keep what it wrote.

    python scripts/make_why_fixtures.py [SCENARIO ...]     # all when none named

Scenarios (each a folder under ``tests/fixtures/real_agents/claude-code/``, written like
scripts/make_real_agent_fixtures.py's, whose helpers this reuses):

- ``finish``: a tool call, then an answer that ends the turn (``end_turn``);
- ``max_tokens``: the reply stops at its output limit (``stop_reason: max_tokens``);
- ``refusal``: the model refuses (``stop_reason: refusal``);
- ``interrupt``: the model asks for a long Bash command and the user stops the CLI while it runs
  (SIGINT, as Ctrl-C; SIGKILL if it does not exit): a tool call left without a result;
- ``provider_error``: the server answers 500 every time (Claude Code retries ten times, then gives up).

The CLI is ``claude`` in ``$CTXDESK_AGENTS_BIN`` (tests/real_agents.py). Each folder keeps the
transcripts, the CLI's stdout per run (``runs.json``: exit code, the signal sent) and the
server's request log (``requests.jsonl``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import make_real_agent_fixtures as base
from model_server import ScriptedServer
from model_server import anthropic as A
from model_server.fixtures import store_request_log
from real_agents import agent_bin

#: Seconds to wait for the long command to start before stopping the CLI.
INTERRUPT_AFTER = 4.0


@dataclass
class WhyScenario:
    name: str
    prompt: str
    replies: Any  # repo path -> scripted replies
    interrupt_on: str | None = None  # stop the CLI once the transcript holds this text
    timeout: float = 240


def scenarios() -> dict[str, WhyScenario]:
    def finish(repo: Path) -> list[Any]:
        return [
            A.tool_calls(("Read", {"file_path": str(repo / "app.py")})),
            A.text("app.py returns 42.", stop_reason="end_turn"),
        ]

    def max_tokens(repo: Path) -> list[Any]:
        # Claude Code resumes after a cut reply ("Output token limit hit. Resume directly"): every reply is cut.
        cut = "Here is the full rewrite of app.py, line by line: def main(): # first, the"
        return [A.text(cut, stop_reason="max_tokens", usage={"output_tokens": 32_000})] * 6

    def refusal(repo: Path) -> list[Any]:
        # Claude Code continues once after a refusal ("stopped by a safety classifier"): every reply refuses.
        return [A.reply(stop_reason="refusal")] * 4

    def interrupt(repo: Path) -> list[Any]:
        wait = "python3 -c 'import time; time.sleep(120)'"  # a bare sleep is blocked by Claude Code
        return [A.tool_calls(("Bash", {"command": wait, "description": "Wait two minutes"}))]

    def provider_error(repo: Path) -> list[Any]:
        cut = A.ScriptedResponse(
            status=500,
            body={"type": "error", "error": {"type": "api_error", "message": "internal server error"}},
        )
        return [cut] * 12

    return {
        s.name: s
        for s in [
            WhyScenario("finish", "What does app.py return?", finish),
            WhyScenario("max_tokens", "Rewrite app.py in full, every line.", max_tokens),
            WhyScenario("refusal", "Explain app.py.", refusal),
            WhyScenario(
                "interrupt",
                "Wait two minutes with sleep, then tell me.",
                interrupt,
                interrupt_on="time.sleep(120)",
            ),
            WhyScenario("provider_error", "What does app.py return?", provider_error, timeout=420),
        ]
    }


def run(scenario: WhyScenario, out_root: Path = base.FIXTURES) -> Path:
    """Run one scenario with the real CLI (taking its turn on the fixed scratch folder)."""
    with base.scenario_turn(f"why-{scenario.name}"):
        return _run(scenario, out_root)


def _run(scenario: WhyScenario, out_root: Path) -> Path:
    work, home, repo, log = base.scratch_workspace(f"why-{scenario.name}", base._files)
    server = A.install(
        ScriptedServer(*scenario.replies(repo), default=A.text("OK."), log_path=log, name=scenario.name)
    )
    claude = agent_bin("claude")
    if claude is None:
        raise SystemExit(
            "Claude Code is not installed: set $CTXDESK_AGENTS_BIN to a node_modules/.bin holding claude"
        )
    cmd = [str(claude), "-p", scenario.prompt, "--output-format", "json", "--model", base.CLAUDE_MODEL]
    cmd += ["--dangerously-skip-permissions"]
    result: dict[str, Any] = {}
    with server:
        proc = subprocess.Popen(
            cmd, cwd=repo, env=base.claude_env(home, server.base_url), stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        if scenario.interrupt_on:
            result["signal"] = _interrupt(proc, home, scenario.interrupt_on)
        try:
            stdout, stderr = proc.communicate(timeout=scenario.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            result["signal"] = "SIGKILL (timeout)"
        leftover = [type(item).__name__ for item in server.pending]
    try:
        result |= json.loads(stdout.strip().splitlines()[-1]) if stdout.strip() else {}
    except json.JSONDecodeError:
        result["stdout"] = stdout[-2000:]
    result["exit_code"] = proc.returncode
    if proc.returncode:
        result["stderr"] = stderr[-2000:]
    out = out_root / "claude-code" / scenario.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    projects = home / ".claude" / "projects"
    for project in projects.iterdir() if projects.is_dir() else []:
        shutil.copytree(project, out / "transcripts", dirs_exist_ok=True)
    records = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]
    store_request_log(records, out)
    (out / "runs.json").write_text(
        json.dumps(
            {"scratch": str(work), "runs": [{"prompt": scenario.prompt, "resume": False, "result": result}],
             "unused_replies": leftover},
            indent=1,
        ) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    return out


def _interrupt(proc: subprocess.Popen[str], home: Path, needle: str) -> str:
    """Wait until the transcript holds ``needle`` (the tool call is running), then stop the CLI as a
    user's Ctrl-C does; kill it if it has not exited 20 s later."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if any(needle in p.read_text(encoding="utf-8", errors="replace") for p in home.rglob("*.jsonl")):
            break
        time.sleep(0.2)
    time.sleep(INTERRUPT_AFTER)
    if proc.poll() is not None:
        return "none (exited before)"
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=20)
        return "SIGINT"
    except subprocess.TimeoutExpired:
        proc.kill()
        return "SIGINT, then SIGKILL"


def main(argv: list[str] | None = None) -> None:
    known = scenarios()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("scenarios", nargs="*", metavar="SCENARIO", help=f"any of: {', '.join(known)}")
    args = parser.parse_args(argv)
    unknown = [n for n in args.scenarios if n not in known]
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(unknown)}; known: {', '.join(known)}")
    for name in args.scenarios or list(known):
        print(run(known[name]).relative_to(base.ROOT))


if __name__ == "__main__":
    main()
