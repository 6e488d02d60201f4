"""The OTLP receiver inside ``ctxdesk proxy``: an agent's telemetry posted to the proxy's own port
(/v1/logs, /v1/metrics) lands in the proxy's database beside the calls it forwarded."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import anthropic
import httpx
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.importers import import_file
from engine.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
ROOT = Path(__file__).parent.parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_proxy_records_otlp_telemetry_beside_the_calls_it_forwards(tmp_path: Path) -> None:
    db, port = tmp_path / "proxy.db", _free_port()
    url = f"http://127.0.0.1:{port}"
    with ScriptedServer() as upstream:
        A.install(upstream)
        upstream.queue(A.text("forwarded"))
        command = [sys.executable, "-m", "engine.cli", "proxy", "--port", str(port), "--db", str(db),
                   "--anthropic-upstream", upstream.base_url]  # fmt: skip
        with subprocess.Popen(
            command, cwd=ROOT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        ) as process:  # fmt: skip
            try:
                lines = [process.stdout.readline() for _ in range(5)]
                assert any(f"OTEL_EXPORTER_OTLP_ENDPOINT={url}" in line for line in lines), lines
                for path in sorted(FIXTURES.glob("claude-code/protobuf-*")):
                    signal_name = "logs" if "_v1_logs" in path.name else "metrics"
                    answer = httpx.post(
                        f"{url}/v1/{signal_name}", content=path.read_bytes(),
                        headers={"content-type": "application/x-protobuf"}, timeout=30,
                    )  # fmt: skip
                    assert answer.status_code == 200, answer.text
                    assert "ctxdesk" in answer.json()  # the receiver's answer, not a forwarded one
                client = opened(anthropic.Anthropic(base_url=url, api_key="sk-test", max_retries=0))
                reply = client.messages.create(
                    model="claude-sonnet-4-6", max_tokens=5, messages=[{"role": "user", "content": "hi"}]
                )
                assert reply.content[0].text == "forwarded"
            finally:
                process.send_signal(signal.SIGTERM)
                _, stderr = process.communicate(timeout=60)
        assert [r.path for r in upstream.requests] == ["/v1/messages"]  # telemetry never went upstream
    assert "Traceback" not in stderr
    with SessionStore(db, read_only=True) as store, SessionStore(tmp_path / "import.db") as imported:
        import_file(FIXTURES / "claude-code" / "transcript-pb.jsonl", imported)
        (expected,) = imported.list_sessions()
        sources = {s.id: s.source for s in store.list_sessions()}
        assert sources[expected.id] == "otel:claude-code" and "proxy" in set(sources.values())
        received = [(e.model, e.usage) for e in store.list_events(expected.id, kind="request")]
        assert received == [(e.model, e.usage) for e in imported.list_events(expected.id, kind="request")]
        forwarded = [r for sid in sources if sid != expected.id for r in store.list_requests(sid)]
        assert [r.status_code for r in forwarded] == [200]
