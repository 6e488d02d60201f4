"""OTLP receiver: real Claude Code telemetry (captured offline, protobuf and JSON) into a real store,
compared call by call with the same session's transcript import; bad payloads answered 400 and kept nowhere."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs

from engine.errors import ValidationError
from engine.importers import import_file
from engine.messages import ToolUseBlock
from engine.otel import OtelReceiver, OtelSink, handle_otlp, parse_otlp
from engine.otel.payload import MAX_OTLP_BYTES
from engine.store import SessionStore

FIXTURES = Path(__file__).parent / "fixtures" / "otel"
CAPTURES = {  # encoding -> (files in the order the CLI posted them, content type, transcript of the same run)
    "json": ("claude-code/json-*", "application/json", "claude-code/transcript-json.jsonl"),
    "protobuf": ("claude-code/protobuf-*", "application/x-protobuf", "claude-code/transcript-pb.jsonl"),
}


def _signal(path: Path) -> str:
    return "logs" if "_v1_logs" in path.name else "metrics"


def receive(store: SessionStore, pattern: str, content_type: str) -> None:
    sink = OtelSink(store)
    for path in sorted(FIXTURES.glob(pattern)):
        status, answer = handle_otlp(sink, _signal(path), path.read_bytes(), content_type)
        assert status == 200, answer


def calls(store: SessionStore) -> dict[str, tuple]:
    """request id -> (session, model, outcome, usage) of every request event in the store."""
    out = {}
    for session in store.list_sessions():
        for event in store.list_events(session.id, kind="request"):
            out[event.details.get("request_id")] = (session.id, event.model, event.outcome, event.usage)
    return out


@pytest.mark.parametrize("encoding", sorted(CAPTURES))
def test_claude_code_telemetry_gives_the_transcripts_calls_and_usage(tmp_path: Path, encoding: str) -> None:
    pattern, content_type, transcript = CAPTURES[encoding]
    with SessionStore(tmp_path / "otel.db") as otel, SessionStore(tmp_path / "import.db") as imported:
        receive(otel, pattern, content_type)
        import_file(FIXTURES / transcript, imported)
        received, expected = calls(otel), calls(imported)
        assert len(expected) == 2
        assert received == expected  # same session id, model, outcome and provider usage per call
        (session,) = otel.list_sessions()
        assert session.source == "otel:claude-code" and session.provider == "anthropic"
        tools = [e for e in otel.list_events(session.id, kind="note") if e.trigger == "tool_result"]
        assert [(t.details["tool_name"], t.details["success"], t.outcome) for t in tools] == [
            ("Read", True, "ok")
        ]
        first = otel.list_events(session.id, kind="request")[0]
        assert first.details["agent_cost_usd"] > 0 and first.details["cache_write_5m_tokens"] == 22866 + (
            2 if encoding == "protobuf" else 0
        )


def test_a_failed_call_is_recorded_as_the_import_records_it(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "otel.db") as otel, SessionStore(tmp_path / "import.db") as imported:
        receive(otel, "claude-code-error/json-*", "application/json")
        import_file(FIXTURES / "claude-code-error" / "transcript.jsonl", imported)
        (session,) = otel.list_sessions()
        (event,) = otel.list_events(session.id, kind="request")
        (expected,) = imported.list_events(session.id, kind="request")
        assert (
            (event.outcome, event.usage)
            == (expected.outcome, expected.usage)
            == ("context_length_exceeded", None)
        )
        failure = event.details["failure"]
        assert failure["cause"] == expected.details["failure"]["cause"] == "prompt_too_long"
        assert (failure["status"], failure["prompt_tokens"], failure["maximum_tokens"]) == (
            400,
            212301,
            200000,
        )


def test_receiving_the_same_capture_twice_into_one_store_keeps_the_first(tmp_path: Path) -> None:
    pattern, content_type, _ = CAPTURES["json"]
    with SessionStore(tmp_path / "otel.db") as store:
        receive(store, pattern, content_type)
        receive(store, pattern, content_type)  # a second receiver process, the session already stored
        assert len(store.list_sessions()) == 1


def _log_request(name: str, **attributes: object) -> bytes:
    def value(v: object) -> AnyValue:
        if isinstance(v, bool):
            return AnyValue(bool_value=v)
        if isinstance(v, int):
            return AnyValue(int_value=v)
        return AnyValue(string_value=str(v))

    record = LogRecord(
        time_unix_nano=1, body=AnyValue(string_value=name),
        attributes=[KeyValue(key=k, value=value(v)) for k, v in attributes.items()],
    )  # fmt: skip
    return ExportLogsServiceRequest(
        resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[record])])]
    ).SerializeToString()


def test_a_whole_raw_request_body_is_kept_exact_and_a_cut_one_is_not(tmp_path: Path) -> None:
    body = {
        "model": "claude-sonnet-4-5",
        "system": "be brief",
        "messages": [{"role": "user", "content": "hi"}],
    }
    with SessionStore(tmp_path / "otel.db") as store:
        sink = OtelSink(store)
        for truncated in ("false", "true"):
            payload = _log_request(
                "claude_code.api_request_body", **{"session.id": "s1", "body": json.dumps(body),
                                                   "body_truncated": truncated, "model": "claude-sonnet-4-5"},
            )  # fmt: skip
            assert handle_otlp(sink, "logs", payload, "application/x-protobuf")[0] == 200
        (request,) = store.list_requests("s1", with_body=True)
        assert request.body == body and request.source == "otel:claude-code"


@pytest.mark.parametrize(
    ("name", "body", "content_type"),
    [
        ("garbage protobuf", b"\xff\xff\xff\xff", "application/x-protobuf"),
        ("invalid JSON", b"{not json", "application/json"),
        ("JSON of the wrong shape", b'{"resourceLogs": "yes"}', "application/json"),
        ("not UTF-8 JSON", b'{"resourceLogs": ["\xff"]}', "application/json"),
        ("over the size limit", b"\x00" * (MAX_OTLP_BYTES + 1), "application/x-protobuf"),
    ],
    # The body is left out of the test's id: 16 MiB of bytes made a 64 MB id that every report carried.
    ids=lambda value: "body" if isinstance(value, bytes) else None,
)
def test_a_bad_payload_is_answered_400_and_recorded_nowhere(
    tmp_path: Path, name: str, body: bytes, content_type: str
) -> None:
    with pytest.raises(ValidationError):
        parse_otlp("logs", body, content_type)
    with SessionStore(tmp_path / "otel.db") as store:
        status, answer = handle_otlp(OtelSink(store), "logs", body, content_type)
        assert status == 400 and "OTLP logs" in answer["error"]
        assert store.list_sessions() == []


def test_events_of_other_programs_and_without_a_session_are_skipped(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "otel.db") as store:
        sink = OtelSink(store)
        for payload in (
            _log_request("some_app.api_request", **{"session.id": "x", "input_tokens": 5}),
            _log_request("claude_code.api_request", input_tokens=5),  # no session id
        ):
            assert handle_otlp(sink, "logs", payload, "application/x-protobuf") == (
                200, {"partialSuccess": {}, "ctxdesk": {"records": 1, "written": 0}},
            )  # fmt: skip
        assert store.list_sessions() == []


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200), as_json=st.booleans())
def test_any_body_is_recorded_or_answered_400_never_raised(
    tmp_path: Path, body: bytes, as_json: bool
) -> None:
    with SessionStore(tmp_path / "fuzz.db") as store:
        status, _ = handle_otlp(
            OtelSink(store), "logs", body, "application/json" if as_json else "application/x-protobuf"
        )
        assert status in (200, 400)


def test_the_http_endpoint_takes_protobuf_json_and_gzip_and_refuses_bad_bodies(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "otel.db") as store, OtelReceiver(store, port=0) as receiver:
        url = receiver.endpoint
        assert receiver.server.config.host == "127.0.0.1"
        for path in sorted(FIXTURES.glob("claude-code/protobuf-*")):
            body, headers = path.read_bytes(), {"content-type": "application/x-protobuf"}
            if "_v1_logs" in path.name:  # the gzip the exporters use when OTEL_EXPORTER_OTLP_COMPRESSION=gzip
                body, headers = gzip.compress(body), {**headers, "content-encoding": "gzip"}
            answer = httpx.post(f"{url}/v1/{_signal(path)}", content=body, headers=headers)
            assert answer.status_code == 200, answer.text
        assert len(calls(store)) == 2
        bad = httpx.post(f"{url}/v1/logs", content=b"{", headers={"content-type": "application/json"})
        assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]
        huge = httpx.post(f"{url}/v1/traces", content=b"\x00" * (MAX_OTLP_BYTES + 1))
        assert huge.status_code == 413
        assert httpx.get(f"{url}/v1/logs").status_code == 405
        assert len(calls(store)) == 2


# -- Codex and Gemini CLI: real captures (scripts/real_agents_otel.py), the same runs' transcripts -------------

#: agent -> (side calls the transcript does not hold: Gemini CLI's model router, by its role)
OTHER_AGENTS = {"codex": 0, "gemini": 2}


def receive_capture(store: SessionStore, agent: str) -> None:
    """Post every body of the capture, in the order the CLI sent it, with the content type it sent."""
    folder = FIXTURES / agent
    sink = OtelSink(store)
    for name, content_type in json.loads((folder / "content-types.json").read_text()).items():
        signal = name.split("_v1_")[1].split(".")[0]
        status, answer = handle_otlp(sink, signal, (folder / name).read_bytes(), content_type)
        assert status == 200, answer


def _tool_uses(store: SessionStore, session_id: str) -> list[tuple[str, str]]:
    """(name, id) of every tool call in the session's messages, first sight only."""
    seen: dict[str, str] = {}
    for stored in store.load_messages(session_id):
        content = stored.message.content
        for block in [] if isinstance(content, str) else content:
            if isinstance(block, ToolUseBlock):
                seen.setdefault(block.id, block.name)
    return [(name, call_id) for call_id, name in seen.items()]


@pytest.mark.parametrize("agent", sorted(OTHER_AGENTS))
def test_codex_and_gemini_cli_telemetry_give_the_transcripts_calls_and_usage(
    tmp_path: Path, agent: str
) -> None:
    with SessionStore(tmp_path / "otel.db") as otel, SessionStore(tmp_path / "import.db") as imported:
        receive_capture(otel, agent)
        (transcript,) = (FIXTURES / agent).glob("transcript-*")
        import_file(transcript, imported)
        (session,) = otel.list_sessions()
        (expected,) = imported.list_sessions()
        assert (session.id, session.source) == (expected.id, f"otel:{agent}")
        assert (session.provider, session.model) == (expected.provider, expected.model)  # the main model
        received = otel.list_events(session.id, kind="request")
        side = [e for e in received if e.details.get("agent_role", "main") != "main"]
        main = [e for e in received if e not in side]
        assert len(side) == OTHER_AGENTS[agent] and all(e.model != session.model for e in side)
        wanted = imported.list_events(expected.id, kind="request")
        assert len(wanted) == 5
        # same calls, in order, with the provider's usage token for token (cached part and output included)
        assert [(e.model, e.outcome, e.usage) for e in main] == [
            (e.model, e.outcome, e.usage) for e in wanted
        ]
        tools = [e for e in otel.list_events(session.id, kind="note") if e.trigger == "tool_result"]
        assert all(t.outcome == "ok" and t.details["success"] is True for t in tools)
        calls = _tool_uses(imported, expected.id)
        if agent == "codex":  # each result names the call it answers
            assert sorted(t.details["call_id"] for t in tools) == sorted(call_id for _, call_id in calls)
        else:
            assert [t.details["function_name"] for t in tools] == [name for name, _ in calls]


def test_log_names_come_from_event_name_when_the_body_is_a_sentence_or_a_source_line(tmp_path: Path) -> None:
    # Codex: body and event_name "event otel/src/...rs:803"; Gemini CLI: body "API response from ..."
    cases = {"event otel/src/events/session_telemetry.rs:803": "codex.api_request",
             "API response from gemini-3.1-pro-preview. Status: 200.": "gemini_cli.api_response"}  # fmt: skip
    for body, name in cases.items():
        request = ExportLogsServiceRequest(
            resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[LogRecord(
                body=AnyValue(string_value=body), event_name=body if "otel/" in body else "",
                attributes=[KeyValue(key="event.name", value=AnyValue(string_value=name))],
            )])])]
        )  # fmt: skip
        (record,) = parse_otlp("logs", request.SerializeToString(), "application/x-protobuf")
        assert record.name == name


def test_codex_failed_calls_are_recorded_as_the_import_records_them(tmp_path: Path) -> None:
    """The failed-calls run: a 400 context_length_exceeded ends run 1, run 2 compacts and answers, run 3
    gets only 500s. Codex 0.169 posts nothing for run 1 (it exits on the 400 before its exporter's
    batch goes out: the capture holds runs 2 and 3 only), so those calls are the import's last three."""
    with SessionStore(tmp_path / "otel.db") as otel, SessionStore(tmp_path / "import.db") as imported:
        receive_capture(otel, "codex-failed-calls")
        (transcript,) = (FIXTURES / "codex-failed-calls").glob("transcript-*")
        import_file(transcript, imported)
        (session,) = otel.list_sessions()
        received = otel.list_events(session.id, kind="request")
        wanted = imported.list_events(session.id, kind="request")
        assert [e.outcome for e in wanted] == [None, "context_length_exceeded", None, None, "provider_error"]
        assert [(e.model, e.outcome, e.usage) for e in received] == [
            (e.model, e.outcome, e.usage) for e in wanted[2:]
        ]
        failure = received[-1].details["failure"]
        assert failure["cause"] == wanted[-1].details["failure"]["cause"] == "provider_error"
        assert failure["status"] == 500  # the HTTP status Codex logged with the attempt


def test_gemini_cli_failed_calls_are_recorded_failed_with_their_status(tmp_path: Path) -> None:
    """Gemini CLI's failed-calls run (scripts/real_agents_otel.py): run 1 answers, run 2's call gets a 400
    (too long), run 3's first attempt a 500 that Gemini CLI retries. Its telemetry names the 500 attempt
    (gemini_cli.api_error), which the transcript does not hold; run 2 posts nothing (Gemini CLI exits on
    the 400 before its exporters' batches go out, as Codex does), so neither its router call nor the 400."""
    with SessionStore(tmp_path / "otel.db") as otel, SessionStore(tmp_path / "import.db") as imported:
        receive_capture(otel, "gemini-failed-calls")
        for transcript in sorted((FIXTURES / "gemini-failed-calls").glob("transcript-*")):
            import_file(transcript, imported)  # the 400 run's resume wrote a second file (no new call)
        (session,) = otel.list_sessions()
        (expected,) = imported.list_sessions()
        assert (session.id, session.model) == (expected.id, expected.model)
        received = otel.list_events(session.id, kind="request")
        main = [e for e in received if e.details.get("agent_role", "main") == "main"]
        assert len(received) - len(main) == 2  # the router's side calls of runs 1 and 3
        assert [e.outcome for e in main] == [None, None, "provider_error", None]
        failed = main[2]
        assert (failed.model, failed.usage) == (session.model, None)  # a failed attempt bills nothing
        assert failed.details["failure"]["cause"] == "provider_error"
        assert failed.details["failure"]["status"] == 500  # the HTTP status Gemini CLI logged
        assert "Internal error encountered." in failed.details["failure"]["message"]
        wanted = imported.list_events(expected.id, kind="request")
        # the calls that answered: the transcript's, token for token (the retry's answer included)
        answered = [e for e in main if e is not failed]
        assert [(e.model, e.outcome, e.usage) for e in answered] == [
            (e.model, e.outcome, e.usage) for e in wanted
        ]
        assert [e.usage.input_tokens + e.usage.cache_read_input_tokens for e in answered] == [
            12107, 12193, 12265
        ]  # fmt: skip
