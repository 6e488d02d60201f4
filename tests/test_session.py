"""The session manager's per-turn flow, end to end with a scripted model and a real SQLite store."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from engine.budget import measure_components
from engine.clients import AnthropicClient, ModelRequest, ScriptedClient
from engine.compaction import OfflineSummarizer
from engine.errors import ContextLengthExceededError, ContextOverflowError, ProviderError, ValidationError
from engine.messages import Message, ToolResultBlock, assistant, tool_use
from engine.prompt import PromptSection
from engine.session import SessionManager, TurnResult
from engine.settings import Settings, SettingsWatcher
from engine.store import SessionStore
from engine.tokens import Tokenizer, get_encoding, get_tokenizer
from tests.anthropic_server import FakeAnthropicServer, ScriptedResponse, message_body, success

MODEL = "claude-sonnet-4-6"
SMALL_WINDOW = {"context_window": 16_000, "max_output_tokens": 4_096}
GIT_LOG = "\n".join(
    f"commit {i:040x}\nAuthor: Dev {i % 7} <dev{i % 7}@example.com>\nDate:   2025-03-{i % 28 + 1:02d}\n\n"
    f"    payments: fix retry {i} in the ledger sync\n"
    for i in range(900)
)
TEST_LOG = "\n".join(f"tests/test_ledger.py::test_case_{i} PASSED [{i % 100:3d}%]" for i in range(700))
SOURCE = "def sync(ledger):\n    return ledger.flush()  # keep the ledger in step\n" * 40


def tool(name: str, description: str, **properties: str) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {"type": "object", "properties": {k: {"type": v} for k, v in properties.items()}},
    }


CODING_TOOLS = [
    tool("git_log", "Show the commit log of the repository."),
    tool("read_file", "Read a file of the repository.", path="string"),
    tool("run_tests", "Run the test suite and return its log."),
]
MCP_TOOLS = [
    tool(
        "mcp__github__create_pull_request", "Create a pull request on GitHub.", title="string", head="string"
    )
] + [
    tool(
        f"mcp__{server}__{verb}_{noun}",
        f"{verb.title()} a {noun} in {server}. " + "It takes an id and options. " * 6,
        id="string",
        options="string",
    )
    for server in ("slack", "postgres", "jira", "linear")
    for verb in ("get", "list", "update", "delete")
    for noun in ("item", "record")
]
HANDLERS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "git_log": lambda _: GIT_LOG,
    "read_file": lambda args: SOURCE.replace("sync", Path(args["path"]).stem),
    "run_tests": lambda _: TEST_LOG,
}


def small_window_settings(**extra: Any) -> Settings:
    return Settings.from_dict(
        {"models": {MODEL: SMALL_WINDOW | {"result_offload_threshold": 65_536} | extra}}
    )


def manager(store: SessionStore, client: ScriptedClient, **kwargs: Any) -> SessionManager:
    kwargs.setdefault("settings", small_window_settings())
    kwargs.setdefault("system_prompt", "You are a careful coding agent working in the payments repository.")
    kwargs.setdefault("tools", [*CODING_TOOLS, *MCP_TOOLS])
    kwargs.setdefault("tool_handlers", HANDLERS)
    kwargs.setdefault("summarizer", OfflineSummarizer())
    return SessionManager(client, store, **kwargs)


def ref_in_last_message(request: ModelRequest) -> str:
    match = re.search(r"res_[0-9a-f]+", request.messages[-1].text)
    assert match, "the offloaded result's reference is in the context"
    return match.group(0)


def final_report_when_offered(request: ModelRequest) -> Message:
    assert [t["name"] for t in request.tools] == ["final_report"]
    return assistant(
        "", tool_use("fin", "final_report", report="Ledger sync retries are flaky; fix in progress.")
    )


def read_turn(turn: int) -> list[Any]:
    return [
        assistant(f"Reading module {turn}a.", tool_use(f"ra{turn}", "read_file", path=f"src/mod{turn}a.py")),
        assistant(f"Reading module {turn}b.", tool_use(f"rb{turn}", "read_file", path=f"src/mod{turn}b.py")),
        f"Module {turn} decided: keep the retry loop, but bound it.",
    ]


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    with SessionStore(tmp_path / "sessions.db") as s:
        yield s


def kinds(store: SessionStore, session_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(e.kind, e.trigger, e.outcome) for e in store.list_events(session_id)]


def test_a_session_goes_through_deferral_offload_note_compaction_and_a_forced_final_turn(
    store: SessionStore,
) -> None:
    steps: list[Any] = [
        assistant("Let me find the PR tool.", tool_use("s1", "tool_search", query="create a pull request")),
        assistant("", tool_use("g1", "git_log")),
        lambda req: assistant(
            "", tool_use("r1", "read_result", ref_id=ref_in_last_message(req), pattern="retry 12")
        ),
        "The retries changed in commit 12.",
    ]
    for turn in range(1, 9):
        steps += read_turn(turn)
    steps += [assistant("", tool_use("t1", "run_tests")), final_report_when_offered]
    client = ScriptedClient(steps, model=MODEL, usage_ratio=1.04)
    m = manager(store, client, title="flaky ledger sync", compaction="sandwich")

    results = [m.run_turn("Why is the ledger sync test flaky?")]
    results += [m.run_turn(f"Read module {turn}") for turn in range(1, 9)]
    results.append(m.run_turn("Now run the tests."))

    assert [r.stop for r in results[:-1]] == ["end_turn"] * 9
    assert results[-1] == TurnResult(9, "Ledger sync retries are flaky; fix in progress.", "final_report", "final", 2,
                                     "Ledger sync retries are flaky; fix in progress.")  # fmt: skip
    assert client.remaining == 0
    sid = m.session_id
    events = store.list_events(sid)
    seen = kinds(store, sid)

    # deferral: 33 MCP definitions wait behind tool_search; the search promotes the PR tool
    deferral = store.list_events(sid, kind="deferral")
    assert deferral and "mcp__github__create_pull_request" in deferral[0].details["deferred"]
    assert "tool_search" in client.requests[0].tool_names
    assert "mcp__github__create_pull_request" not in client.requests[0].tool_names
    assert ("tool_search", None, "hit") in seen
    assert "mcp__github__create_pull_request" in client.requests[1].tool_names

    # offload: the 98 KB git log is stored whole, the context holds a reference read back by read_result
    blob = store.list_blobs(sid)[0]
    assert blob.size_bytes == len(GIT_LOG.encode()) and blob.tool_name == "git_log"
    assert store.get_blob(blob.ref_id).content == GIT_LOG.encode()
    assert "retry 12 in the ledger sync" in client.requests[3].messages[-1].text
    assert store.list_events(sid, kind="request")[2].components.offloaded_bytes == blob.size_bytes

    # note at 80%, in the context status section of the system prompt
    note = store.list_events(sid, kind="note")[0]
    assert note.reason.startswith("[Context: 8") and note.details["section"] == "context_status"
    noted = next(r for r in client.requests if "[Context: " in r.system)
    assert not any("[Context: " in msg.text for msg in noted.messages)

    # compaction at the threshold, with a snapshot; the summary goes into the system prompt only
    compaction = next(e for e in events if e.kind == "compaction" and e.outcome == "compacted")
    assert compaction.trigger in ("compact_threshold", "hard_block") and compaction.turn_index is not None
    snapshot = store.latest_snapshot(sid)
    assert snapshot is not None and snapshot.event_id == compaction.id
    assert compaction.details["removed_message_seqs"] and compaction.details["after_tokens"] < compaction.details[
        "before_tokens"]  # fmt: skip
    after = [
        r
        for r in client.requests
        if r.payload.get("system") and "Summary of earlier conversation" in str(r.payload["system"])
    ]
    assert after, "the summary is injected at request time"
    assert not any("Summary of earlier conversation" in msg.text for r in after for msg in r.messages)
    assert store.message_count(sid) == len(store.load_transcript(sid))
    assert store.load_transcript(sid)[0].text == "Why is the ledger sync test flaky?"

    # the 32 KB test log does not fit: rejected, final turn forced, final_report ends the session
    rejected = next(e for e in events if e.kind == "guard" and e.outcome == "rejected")
    assert rejected.reason == "token_budget_exceeded" and rejected.details["tool_name"] == "run_tests"
    forced = next(e for e in events if e.kind == "guard" and e.outcome == "forced_final")
    assert forced.seq > rejected.seq and forced.details["tools_restricted_to"] == ["final_report"]
    withheld = store.load_transcript(sid)[-3].content[0]
    assert (
        isinstance(withheld, ToolResultBlock)
        and withheld.is_error
        and "token_budget_exceeded" in withheld.text
    )
    assert store.get_session(sid).status == "final"
    with pytest.raises(ValidationError, match="ended"):
        m.run_turn("one more thing")

    # one request event per model call, with our components beside the provider's usage
    requests = store.list_events(sid, kind="request")
    assert len(requests) == len(client.requests)
    for event, request in zip(requests, client.requests, strict=True):
        # our estimate is what the guard judged; the stored components add up to the provider's count
        assert event.outcome == "ok" and event.projected_tokens == request.estimated_prompt_tokens
        assert event.usage is not None and event.usage.prompt_tokens == round(event.projected_tokens * 1.04)
        assert event.components.total == event.usage.prompt_tokens and event.components.unattributed == 0
        assert event.components_basis == "reconciled"  # our measure, made to add up to the provider's count
        assert event.limit_tokens == 16_000 - 4_096 - 256
    stored = store.load_messages(sid)
    assert all(row.usage is not None for row in stored if row.message.role == "assistant")


def test_resume_loads_the_snapshot_so_the_session_does_not_overflow_again(store: SessionStore) -> None:
    steps: list[Any] = []
    for turn in range(1, 10):
        steps += read_turn(turn)
    first = manager(store, ScriptedClient(steps, model=MODEL))
    for turn in range(1, 10):
        first.run_turn(f"Read module {turn}")
    sid = first.session_id
    assert store.latest_snapshot(sid) is not None
    transcript_tokens = sum(row.tokens for row in store.load_messages(sid))
    assert transcript_tokens > first.settings.compact_tokens, "the whole transcript would overflow"

    client = ScriptedClient(["Resumed: bounded retries are in."], model=MODEL)
    resumed = SessionManager.resume(store, sid, client, settings=small_window_settings(),
                                    tools=[*CODING_TOOLS, *MCP_TOOLS], tool_handlers=HANDLERS,
                                    summarizer=OfflineSummarizer())  # fmt: skip
    assert resumed.history == store.load_resume_history(sid)[0]
    assert resumed.summary == store.latest_snapshot(sid).summary
    result = resumed.run_turn("Where were we?")
    assert result.turn_index == 9 and result.text.startswith("Resumed")
    sent = client.requests[0]
    assert sent.estimated_prompt_tokens < resumed.settings.compact_tokens
    assert len(sent.messages) < store.message_count(sid)
    resume = store.list_events(sid, kind="resume")[0]
    assert resume.outcome == "resumed" and resume.details["snapshot_through_seq"] is not None
    assert store.load_messages(sid)[-2].turn_index == 9


def cold_exact_tokenizer() -> Tokenizer:
    """o200k_base with an empty cache: a recount that owes nothing to counts the manager cached."""
    encoding = get_encoding("o200k_base")
    return Tokenizer(get_tokenizer("o200k_base").info, lambda text: len(encoding.encode_ordinary(text)))


def assert_running_totals_exact(m: SessionManager) -> None:
    """The manager's running history totals equal a full measure_components recount."""
    running = m.measure().components
    recount = measure_components(tokenizer=cold_exact_tokenizer(), messages=m.history)
    assert (running.conversation, running.tool_results) == (recount.conversation, recount.tool_results)


def test_running_totals_equal_a_full_recount_through_compactions_emergency_and_resume(
    store: SessionStore,
) -> None:
    too_long = ContextLengthExceededError("prompt is too long: 20000 tokens > 16000 maximum", status=400)
    steps: list[Any] = [
        assistant("", tool_use("s1", "tool_search", query="create a pull request")),  # tools change
        assistant("", tool_use("g1", "git_log")),
        "The log is stored.",
    ]
    for turn in range(1, 7):
        steps += read_turn(turn)
    steps += [assistant("", tool_use("c1", "compact_context", strategy="sliding_window")), "Compacted."]
    for turn in range(7, 11):
        steps += read_turn(turn)
    steps += [too_long, "Answer after the retry."]
    for turn in range(11, 14):
        steps += read_turn(turn)
    settings = small_window_settings(tokenizer="o200k_base")
    client = ScriptedClient(steps, model=MODEL)
    m = manager(store, client, settings=settings)
    assert_running_totals_exact(m)
    m.run_turn("Show me the git log.")
    assert_running_totals_exact(m)
    for turn in range(1, 7):
        m.run_turn(f"Read module {turn}")
        assert_running_totals_exact(m)
    m.run_turn("Compact, please.")
    assert_running_totals_exact(m)
    m.compact("truncate", target_tokens=2_000)
    assert_running_totals_exact(m)
    for turn in range(7, 11):
        m.run_turn(f"Read module {turn}")
        assert_running_totals_exact(m)
    m.run_turn("And the conclusion?")
    assert_running_totals_exact(m)
    for turn in range(11, 14):
        m.run_turn(f"Read module {turn}")
        assert_running_totals_exact(m)

    compacted = [
        e.trigger for e in store.list_events(m.session_id, kind="compaction") if e.outcome == "compacted"
    ]
    assert {"tool", "manual", "provider_error"} <= set(compacted)
    assert {"compact_threshold", "hard_block"} & set(compacted), "a compaction at the threshold happened"
    # every model call recorded what was sent, counted from the running totals: recount each one
    cold = cold_exact_tokenizer()
    requests = store.list_events(m.session_id, kind="request")
    for event, request in zip(requests, client.requests, strict=True):
        history = event.components.conversation + event.components.tool_results
        assert history == cold.count_messages(request.messages)
        assert event.components.tools == cold.count_tools(list(request.tools))
    assert len({tuple(r.tool_names) for r in client.requests}) > 1, "the tools sent changed"

    resumed = SessionManager.resume(store, m.session_id, ScriptedClient(["Resumed."], model=MODEL),
                                    settings=settings, tools=[*CODING_TOOLS, *MCP_TOOLS],
                                    tool_handlers=HANDLERS, summarizer=OfflineSummarizer())  # fmt: skip
    assert_running_totals_exact(resumed)
    resumed.run_turn("Where were we?")
    assert_running_totals_exact(resumed)


def test_a_context_length_error_takes_the_emergency_path_and_one_retry(store: SessionStore) -> None:
    too_long = ContextLengthExceededError("prompt is too long: 20000 tokens > 16000 maximum", status=400)
    steps: list[Any] = [*read_turn(1), *read_turn(2), "ok", too_long, "Answer after the retry."]
    client = ScriptedClient(steps, model=MODEL)
    m = manager(store, client)
    for turn in (1, 2):
        m.run_turn(f"Read module {turn}")
    m.run_turn("Summarise.")
    result = m.run_turn("And the conclusion?")

    assert result.text == "Answer after the retry." and result.steps == 1
    requests = store.list_events(m.session_id, kind="request")
    assert [(e.trigger, e.outcome) for e in requests[-2:]] == [
        ("user_input", "context_length_exceeded"),
        ("retry", "ok"),
    ]
    assert "prompt is too long" in requests[-2].reason
    emergency = store.list_events(m.session_id, kind="compaction")[-1]
    assert emergency.trigger == "provider_error" and emergency.outcome == "compacted"
    assert emergency.details["strategies_run"] == ["emergency"]
    assert store.latest_snapshot(m.session_id).event_id == emergency.id
    assert len(client.requests[-1].messages) < len(client.requests[-2].messages)


def test_a_second_context_length_error_after_the_retry_is_a_context_overflow(store: SessionStore) -> None:
    def too_long() -> ContextLengthExceededError:
        return ContextLengthExceededError("prompt is too long", status=400)

    client = ScriptedClient([*read_turn(1), too_long(), too_long()], model=MODEL)
    m = manager(store, client)
    m.run_turn("Read module 1")
    with pytest.raises(ContextOverflowError):
        m.run_turn("Conclusion?")
    outcomes = [e.outcome for e in store.list_events(m.session_id, kind="request")]
    assert outcomes[-2:] == ["context_length_exceeded", "context_length_exceeded"]


def test_a_fallback_whose_window_is_too_small_is_skipped_provider(store: SessionStore) -> None:
    settings = Settings.from_dict(
        {
            "models": {
                MODEL: SMALL_WINDOW,
                "claude-haiku-4-5": {"context_window": 4_400, "max_output_tokens": 4_096},
            }
        }
    )
    primary = ScriptedClient(["From the primary."], model=MODEL)
    fallback = ScriptedClient([], model="claude-haiku-4-5")
    m = manager(store, primary, fallbacks=[fallback], settings=settings)
    assert m.run_turn("hello").text == "From the primary."
    guard = store.list_events(m.session_id, kind="guard")
    assert {(e.model, e.outcome) for e in guard} == {(MODEL, "ok"), ("claude-haiku-4-5", "skipped_provider")}
    skipped = next(e for e in guard if e.outcome == "skipped_provider")
    assert skipped.reason == "floor_exceeds_limit" and skipped.limit_tokens == 4_400 - 4_096 - 256
    assert not fallback.requests
    assert store.get_session(m.session_id).settings["fallbacks"][0]["context_window"] == 4_400


def test_a_retryable_provider_error_falls_back_to_the_next_target(store: SessionStore) -> None:
    settings = Settings.from_dict({"models": {MODEL: SMALL_WINDOW, "claude-opus-4-7": SMALL_WINDOW}})
    overloaded = ProviderError(
        "anthropic API overloaded (HTTP 529)", provider="anthropic", status=529, retryable=True
    )
    primary = ScriptedClient([overloaded], model=MODEL)
    fallback = ScriptedClient(["From the fallback."], model="claude-opus-4-7")
    m = manager(store, primary, fallbacks=[fallback], settings=settings)
    assert m.run_turn("hello").text == "From the fallback."
    requests = store.list_events(m.session_id, kind="request")
    assert [(e.model, e.outcome) for e in requests] == [(MODEL, "provider_error"), ("claude-opus-4-7", "ok")]


def test_a_non_retryable_provider_error_propagates(store: SessionStore) -> None:
    bad = ProviderError("anthropic API error (HTTP 401: invalid x-api-key)", status=401)
    m = manager(store, ScriptedClient([bad], model=MODEL))
    with pytest.raises(ProviderError, match="401"):
        m.run_turn("hello")


def test_manual_compaction_and_the_compact_context_tool_write_snapshots(store: SessionStore) -> None:
    steps: list[Any] = [*read_turn(1), *read_turn(2), *read_turn(3)]
    steps += [assistant("", tool_use("c1", "compact_context", strategy="sliding_window")), "Compacted."]
    m = manager(store, ScriptedClient(steps, model=MODEL))
    for turn in (1, 2, 3):
        m.run_turn(f"Read module {turn}")
    report = m.compact("sandwich")
    assert not report.noop and report.snapshot_id is not None
    assert m.history == store.latest_snapshot(m.session_id).messages
    m.run_turn("Compact, please.")
    compactions = store.list_events(m.session_id, kind="compaction")
    assert [(e.trigger, e.details["strategy"]) for e in compactions] == [
        ("manual", "sandwich"),
        ("tool", "sliding_window"),
    ]
    # force_compact writes each event whole: the turn and the window in force, no later UPDATE
    assert [(e.turn_index, e.provider, e.model) for e in compactions] == [
        (2, "anthropic", MODEL),
        (3, "anthropic", MODEL),
    ]
    assert {(e.context_window, e.max_output_tokens, e.buffer_tokens) for e in compactions} == {
        (16_000, 4_096, m.settings.buffer_tokens)
    }
    answer = store.load_transcript(m.session_id)[-2].content[0]
    assert answer.text.startswith(("Compacted", "Nothing compacted"))


def test_force_compact_event_fields_are_written_with_the_event_and_checked_first(
    store: SessionStore,
) -> None:
    from engine.compaction import force_compact

    m = manager(store, ScriptedClient([*read_turn(1), *read_turn(2)], model=MODEL))
    for turn in (1, 2):
        m.run_turn(f"Read module {turn}")
    sid = m.session_id
    fields = {"turn_index": 7, "provider": "gateway", "context_window": 32_000, "buffer_tokens": 500}
    report = force_compact(store, sid, strategy="truncate", target_tokens=400, event_fields=fields)
    event = store.list_events(sid, kind="compaction")[-1]
    assert event.id == report.event_id and event.model == MODEL  # the session's model by default
    assert (event.turn_index, event.provider, event.context_window, event.buffer_tokens) == (
        7,
        "gateway",
        32_000,
        500,
    )
    written = len(store.list_events(sid)), len(store.list_snapshots(sid))
    for bad in ({"projected_tokens": 1}, {"context_window": "large"}):
        with pytest.raises(ValidationError, match="event_fields"):
            force_compact(store, sid, strategy="truncate", target_tokens=400, event_fields=bad)
    assert (len(store.list_events(sid)), len(store.list_snapshots(sid))) == written


def test_tool_failures_and_unknown_tools_become_error_results(
    store: SessionStore, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(_: dict[str, Any]) -> str:
        raise OSError("disk on fire")

    steps = [assistant("", tool_use("a", "read_file", path="x.py"), tool_use("b", "no_such_tool")), "Sorry."]
    m = manager(store, ScriptedClient(steps, model=MODEL), tool_handlers={**HANDLERS, "read_file": broken})
    with caplog.at_level(logging.WARNING):
        m.run_turn("read x.py")
    results = store.load_transcript(m.session_id)[2].content
    assert [r.is_error for r in results] == [True, True]
    assert "OSError: disk on fire" in results[0].text and "unknown tool 'no_such_tool'" in results[1].text
    assert "disk on fire" in caplog.text


def test_handlers_may_not_replace_built_in_tools(store: SessionStore) -> None:
    with pytest.raises(ValidationError, match="built-in"):
        manager(store, ScriptedClient([], model=MODEL), tool_handlers={"read_result": lambda _: ""})


def test_settings_are_reloaded_live_between_turns(store: SessionStore, tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(f'[models."{MODEL}"]\ncontext_window = 200000\nmax_output_tokens = 4096\n')
    watcher = SettingsWatcher(path, watch=False)
    client = ScriptedClient(["one", "two"], model=MODEL)
    m = manager(store, client, settings=watcher)
    m.run_turn("first")
    path.write_text(f'[models."{MODEL}"]\ncontext_window = 32000\nmax_output_tokens = 4096\ncompact_trigger = 0.9\n'.replace(
        "compact_trigger", "compact_threshold"))  # fmt: skip
    watcher.reload_now()
    m.run_turn("second")
    windows = [e.context_window for e in store.list_events(m.session_id, kind="request")]
    assert windows == [200_000, 32_000]
    stored = store.get_session(m.session_id).settings
    assert stored["context_window"] == 32_000 and stored["compact_threshold"] == 0.9
    assert stored["sources"]["context_window"].startswith(f"model:{MODEL}")


def test_a_settings_path_is_watched_and_the_watcher_stopped_on_close(
    store: SessionStore, tmp_path: Path
) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("compact_trigger = 0.9\nmax_output_tokens = 2048\n")
    with manager(store, ScriptedClient(["hi"], model=MODEL), settings=path) as m:
        assert m.settings.compact_threshold == 0.9 and m.settings.max_output_tokens <= 64_000
        assert m.run_turn("hello").text == "hi"


def test_the_api_key_never_reaches_the_database_or_the_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    key = "sk-ant-api03-CTXDESK-DISTINCTIVE-FAKE-KEY-7f3a9c"
    monkeypatch.setenv("ANTHROPIC_API_KEY", key)
    call = [{"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {"path": "a.py"}}]
    replies = [
        ScriptedResponse(200, message_body("", content=call, stop_reason="tool_use", input_tokens=900)),
        success("Done.", input_tokens=1500, output_tokens=10),
    ]
    db = tmp_path / "keys.db"
    with (
        caplog.at_level(logging.DEBUG),
        FakeAnthropicServer(*replies) as server,
        AnthropicClient(MODEL, base_url=server.base_url, max_retries=0, timeout=5) as client,
        SessionStore(db) as store,
    ):
        m = manager(store, client)
        assert m.run_turn("read a.py").text == "Done."
        assert key in str(server.requests[0].headers), "the SDK did send the key"
        requests = store.list_events(m.session_id, kind="request")
        assert [e.usage.input_tokens for e in requests] == [900, 1500]
    files = [p for p in tmp_path.iterdir() if p.name.startswith("keys.db")]
    assert files
    for path in files:
        assert key.encode() not in path.read_bytes()
        assert b"DISTINCTIVE-FAKE-KEY" not in path.read_bytes()
    assert "DISTINCTIVE-FAKE-KEY" not in caplog.text


def test_in_a_forced_final_turn_other_tools_are_refused_and_the_next_turn_starts_fresh(
    store: SessionStore,
) -> None:
    steps: list[Any] = [
        assistant("", tool_use("t1", "run_tests")),  # 32 KB inline: rejected, final turn forced
        assistant("", tool_use("r1", "read_file", path="a.py")),  # ignores the restriction
        "I could not finish: the context is full.",  # answers in text instead of final_report
        "Fresh turn.",
    ]
    client = ScriptedClient(steps, model=MODEL)
    m = manager(store, client)
    first = m.run_turn("Run the tests.")
    assert first.stop == "end_turn" and first.status == "active"
    refused = [e for e in store.list_events(m.session_id, kind="guard") if e.reason == "tools_refused"]
    assert refused and refused[0].details["tool_name"] == "read_file"
    assert "tools_refused" in store.load_transcript(m.session_id)[-2].content[0].text
    assert client.requests[2].tool_names == ["final_report"]
    assert m.run_turn("Start over.").text == "Fresh turn."
    assert "read_file" in client.requests[3].tool_names


class _BrokenSection(PromptSection):
    """A section whose render fails: every request's prompt degrades to plain concatenation."""

    def render(self) -> str:
        raise ValueError("template variable missing")


def test_a_degraded_prompt_is_recorded_once_per_request_sent(store: SessionStore) -> None:
    """Past the note threshold and through compactions, each request's assembly is recorded once."""
    steps = [step for turn in range(8) for step in read_turn(turn)]
    m = manager(store, ScriptedClient(steps, model=MODEL), sections=[_BrokenSection("project", "rules")])
    for turn in range(8):
        m.run_turn(f"Read module {turn}.")
    events = store.list_events(m.session_id)
    assert any(e.kind == "note" for e in events) and any(e.kind == "compaction" for e in events)
    degraded = [e for e in events if e.kind == "degraded" and e.trigger == "prompt"]
    requests = [e for e in events if e.kind == "request"]
    assert len(degraded) == len(requests) == 24


def test_every_request_event_says_how_many_transcript_messages_it_sent(store: SessionStore) -> None:
    steps = [
        assistant("Reading it.", tool_use("r1", "read_file", path="src/a.py")),
        "Done reading.",
        "Second answer.",
    ]
    m = manager(store, ScriptedClient(steps, model=MODEL))
    m.run_turn("Read src/a.py.")
    m.run_turn("And now?")
    requests = store.list_events(m.session_id, kind="request")
    # user | request 0 -> reply, tool result | request 1 -> reply | user | request 2 -> reply
    assert [e.details["messages_sent"] for e in requests] == [1, 3, 5]
    assert all(
        store.load_messages(m.session_id)[e.details["messages_sent"]].seq == e.message_seq for e in requests
    )


def test_the_guard_projects_what_each_request_measures(store: SessionStore) -> None:
    """One guard for the session: its counters follow replies and tool outputs exactly."""
    m = manager(store, ScriptedClient(read_turn(0) + read_turn(1), model=MODEL))
    m.run_turn("Read module 0.")
    m.run_turn("Read module 1.")
    events = store.list_events(m.session_id)
    requests = {e.seq: e for e in events if e.kind == "request"}
    for guard in (e for e in events if e.kind == "guard" and e.trigger == "turn_preflight"):
        sent = next(r for seq, r in sorted(requests.items()) if seq > guard.seq)
        assert guard.projected_tokens == sent.components.total
