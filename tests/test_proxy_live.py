"""Manual compaction of a live proxied session: the next request the upstream receives carries the
compacted history (byte-stable from one request to the next) until the compaction is undone."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import anthropic
from model_server import ScriptedServer
from model_server import anthropic as A
from proxy_support import close_sdk_clients, opened  # noqa: F401 - autouse fixture

from engine.compaction.operations import force_compact
from engine.proxy import ProxyServer, Upstreams
from engine.proxy.policy.live import SNAPSHOT_CHECK_S
from engine.store import SessionStore

MODEL = "claude-sonnet-4-6"


def ask(client: anthropic.Anthropic, history: list[dict[str, Any]], text: str) -> None:
    history.append({"role": "user", "content": text})
    reply = client.messages.create(model=MODEL, max_tokens=50, system="Agent.", messages=history)
    history.append({"role": "assistant", "content": reply.content[0].text})


def test_a_compaction_applied_to_a_live_session_rewrites_the_next_requests_until_undone(
    tmp_path: Path,
) -> None:
    db = tmp_path / "p.db"
    server = A.install(ScriptedServer(default=A.text("Noted. " * 40)))
    with server, ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url)) as proxy:
        client = opened(
            anthropic.Anthropic(
                base_url=proxy.base_url,
                api_key="sk-x",
                max_retries=0,
                default_headers={"X-Ctxdesk-Session": "live"},
            )
        )
        history: list[dict[str, Any]] = []
        for i in range(6):
            ask(client, history, f"Step {i}: remember fact {i} about the parser. " * 20)
        assert proxy.recorder.flush()
        with SessionStore(db) as store:
            report = force_compact(store, "live", strategy="sliding_window", keep_messages=4)
            snapshot = store.latest_snapshot("live")
        assert snapshot is not None and report.after_tokens < report.before_tokens
        time.sleep(SNAPSHOT_CHECK_S + 0.1)
        ask(client, history, "Step 6: go on.")
        ask(client, history, "Step 7: and on.")
        sent_6, sent_7 = (r.body["messages"] for r in server.requests[-2:])
        assert len(sent_6) < len(history) - 2  # the agent sent its whole history; the model got less
        assert sent_6[-1]["content"] == "Step 6: go on."
        assert json.dumps(sent_7[: len(sent_6) - 1]) == json.dumps(sent_6[:-1])  # the same bytes again
        assert proxy.recorder.flush()
        with SessionStore(db) as store:
            live = [e for e in store.list_events("live", kind="compaction") if e.trigger == "manual"]
            assert [e.details["policy"] for e in live[-2:]] == ["live_compaction", "live_compaction"]
            assert live[-1].details["after_tokens"] < live[-1].details["before_tokens"]
            originals = [
                r.body for r in store.list_requests("live", with_body=True) if r.source == "proxy:original"
            ]
            assert originals[-1]["messages"] == history[:-1]  # the agent's own request is kept
            # undo: a snapshot of the whole transcript (what the dashboard's restore writes)
            stored = store.load_messages("live")
            store.write_snapshot(
                "live", [m.message for m in stored], through_seq=stored[-1].seq, summary=None,
                tokens=sum(m.tokens for m in stored), strategy="restore",
            )  # fmt: skip
        time.sleep(SNAPSHOT_CHECK_S + 0.1)
        ask(client, history, "Step 8: undone?")
        assert server.requests[-1].body["messages"] == history[:-1]


def test_compact_live_compacts_the_proxy_database_session_and_the_proxy_sends_it(
    tmp_path: Path, monkeypatch: Any
) -> None:
    import io

    from engine.cli import main

    db = tmp_path / "p.db"
    monkeypatch.setenv("CTXDESK_DB", str(db))
    server = A.install(ScriptedServer(default=A.text("Noted. " * 40)))
    with server, ProxyServer(db, upstreams=Upstreams(anthropic=server.base_url)) as proxy:
        client = opened(
            anthropic.Anthropic(
                base_url=proxy.base_url, api_key="sk-x", max_retries=0,
                default_headers={"X-Ctxdesk-Session": "cli-live"},
            )
        )  # fmt: skip
        history: list[dict[str, Any]] = []
        for i in range(12):
            ask(client, history, f"Step {i}: remember fact {i} about the parser. " * 20)
        assert proxy.recorder.flush()
        out = io.StringIO()
        assert main(["compact", "--live", "cli-live", "--strategy", "sliding_window"], out=out) == 0
        assert "snapshot" in out.getvalue() and "live:" in out.getvalue()
        time.sleep(SNAPSHOT_CHECK_S + 0.1)
        ask(client, history, "Step 12: go on.")
        sent = server.requests[-1].body["messages"]
        assert len(sent) < len(history) - 1  # the model got the compacted history
