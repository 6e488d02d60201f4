"""Codex and Gemini CLI OpenTelemetry fixtures: run the real clients offline against the scripted model
server (scripts/real_agents_codex_gemini.py's tools-resume scenario) with their exporters pointed at a
local capture endpoint, and keep the raw OTLP bodies they post beside the same run's transcript
(and each CLI's failed-calls scenario, in ``codex-failed-calls/`` and ``gemini-failed-calls/``).

    python scripts/real_agents_otel.py [--only codex|gemini] [--scenario NAME] [--out tests/fixtures/otel]

Codex: an ``[otel]`` table in config.toml (otlp-http exporters for logs and traces, binary protobuf,
``log_user_prompt``); Gemini CLI: settings.json ``telemetry`` (enabled, target local, otlpEndpoint,
otlpProtocol http, logPrompts). Each body is kept as ``NNN_v1_<signal>.pb|json`` (as sent: Codex posts
protobuf, Gemini CLI JSON, chunked), with ``content-types.json``; the transcript as the CLI wrote it.
Every run uses a scratch HOME under /tmp; nothing touches a user folder.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import real_agents_codex_gemini as agents  # noqa: E402

OUT = ROOT / "tests" / "fixtures" / "otel"
SCENARIO = "tools-resume"
#: (agent, scenario) captured: tools and a resume for each CLI; each CLI's failed calls (a 400 context
#: too long, 500s).
RUNS = (("codex", SCENARIO), ("gemini", SCENARIO), ("codex", "failed-calls"), ("gemini", "failed-calls"))

agents.GEMINI_SCENARIOS["failed-calls"] = [
    # a call that works; the resumed run's call is refused as too long (400, not retried); the third
    # run's first attempt gets a 500 and Gemini CLI's retry an answer (only 500s: minutes of backoff)
    ("Read the README.", [[{"functionCall": {"name": "read_file", "args": {"file_path": "README.md"}}}],
                          ["It says hello."]]),
    ("Now read every file in full.", [{"error": {
        "code": 400, "status": "INVALID_ARGUMENT",
        "message": "The input token count (1210112) exceeds the maximum number of tokens allowed (1048576)."}}]),
    ("And once more.", [{"error": {"code": 500, "status": "INTERNAL", "message": "Internal error encountered."}},
                        ["Hello, once more."]]),
]  # fmt: skip
#: Runs that end in an error (the CLI exits non-zero): their exit status is not checked.
GEMINI_FAILING_PROMPTS = {"Now read every file in full."}
#: Seconds to wait after the last run for the exporters' final batches (they flush on exit, but late).
SETTLE_S = 3.0


class Capture:
    """A local OTLP/HTTP endpoint keeping every POST body (chunked or not) with its path and content type."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, str, bytes]] = []
        capture = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                if self.headers.get("transfer-encoding", "").lower() == "chunked":
                    body = _read_chunked(self.rfile)
                else:
                    body = self.rfile.read(int(self.headers.get("content-length") or 0))
                capture.posts.append((self.path, self.headers.get("content-type", ""), body))
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()


def _read_chunked(stream: Any) -> bytes:
    body = b""
    while True:
        size = int(stream.readline().split(b";")[0].strip() or b"0", 16)
        if not size:
            stream.readline()
            return body
        body += stream.read(size)
        stream.readline()


def codex_otel_config(url: str) -> str:
    """The ``[otel]`` table pointing Codex's log and trace exporters at ``url`` (OTLP/HTTP protobuf)."""
    return (
        '\n[otel]\nenvironment = "ctxdesk-fixture"\nlog_user_prompt = true\n'
        f'exporter = {{ otlp-http = {{ endpoint = "{url}/v1/logs", protocol = "binary" }} }}\n'
        f'trace_exporter = {{ otlp-http = {{ endpoint = "{url}/v1/traces", protocol = "binary" }} }}\n'
    )


def gemini_telemetry_settings(url: str) -> dict[str, Any]:
    """settings.json ``telemetry`` pointing Gemini CLI's exporters at ``url`` (OTLP/HTTP JSON)."""
    return {
        "telemetry": {
            "enabled": True, "target": "local", "otlpEndpoint": url, "otlpProtocol": "http", "logPrompts": True,
        }
    }  # fmt: skip


def run(agent: str, out: Path, scenario: str = SCENARIO) -> Path:
    capture = Capture()
    scratch = Path(tempfile.mkdtemp(prefix=f"ctxdesk-otel-{agent}-"))
    try:
        if agent == "codex":
            agents.CODEX_CONFIG[scenario] = agents.CODEX_CONFIG.get(scenario, "") + codex_otel_config(
                capture.url
            )
            written = agents.run_codex(scenario, agents.CODEX_SCENARIOS[scenario], scratch)
        else:
            agents.GEMINI_SETTINGS[scenario] = {
                **agents.GEMINI_SETTINGS.get(scenario, {}),
                **gemini_telemetry_settings(capture.url),
            }
            run_cli = agents._run

            def with_telemetry(cmd: list[str], *, cwd: Path, env: dict[str, str], **kwargs: Any) -> str:
                env = {
                    k: v for k, v in env.items() if k != "GEMINI_TELEMETRY_ENABLED"
                }  # the fixtures' off switch
                if any(prompt in cmd for prompt in GEMINI_FAILING_PROMPTS):
                    kwargs["check"] = False
                return run_cli(cmd, cwd=cwd, env=env, **kwargs)

            agents._run = with_telemetry
            try:
                written = agents.run_gemini(scenario, agents.GEMINI_SCENARIOS[scenario], scratch)
            finally:
                agents._run = run_cli
        time.sleep(SETTLE_S)
        target = out / (agent if scenario == SCENARIO else f"{agent}-{scenario}")
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        types = {}
        for n, (path, content_type, body) in enumerate(capture.posts):
            suffix = "pb" if "protobuf" in content_type else "json"
            name = f"{n:03d}{path.replace('/', '_')}.{suffix}"
            (target / name).write_bytes(body)
            types[name] = content_type
        (target / "content-types.json").write_text(json.dumps(types, indent=1) + "\n", encoding="utf-8")
        transcripts = sorted(
            p for p in written.rglob("*.json*") if "rollout-" in p.name or "session-" in p.name
        )
        for transcript in transcripts:
            shutil.copy(transcript, target / f"transcript-{transcript.name}")
        return target
    finally:
        capture.close()
        shutil.rmtree(scratch, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("codex", "gemini"))
    parser.add_argument("--scenario", choices=sorted({scenario for _, scenario in RUNS}))
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    for agent, scenario in RUNS:
        if (args.only and agent != args.only) or (args.scenario and scenario != args.scenario):
            continue
        target = run(agent, args.out, scenario)
        print(f"{agent} {scenario}: {len(list(target.glob('*_v1_*')))} OTLP bodies -> {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
