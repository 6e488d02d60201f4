"""End to end: the real Claude Code and Codex CLIs through ``ctxdesk proxy`` to the scripted server.

Each run gets a scratch HOME and repository under tmp_path. Every request the upstream
received must be recorded exactly (same JSON body), in the agent's session (Claude Code's
sub-agent in a child session), with the API key nowhere in the database. Runs only when the
CLIs are installed (``python -m bench.peers install``; under CI a missing one fails).
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from model_server import ScriptedServer
from model_server import anthropic as A
from model_server import openai_responses as R

from bench.bench_cache_policy import unmarked
from bench.peers import agents_bin
from engine.compaction.clearing import CLEARED_PREFIX
from engine.proxy import ProxyServer, Upstreams
from engine.store import SessionStore

CLAUDE = agents_bin() / "claude"
CODEX = agents_bin() / "codex"
KEY = "sk-ant-e2e-PROXYKEY-9f8e7d6c5b4a"
SUB_PROMPT = "List the files in this repository"


def scratch(tmp_path: Path) -> tuple[Path, Path]:
    home, repo = tmp_path / "home", tmp_path / "repo"
    home.mkdir()
    repo.mkdir()
    (repo / "README.md").write_text("hello\n", encoding="utf-8")
    git = ["git", "-c", "user.email=dev@example.com", "-c", "user.name=dev"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run([*git, "add", "."], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-qm", "init"], cwd=repo, check=True)
    return home, repo


def run(cmd: list[str], *, cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, stdin=subprocess.DEVNULL
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def claude_env(home: Path, base_url: str) -> dict[str, str]:
    """Claude Code's environment for an offline run against ``base_url`` from a scratch HOME."""
    return {
        "PATH": os.environ["PATH"], "HOME": str(home), "ANTHROPIC_BASE_URL": base_url,
        "ANTHROPIC_API_KEY": KEY, "DISABLE_TELEMETRY": "1", "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1", "DISABLE_ERROR_REPORTING": "1", "IS_SANDBOX": "1",
    }  # fmt: skip


def recorded_bodies(store: SessionStore) -> dict[str, list[Any]]:
    return {s.id: [r.body for r in store.list_requests(s.id, with_body=True)] for s in store.list_sessions()}


def database_bytes(path: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(path.parent.glob(path.name + "*")))


@pytest.mark.peer("claude")
def test_claude_code_through_the_proxy_records_every_request_in_its_session(tmp_path: Path) -> None:
    home, repo = scratch(tmp_path)
    is_sub = A.first_user_contains(SUB_PROMPT)
    server = A.install(ScriptedServer(default=A.text("Done.")))
    server.queue(
        A.tool_calls(("Read", {"file_path": str(repo / "README.md")}), when=A.not_(is_sub)),
        A.tool_calls(
            (
                "Agent",
                {
                    "description": "list files",
                    "prompt": SUB_PROMPT,
                    "subagent_type": "general-purpose",
                    "run_in_background": False,
                },
            ),
            when=A.not_(is_sub),
        ),
        A.tool_calls(("Bash", {"command": "ls", "description": "List files"}), when=is_sub),
        A.text("The repository holds README.md.", when=is_sub),
        A.text("README says hello; a sub-agent listed the files.", when=A.not_(is_sub)),
        A.tool_calls(
            ("Bash", {"command": "git status --short", "description": "Status"}), when=A.not_(is_sub)
        ),
        A.text("The tree is clean.", when=A.not_(is_sub)),
    )
    db = tmp_path / "proxy.db"
    with server, ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url)) as proxy:
        env = claude_env(home, proxy.base_url)
        base = [str(CLAUDE), "--output-format", "json", "--model", "claude-sonnet-4-5"]
        base.append("--dangerously-skip-permissions")
        first = json.loads(
            run([*base, "-p", "Read the README, then have a sub-agent list the files."], cwd=repo, env=env)
        )
        session_id = first["session_id"]
        second = json.loads(
            run([*base, "--resume", session_id, "-p", "Is the tree clean?"], cwd=repo, env=env)
        )
        assert second["result"] == "The tree is clean."
        assert proxy.recorder.flush()
    received = [r.body for r in server.requests]
    with SessionStore(db, read_only=True) as store:
        sessions = {s.id: s for s in store.list_sessions()}
        bodies = recorded_bodies(store)
        main_system = json.dumps(received[0]["system"])
        sub_ids = [i for i, s in sessions.items() if s.parent_session_id == session_id]
        assert len(sub_ids) == 1, sessions
        # every request the upstream got is recorded, exactly, in the right session (Claude Code's
        # bodiless HEAD / probes are recorded too, unparsed)
        parsed = [b for bs in bodies.values() for b in bs if b is not None]
        assert sorted(json.dumps(b, sort_keys=True) for b in parsed) == sorted(
            json.dumps(b, sort_keys=True) for b in received
        )
        assert all(json.dumps(b["system"]) == main_system for b in bodies[session_id] if "system" in b)
        assert bodies[sub_ids[0]] and all(json.dumps(b["system"]) != main_system for b in bodies[sub_ids[0]])
        assert all(SUB_PROMPT in json.dumps(b["messages"][0]) for b in bodies[sub_ids[0]])
        assert len(bodies[session_id]) >= 5
        # the transcript grows by new messages only: each prompt once, each answer once
        texts = [m.text for m in store.load_transcript(session_id)]
        assert sum("Is the tree clean?" in t for t in texts) == 1
        assert sum(t == "The tree is clean." for t in texts) == 1
        events = store.list_events(session_id, kind="request")
        assert events and all(e.components.system > 0 and e.components.tools > 0 for e in events)
        assert all(e.usage is not None and e.usage.prompt_tokens > 0 for e in events)
    assert KEY.encode() not in database_bytes(db)


@pytest.mark.peer("codex")
def test_codex_through_the_proxy_records_every_request_in_its_thread(tmp_path: Path) -> None:
    home, repo = scratch(tmp_path)
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    server = R.install(ScriptedServer(default=[{"type": "message", "text": "Done."}]))
    server.queue(
        [
            {"type": "reasoning", "summary": "Reading the README first."},
            {"type": "function_call", "name": "exec_command", "arguments": {"cmd": "cat README.md"}},
        ],
        [{"type": "message", "text": "The README says hello."}],
        [{"type": "function_call", "name": "exec_command", "arguments": {"cmd": "git status --short"}}],
        [{"type": "message", "text": "Clean."}],
    )
    db = tmp_path / "proxy.db"
    with server, ProxyServer(db, upstreams=Upstreams(openai=server.base_url + "/v1")) as proxy:
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "local"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n\n[model_providers.local]\nname = "local"\n'
            f'base_url = "{proxy.base_url}/v1"\nwire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n',
            encoding="utf-8",
        )
        env = {
            "PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "LOCAL_API_KEY": KEY,
            "NO_COLOR": "1",
        }  # fmt: skip
        out = run([str(CODEX), "exec", "--json", "What does the README say?"], cwd=repo, env=env)
        thread = next(
            json.loads(line)["thread_id"] for line in out.splitlines() if '"thread.started"' in line
        )
        run([str(CODEX), "exec", "--json", "resume", thread, "Is the tree clean?"], cwd=repo, env=env)
        assert proxy.recorder.flush()
    received = [r.body for r in server.requests]
    with SessionStore(db, read_only=True) as store:
        bodies = recorded_bodies(store)
        assert bodies[thread] == received  # one thread, every request, in order, exactly
        assert [s.id for s in store.list_sessions()] == [thread]
        texts = [m.text for m in store.load_transcript(thread)]
        assert sum(t == "Clean." for t in texts) == 1
        events = store.list_events(thread, kind="request")
        assert len(events) == len(received) and all(e.usage and e.components.system > 0 for e in events)
    assert KEY.encode() not in database_bytes(db)


@pytest.mark.peer("claude")
def test_claude_code_keeps_working_while_the_proxy_clears_old_tool_results(tmp_path: Path) -> None:
    home, repo = scratch(tmp_path)
    for i in range(3):
        (repo / f"f{i}.txt").write_text(f"file {i} " * 300, encoding="utf-8")
    server = A.install(ScriptedServer(default=A.text("Done.")))
    server.queue(
        *(A.tool_calls(("Read", {"file_path": str(repo / f"f{i}.txt")})) for i in range(3)),
        A.text("Read all three files."),
    )
    settings = tmp_path / "settings.toml"
    settings.write_text("[policies]\nclear_tool_results = { trigger = 0, keep = 1 }\n", encoding="utf-8")
    db = tmp_path / "proxy.db"
    ups = Upstreams(anthropic=server.base_url)
    with server, ProxyServer(db, upstreams=ups, settings_file=settings) as proxy:
        env = claude_env(home, proxy.base_url)
        cmd = [
            str(CLAUDE),
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--dangerously-skip-permissions",
        ]
        result = json.loads(
            run([*cmd, "-p", "Read f0.txt, f1.txt and f2.txt one by one."], cwd=repo, env=env)
        )
        assert result["result"] == "Read all three files."
        assert proxy.recorder.flush()
    last = server.requests[-1].body
    results = [
        json.dumps(b.get("content"))
        for m in last["messages"]
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_result"
    ]
    assert len(results) == 3
    # the engine's placeholder (in the JSON of the content: its quotes escaped)
    assert all(CLEARED_PREFIX in r and 'from \\"Read\\"' in r for r in results[:2]) and "file 2" in results[2]
    # Claude Code's own transcript still holds every result as it was
    (transcript,) = (home / ".claude" / "projects").rglob(f"{result['session_id']}.jsonl")
    text = transcript.read_text(encoding="utf-8")
    assert "file 0 file 0" in text and CLEARED_PREFIX not in text
    with SessionStore(db, read_only=True) as store:
        edits = store.list_events(result["session_id"], kind="compaction")
        assert edits and all(e.details["after_tokens"] < e.details["before_tokens"] for e in edits)


@pytest.mark.peer("claude")
def test_strict_clearing_leaves_claude_codes_warm_cache_alone_and_clears_when_it_resumes_past_expiry(
    tmp_path: Path,
) -> None:
    home, repo = scratch(tmp_path)
    for i in range(4):
        (repo / f"notes{i}.txt").write_text(f"line of notes{i}\n" * 300, encoding="utf-8")
    server = A.install(ScriptedServer(default=A.text("Done.")))
    server.queue(
        *(A.tool_calls(("Bash", {"command": f"cat notes{i}.txt", "description": f"Read notes {i}"})) for i in range(3)),
        A.text("Read three notes."),
        A.tool_calls(("Bash", {"command": "cat notes3.txt", "description": "Read notes 3"})),
        A.text("Read notes 3 too."),
    )  # fmt: skip
    settings = tmp_path / "settings.toml"
    settings.write_text(
        '[policies]\nclear_tool_results = { trigger = 3000, keep = 1, cache_aware = "strict" }\n',
        encoding="utf-8",
    )
    db = tmp_path / "proxy.db"
    now = [1_000.0]
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url), settings_file=settings) as proxy,
    ):
        proxy.controller.clock = lambda: now[0]  # the pause below passes on this clock, not the wall's
        env = claude_env(home, proxy.base_url)
        cmd = [
            str(CLAUDE),
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--dangerously-skip-permissions",
        ]
        first = json.loads(run([*cmd, "-p", "Read notes 0, 1 and 2."], cwd=repo, env=env))
        warm = len(server.requests)
        now[0] += 6 * 60  # the person reads the answer for six minutes: Anthropic's 5-minute cache expires
        second = json.loads(
            run([*cmd, "--resume", first["session_id"], "-p", "Now notes 3."], cwd=repo, env=env)
        )
        assert second["result"] == "Read notes 3 too."
        assert proxy.recorder.flush()
    sent = [json.dumps(r.body["messages"]) for r in server.requests]
    # over the trigger on every call, but nothing is cleared while the cache is warm
    assert all(CLEARED_PREFIX not in s for s in sent[:warm]) and sent[warm - 1].count("line of notes2") == 300
    # the first request after the pause clears all but the newest result; the next sends that again
    back = sent[warm]
    assert (
        back.count(f"{CLEARED_PREFIX} \\u2014 ") == 2
        and back.count('from \\"Bash\\"') == 2
        and back.count("line of notes2") == 300
    )
    resent, again = (unmarked(r.body["messages"]) for r in server.requests[warm : warm + 2])
    assert again[: len(resent)] == resent  # byte-stable from then on (cache markers aside)
    (transcript,) = (home / ".claude" / "projects").rglob(f"{first['session_id']}.jsonl")
    assert CLEARED_PREFIX not in transcript.read_text(encoding="utf-8")  # Claude Code's file untouched
    with SessionStore(db, read_only=True) as store:
        edits = store.list_events(first["session_id"], kind="compaction")
    assert [e.outcome for e in edits] == ["compacted", "kept"]
    assert "the prompt cache had expired (idle 6 min > 5 min)" in edits[0].reason


@pytest.mark.peer("claude")
def test_a_manual_compaction_of_a_live_claude_code_session_reaches_its_next_request(tmp_path: Path) -> None:
    from engine.compaction.operations import force_compact
    from engine.proxy.policy.live import SNAPSHOT_CHECK_S

    home, repo = scratch(tmp_path)
    server = A.install(ScriptedServer(default=A.text("Done.")))
    server.queue(
        A.tool_calls(("Read", {"file_path": str(repo / "README.md")})),
        A.text("The README says hello. " * 30),
        A.tool_calls(("Bash", {"command": "git log --oneline", "description": "Log"})),
        A.text("One commit: init. " * 30),
        A.text("Still here after the compaction."),
    )
    db = tmp_path / "proxy.db"
    with server, ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url)) as proxy:
        env = claude_env(home, proxy.base_url)
        cmd = [
            str(CLAUDE),
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--dangerously-skip-permissions",
        ]
        first = json.loads(run([*cmd, "-p", "What does the README say?"], cwd=repo, env=env))
        session_id = first["session_id"]
        run([*cmd, "--resume", session_id, "-p", "And the git log?"], cwd=repo, env=env)
        assert proxy.recorder.flush()
        with SessionStore(db) as store:  # what the dashboard's Compaction page applies
            report = force_compact(store, session_id, strategy="sliding_window", keep_messages=2)
        assert report.after_tokens < report.before_tokens
        time.sleep(SNAPSHOT_CHECK_S + 0.2)
        third = json.loads(
            run([*cmd, "--resume", session_id, "-p", "Are you still there?"], cwd=repo, env=env)
        )
        assert third["result"] == "Still here after the compaction."
        assert proxy.recorder.flush()
    sent = server.requests[-1].body["messages"]
    before = server.requests[-2].body["messages"]
    assert len(sent) < len(before) + 2  # the compacted history, not Claude Code's whole one
    assert "README" not in json.dumps(sent[:-1]) or len(sent) <= 4
    assert "Are you still there?" in json.dumps(sent[-1])
    (transcript,) = (home / ".claude" / "projects").rglob(f"{session_id}.jsonl")
    text = transcript.read_text(encoding="utf-8")
    assert "The README says hello." in text and "ctxdesk-summary" not in text  # Claude Code's file untouched
    with SessionStore(db, read_only=True) as store:
        live = [
            e
            for e in store.list_events(session_id, kind="compaction")
            if e.details.get("policy") == "live_compaction"
        ]
        assert live and live[-1].details["after_tokens"] < live[-1].details["before_tokens"]


@pytest.mark.peer("claude")
def test_claude_code_never_sees_the_read_result_rounds_the_proxy_serves(tmp_path: Path) -> None:
    import re

    home, repo = scratch(tmp_path)
    (repo / "build.log").write_text(
        "compiling module\n" * 800 + "ERROR-7731: link failed\n", encoding="utf-8"
    )
    server = A.install(ScriptedServer(default=A.text("Done.")))
    handler = next(h for _, p, h in server.routes if p == "/v1/messages")

    def model(srv: ScriptedServer, request: Any) -> Any:
        text = json.dumps(request.body.get("messages"))
        offered = any(t.get("name") == "read_result" for t in request.body.get("tools") or [])
        if (
            offered
            and '"name": "read_result"' not in text
            and (ref := re.search(r'ref_id=\\"(res_[0-9a-f]+)', text))
        ):
            srv.queue(A.tool_calls(("read_result", {"ref_id": ref.group(1), "pattern": "ERROR"})))
        elif '"name": "read_result"' in text:
            srv.queue(A.text(f"The build failed: {re.findall(r'ERROR-[0-9]+: link failed', text)[-1]}."))
        return handler(srv, request)

    server.routes.insert(0, ("POST", "/v1/messages", model))
    server.queue(A.tool_calls(("Read", {"file_path": str(repo / "build.log")})))
    settings = tmp_path / "settings.toml"
    settings.write_text("[policies]\noffload = { threshold_bytes = 4000 }\n", encoding="utf-8")
    db = tmp_path / "proxy.db"
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url), settings_file=settings) as proxy,
    ):
        env = claude_env(home, proxy.base_url)
        cmd = [
            str(CLAUDE),
            "--output-format",
            "json",
            "--model",
            "claude-sonnet-4-5",
            "--dangerously-skip-permissions",
        ]
        result = json.loads(run([*cmd, "-p", "Why did the build fail? Read build.log."], cwd=repo, env=env))
        assert proxy.recorder.flush()
    assert result["result"] == "The build failed: ERROR-7731: link failed."
    bodies = [r.body for r in server.requests]
    assert any("read_result" in json.dumps(b["messages"]) for b in bodies)  # the upstream saw the round
    (transcript,) = (home / ".claude" / "projects").rglob(f"{result['session_id']}.jsonl")
    assert "read_result" not in transcript.read_text(encoding="utf-8")  # Claude Code never did
    with SessionStore(db, read_only=True) as store:
        sources = [r.source for r in store.list_requests(result["session_id"])]
        assert "proxy:read_result" in sources


@pytest.mark.peer("codex")
def test_codex_keeps_working_while_the_proxy_clears_old_command_outputs(tmp_path: Path) -> None:
    home, repo = scratch(tmp_path)
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    server = R.install(ScriptedServer(default=[{"type": "message", "text": "Done."}]))
    server.queue(
        *(
            [{"type": "function_call", "name": "exec_command", "arguments": {"cmd": f"seq {i} 400"}}]
            for i in range(3)
        ),
        [{"type": "message", "text": "Counted three times."}],
    )
    settings = tmp_path / "settings.toml"
    settings.write_text("[policies]\nclear_tool_results = { trigger = 0, keep = 1 }\n", encoding="utf-8")
    db = tmp_path / "proxy.db"
    ups = Upstreams(openai=server.base_url + "/v1")
    with server, ProxyServer(db, upstreams=ups, settings_file=settings) as proxy:
        (codex_home / "config.toml").write_text(
            'model = "gpt-5.5"\nmodel_provider = "local"\napproval_policy = "never"\n'
            'sandbox_mode = "danger-full-access"\n\n[model_providers.local]\nname = "local"\n'
            f'base_url = "{proxy.base_url}/v1"\nwire_api = "responses"\nenv_key = "LOCAL_API_KEY"\n',
            encoding="utf-8",
        )
        env = {
            "PATH": os.environ["PATH"], "HOME": str(home), "CODEX_HOME": str(codex_home), "LOCAL_API_KEY": KEY,
            "NO_COLOR": "1",
        }  # fmt: skip
        out = run([str(CODEX), "exec", "--json", "Count three times."], cwd=repo, env=env)
        assert proxy.recorder.flush()
    assert "Counted three times." in out
    outputs = [
        json.dumps(i.get("output"))
        for i in server.requests[-1].body["input"]
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    ]
    assert (
        len(outputs) == 3
        and all(CLEARED_PREFIX in o for o in outputs[:2])
        and CLEARED_PREFIX not in outputs[2]
    )
