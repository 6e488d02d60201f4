"""``ctxdesk export otlp``: real Claude Code imports exported as GenAI spans to a local OTLP endpoint,
the protobuf read back field by field against the stored rows; then to a real Phoenix and read back
through its REST API. Bad endpoints, databases and sessions are typed errors; nothing is half sent."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from engine.cli import main
from engine.errors import ExportError, ValidationError
from engine.events import ContextEvent, ProviderUsage
from engine.importers import import_file
from engine.otel.export import _batches, export_sessions, traces_url
from engine.otel.payload import attributes_of
from engine.otel.spans import session_spans, span_id_of, trace_id_of
from engine.store import SessionStore

CLAUDE_CODE = Path(__file__).parent / "fixtures" / "real_agents" / "claude-code"
#: Real runs: an automatic compaction, a reactive one after a refused call, a sub-agent, failed calls.
RUNS = ("compact_auto", "compact_reactive", "subagent_foreground", "provider_error")

Reply = Callable[[bytes], Response]


class CaptureEndpoint:
    """A Starlette OTLP/HTTP traces endpoint on 127.0.0.1 keeping every body it is sent."""

    def __init__(self, reply: Reply | None = None) -> None:
        import uvicorn

        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self.reply = reply or (lambda body: Response(status_code=200))

        async def traces(request: Request) -> Response:
            body = await request.body()
            self.bodies.append(body)
            self.headers.append(dict(request.headers))
            return self.reply(body)

        app = Starlette(routes=[Route("/v1/traces", traces, methods=["POST"])])
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> CaptureEndpoint:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "capture endpoint did not start"
            time.sleep(0.02)
        self.url = f"http://127.0.0.1:{self.server.servers[0].sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)

    def spans(self) -> list[Span]:
        out = []
        for body in self.bodies:
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                assert attributes_of(resource.resource.attributes)["service.name"] == "ctxdesk"
                for scope in resource.scope_spans:
                    out.extend(scope.spans)
        return out


@pytest.fixture(scope="module")
def real_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("export") / "claude-code.db"
    with SessionStore(db) as store:
        for run in RUNS:
            for transcript in sorted((CLAUDE_CODE / run / "transcripts").glob("*.jsonl")):
                import_file(transcript, store)
    return db


def attrs(span: Span) -> dict:
    return attributes_of(span.attributes)


def test_every_call_and_compaction_is_a_span_equal_to_its_stored_row(real_db: Path) -> None:
    with SessionStore(real_db, read_only=True) as store, CaptureEndpoint() as endpoint:
        ids = [s.id for s in store.list_sessions()]
        result = export_sessions(store, ids, endpoint.url)
        spans = endpoint.spans()
        by_id = {span.span_id: span for span in spans}
        assert len(by_id) == len(spans) == result.spans
        calls = 0
        for session in store.list_sessions():
            trace = trace_id_of(session.id)
            root = by_id[span_id_of(session.id, None)]
            assert (root.trace_id, root.parent_span_id, attrs(root)["gen_ai.operation.name"]) == (
                trace,
                b"",
                "invoke_agent",
            )
            assert attrs(root)["gen_ai.conversation.id"] == session.id
            assert attrs(root).get("ctxdesk.session.parent_id") == session.parent_session_id
            for event in store.list_events(session.id):
                span = by_id[span_id_of(session.id, event.id)]
                a = attrs(span)
                assert (span.trace_id, span.parent_span_id) == (trace, root.span_id)
                assert (a["ctxdesk.event.id"], a["ctxdesk.event.kind"]) == (event.id, event.kind)
                assert a["ctxdesk.context.window"] == event.context_window
                assert a["ctxdesk.context.limit"] == event.effective_limit
                if event.kind == "compaction":
                    assert span.name.startswith("ctxdesk.compaction agent")
                    assert (a["ctxdesk.edit.by"], a["ctxdesk.edit.trigger_kind"]) == (
                        event.details["by"], event.details["trigger_kind"],
                    )  # fmt: skip
                    assert a["ctxdesk.edit.before_tokens"] == event.details["before_tokens"]
                    assert a["ctxdesk.edit.after_tokens"] == event.details["after_tokens"]
                    continue
                calls += 1
                assert span.kind == Span.SPAN_KIND_CLIENT and span.name == f"chat {event.model}"
                assert (a["gen_ai.operation.name"], a["gen_ai.provider.name"]) == ("chat", "anthropic")
                assert (a["gen_ai.request.model"], a["gen_ai.conversation.id"]) == (event.model, session.id)
                assert span.end_time_unix_nano >= span.start_time_unix_nano > 0
                assert root.start_time_unix_nano <= span.start_time_unix_nano
                assert span.end_time_unix_nano <= root.end_time_unix_nano
                failed = event.outcome not in (None, "ok")
                assert span.status.code == (Status.STATUS_CODE_ERROR if failed else Status.STATUS_CODE_UNSET)
                if failed:
                    assert a["error.type"] == event.details["failure"]["cause"]
                if event.usage is None:  # a failed call, or one whose answer the transcript does not hold
                    assert "gen_ai.usage.input_tokens" not in a
                    continue
                usage = event.usage
                # cached tokens included, as the conventions say
                assert a["gen_ai.usage.input_tokens"] == usage.prompt_tokens
                assert a["gen_ai.usage.output_tokens"] == usage.output_tokens
                assert a["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read_input_tokens
                assert a["gen_ai.usage.cache_creation.input_tokens"] == usage.cache_creation_input_tokens
                components = event.components.model_dump()
                assert {k: a[f"ctxdesk.components.{k}"] for k in components} == components
                assert a["ctxdesk.components.total"] == event.components.total == usage.prompt_tokens
                assert a["ctxdesk.context.share"] == pytest.approx(
                    usage.prompt_tokens / event.effective_limit
                )
        assert calls == result.calls > 20
        assert result.sessions == len(ids) == 5


def test_the_sessions_spans_hold_the_real_runs_numbers(real_db: Path) -> None:
    """Known facts of the real runs, not re-derived from the store: the reactive compaction's tokens,
    the refused call, the sub-agent's trace of its own."""
    with SessionStore(real_db, read_only=True) as store:
        spans = {s.id: session_spans(s, store.list_events(s.id)) for s in store.list_sessions()}
    reactive = spans["3458c242-c71f-4b42-90c9-6b0ff888daa5"]
    (compaction,) = [s for s in reactive if s.name.startswith("ctxdesk.compaction")]
    assert attrs(compaction)["ctxdesk.edit.trigger_kind"] == "reactive"
    assert attrs(compaction)["ctxdesk.edit.after_failed_call"] > 0
    refused = [s for s in reactive if s.status.code == Status.STATUS_CODE_ERROR]
    assert [attrs(s)["error.type"] for s in refused] == ["prompt_too_long"]
    assert attrs(reactive[0])["ctxdesk.session.failed_calls"] == 1
    sub = spans["be032aee-51e4-4b63-b549-9e621ee3761a:agent-a0448b9b305e0322d"]
    assert sub[0].trace_id != spans["be032aee-51e4-4b63-b549-9e621ee3761a"][0].trace_id
    failed = spans["0c642992-22ef-4699-9e0d-6bd410c6750c"]
    # Claude Code retried ten 500s before the last one (a system api_error line each)
    assert [attrs(s)["ctxdesk.event.outcome"] for s in failed[1:]] == ["provider_error"] * 11
    # an agent's compaction has no time of its own in the transcript: it sits between the calls around it
    auto = spans["005e4ed3-208c-4f24-ac39-ceb1cfae1fa5"]
    index = next(i for i, s in enumerate(auto) if s.name.startswith("ctxdesk.compaction"))
    assert auto[index - 1].end_time_unix_nano == auto[index].start_time_unix_nano
    assert auto[index].end_time_unix_nano == auto[index + 1].start_time_unix_nano


def test_exporting_twice_sends_the_same_spans(real_db: Path) -> None:
    with SessionStore(real_db, read_only=True) as store, CaptureEndpoint() as endpoint:
        ids = [s.id for s in store.list_sessions()]
        export_sessions(store, ids, endpoint.url)
        export_sessions(store, ids, endpoint.url)
        assert endpoint.bodies[0] == endpoint.bodies[1]


def test_a_proxy_policy_edit_and_a_guard_refusal_are_spans_naming_the_policy(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "proxy.db") as store:
        store.create_session(session_id="p1", model="claude-sonnet-4-5", provider="anthropic", source="proxy")
        store.record_event("p1", ContextEvent(
            kind="request", provider="anthropic", model="claude-sonnet-4-5", context_window=200_000,
            limit_tokens=180_000, usage=ProviderUsage(input_tokens=10, output_tokens=5, cache_read_input_tokens=90),
            details={"latency_ms": 1500},
        ))  # fmt: skip
        store.record_event("p1", ContextEvent(
            kind="compaction", trigger="proxy_policy", outcome="compacted", reason="cleared 3 tool results",
            projected_tokens=40, details={"policy": "clear_tool_results", "before_tokens": 100, "after_tokens": 40,
                                          "changes": ["m3"], "strategies_run": ["clear_tool_results"]},
        ))  # fmt: skip
        store.record_event("p1", ContextEvent(kind="guard", trigger="turn_preflight", outcome="rejected"))
        store.record_event("p1", ContextEvent(kind="note", trigger="tool_result"))  # not a span
        root, call, edit, guard = session_spans(store.get_session("p1"), store.list_events("p1"))
    assert call.end_time_unix_nano - call.start_time_unix_nano == 1_500_000_000
    assert attrs(call)["gen_ai.usage.input_tokens"] == 100
    assert edit.name == "ctxdesk.compaction proxy clear_tool_results"
    assert (attrs(edit)["ctxdesk.edit.policy"], attrs(edit)["ctxdesk.edit.strategies"]) == (
        "clear_tool_results", ["clear_tool_results"],
    )  # fmt: skip
    assert (attrs(edit)["ctxdesk.edit.before_tokens"], attrs(edit)["ctxdesk.edit.after_tokens"]) == (100, 40)
    assert guard.name == "ctxdesk.guard rejected"
    assert attrs(root)["ctxdesk.session.edits"] == 2


def test_the_cli_exports_one_session_with_its_sub_agent(real_db: Path, capsys: pytest.CaptureFixture) -> None:
    parent = "be032aee-51e4-4b63-b549-9e621ee3761a"
    with CaptureEndpoint() as endpoint:
        code = main(["export", "otlp", f"{real_db}:{parent}", "--endpoint", endpoint.url,
                     "--header", "authorization=Bearer t0ken"])  # fmt: skip
        assert code == 0, capsys.readouterr().err
        traces = {s.trace_id for s in endpoint.spans()}
        assert traces == {trace_id_of(parent), trace_id_of(f"{parent}:agent-a0448b9b305e0322d")}
        assert endpoint.headers[0]["authorization"] == "Bearer t0ken"
        assert endpoint.headers[0]["content-type"] == "application/x-protobuf"
    assert "2 session(s), 4 call(s), 0 compaction/edit span(s)" in capsys.readouterr().out


def test_the_endpoint_comes_from_the_opentelemetry_variable(
    real_db: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    with CaptureEndpoint() as endpoint:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.url)
        assert main(["export", "otlp", f"{real_db}:0c642992"]) == 0
        assert len(endpoint.spans()) == 12
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_ENDPOINT")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    assert main(["export", "otlp", str(real_db)]) == 2
    assert "name the OTLP endpoint" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("name", "endpoint", "expected"),
    [
        ("a base gets the traces path", "http://127.0.0.1:4318", "http://127.0.0.1:4318/v1/traces"),
        ("a trailing slash too", "http://collector:4318/", "http://collector:4318/v1/traces"),
        ("a path prefix is kept", "https://cloud.example/api/public/otel", "https://cloud.example/api/public/otel/v1/traces"),
        ("a full traces URL as given", "http://h:6006/v1/traces", "http://h:6006/v1/traces"),
    ],
)  # fmt: skip
def test_traces_url(name: str, endpoint: str, expected: str) -> None:
    assert traces_url(endpoint) == expected


@pytest.mark.parametrize(
    "endpoint", ["127.0.0.1:4318", "grpc://127.0.0.1:4317", "http://", "http://h:99999", "ftp://h/x", ""]
)
def test_a_malformed_endpoint_is_a_validation_error_before_anything_is_read(endpoint: str) -> None:
    with pytest.raises(ValidationError, match="OTLP endpoint"):
        traces_url(endpoint)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _partial(rejected: int) -> Response:
    answer = ExportTraceServiceResponse()
    answer.partial_success.rejected_spans = rejected
    answer.partial_success.error_message = "span too large"
    return Response(answer.SerializeToString(), media_type="application/x-protobuf")


@pytest.mark.parametrize(
    ("name", "reply", "status", "message"),
    [
        ("a server error", lambda body: Response("collector down", status_code=503), 503, "answered 503: collector down"),
        ("unauthorised", lambda body: Response("no key", status_code=401), 401, "answered 401"),
        ("spans rejected", lambda body: _partial(3), 200, "rejected 3 of 7 spans: span too large"),
    ],
)  # fmt: skip
def test_an_endpoint_refusing_is_an_export_error_naming_it(
    real_db: Path, name: str, reply: Reply, status: int, message: str
) -> None:
    with (
        SessionStore(real_db, read_only=True) as store,
        CaptureEndpoint(reply) as endpoint,
        pytest.raises(ExportError, match=message) as caught,
    ):
        export_sessions(store, ["005e4ed3-208c-4f24-ac39-ceb1cfae1fa5"], endpoint.url)
    assert (caught.value.status, caught.value.endpoint) == (status, f"{endpoint.url}/v1/traces")


def test_an_endpoint_nobody_listens_on_is_an_export_error(
    real_db: Path, capsys: pytest.CaptureFixture
) -> None:
    url = f"http://127.0.0.1:{_free_port()}"
    with (
        SessionStore(real_db, read_only=True) as store,
        pytest.raises(ExportError, match="cannot be reached"),
    ):
        export_sessions(store, ["005e4ed3-208c-4f24-ac39-ceb1cfae1fa5"], url, timeout=5)
    assert main(["export", "otlp", str(real_db), "--endpoint", url, "--timeout", "5"]) == 1
    assert capsys.readouterr().err.startswith(
        f"ctxdesk: error: OTLP endpoint {url}/v1/traces cannot be reached"
    )


@pytest.mark.parametrize(
    ("name", "target", "message"),
    [
        ("no such database", "{tmp}/missing.db", "no such file"),
        ("no such session", "{db}:not-a-session", "no session"),
        ("neither a database nor a transcript", "{tmp}/notes.db", "not JSON or JSON Lines"),
    ],
)
def test_a_bad_database_or_session_is_one_error_line_and_nothing_sent(
    real_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture, name: str, target: str, message: str
) -> None:
    (tmp_path / "notes.db").write_text("not sqlite")
    with CaptureEndpoint() as endpoint:
        code = main(["export", "otlp", target.format(tmp=tmp_path, db=real_db), "--endpoint", endpoint.url])
        assert endpoint.bodies == []
    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("ctxdesk: error: ") and message in err and "Traceback" not in err


def test_batches_keep_a_session_together_and_send_every_span_once(real_db: Path) -> None:
    with SessionStore(real_db, read_only=True) as store, CaptureEndpoint() as endpoint:
        ids = [s.id for s in store.list_sessions()]
        whole = export_sessions(store, ids, endpoint.url)
        sent = len(endpoint.bodies)
        batched = export_sessions(store, ids, endpoint.url, batch_spans=5)
        assert batched.requests == len(endpoint.bodies) - sent > whole.requests == 1
        spans = [s.span_id for s in endpoint.spans()]
        assert len(spans) == 2 * whole.spans and set(spans[: whole.spans]) == set(spans[whole.spans :])


@given(st.lists(st.integers(1, 12), max_size=8), st.integers(1, 10))
def test_batching_splits_only_sessions_larger_than_a_batch(sizes: list[int], size: int) -> None:
    sessions = [[Span(name=f"{i}.{j}") for j in range(n)] for i, n in enumerate(sizes)]
    batches = list(_batches(sessions, size))
    assert [s.name for b in batches for s in b] == [s.name for group in sessions for s in group]
    assert all(0 < len(b) <= size for b in batches)
    for group in sessions:
        holding = [i for i, b in enumerate(batches) if any(s.name == group[0].name for s in b)]
        if len(group) <= size:
            assert all(s in batches[holding[0]] for s in group)


# -- a real Phoenix (arize-phoenix), served offline --------------------------------------------------------

PHOENIX_ENV_VAR = "CTXDESK_PHOENIX_BIN"
PHOENIX_START_S = 420
#: .ci/run installs Phoenix in the background and writes pip's exit status to this file when done.
PHOENIX_INSTALL_ENV_VAR = "CTXDESK_PHOENIX_INSTALL_STATUS"
PHOENIX_INSTALL_S = 3600  # bench/peers.py INSTALL_TIMEOUT_S: pip is stopped by then and its status written


def phoenix_bin() -> str | None:
    """Phoenix's ``phoenix`` script: $CTXDESK_PHOENIX_BIN, else the peers' venvs/phoenix, else on PATH."""
    from bench.peers import agents_dir

    candidates = [
        os.environ.get(PHOENIX_ENV_VAR),
        str(agents_dir() / "venvs" / "phoenix" / "bin" / "phoenix"),
    ]
    found = next((c for c in candidates if c and Path(c).is_file()), None)
    return found or shutil.which("phoenix")


def phoenix_expected() -> bool:
    """Phoenix is installed, being installed (.ci/run), or required (CI): else its tests skip."""
    in_ci = os.environ.get("CI", "").lower() in {"1", "true", "yes"}
    return phoenix_bin() is not None or bool(os.environ.get(PHOENIX_INSTALL_ENV_VAR)) or in_ci


def _installed_phoenix() -> str:
    """Phoenix's script, once .ci/run's background install (if any) is done; a clear failure if missing."""
    status = os.environ.get(PHOENIX_INSTALL_ENV_VAR)
    if status:
        deadline = time.monotonic() + PHOENIX_INSTALL_S
        while not Path(status).is_file():
            assert time.monotonic() < deadline, f"arize-phoenix not installed in {PHOENIX_INSTALL_S} s"
            time.sleep(2)
        log = Path(f"{status}.log")
        tail = log.read_text(errors="replace")[-2000:] if log.is_file() else ""
        assert Path(status).read_text().strip() == "0", f"installing arize-phoenix failed: {tail}"
    found = phoenix_bin()
    assert found, "arize-phoenix is missing: python -m bench.peers install --only phoenix"
    return found


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[str]:
    executable = _installed_phoenix()
    port, grpc_port = _free_port(), _free_port()
    env = {
        **os.environ, "PHOENIX_WORKING_DIR": str(tmp_path / "phoenix"), "PHOENIX_PORT": str(port),
        "PHOENIX_GRPC_PORT": str(grpc_port), "PHOENIX_HOST": "127.0.0.1", "PHOENIX_TELEMETRY_ENABLED": "false",
        # offline: no WASM sandbox download, no docs MCP server (its start can hang until a deadline when
        # egress is blocked), no assistant or /mcp mount: none of it serves the OTLP endpoint or /v1/spans
        "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false", "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
        "PHOENIX_ENABLE_MCP_SERVER": "false",
    }  # fmt: skip
    log = (tmp_path / "phoenix.log").open("w")
    process = subprocess.Popen([executable, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        # ~20 s on an idle machine; over 180 s was seen with 2 cores under a load of 24
        deadline = time.monotonic() + PHOENIX_START_S
        while True:
            assert process.poll() is None, (tmp_path / "phoenix.log").read_text()[-2000:]
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, f"phoenix did not start in {PHOENIX_START_S} s"
            time.sleep(0.5)
        yield url
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(timeout=60)  # over 30 s seen under load
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()  # reaped: an unreaped Popen is a ResourceWarning (an error here)
        log.close()


@pytest.mark.slow
@pytest.mark.skipif(
    not phoenix_expected(), reason="arize-phoenix not installed: python -m bench.peers install --only phoenix"
)
def test_a_real_phoenix_reads_back_every_call_with_its_tokens_and_window(real_db: Path, phoenix: str) -> None:
    session = "3458c242-c71f-4b42-90c9-6b0ff888daa5"  # the reactive compaction run
    assert main(["export", "otlp", f"{real_db}:{session}", "--endpoint", phoenix]) == 0
    with SessionStore(real_db, read_only=True) as store:
        events = {e.id: e for e in store.list_events(session)}
    deadline = time.monotonic() + 60
    while True:  # Phoenix inserts what it received in the background
        answer = httpx.get(f"{phoenix}/v1/projects/default/spans", params={"limit": 100}, timeout=10)
        assert answer.status_code == 200, answer.text
        spans = answer.json()["data"]
        if len(spans) == len(events) + 1 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert len(spans) == len(events) + 1
    (root,) = [s for s in spans if s["parent_id"] is None]
    assert (root["span_kind"], root["attributes"]["session.id"]) == ("AGENT", session)
    for span in spans:
        if span is root:
            continue
        a = span["attributes"]
        event = events[a["ctxdesk.event.id"]]
        assert span["parent_id"] == root["context"]["span_id"]
        assert a["ctxdesk.context.limit"] == event.effective_limit
        if event.kind == "compaction":
            assert a["ctxdesk.edit.before_tokens"] == event.details["before_tokens"]
            continue
        assert span["span_kind"] == "LLM" and a["llm.model_name"] == event.model
        failed = event.outcome not in (None, "ok")
        assert span["status_code"] == ("ERROR" if failed else "UNSET")
        if event.usage is None:
            continue
        assert a["llm.token_count.prompt"] == a["gen_ai.usage.input_tokens"] == event.usage.prompt_tokens
        assert a["llm.token_count.completion"] == event.usage.output_tokens
        assert a["gen_ai.usage.cache_read.input_tokens"] == event.usage.cache_read_input_tokens
        assert a["ctxdesk.components.total"] == event.components.total


SHARED_SESSION = (
    Path(os.environ.get("CTXDESK_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
    / "sessions"
    / "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl"
)


@pytest.mark.shared
def test_a_real_170_call_session_is_exported_whole(tmp_path: Path) -> None:
    """The real Claude Code session fe5e1c67 (a main thread and 5 sub-agents, 170 calls): 6 traces,
    170 chat spans, their token sums those the provider reported (as `ctxdesk costs` prices them)."""
    with SessionStore(tmp_path / "fe5e.db") as store, CaptureEndpoint() as endpoint:
        import_file(SHARED_SESSION, store)
        result = export_sessions(store, [s.id for s in store.list_sessions()], endpoint.url)
        spans = endpoint.spans()
    calls = [attrs(s) for s in spans if s.kind == Span.SPAN_KIND_CLIENT]
    assert (result.sessions, result.calls, len({s.trace_id for s in spans})) == (6, 170, 6)
    totals = [sum(a.get(f"gen_ai.usage.{k}", 0) for a in calls) for k in (
        "input_tokens", "output_tokens", "cache_read.input_tokens", "cache_creation.input_tokens")]  # fmt: skip
    assert totals == [3_786_648, 51_933, 3_647_854, 137_976]
