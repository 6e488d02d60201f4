"""``ctxdesk otel`` itself: started as a process on a free port with --db, sent a real Claude Code
capture, stopped by SIGINT (Ctrl-C) and SIGTERM, and the store it wrote read back against the import."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from engine.importers import import_file
from engine.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
ROOT = Path(__file__).parent.parent
_LISTENING = re.compile(r"OTLP/HTTP on (http://127\.0\.0\.1:(\d+)) ")


def start_otel(db: Path, *extra: str) -> tuple[subprocess.Popen[str], str]:
    """``ctxdesk otel --port 0 --db DB`` as a child process, and the endpoint it says it listens on."""
    process = subprocess.Popen(
        [sys.executable, "-m", "engine.cli", "otel", "--port", "0", "--db", str(db), *extra],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once the socket is bound: connections queue until it serves
    found = _LISTENING.search(line)
    if found is None:
        process.kill()
        raise AssertionError(f"ctxdesk otel did not start: {line!r} {process.communicate()[1]!r}")
    assert int(found.group(2)) > 0 and str(db) in line
    return process, found.group(1)


def stop(process: subprocess.Popen[str], how: signal.Signals) -> tuple[int, str]:
    process.send_signal(how)
    try:
        _, stderr = process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return process.returncode, stderr


def post_capture(endpoint: str, pattern: str, content_type: str) -> list[dict]:
    answers = []
    for path in sorted(FIXTURES.glob(pattern)):
        signal_name = "logs" if "_v1_logs" in path.name else "metrics"
        answer = httpx.post(
            f"{endpoint}/v1/{signal_name}", content=path.read_bytes(), headers={"content-type": content_type},
            timeout=30,
        )  # fmt: skip
        assert answer.status_code == 200, answer.text
        answers.append(answer.json())
    return answers


def calls(store: SessionStore) -> dict[tuple[str, str], tuple]:
    """(session, request id) -> (model, outcome, usage) of every call (the scripted server reuses request ids)."""
    return {
        (s.id, e.details.get("request_id")): (e.model, e.outcome, e.usage)
        for s in store.list_sessions()
        for e in store.list_events(s.id, kind="request")
    }


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_ctxdesk_otel_records_a_real_capture_and_stops_cleanly(tmp_path: Path, how: signal.Signals) -> None:
    db = tmp_path / "otel.db"
    process, endpoint = start_otel(db)
    try:
        answers = post_capture(endpoint, "claude-code/protobuf-*", "application/x-protobuf")
    finally:
        code, stderr = stop(process, how)
    assert code == 0, stderr
    assert "Traceback" not in stderr
    assert sum(a["ctxdesk"]["written"] for a in answers) == 3  # two calls and one tool result
    with SessionStore(db, read_only=True) as store, SessionStore(tmp_path / "import.db") as imported:
        import_file(FIXTURES / "claude-code" / "transcript-pb.jsonl", imported)
        received = calls(store)
        assert len(received) == 2 and received == calls(imported)
        (session,) = store.list_sessions()
        assert session.source == "otel:claude-code"


def test_a_second_run_on_the_same_database_adds_to_it(tmp_path: Path) -> None:
    db = tmp_path / "otel.db"
    for pattern, content_type in (
        ("claude-code/json-*", "application/json"),
        ("claude-code-error/json-*", "application/json"),
    ):
        process, endpoint = start_otel(db)
        try:
            post_capture(endpoint, pattern, content_type)
        finally:
            assert stop(process, signal.SIGINT)[0] == 0
    with SessionStore(db, read_only=True) as store:
        outcomes = sorted(str(e[1]) for e in calls(store).values())
        assert len(store.list_sessions()) == 2
        assert outcomes == ["None", "None", "context_length_exceeded"]  # two answered calls, one refused


def test_a_port_in_use_is_one_error_line_and_exit_2(tmp_path: Path) -> None:
    process, endpoint = start_otel(tmp_path / "first.db")
    try:
        port = endpoint.rsplit(":", 1)[1]
        second = subprocess.run(
            [sys.executable, "-m", "engine.cli", "otel", "--port", port, "--db", str(tmp_path / "second.db")],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        stop(process, signal.SIGINT)
    assert second.returncode == 2
    assert second.stderr.startswith(f"ctxdesk: error: cannot listen on 127.0.0.1:{port}")
    assert "Traceback" not in second.stderr


def test_a_client_that_connects_before_the_receiver_serves_queues_instead_of_being_refused(
    tmp_path: Path,
) -> None:
    """The port is printed right after bind(): on a loaded machine a client may connect before uvicorn
    serves (a fresh-clone CI run beside a CPU-heavy job got 'Connection refused')."""
    import socket

    from engine.otel import OtelReceiver

    with SessionStore(tmp_path / "otel.db") as store:
        receiver = OtelReceiver(store, port=0)
        sock = receiver.bind()
        try:
            with socket.create_connection(("127.0.0.1", receiver.bound_port), timeout=5):
                pass
        finally:
            sock.close()
