"""A proxied session on the dashboard: the Requests page opens any call whole, the provider's
count beside ours, read through DuckDB (dashboard.data.exact_requests) and driven with AppTest."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
import streamlit as st
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture
from streamlit.testing.v1 import AppTest

from dashboard import analysis, data
from dashboard.data import DB_PATHS_ENV_VAR
from engine.compaction.clearing import CLEARED_PREFIX
from engine.proxy import ProxyServer, Upstreams
from engine.settings import SETTINGS_ENV_VAR

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"
READ = {"name": "Read", "description": "Read a file", "input_schema": {"type": "object", "properties": {}}}


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[dict]]]:
    db = tmp_path_factory.mktemp("proxied") / "proxy.db"
    server = A.install(ScriptedServer(A.tool_calls(("Read", {"file_path": "a.py"})), A.text("It prints hi.")))
    with server, ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url)) as proxy:
        client = opened(
            anthropic.Anthropic(
                base_url=proxy.base_url,
                api_key="sk-x",
                max_retries=0,
                default_headers={"X-Ctxdesk-Session": "live-1"},
            )
        )
        history: list[dict] = [{"role": "user", "content": "What does a.py do?"}]
        first = client.messages.create(
            model="claude-sonnet-4-6", max_tokens=50, system="You are terse.", messages=history, tools=[READ]
        )
        tool = first.content[0]
        history += [
            {"role": "assistant", "content": [tool.model_dump(exclude_none=True)]},
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": tool.id, "content": "print('hi')"}],
            },
        ]
        client.messages.create(
            model="claude-sonnet-4-6", max_tokens=50, system="You are terse.", messages=history, tools=[READ]
        )
        assert proxy.recorder.flush()
        yield db, [r.body for r in server.requests]


def test_request_data_gives_each_call_with_both_counts_and_opens_it_exactly(
    proxied: tuple[Path, list[dict]],
) -> None:
    db, received = proxied
    con = data.connect([db])
    label = data.db_labels([db])[0]
    assert data.has_requests(con, label)
    calls = data.session_calls(con, label, "live-1")
    assert list(calls["seq"]) == [0, 1]
    assert (calls["our_prompt_tokens"] > 0).all() and (calls["provider_prompt_tokens"] > 0).all()
    detail = data.call_detail(con, label, int(calls["id"].iloc[1]))
    assert detail["system"] == received[1]["system"]
    assert detail["tools"] == received[1]["tools"]
    assert detail["messages"] == received[1]["messages"]
    assert detail["row"]["stop_reason"] == "end_turn"
    assert "print('hi')" in analysis.part_text(detail["messages"][-1])


def test_each_exact_request_carries_the_call_number_the_other_pages_use(tmp_path: Path) -> None:
    """Claude Code's compaction summarizer (call 3) keeps no exact request: the Requests page's
    calls are 1, 2, 4, 5, and the one the why page says it compacted at (call 2) is the 95,003-token
    one, not the page's third row."""
    from engine.explain import explain_store
    from engine.importers import import_file
    from engine.store import SessionStore

    folder = APP.parents[1] / "tests" / "fixtures" / "real_agents" / "claude-code" / "compact_auto"
    db = tmp_path / "cc.db"
    with SessionStore(db) as store:
        for path in sorted((folder / "transcripts").glob("*.jsonl")):
            import_file(path, store)
        [why] = [s for s in explain_store(store).sessions if ":" not in s.session_id]
    con = data.connect([db])
    calls = data.session_calls(con, data.db_labels([db])[0], why.session_id)
    assert list(calls["call_number"]) == [1, 2, 4, 5]
    [compaction] = why.compactions
    at = calls[calls["call_number"] == compaction.call].iloc[0]
    assert (compaction.call, at["provider_prompt_tokens"]) == (2, 95_003)


def test_a_proxied_session_is_an_ordinary_session_on_the_existing_pages(
    proxied: tuple[Path, list[dict]],
) -> None:
    db, _ = proxied
    con = data.connect([db])
    label = data.db_labels([db])[0]
    overview = data.sessions_overview(con)
    row = overview[overview["session_id"] == "live-1"].iloc[0]
    assert row["source"] == "proxy" and row["messages"] == 4
    assert len(data.timeline(con, label, "live-1")) == 1  # one turn (a tool loop) ...
    assert len(data.requests(con, label, "live-1")) == 2  # ... of two model calls


def test_the_requests_page_shows_the_calls_and_the_exact_prompt(
    proxied: tuple[Path, list[dict]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = proxied
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, [e.value for e in at.exception]
    label = data.db_labels([db])[0]
    at.session_state["selected_session"] = f"{label}::live-1"
    at.switch_page("views/requests.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.title[0].value == "Requests"
    assert at.metric[0].value == "2"
    codes = "\n".join(c.value for c in at.code)
    assert "You are terse." in codes and "print('hi')" in codes


@contextlib.contextmanager
def _proxy_with_policies(
    tmp_path: Path, policies: str, session: str
) -> Iterator[tuple[Path, ProxyServer, anthropic.Anthropic]]:
    """A proxy with ``[policies]`` set, in front of a scripted model, and an SDK client of one session."""
    settings = tmp_path / "settings.toml"
    settings.write_text(f"[policies]\n{policies}\n", encoding="utf-8")
    db = tmp_path / "p.db"
    server = A.install(ScriptedServer(default=A.text("ok")))
    with (
        server,
        ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url), settings_file=settings) as proxy,
    ):
        client = opened(
            anthropic.Anthropic(
                base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                default_headers={"X-Ctxdesk-Session": session},
            )
        )  # fmt: skip
        yield db, proxy, client


def _app_on(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, session: str) -> AppTest:
    """The dashboard on ``db`` with ``session`` selected."""
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "none.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    at.session_state["selected_session"] = f"{data.db_labels([db])[0]}::{session}"
    return at


def test_an_edited_call_shows_what_the_agent_sent_beside_what_the_model_received(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _proxy_with_policies(tmp_path, "clear_tool_results = { trigger = 0, keep = 0 }", "edited") as (
        db,
        proxy,
        client,
    ):
        messages = [
            {"role": "user", "content": "Read it."},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "SECRET-LOOKING OUTPUT " * 50}
                ],
            },
        ]
        client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=messages, tools=[READ])
        assert proxy.recorder.flush()
    con = data.connect([db])
    label = data.db_labels([db])[0]
    (call,) = data.session_calls(con, label, "edited").itertuples()
    assert call.original_id is not None
    diff = analysis.edit_diff(
        data.call_detail(con, label, int(call.original_id)),
        data.call_detail(con, label, int(call.id)),
    )
    assert "-[2] user: SECRET-LOOKING OUTPUT" in diff and f"+[2] user: {CLEARED_PREFIX}" in diff
    at = _app_on(db, tmp_path, monkeypatch, "edited")
    at.switch_page("views/requests.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any("A ctxdesk policy edited this call" in w.value for w in at.warning)
    assert any("SECRET-LOOKING OUTPUT" in c.value and CLEARED_PREFIX in c.value for c in at.code)
    savings = analysis.edit_savings(
        data.call_detail(con, label, int(call.original_id)),
        data.call_detail(con, label, int(call.id)),
    )
    assert savings["tokens_saved"] > 0 and savings["agent_bytes"] > savings["model_bytes"]
    # the Compaction page shows the same diff beside the tokens saved, and links to the Requests page
    at.switch_page("views/compaction.py").run()
    assert not at.exception, [e.value for e in at.exception]
    assert any(s.value == "Proxied calls: agent sent vs model received" for s in at.subheader)
    assert any(CLEARED_PREFIX in c.value for c in at.code)
    assert any(m.label == "Tokens saved (messages, our count)" for m in at.metric)


def test_a_policy_edit_is_on_the_timeline_with_its_reason_and_a_resent_one_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.store import SessionStore

    history: list[dict] = [{"role": "user", "content": "Read them."}]
    with _proxy_with_policies(
        tmp_path, "clear_tool_results = { trigger = 0, keep = 1 }", "timeline-edits"
    ) as (
        db,
        proxy,
        client,
    ):
        for i in range(3):  # each call adds a result; from the second on, an older one is cleared
            history += [
                {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}",
                                              "content": f"FILE {i} " * 200}]},
            ]  # fmt: skip
            client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=history, tools=[READ])
        history += [{"role": "assistant", "content": "ok"}, {"role": "user", "content": "Thanks."}]
        client.messages.create(model="claude-sonnet-4-6", max_tokens=20, messages=history, tools=[READ])
        assert proxy.recorder.flush()
    with SessionStore(db, read_only=True) as store:
        edits = store.list_events("timeline-edits", kind="compaction")
    # call 2 clears t0, call 3 clears t1 (t0's placeholder sent again), call 4 clears nothing new
    assert [e.outcome for e in edits] == ["compacted", "compacted", "kept"]
    assert "stay cleared" in edits[-1].reason and all(e.turn_index is not None for e in edits)
    con = data.connect([db])
    label = data.db_labels([db])[0]
    marks = data.markers(con, label, "timeline-edits")
    assert list(marks["reason"]) == [e.reason for e in edits[:2]] and "cleared" in marks["reason"].iloc[0]
    (row,) = data.sessions_overview(con).itertuples()
    assert row.compactions == 2  # a re-sent edit is no new compaction
    at = _app_on(db, tmp_path, monkeypatch, "timeline-edits")
    at.switch_page("views/timeline.py").run()
    at.radio(key="timeline_step").set_value("model call").run()
    at.number_input(key="timeline_call").set_value(2).run()  # the second call cleared the first result
    assert not at.exception, [e.value for e in at.exception]
    chart = at.get("plotly_chart")[0].proto.spec
    assert "Policy edit" in chart and "cleared" in chart  # the marker, and the reason in its hover
    assert any("Edited here by a ctxdesk policy" in i.value and "cleared" in i.value for i in at.info)
