"""Hostile content: no API key is ever written down, stored content comes back verbatim, and
the dashboard only listens on loopback.

The key check runs a whole session through the SessionManager (tool calls, an offloaded
output, a manual compaction, CONTEXT_DEBUG logging on) with a distinctive fake Anthropic key
in the environment and in a fallback client, then scans the database bytes (WAL included,
before and after close) and every log record.
"""

from __future__ import annotations

import json
import logging
import tomllib
from pathlib import Path

import pytest

from dashboard import data
from engine.clients import AnthropicClient, ScriptedClient
from engine.compaction import OfflineSummarizer
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.session import SessionManager
from engine.settings import Settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
FAKE_KEY = "sk-ant-api03-CTXDESKFAKEKEY-" + "q7Zx" * 16 + "-Zz9AA"
#: Pieces that would show a key cut short, masked or wrapped.
KEY_PARTS = (FAKE_KEY, FAKE_KEY[-32:], "CTXDESKFAKEKEY")

BASH_TOOL = {
    "name": "bash",
    "description": "Run a shell command.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}


def bash(tool_input: dict) -> str:
    if "cat" in tool_input["command"]:
        return "\n".join(f"line {i}: build output ✓" for i in range(2_000))  # > offload threshold
    return "ok"


def db_bytes(db: Path) -> bytes:
    return b"".join(p.read_bytes() for p in (db, Path(f"{db}-wal")) if p.exists())


def test_an_api_key_never_reaches_the_database_logs_or_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    monkeypatch.setenv("CONTEXT_DEBUG", "1")
    caplog.set_level(logging.DEBUG)
    db = tmp_path / "session.db"
    steps = []
    for turn in range(4):
        steps += [
            assistant("Let me look.", tool_use(f"toolu_{turn}a", "bash", command="cat build.log")),
            assistant("And one more.", tool_use(f"toolu_{turn}b", "bash", command="ls")),
            f"Turn {turn} done.",
        ]
    client = ScriptedClient(steps, model="claude-sonnet-4-5")
    fallback = AnthropicClient("claude-haiku-4-5", api_key=FAKE_KEY, max_retries=0)
    store = SessionStore(db)
    manager = SessionManager(
        client,
        store,
        title="secrets",
        system_prompt="You are a careful agent.",
        tools=[BASH_TOOL],
        tool_handlers={"bash": bash},
        fallbacks=[fallback],
        settings=Settings(),
        summarizer=OfflineSummarizer(),
        metadata={"purpose": "reliability"},
    )
    try:
        for turn in range(4):
            manager.run_turn(f"Step {turn}: build the project and read the log.")
        manager.compact("summarize")
        assert len(client.requests) == len(steps), "every scripted call was made (the fallback never was)"
        assert store.list_blobs(manager.session_id), "the long output was offloaded"
        assert store.list_events(manager.session_id, kind="compaction")
        open_bytes = db_bytes(db)
    finally:
        manager.close()
        store.close()
    closed_bytes = db_bytes(db)
    logged = caplog.text + "".join(json.dumps(r.__dict__, default=str) for r in caplog.records)
    assert any(r.name == "ctxdesk.context" for r in caplog.records), "debug logging ran"
    for part in KEY_PARTS:
        assert part.encode() not in open_bytes
        assert part.encode() not in closed_bytes
        assert part not in logged


HOSTILE = (
    "<script>alert(1)</script><img src=x onerror=alert(2)> **bold?** [x](javascript:alert(3)) $x^2$",
    "\x1b[31mred\x1b[0m \x07 bell, \u202eRTL override\u202c, zero\u200bwidth, NUL \x00 inside",
    "'; DROP TABLE messages; -- \" OR 1=1 --",
    "{{ template }} ${env:HOME} %s %n \\u0000 \\x00",
    "emoji 🧨🔥 and combining e\u0301 and surrogate-free 𝕏",
)


def test_the_dashboard_data_layer_returns_stored_content_verbatim(tmp_path: Path) -> None:
    db = tmp_path / "hostile.db"
    messages: list[Message] = []
    for i, text in enumerate(HOSTILE):
        messages += [
            user(text),
            assistant(text, tool_use(f"toolu_{i}", "bash", command=text)),
            tool_result(f"toolu_{i}", text),
        ]
    with SessionStore(db) as store:
        session_id = store.create_session(title=HOSTILE[0], model="gpt-4.1")
        store.append_messages(session_id, messages, tokenizer=get_tokenizer("o200k_base"))
    con = data.connect([db])
    try:
        label = data.db_labels([db.resolve()])[0]
        overview = data.sessions_overview(con)
        assert overview.iloc[0]["title"] == HOSTILE[0]
        for seq, message in enumerate(messages):
            row = data.message(con, label, session_id, seq)
            assert row is not None
            stored = json.loads(row["content_json"])
            expected = json.loads(json.dumps(message.model_dump(mode="json")["content"]))
            assert stored == expected or (isinstance(stored, list) and _same_blocks(stored, expected))
            for text in {message.text} - {""}:
                assert text in row["text"]
    finally:
        con.close()


def _same_blocks(stored: list[dict], expected: list[dict]) -> bool:
    """Blocks equal once the stored form's omitted defaults (None fields) are put back."""
    return len(stored) == len(expected) and all(
        {k: v for k, v in e.items() if v is not None} == s for s, e in zip(stored, expected, strict=True)
    )


def test_the_dashboard_binds_to_loopback_only() -> None:
    config = tomllib.loads((ROOT / ".streamlit" / "config.toml").read_text(encoding="utf-8"))
    assert config["server"]["address"] == "127.0.0.1"
    assert config["browser"]["gatherUsageStats"] is False
