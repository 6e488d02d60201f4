"""No credential reaches the session database: every write method is fed text holding one, and every
text and blob column of every table (read from the migrated schema, so a new column is checked
without anyone listing it) must hold it redacted. On both backends."""

from __future__ import annotations

import json
import string
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import assistant, tool_result, tool_use, user
from engine.redact import REDACTED
from engine.store import RequestRecord, SessionStore, ToolRecord, describe_schema
from engine.store.factory import open_store
from engine.tokens import get_tokenizer
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

TOKENIZER = get_tokenizer("o200k_base")

#: Text columns no caller fills with free text (ids, hashes, kinds, times, what ctxdesk computes):
#: every other text or blob column must be shown to receive a secret here, and to hold it redacted.
STRUCTURAL = {
    "_migrations": {"name", "applied_utc"},
    "sessions": {"id", "parent_session_id", "created_utc", "updated_utc"},
    "messages": {"session_id", "role", "kind", "tokenizer", "created_utc"},
    "session_snapshots": {"session_id", "created_utc"},
    "tool_result_blobs": {"ref_id", "session_id", "sha256", "created_utc"},
    "context_states": {"session_id", "created_utc"},
    "context_events": {"session_id", "kind", "components_basis", "created_utc", "messages_excluded"},
    "session_tools": {"session_id"},
    "payload_parts": {"hash", "kind", "created_utc"},
    "model_requests": {
        "session_id", "system_key", "system_hash", "tools_hash", "messages_key", "message_hashes_json",
        "body_keys_json", "cache_control_json", "request_sha256", "started_utc",
    },
    "_session_rollups": {"session_id"},  # derived totals: the only text is the session id
    "request_costs": {
        "session_id", "call_utc", "day", "priced_as", "price_source", "cache_cause", "cache_explanation",
        "computed_utc",
    },
}  # fmt: skip
#: Kept exactly, secrets included: an offloaded output is the copy read_result serves back to the
#: model (sha256 and size name it); its preview, tool and ids are redacted like everything else.
EXACT = {("tool_result_blobs", "content")}

ALNUM = string.ascii_letters + string.digits
#: A credential value: key characters with a digit (a bare dotted name reads as code, and is kept).
values = st.text(ALNUM, min_size=12, max_size=24).filter(lambda v: any(c.isdigit() for c in v))
keys = st.one_of(
    st.text(ALNUM, min_size=20, max_size=30).map(lambda b: f"sk-ant-api03-{b}"),
    st.text(ALNUM, min_size=24, max_size=30).map(lambda b: f"sk-proj-{b}"),
    st.text(ALNUM, min_size=35, max_size=35).map(lambda b: f"AIza{b}"),
    st.text(string.ascii_letters + string.digits, min_size=36, max_size=36).map(lambda b: f"ghp_{b}"),
    st.text(string.ascii_uppercase + string.digits, min_size=16, max_size=16).map(lambda b: f"AKIA{b}"),
)
NAMED_FORMS = (
    "x-api-key: {}", "X-Goog-Api-Key={}", "Authorization: Bearer {}", '"api_key": "{}"', "password={}",
    "client_secret={}", "refresh_token={}", "ANTHROPIC_API_KEY={}", "postgresql://app:{}@db/x",
)  # fmt: skip
named = st.tuples(st.sampled_from(NAMED_FORMS), values).map(lambda fv: (fv[0].format(fv[1]), fv[1]))
#: (text holding the credential, the credential as it must never be found)
secrets = st.one_of(keys.map(lambda k: (f"401 invalid x-api-key {k}", k)), named)


def _write_everything(store: SessionStore, text: str, secret: str) -> None:
    """Every write method of the store, each text argument holding ``text``."""
    t = f"note ({text}) end"
    sid = store.create_session(
        session_id="s1", title=t, model=t, provider=t, tokenizer=t, source=t, source_path=t,
        settings={"database": t}, metadata={"note": t, "headers": {"authorization": secret}},
    )  # fmt: skip
    store.update_session(sid, status=t)
    messages = [
        user(t).model_copy(update={"id": t, "meta": {"headers": {"x-api-key": secret}, "note": t}}),
        assistant(t, tool_use("tu1", f"run {text}", cmd=t)),
        tool_result("tu1", t),
    ]
    usage = ProviderUsage(input_tokens=100, output_tokens=10, cache_creation_input_tokens=50)
    store.append_messages(sid, messages, tokenizer=TOKENIZER, usages=[None, usage, None])
    event_id = store.record_event(
        sid,
        ContextEvent(
            kind="request", trigger=t, outcome=t, reason=t, provider=t, model=t, context_window=200_000,
            projected_tokens=150, components=ComponentTokens(conversation=140, unattributed=10),
            components_basis="reconciled", usage=usage, message_seq=1, details={"error": t, "api_key": secret},
        ),
    )  # fmt: skip
    store.write_snapshot(sid, messages, through_seq=2, summary=t, tokens=10, strategy=t)
    store.put_blob(sid, f"output {t}", tool_name=t, tool_use_id=t)
    store.put_blob(sid, b"\x89PNG binary", tool_name=t, preview=t)
    store.save_context_state(
        sid, strategy=t, range_start=0, range_end=2, summary=t, summary_tokens=3, summarizer=t
    )
    store.upsert_tools(sid, [ToolRecord(name=t, category=t, server=t, definition={"description": t})])
    body: dict[str, Any] = {
        "model": t, "system": t, "messages": [{"role": "user", "content": t}], "api_key": secret,
        "tools": [{"name": "bash", "description": t}], "thinking": {"note": t},
        "context_management": {"note": t}, "metadata": {"user_id": t}, "max_tokens": 5,
    }  # fmt: skip
    store.record_request(
        sid,
        RequestRecord(
            api=t, source=t, method=t, path=f"/v1/messages?api_key={secret}&note={t}", body=body,
            agent_session_id=t, headers={"x-note": t, "x-api-key": secret}, error_type=t, error_message=t,
            response={"content": t}, stop_reason=t, usage={"note": t}, event_id=event_id,
        ),
    )  # fmt: skip
    form = f"grant_type=refresh_token&refresh_token={secret}&client_secret={secret}&note={t}"
    store.record_request(sid, RequestRecord(api="passthrough", raw_body=form.encode()))


def _check_every_column(store: SessionStore, secret: str) -> None:
    reached: set[tuple[str, str]] = set()
    for table in describe_schema():
        for column in table.columns:
            kind = column.type.upper()
            if "TEXT" not in kind and "BLOB" not in kind:
                continue
            where = (table.name, column.name)
            with store.transaction() as conn:
                rows = conn.execute(f"SELECT {column.name} FROM {table.name}").fetchall()
            texts = [bytes(v).decode("utf-8", "replace") if isinstance(v, bytes | memoryview) else str(v)
                     for (v,) in rows if v is not None]  # fmt: skip
            if where in EXACT:
                continue
            assert not any(secret in text for text in texts), f"{table.name}.{column.name} holds the secret"
            if any(REDACTED in text for text in texts):
                reached.add(where)
    unreached = {
        (table.name, c.name)
        for table in describe_schema()
        for c in table.columns
        if ("TEXT" in c.type.upper() or "BLOB" in c.type.upper())
        and c.name not in STRUCTURAL.get(table.name, set())
        and (table.name, c.name) not in EXACT
    } - reached
    assert not unreached, (
        f"text columns no write fed with a secret: {sorted(unreached)} (feed them in _write_everything, "
        "or list them in STRUCTURAL if no caller ever writes free text there)"
    )


@settings(max_examples=12, deadline=None)
@given(secrets)
def test_no_column_of_any_table_keeps_a_secret_sqlite(case: tuple[str, str]) -> None:
    text, secret = case
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.db"
        with SessionStore(path) as store:
            _write_everything(store, text, secret)
            _check_every_column(store, secret)
        raw = b"".join(p.read_bytes() for p in Path(folder).iterdir() if p.name.startswith("s.db"))
        # the file's bytes too (a free page or the WAL would keep what a row no longer shows)
        hits = raw.count(secret.encode())
        assert hits <= _exact_copies(store_path=path, secret=secret), "the secret is in the file's bytes"


def _exact_copies(*, store_path: Path, secret: str) -> int:
    """How often the secret is in the database's bytes legitimately: inside offloaded outputs only."""
    with SessionStore(store_path, read_only=True) as store:
        return sum(
            bytes(store.get_blob(b.ref_id).content or b"").count(secret.encode()) for b in store.list_blobs()
        )


@pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
def test_no_column_of_any_table_keeps_a_secret_postgresql() -> None:
    secret = "Zx9fQ2mPq7Lr4Ws8Ty1Uv5Nb"
    with open_store(fresh_url()) as store:
        _write_everything(store, f"x-api-key: sk-ant-api03-{secret}", secret)
        _check_every_column(store, secret)


def test_an_exact_request_is_exact_apart_from_its_secrets(tmp_path: Path) -> None:
    clean = {"model": "claude-x", "system": [{"type": "text", "text": "be brief"}], "max_tokens": 9,
             "messages": [{"role": "user", "content": "hi"}], "tools": [{"name": "t", "input_schema": {}}]}  # fmt: skip
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session()
        first = store.record_request(sid, RequestRecord(api="anthropic_messages", body=clean))
        secret = "sk-ant-api03-" + "Q" * 24
        leaky = {
            **clean,
            "api_key": "hunter2hunter2",
            "messages": [{"role": "user", "content": f"key {secret}"}],
        }
        second = store.record_request(sid, RequestRecord(api="anthropic_messages", body=leaky))
        assert store.get_request(first).body == clean
        rebuilt = store.get_request(second).body
    assert rebuilt == {
        **clean,
        "api_key": REDACTED,
        "messages": [{"role": "user", "content": f"key {REDACTED}"}],
    }
    assert list(rebuilt) == list(leaky)  # key order as sent


def test_a_stored_message_is_returned_as_stored(tmp_path: Path) -> None:
    secret = "sk-ant-api03-" + "Z" * 24
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session()
        (row,) = store.append_messages(sid, [user(f"use {secret}")], tokenizer=TOKENIZER)
        (loaded,) = store.load_messages(sid)
    assert row.message == loaded.message and row.message.text == f"use {REDACTED}"
    assert row.tokens == TOKENIZER.count_message(user(f"use {secret}"))  # counted as the model saw it
    assert json.dumps(loaded.message.model_dump()).count(secret) == 0


def test_a_reimport_of_a_transcript_holding_a_secret_appends_only_what_is_new(tmp_path: Path) -> None:
    """Stored messages are redacted, the source's are not: the import compares them redacted, so a
    file that only grew is appended to, not rewritten from the message holding the secret."""
    from engine.importers import import_file

    fixture = Path(__file__).parent / "fixtures" / "sessions" / "claude-code__fe5e1c67__head37.jsonl"
    lines = fixture.read_text(encoding="utf-8").splitlines(keepends=True)
    secret = "sk-ant-api03-" + "Rk7" * 10
    with_secret = [line.replace('"content":"', f'"content":"my key is {secret}. ', 1) for line in lines]
    assert sum(secret in line for line in with_secret) > 3
    source = tmp_path / "session.jsonl"
    source.write_text("".join(with_secret[:30]), encoding="utf-8")
    with SessionStore(tmp_path / "s.db") as store:
        first = import_file(source, store)
        sid = next(s.session_id for s in first.sessions if s.parent_session_id is None)
        before = [(m.id, m.message) for m in store.load_messages(sid)]
        source.write_text("".join(with_secret), encoding="utf-8")  # the agent wrote 7 more lines
        second = import_file(source, store)
        after = [(m.id, m.message) for m in store.load_messages(sid)]
        notes = store.get_session(sid).metadata.get("import_notes", [])
    assert after[: len(before)] == before  # the rows imported first are the same rows
    added = next(s.added_messages for s in second.sessions if s.session_id == sid)
    assert added == len(after) - len(before) > 0
    assert not any("changed" in note for note in notes)
    assert not any(secret in str(m) for _, m in after)


def test_a_session_id_is_an_identity_kept_as_it_is(tmp_path: Path) -> None:
    """Ids others refer to are not free text: one shaped like a key stays, so its rows stay linked."""
    sid = "sk-proj-" + "A1b2C3d4" * 3
    with SessionStore(tmp_path / "s.db") as store:
        store.create_session(session_id=sid, title=f"about {sid}")
        child = store.create_session(session_id="child", parent_session_id=sid)
        store.append_messages(sid, [user("hi")], tokenizer=TOKENIZER)
        store.record_event(sid, ContextEvent(kind="note", reason=f"session {sid}"))
        store.update_session(child, parent_session_id=sid)
        assert store.get_session(sid).title == f"about {REDACTED}"
        assert store.get_session(child).parent_session_id == sid
        assert [e.reason for e in store.list_events(sid)] == [f"session {REDACTED}"]
        assert store.message_count(sid) == 1


def test_a_proxied_401_echoing_the_key_and_an_oauth_form_leave_no_secret_in_the_file(tmp_path: Path) -> None:
    """The issue's repro through the real proxy: the provider's 401 quotes the caller's key (kept in
    model_requests.error_message before), a body carries ``api_key``, an OAuth refresh is a form."""
    import httpx

    from engine.proxy import ProxyServer, Upstreams
    from tests.model_server import HttpReply, ScriptedServer

    key = "sk-ant-api03-" + "Zx9fQ2mPq7Lr4Ws8Ty1Uv5Nb3Kc6Jd"
    refresh, client_secret = "rt-" + "Q1w2E3r4" * 3, "cs-" + "P0o9I8u7" * 3
    upstream = ScriptedServer()
    error = {
        "type": "error",
        "error": {"type": "authentication_error", "message": f"invalid x-api-key {key}"},
    }
    upstream.add_route("POST", "/v1/messages", lambda server, request: HttpReply(401, body=error))
    upstream.add_route("POST", "/oauth/token", lambda server, request: HttpReply(200, body={"ok": True}))
    with upstream, ProxyServer(tmp_path / "p.db", upstreams=Upstreams(anthropic=upstream.base_url)) as proxy:
        with httpx.Client(base_url=proxy.base_url) as client:
            body = {"model": "claude-sonnet-4-5", "max_tokens": 8, "api_key": key,
                    "messages": [{"role": "user", "content": "hi"}]}  # fmt: skip
            answer = client.post("/v1/messages", json=body, headers={"x-api-key": key})
            assert answer.status_code == 401  # the agent still gets the provider's answer
            form = f"grant_type=refresh_token&refresh_token={refresh}&client_secret={client_secret}"
            client.post(
                "/oauth/token", content=form, headers={"content-type": "application/x-www-form-urlencoded"}
            )
        assert proxy.recorder.flush()
        with SessionStore(tmp_path / "p.db", read_only=True) as store:
            requests = [r for s in store.list_sessions() for r in store.list_requests(s.id, with_body=True)]
    assert any(r.status_code == 401 and f"x-api-key {REDACTED}" in (r.error_message or "") for r in requests)
    assert any(r.body and r.body.get("api_key") == REDACTED for r in requests)
    assert any(r.raw_body and b"refresh_token=[REDACTED]" in r.raw_body for r in requests), [
        r.path for r in requests
    ]
    raw = b"".join(p.read_bytes() for p in tmp_path.glob("p.db*"))
    for secret in (key, refresh, client_secret):
        assert secret.encode() not in raw, secret
