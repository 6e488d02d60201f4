"""Exact requests in the session database: content-addressed parts, rebuilt bodies, no secrets."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from engine.store import RequestRecord, SessionStore
from engine.store.payloads import cache_control_positions, rebuild_body, split_body
from engine.store.schema import MIGRATIONS, apply_migrations

SYSTEM = [
    {"type": "text", "text": "You are a coding agent."},
    {"type": "text", "text": "Rules...", "cache_control": {"type": "ephemeral", "ttl": "1h"}},
]
TOOLS = [{"name": "Read", "description": "Read a file", "input_schema": {"type": "object"}}]


def body(n_messages: int) -> dict:
    messages = []
    for i in range(n_messages):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append({"role": role, "content": [{"type": "text", "text": f"message {i} " * 50}]})
    messages[-1]["content"][-1]["cache_control"] = {"type": "ephemeral"}
    return {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32000,
        "system": SYSTEM,
        "messages": messages,
        "tools": TOOLS,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "metadata": {"user_id": '{"session_id": "abc"}'},
        "stream": True,
    }


@pytest.mark.parametrize(
    "sent",
    [
        body(3),
        {
            "model": "gpt-5",
            "input": [{"role": "user", "content": "hi"}],
            "instructions": "Be brief.",
            "tools": [],
        },
        {"model": "gpt-5", "input": "just a string"},
        {
            "model": "gpt-4o",
            "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        },
        {
            "contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "systemInstruction": {"parts": [{"text": "s"}]},
        },
        {},
    ],
    ids=["anthropic", "responses", "responses-string-input", "chat", "gemini", "empty"],
)
def test_split_then_rebuild_gives_the_body_back_in_key_order(sent: dict) -> None:
    parts = split_body(sent)
    rebuilt = rebuild_body(
        parts["keys"],
        parts["params"],
        system_key=parts["system_key"],
        system=parts["system"],
        tools=parts["tools"],
        messages_key=parts["messages_key"],
        messages=parts["messages"],
    )
    assert rebuilt == sent
    assert list(rebuilt) == list(sent)


def test_cache_control_positions_name_each_breakpoint_with_its_ttl() -> None:
    positions = cache_control_positions(body(3))
    assert positions == [
        {"path": "system[1]", "type": "ephemeral", "ttl": "1h"},
        {"path": "messages[2].content[0]", "type": "ephemeral", "ttl": "5m"},
    ]


def test_a_long_session_stores_its_shared_prefix_once(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(model="claude-sonnet-4-5", source="proxy")
        sent = [body(n) for n in range(1, 41)]
        for b in sent:
            store.record_request(sid, RequestRecord(api="anthropic_messages", body=b, status_code=200))
        requests = store.list_requests(sid, with_body=True)
        assert [r.body for r in requests] == sent
        assert [r.seq for r in requests] == list(range(40))
        conn = sqlite3.connect(tmp_path / "s.db")
        kinds = dict(conn.execute("SELECT kind, count(*) FROM payload_parts GROUP BY kind").fetchall())
        # one system, one tool list; each message once, plus the cache-marked last message per request
        assert kinds["system"] == 1 and kinds["tools"] == 1
        assert kinds["message"] <= 2 * 40
        stored = conn.execute("SELECT sum(size_bytes) FROM payload_parts").fetchone()[0]
        naive = sum(len(str(b)) for b in sent)
        assert stored * 10 < naive


def test_a_request_row_keeps_params_usage_timing_and_response(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(source="proxy")
        rid = store.record_request(
            sid,
            RequestRecord(
                api="anthropic_messages",
                path="/v1/messages?beta=true",
                body=body(1) | {"context_management": {"edits": [{"type": "clear_tool_uses_20250919"}]}},
                agent_session_id="abc",
                status_code=200,
                response={"content": [{"type": "text", "text": "ok"}]},
                stop_reason="end_turn",
                input_tokens=10,
                output_tokens=5,
                cache_read_input_tokens=100,
                cache_creation_input_tokens=30,
                cache_creation_5m_tokens=10,
                cache_creation_1h_tokens=20,
                usage={"input_tokens": 10},
                latency_ms=12.5,
                ttfb_ms=3.0,
                headers={
                    "x-api-key": "sk-secret",
                    "Authorization": "Bearer sk-secret",
                    "anthropic-version": "1",
                },
            ),
        )
        got = store.get_request(rid)
        assert got.model == "claude-sonnet-4-5" and got.stream is True and got.max_tokens == 32000
        assert got.thinking == {"type": "enabled", "budget_tokens": 1024}
        assert got.context_management == {"edits": [{"type": "clear_tool_uses_20250919"}]}
        assert got.cache_creation_1h_tokens == 20 and got.ttfb_ms == 3.0 and got.stop_reason == "end_turn"
        assert got.headers == {"anthropic-version": "1"}
        assert got.message_count == 1 and got.parsed
    raw = (tmp_path / "s.db").read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("s.db-*"))
    assert b"sk-secret" not in raw


def test_an_unparsed_body_is_kept_as_bytes(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(source="proxy")
        rid = store.record_request(
            sid, RequestRecord(api="passthrough", raw_body=b"\xff not json", status_code=404)
        )
        got = store.get_request(rid)
        assert not got.parsed and got.body is None and got.raw_body == b"\xff not json"
        assert store.list_requests(sid)[0].id == rid


def test_a_version_1_database_gains_the_request_tables(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    conn.execute("CREATE TABLE _migrations (name TEXT PRIMARY KEY, applied_utc TEXT NOT NULL)")
    MIGRATIONS[0][1](conn)
    conn.execute("INSERT INTO _migrations VALUES ('m001_initial', 'x')")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("PRAGMA application_id = 0x43545844")
    conn.close()
    with SessionStore(tmp_path / "old.db") as store:
        sid = store.create_session()
        store.record_request(sid, RequestRecord(api="openai_chat", body={"messages": []}))
    conn = sqlite3.connect(tmp_path / "old.db", isolation_level=None)
    assert "m002_request_payloads" in {r[0] for r in conn.execute("SELECT name FROM _migrations")}
    assert apply_migrations(conn) == []
