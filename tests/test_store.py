"""The session database on both backends (real SQLite files, a real PostgreSQL server the tests
start): migrations, typed refusals, lossless round trips. File-level checks are SQLite's own."""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings

from engine.convert import from_anthropic, to_anthropic
from engine.errors import NotADatabaseError, NotFoundError, SchemaVersionError, StoreError
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import Message, assistant, tool_result, tool_use, user
from engine.store import SCHEMA_VERSION, TABLE_NAMES, SessionStore, ToolRecord
from engine.store.factory import open_store
from engine.store.schema import APPLICATION_ID, MIGRATIONS, apply_migrations
from engine.tokens import get_tokenizer
from engine.turns import turn_indices
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url
from tests.strategies import HEAVY_WITH_FIXTURE, anthropic_dicts, histories

TOKENIZER = get_tokenizer("o200k_base")
#: Every store test runs on both; CI must have the server binaries (.ci/run installs them).
BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgresql",
        id="postgresql",
        marks=pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON),
    ),
]


def new_target(backend: str, folder: Path) -> str:
    """An empty database: a file path, or a fresh schema on the test server."""
    return str(folder / "sessions.db") if backend == "sqlite" else fresh_url()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "sessions.db"


@pytest.fixture
def target(backend: str, tmp_path: Path) -> str:
    return new_target(backend, tmp_path)


@pytest.fixture
def store(target: str) -> Iterator[SessionStore]:
    with open_store(target) as s:
        yield s


def _sql(store: SessionStore, sql: str, params: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    """Raw SQL on either backend, in one transaction (``?`` stands for the driver's marker)."""
    sql = sql.replace("?", store.P)
    with store.transaction() as conn:
        cur = conn.execute(sql, params)
        return [tuple(r) for r in cur.fetchall()] if cur.description else []


def _tables(store: SessionStore) -> set[str]:
    if isinstance(store.path, Path):
        return {str(r[0]) for r in _sql(store, "SELECT name FROM sqlite_master WHERE type = 'table'")}
    sql = "SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()"
    return {str(r[0]) for r in _sql(store, sql)}


def _pragma(store: SessionStore, name: str) -> int:
    """A SQLite pragma, or the row of ``_pragmas`` that stands for it on PostgreSQL."""
    if isinstance(store.path, Path):
        return int(_sql(store, f"PRAGMA {name}")[0][0])
    return int(_sql(store, "SELECT value FROM _pragmas WHERE name = ?", (name,))[0][0])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(path, isolation_level=None)


# -- schema and migrations ------------------------------------------------------------------


def test_migrations_create_every_table(store: SessionStore) -> None:
    applied = [r[0] for r in _sql(store, "SELECT name FROM _migrations ORDER BY name")]
    user_version, application_id = _pragma(store, "user_version"), _pragma(store, "application_id")
    assert set(TABLE_NAMES) | {"_migrations"} <= _tables(store)
    assert applied == [name for name, _ in MIGRATIONS]
    assert (user_version, application_id) == (SCHEMA_VERSION, APPLICATION_ID)


def test_reopening_applies_no_migration_again(target: str) -> None:
    with open_store(target) as first:
        before = _sql(first, "SELECT name, applied_utc FROM _migrations ORDER BY name")
    with open_store(target) as second:
        assert _sql(second, "SELECT name, applied_utc FROM _migrations ORDER BY name") == before
    assert [r[0] for r in before] == [name for name, _ in MIGRATIONS]


def test_sqlite_migrations_run_twice_are_a_no_op(db_path: Path) -> None:
    SessionStore(db_path).close()
    with _raw(db_path) as conn:
        before = conn.execute("SELECT name, applied_utc FROM _migrations").fetchall()
        assert apply_migrations(conn) == []
        assert conn.execute("SELECT name, applied_utc FROM _migrations").fetchall() == before
    SessionStore(db_path).close()
    with _raw(db_path) as conn:
        assert conn.execute("SELECT name, applied_utc FROM _migrations").fetchall() == before


def test_database_is_in_wal_mode(db_path: Path) -> None:
    SessionStore(db_path).close()
    with _raw(db_path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_an_empty_file_becomes_a_database(tmp_path: Path) -> None:
    path = tmp_path / "empty.db"
    path.write_bytes(b"")
    with SessionStore(path) as s:
        assert s.list_sessions() == []


def test_deleting_a_session_cascades_to_everything_it_owns(store: SessionStore) -> None:
    sid = store.create_session()
    child = store.create_session(parent_session_id=sid)
    store.append_messages(sid, [user("hi"), assistant("hello")], tokenizer=TOKENIZER)
    store.append_messages(child, [user("sub-task")], tokenizer=TOKENIZER)
    event_id = store.record_event(sid, ContextEvent(kind="note"))
    store.write_snapshot(
        sid, [user("hi")], through_seq=1, summary=None, tokens=5, strategy="x", event_id=event_id
    )
    store.put_blob(sid, b"output")
    store.save_context_state(
        sid,
        strategy="rolling",
        range_start=0,
        range_end=1,
        summary="s",
        summary_tokens=1,
        summarizer="offline",
    )
    store.upsert_tools(sid, [ToolRecord(name="bash", tokens=10)])
    store.delete_session(sid)
    for table in TABLE_NAMES:
        assert _sql(store, f"SELECT count(*) FROM {table}") == [(0,)], table


# -- files we must not touch ----------------------------------------------------------------


def _text_file(path: Path) -> None:
    path.write_text("just some notes, not a database\n" * 10)


def _other_app(path: Path) -> None:
    with _raw(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
        conn.execute("INSERT INTO notes (body) VALUES ('keep me')")


def _truncated(path: Path) -> None:
    full = path.with_suffix(".full")
    with SessionStore(full) as s:
        sid = s.create_session()
        s.append_messages(sid, [user("x" * 4000) for _ in range(30)], tokenizer=TOKENIZER)
    path.write_bytes(full.read_bytes()[: 3 * 4096 + 100])


def _newer_schema(path: Path) -> None:
    SessionStore(path).close()
    with _raw(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")


def _sqlite_header_garbage_body(path: Path) -> None:
    path.write_bytes(b"SQLite format 3\x00" + b"\xff" * 8000)


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
@pytest.mark.parametrize(
    ("make", "error"),
    [
        pytest.param(_text_file, NotADatabaseError, id="not-sqlite"),
        pytest.param(_other_app, NotADatabaseError, id="other-apps-sqlite"),
        pytest.param(_truncated, StoreError, id="truncated"),
        pytest.param(_sqlite_header_garbage_body, StoreError, id="garbage-after-header"),
        pytest.param(_newer_schema, SchemaVersionError, id="newer-schema"),
    ],
)
def test_unusable_files_raise_typed_errors_and_stay_untouched(
    tmp_path: Path, make: object, error: type[StoreError], read_only: bool
) -> None:
    path = tmp_path / "target.db"
    make(path)  # type: ignore[operator]
    before = _sha256(path)
    with pytest.raises(error) as caught:
        SessionStore(path, read_only=read_only)
    assert caught.value.path == str(path)
    assert _sha256(path) == before


def test_schema_version_error_says_which_versions(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    _newer_schema(path)
    with pytest.raises(SchemaVersionError) as caught:
        SessionStore(path)
    assert (caught.value.found, caught.value.supported) == (SCHEMA_VERSION + 1, SCHEMA_VERSION)


def _contents(store: SessionStore) -> list[object]:
    return [_sql(store, f"SELECT * FROM {table} ORDER BY 1") for table in (*TABLE_NAMES, "_migrations")]


def test_read_only_open_never_writes(target: str) -> None:
    with open_store(target) as s:
        sid = s.create_session(title="t")
        s.append_messages(sid, [user("hi"), assistant("hello")], tokenizer=TOKENIZER)
        s.record_event(sid, ContextEvent(kind="note"))
        before = _contents(s)
    file_before = _sha256(Path(target)) if Path(target).is_file() else None
    with open_store(target, read_only=True) as ro:
        assert [m.message for m in ro.load_messages(sid)] == [user("hi"), assistant("hello")]
        assert len(ro.list_events(sid)) == 1
        with pytest.raises(StoreError, match="read-only"):
            ro.create_session()
        with pytest.raises(StoreError, match="read-only"):
            ro.append_messages(sid, [user("more")], tokenizer=TOKENIZER)
    with open_store(target) as s:
        assert _contents(s) == before
    if file_before is not None:
        assert _sha256(Path(target)) == file_before


def test_read_only_open_of_a_missing_file_raises(tmp_path: Path) -> None:
    with pytest.raises(NotFoundError):
        SessionStore(tmp_path / "absent.db", read_only=True)
    assert not (tmp_path / "absent.db").exists()


def test_read_only_reader_sees_committed_writes(store: SessionStore, target: str) -> None:
    sid = store.create_session()
    with open_store(target, read_only=True) as reader:
        store.append_messages(sid, [user("live")], tokenizer=TOKENIZER)
        assert reader.load_transcript(sid) == [user("live")]


# -- sessions -------------------------------------------------------------------------------


def test_session_lifecycle(store: SessionStore) -> None:
    sid = store.create_session(
        session_id="s1", title="demo", model="gpt-4o", tokenizer="o200k_base", tokens_exact=True,
        settings={"context_window": 128_000}, metadata={"cwd": "/tmp"},
    )  # fmt: skip
    record = store.get_session(sid)
    assert (record.id, record.title, record.tokens_exact, record.status) == ("s1", "demo", True, "active")
    assert record.settings == {"context_window": 128_000} and record.metadata == {"cwd": "/tmp"}
    store.update_session(sid, status="final", metadata={"cwd": "/home"})
    updated = store.get_session(sid)
    assert (updated.status, updated.metadata) == ("final", {"cwd": "/home"})
    assert updated.updated_utc >= record.updated_utc
    assert [s.id for s in store.list_sessions()] == ["s1"]


def test_session_errors(store: SessionStore) -> None:
    store.create_session(session_id="s1")
    with pytest.raises(StoreError):
        store.create_session(session_id="s1")
    with pytest.raises(NotFoundError):
        store.get_session("nope")
    with pytest.raises(NotFoundError):
        store.update_session("nope", title="x")
    with pytest.raises(StoreError, match="cannot update"):
        store.update_session("s1", created_utc="yesterday")
    with pytest.raises(NotFoundError):
        store.append_messages("nope", [user("hi")], tokenizer=TOKENIZER)


def test_transaction_is_all_or_nothing(store: SessionStore) -> None:
    with pytest.raises(RuntimeError), store.transaction():
        sid = store.create_session(session_id="inside")
        store.append_messages(sid, [user("hi")], tokenizer=TOKENIZER)
        raise RuntimeError("plan failed half way")
    assert store.list_sessions() == []


# -- transcript -----------------------------------------------------------------------------


@pytest.fixture(scope="module", params=BACKENDS)
def shared_store(request: pytest.FixtureRequest) -> Iterator[SessionStore]:
    """One database per backend for hypothesis examples (each example uses its own session)."""
    with tempfile.TemporaryDirectory() as folder, open_store(new_target(request.param, Path(folder))) as s:
        yield s


@settings(HEAVY_WITH_FIXTURE, max_examples=60)
@given(messages=histories())
def test_messages_round_trip_exactly(shared_store: SessionStore, messages: list[Message]) -> None:
    sid = shared_store.create_session()
    rows = shared_store.append_messages(sid, messages, tokenizer=TOKENIZER)
    assert [r.message for r in rows] == messages
    loaded = shared_store.load_messages(sid)
    assert [m.message for m in loaded] == messages
    assert [m.seq for m in loaded] == list(range(len(messages)))
    assert [m.turn_index for m in loaded] == turn_indices(messages)
    assert [m.tokens for m in loaded] == [TOKENIZER.count_message(m) for m in messages]


@settings(HEAVY_WITH_FIXTURE, max_examples=60)
@given(dicts=anthropic_dicts())
def test_provider_messages_survive_the_store(
    shared_store: SessionStore, dicts: list[dict[str, object]]
) -> None:
    sid = shared_store.create_session()
    shared_store.append_messages(sid, from_anthropic(dicts), tokenizer=TOKENIZER)
    assert to_anthropic(shared_store.load_transcript(sid)) == dicts


@settings(HEAVY_WITH_FIXTURE, max_examples=60)
@given(messages=histories())
def test_snapshots_round_trip_exactly(shared_store: SessionStore, messages: list[Message]) -> None:
    sid = shared_store.create_session()
    snapshot_id = shared_store.write_snapshot(
        sid, messages, through_seq=len(messages) - 1, summary="s", tokens=1, strategy="t"
    )
    assert shared_store.get_snapshot(snapshot_id).messages == messages
    assert shared_store.load_resume_history(sid) == (messages, "s", len(messages) - 1)


@settings(HEAVY_WITH_FIXTURE, max_examples=40)
@given(messages=histories())
def test_turn_indices_continue_across_appends(shared_store: SessionStore, messages: list[Message]) -> None:
    sid = shared_store.create_session()
    half = len(messages) // 2
    shared_store.append_messages(sid, messages[:half], tokenizer=TOKENIZER)
    shared_store.append_messages(sid, messages[half:], tokenizer=TOKENIZER)
    assert [m.turn_index for m in shared_store.load_messages(sid)] == turn_indices(messages)


@pytest.mark.parametrize(
    ("messages", "turns", "kinds"),
    [
        pytest.param(
            [
                user("q"),
                assistant("", tool_use("t", "ls")),
                tool_result("t", "a"),
                assistant("done"),
                user("q2"),
            ],
            [0, 0, 0, 0, 1],
            ["user_input", "tool_use", "tool_result", "assistant", "user_input"],
            id="tool-turn",
        ),
        pytest.param(
            [assistant("hello"), user("hi")], [0, 1], ["assistant", "user_input"], id="assistant-first"
        ),
    ],
)
def test_turn_index_and_kind_are_derived(
    store: SessionStore, messages: list[Message], turns: list[int], kinds: list[str]
) -> None:
    sid = store.create_session()
    rows = store.load_messages(sid) + store.append_messages(sid, messages, tokenizer=TOKENIZER)
    assert [r.turn_index for r in rows] == turns
    assert [r.kind for r in rows] == kinds


def test_tool_result_tokens_and_usage_are_stored(store: SessionStore) -> None:
    sid = store.create_session()
    usage = ProviderUsage(input_tokens=100, output_tokens=20, cache_read_input_tokens=5)
    store.append_messages(
        sid,
        [assistant("", tool_use("t", "ls")), tool_result("t", "a b c")],
        tokenizer=TOKENIZER,
        usages=[usage, None],
    )
    first, second = store.load_messages(sid)
    assert (first.usage, second.usage) == (usage, None)
    assert first.tool_result_tokens == 0
    assert second.tool_result_tokens == TOKENIZER.count("t") + TOKENIZER.count("a b c")
    with pytest.raises(StoreError, match="one to one"):
        store.append_messages(sid, [user("x")], tokenizer=TOKENIZER, usages=[])


@pytest.mark.parametrize(
    ("column", "value"),
    [
        pytest.param("content_json", "{not json", id="content-not-json"),
        pytest.param("content_json", '{"a": 1}', id="content-wrong-shape"),
        pytest.param("content_json", '[{"type": "video"}]', id="content-unknown-block"),
        pytest.param("meta_json", "[1,", id="meta-not-json"),
    ],
)
def test_malformed_stored_message_raises_naming_the_row(store: SessionStore, column: str, value: str) -> None:
    sid = store.create_session()
    [row] = store.append_messages(
        sid, [Message(role="user", content="hi", meta={"k": 1})], tokenizer=TOKENIZER
    )
    _sql(store, f"UPDATE messages SET {column} = ? WHERE id = ?", (value, row.id))
    with pytest.raises(StoreError, match=f"messages row {row.id}"):
        store.load_messages(sid)


def test_malformed_snapshot_raises_naming_the_row(store: SessionStore) -> None:
    sid = store.create_session()
    snapshot_id = store.write_snapshot(sid, [user("a")], through_seq=0, summary=None, tokens=1, strategy="x")
    _sql(store, "UPDATE session_snapshots SET messages_json = '[{\"role\": 7}]' WHERE id = ?", (snapshot_id,))
    with pytest.raises(StoreError, match=f"session_snapshots row {snapshot_id}"):
        store.latest_snapshot(sid)


# -- snapshots and resume -------------------------------------------------------------------


def test_resume_without_snapshot_is_the_transcript(store: SessionStore) -> None:
    sid = store.create_session()
    history = [user("a"), assistant("b")]
    store.append_messages(sid, history, tokenizer=TOKENIZER)
    assert store.load_resume_history(sid) == (history, None, -1)


def test_resume_uses_the_latest_snapshot_plus_later_messages(store: SessionStore) -> None:
    sid = store.create_session()
    history = [user("q1"), assistant("a1"), user("q2"), assistant("a2")]
    store.append_messages(sid, history, tokenizer=TOKENIZER)
    store.write_snapshot(sid, [user("q1 (short)")], through_seq=1, summary="old", tokens=9, strategy="a")
    pinned = Message(role="user", content="rules", pinned=True)
    latest = store.write_snapshot(
        sid, [pinned, assistant("a2")], through_seq=3, summary="s", tokens=7, strategy="b"
    )
    store.append_messages(sid, [user("q3")], tokenizer=TOKENIZER)
    assert store.load_resume_history(sid) == ([pinned, assistant("a2"), user("q3")], "s", 3)
    assert store.load_transcript(sid) == [*history, user("q3")]
    snapshot = store.get_snapshot(latest)
    assert (snapshot.message_count, snapshot.tokens, snapshot.strategy) == (2, 7, "b")
    assert [s.strategy for s in store.list_snapshots(sid)] == ["a", "b"]


def test_missing_snapshot_and_session_raise(store: SessionStore) -> None:
    with pytest.raises(NotFoundError):
        store.get_snapshot(999)
    with pytest.raises(NotFoundError):
        store.load_resume_history("nope")
    sid = store.create_session()
    assert store.latest_snapshot(sid) is None


# -- blobs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "is_text", "lines"),
    [
        pytest.param(b"\x00\xff\xfe\x80binary\x00", False, None, id="binary"),
        pytest.param(bytes(range(256)) * 50, False, None, id="all-bytes"),
        pytest.param("line one\nline two\nunicode ü 🙂\n".encode(), True, 3, id="utf8-text"),
        pytest.param(b"no trailing newline\nsecond", True, 2, id="text-without-final-newline"),
        pytest.param(b"", True, 0, id="empty"),
    ],
)
def test_blobs_are_stored_byte_for_byte(
    store: SessionStore, content: bytes, is_text: bool, lines: int | None
) -> None:
    sid = store.create_session()
    record = store.put_blob(sid, content, tool_name="bash", tool_use_id="t1", tokens=12)
    loaded = store.get_blob(record.ref_id)
    assert loaded.content == content
    assert (loaded.is_text, loaded.line_count, loaded.size_bytes) == (is_text, lines, len(content))
    assert loaded.sha256 == hashlib.sha256(content).hexdigest()
    assert store.get_blob(record.ref_id, with_content=False).content is None
    assert [b.ref_id for b in store.list_blobs(sid)] == [record.ref_id]


def test_blob_preview_describes_binary_data(store: SessionStore) -> None:
    sid = store.create_session()
    assert store.put_blob(sid, b"\xff" * 3000).preview == "binary data, 3,000 bytes"
    assert store.put_blob(sid, b"x" * 3000).preview == "x" * 200


def test_text_blobs_are_stored_as_utf8_and_large_ones_exactly(store: SessionStore) -> None:
    sid = store.create_session()
    text = "héllo ✓ \ud800 line\n" * 200_000  # 4.8 MB of text with a lone surrogate: several pieces
    record = store.put_blob(sid, text)
    blob = store.get_blob(record.ref_id)
    assert blob.content == text.encode("utf-8", "surrogatepass")
    assert blob.size_bytes == len(blob.content) and not blob.is_text
    clean = "héllo ✓ line\n" * 200_000
    record = store.put_blob(sid, clean)
    assert record.is_text and record.line_count == 200_000 and record.preview.startswith("héllo ✓")
    assert store.get_blob(record.ref_id).content == clean.encode()
    assert store.put_blob(sid, b"").line_count == 0


def test_blob_errors(store: SessionStore) -> None:
    sid = store.create_session()
    with pytest.raises(StoreError, match="must be bytes or text"):
        store.put_blob(sid, 12345)  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        store.put_blob("no-such-session", b"x")
    with pytest.raises(NotFoundError):
        store.get_blob("res_missing")


# -- events ---------------------------------------------------------------------------------


def test_events_round_trip_with_components_and_usage(store: SessionStore) -> None:
    sid = store.create_session()
    components = ComponentTokens(
        system=100, skills=5, tools=300, summary=40, conversation=900, tool_results=250, offloaded_bytes=4096
    )
    usage = ProviderUsage(
        input_tokens=10, output_tokens=50, cache_read_input_tokens=1500, cache_creation_input_tokens=90
    )
    event = ContextEvent(
        kind="request", trigger="turn", outcome="ok", reason="context", provider="anthropic", model="claude-x",
        turn_index=3, context_window=200_000, max_output_tokens=8_000, buffer_tokens=1_000, limit_tokens=191_000,
        projected_tokens=1_595, remaining_tokens=189_405, components=components, usage=usage, message_seq=12,
        details={"strategies_run": ["clear_tool_uses"], "removed_message_seqs": [1, 2]},
    )  # fmt: skip
    event_id = store.record_event(sid, event)
    bare_id = store.record_event(sid, ContextEvent(kind="note", reason="hello"))
    stored, bare = store.list_events(sid)
    assert (stored.id, stored.seq, bare.id, bare.seq) == (event_id, 0, bare_id, 1)
    assert stored.components == components and stored.usage == usage
    assert stored.details == event.details
    as_event = {k: getattr(stored, k) for k in event.model_dump() if k != "kind"}
    assert as_event == {k: v for k, v in event if k != "kind"}
    assert (bare.components, bare.usage, bare.details) == (None, None, {})
    assert [e.id for e in store.list_events(sid, kind="note")] == [bare_id]


def test_event_for_unknown_session_raises(store: SessionStore) -> None:
    with pytest.raises(NotFoundError):
        store.record_event("nope", ContextEvent(kind="note"))


# -- cached summaries and tools -------------------------------------------------------------


def test_context_states_save_latest_and_clear(store: SessionStore) -> None:
    sid = store.create_session()

    def save(strategy: str, summary: str, level: int = 0) -> int:
        return store.save_context_state(
            sid, strategy=strategy, range_start=0, range_end=4, summary=summary, summary_tokens=3,
            summarizer="offline", level=level,
        )  # fmt: skip

    save("rolling", "first")
    save("rolling", "second")
    save("tree", "node", level=1)
    latest = store.latest_context_state(sid, strategy="rolling")
    assert latest is not None and latest.summary == "second"
    assert store.latest_context_state(sid, strategy="tree") is None
    assert [s.summary for s in store.list_context_states(sid, strategy="tree")] == ["node"]
    assert store.clear_context_states(sid, keep_strategy="tree") == 2
    assert [s.strategy for s in store.list_context_states(sid)] == ["tree"]
    assert store.clear_context_states(sid) == 1


def test_tools_upsert_updates_in_place(store: SessionStore) -> None:
    sid = store.create_session()
    definition = {"name": "read", "description": "Read a file.", "input_schema": {"type": "object"}}
    store.upsert_tools(
        sid, [ToolRecord(name="read", tokens=40, definition=definition), ToolRecord(name="bash")]
    )
    store.upsert_tools(
        sid, [ToolRecord(name="read", category="mcp", server="fs", tokens=41, definition=definition)]
    )
    tools = store.list_tools(sid)
    assert [t.name for t in tools] == ["bash", "read"]
    assert tools[1] == ToolRecord(name="read", category="mcp", server="fs", tokens=41, definition=definition)
