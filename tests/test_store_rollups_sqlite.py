"""The SQLite store keeps the Sessions page's per-session totals (``_session_rollups``, m008) in its
write transaction: the overview read from them equals the overview aggregated from the rows (the
path a file written by an older ctxdesk takes), after any mix of the store's writes."""

from __future__ import annotations

import json
import random
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from engine.events import ContextEvent
from engine.messages import assistant, user
from engine.store import ROLLUP_TABLE, SESSION_TOTALS, SessionStore
from engine.store.schema import TABLES_M008
from engine.store.sqlite_rollups import sqlite_merge
from engine.tokens import get_tokenizer
from tests.test_sessions_last_active import overview

TOKENIZER = get_tokenizer("gpt-4o")


def as_older_ctxdesk_wrote_it(path: Path, folder: Path) -> Path:
    """A copy of the database without the kept totals (as a file written before m008)."""
    folder.mkdir()
    copy = folder / path.name  # the same name: the same ``db`` label
    shutil.copy(path, copy)
    with closing(sqlite3.connect(copy)) as conn:
        conn.execute(f"DROP TABLE {ROLLUP_TABLE}")
        conn.commit()
    return copy


def assert_both_paths_agree(path: Path, folder: Path) -> pd.DataFrame:
    kept = overview(path)
    aggregated = overview(as_older_ctxdesk_wrote_it(path, folder))
    pd.testing.assert_frame_equal(kept, aggregated)
    return kept


def kept_rows(path: Path) -> dict[str, tuple[Any, ...]]:
    with closing(sqlite3.connect(path)) as conn:
        return {r[0]: r[1:] for r in conn.execute(f"SELECT * FROM {ROLLUP_TABLE}")}


def event(kind: str, outcome: str, projected: int | None = None, window: int | None = None) -> ContextEvent:
    return ContextEvent(
        kind=kind, outcome=outcome, projected_tokens=projected, context_window=window,
        max_output_tokens=None if window is None else window // 10, details={"source": "import:test"},
    )  # fmt: skip


EVENTS = st.builds(
    event,
    st.sampled_from(["request", "compaction", "guard"]),
    st.sampled_from(["ok", "compacted", "forced_final", "skipped_provider", "noop"]),
    st.one_of(st.none(), st.integers(0, 300_000)),
    st.one_of(st.none(), st.sampled_from([8_000, 200_000, 1_000_000])),
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("new"), st.integers(0, 3)),
        st.tuples(st.just("messages"), st.integers(0, 3), st.integers(1, 6)),
        st.tuples(st.just("event"), st.integers(0, 3), EVENTS),
        st.tuples(st.just("batch"), st.integers(0, 3), st.lists(EVENTS, max_size=4)),
        st.tuples(st.just("blob"), st.integers(0, 3), st.integers(0, 5_000)),
        st.tuples(st.just("truncate"), st.integers(0, 3), st.integers(0, 8)),
        st.tuples(st.just("delete"), st.integers(0, 3)),
        st.tuples(st.just("rolled_back"), st.integers(0, 3)),
    ),
    max_size=24,
)


class Boom(Exception):
    """A failure inside a transaction: nothing it wrote, totals included, stays."""


def apply(store: SessionStore, sessions: list[str], op: tuple[Any, ...]) -> None:
    name, which = op[0], op[1]
    if name == "new" or not sessions:
        sessions.append(store.create_session(model="gpt-4o"))
        return
    sid = sessions[which % len(sessions)]
    if name == "messages":
        store.append_messages(sid, [user("q"), assistant("a")] * op[2], tokenizer=TOKENIZER)
    elif name == "event":
        store.record_event(sid, op[2])
    elif name == "batch":  # an import's calls: one transaction, events held and inserted together
        with store.batched_costs():
            store.append_messages(sid, [user("go"), assistant("done")], tokenizer=TOKENIZER)
            for e in op[2]:
                store.record_event(sid, e)
    elif name == "blob":
        store.put_blob(sid, b"x" * op[2], tool_name="bash")
    elif name == "truncate":  # a re-import's replaced tail
        with store.transaction():
            store.truncate_messages(sid, op[2], event_source="import:")
            store.append_messages(sid, [user("again")], tokenizer=TOKENIZER)
    elif name == "delete":
        store.delete_session(sid)
        sessions.remove(sid)
    elif name == "rolled_back":
        with pytest.raises(Boom), store.transaction():
            store.append_messages(sid, [user("lost")], tokenizer=TOKENIZER)
            store.record_event(sid, event("guard", "forced_final"))
            store.put_blob(sid, b"lost", tool_name="bash")
            store.delete_session(sid)
            raise Boom


@settings(
    max_examples=20,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # shrinking a failure takes minutes: the example is enough
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_kept_totals_equal_the_aggregate_after_any_mix_of_writes(
    tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[Any, ...]]
) -> None:
    folder = tmp_path_factory.mktemp("mix")
    path = folder / "store.db"
    sessions: list[str] = []
    with SessionStore(path) as store:
        for op in ops:
            apply(store, sessions, op)
    frame = assert_both_paths_agree(path, folder / "old")
    assert set(frame["session_id"]) == set(sessions)
    assert set(kept_rows(path)) <= set(sessions)  # a deleted session's row went with it


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kept_totals_equal_the_aggregate_after_a_long_generated_mix(tmp_path: Path, seed: int) -> None:
    """80 writes over 4 sessions, drawn from the same operations: every merge expression meets
    earlier totals it must keep or combine (a later, smaller peak; a second compaction)."""
    rng = random.Random(seed)
    ops = [_random_op(rng) for _ in range(80)]
    sessions: list[str] = []
    with SessionStore(tmp_path / "store.db") as store:
        for op in ops:
            apply(store, sessions, op)
    assert_both_paths_agree(tmp_path / "store.db", tmp_path / "old")


def _random_event(rng: random.Random) -> ContextEvent:
    kind = rng.choice(["request", "request", "compaction", "guard"])
    outcome = {
        "request": "ok",
        "compaction": "compacted",
        "guard": rng.choice(["forced_final", "skipped_provider"]),
    }
    return event(kind, outcome[kind], rng.randint(0, 300_000), rng.choice([None, 8_000, 200_000]))


def _random_op(rng: random.Random) -> tuple[Any, ...]:
    which = rng.randint(0, 3)
    name = rng.choices(["new", "messages", "event", "batch", "blob", "truncate", "delete", "rolled_back"],
                       weights=[1, 4, 6, 2, 2, 2, 1, 1])[0]  # fmt: skip
    extra = {
        "messages": (rng.randint(1, 6),), "event": (_random_event(rng),),
        "batch": ([_random_event(rng) for _ in range(rng.randint(0, 4))],),
        "blob": (rng.randint(0, 5_000),), "truncate": (rng.randint(0, 8),),
    }.get(name, ())  # fmt: skip
    return (name, which, *extra)


def test_every_write_of_a_long_mix_is_counted_and_a_migrated_file_is_back_filled(tmp_path: Path) -> None:
    """Totals merged over many transactions (every merge expression used), then the table dropped
    and rebuilt by migration m008 on the next open for writing: the same rows either way."""
    path = tmp_path / "store.db"
    with SessionStore(path) as store:
        a, b = store.create_session(model="gpt-4o"), store.create_session(model="gpt-4o")
        for i in range(3):
            store.append_messages(a, [user(f"q{i}"), assistant("a")], tokenizer=TOKENIZER)
            store.record_event(a, event("request", "ok", 1_000 * (3 - i) + 7, 200_000 - i))
            store.record_event(a, event("compaction", "compacted"))
            store.record_event(b, event("guard", "forced_final" if i else "skipped_provider"))
            store.put_blob(b, b"y" * (100 + i), tool_name="bash")
        store.record_event(a, event("request", "ok", None, 8_000))
    kept = kept_rows(path)  # a's events: request, compaction three times, then a request with no count
    columns = [c.name for c in TABLES_M008[0].columns][1:]
    assert dict(zip(columns, kept[a], strict=True)) == {
        "messages": 6, "last_turn": 2, "peak_usage_pct": 3_007 * 100 / (200_000 - 20_000),
        "peak_tokens": 3_007, "last_limit": 6 * 10_000_000_000 + 8_000 - 800, "compactions": 3,
        "forced_final": 0, "skipped_provider": 0, "offloaded_bytes": 0, "blobs": 0,
    }  # fmt: skip
    assert dict(zip(columns, kept[b], strict=True))["offloaded_bytes"] == 303
    assert_both_paths_agree(path, tmp_path / "old")
    with closing(sqlite3.connect(path)) as conn:  # as a file an older ctxdesk wrote
        conn.execute(f"DROP TABLE {ROLLUP_TABLE}")
        conn.execute("DELETE FROM _migrations WHERE name = 'm008_session_rollups'")
        conn.commit()
    SessionStore(path).close()
    assert kept_rows(path) == kept


def test_the_declared_table_has_one_column_per_total() -> None:
    declared = [c.name for c in TABLES_M008[0].columns]
    assert declared == ["session_id", *(name for totals in SESSION_TOTALS.values() for name in totals)]


@pytest.mark.parametrize(
    ("how", "sqlite"),
    [
        ("greatest(r.last_turn, excluded.last_turn)",
         "coalesce(max(r.last_turn, excluded.last_turn), r.last_turn, excluded.last_turn)"),
        ("r.messages + excluded.messages", "r.messages + excluded.messages"),
    ],
)  # fmt: skip
def test_merges_are_spelled_for_sqlite_with_nulls_ignored(how: str, sqlite: str) -> None:
    assert sqlite_merge(how) == sqlite
    with closing(sqlite3.connect(":memory:")) as conn:
        for old, new, expected in ((None, 3, 3), (4, None, 4), (4, 3, 4), (None, None, None)):
            row = conn.execute(f"SELECT {sqlite_merge('greatest(r.x, excluded.x)').replace('r.x', '?1').replace('excluded.x', '?2')}", (old, new)).fetchone()  # fmt: skip
            assert row[0] == expected


def _proxied(turn: int) -> Any:
    """A proxied Anthropic call of turn ``turn`` (its history grows by a turn each call)."""
    from engine.proxy.recording.exchange import new_exchange

    history: list[dict[str, Any]] = []
    for i in range(turn + 1):
        history += [{"role": "user", "content": f"step {i}"}] + (
            [{"role": "assistant", "content": "ok"}] if i < turn else []
        )
    body = {"model": "claude-sonnet-4-20250514", "max_tokens": 100, "messages": history}
    exchange = new_exchange(
        "anthropic_messages",
        "POST",
        "/v1/messages",
        {"x-ctxdesk-session": "proxied"},
        json.dumps(body).encode(),
    )
    exchange.status, exchange.response_headers = 200, {"content-type": "application/json"}
    answer = {
        "id": f"msg_{turn}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-20250514",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "usage": {"input_tokens": 1_000 * (3 - turn), "output_tokens": 2},
    }  # fmt: skip
    exchange.response_chunks = [json.dumps(answer).encode()]
    return exchange


def test_the_engine_the_dashboard_action_and_the_proxy_writes_keep_the_totals(tmp_path: Path) -> None:
    """The session manager's writes (guard stops, compactions, offloaded outputs), a compaction the
    dashboard applies through the engine, and calls the proxy records: both read paths agree."""
    from dashboard import actions
    from engine.proxy.recording.sessions import SessionResolver
    from engine.proxy.recording.writer import ExchangeWriter
    from tests.dashboard_fixture import write_dashboard_db

    path = tmp_path / "store.db"
    ids = write_dashboard_db(path)
    assert actions.apply_compaction(path, ids["refactor"], strategy="truncate") is not None
    with SessionStore(path) as store:
        writer = ExchangeWriter(store, SessionResolver())
        for turn in range(3):
            writer.write(_proxied(turn))
    frame = assert_both_paths_agree(path, tmp_path / "old").set_index("session_id")
    refactor = frame.loc[ids["refactor"]]
    assert (
        refactor["compactions"] == 2
        and refactor["forced_final"] == 1
        and refactor["offloaded_bytes"] > 40_000
    )
    assert (frame["source"] == "proxy").any()


def test_imports_and_a_reimport_that_replaces_a_tail_keep_the_totals(tmp_path: Path) -> None:
    """The real agents' fixtures and a generated Claude Code session imported; then the session's
    last 100 lines rewritten (other prompts, other usage, 50 lines fewer) and imported again: the
    replaced tail is deleted and written anew, and both read paths still agree."""
    from bench.bench_reliability import claude_code_lines
    from engine.importers import folder_files, import_files

    fixtures = Path(__file__).parent / "fixtures" / "real_agents"
    source = tmp_path / "lines.jsonl"
    claude_code_lines(source, 400)
    path = tmp_path / "store.db"
    with SessionStore(path) as store:
        import_files([*folder_files(fixtures), source], store, on_error=lambda p, e: None)
    before = overview(path).set_index("session_id").loc["s-lines"]
    lines = source.read_text().splitlines(keepends=True)
    tail = [line.replace("run the check", "run it again").replace('"input_tokens": 3', '"input_tokens": 9')
            for line in lines[300:350]]  # fmt: skip
    source.write_text("".join(lines[:300] + tail))
    with SessionStore(path) as store:
        import_files([source], store, on_error=lambda p, e: None)
    after = assert_both_paths_agree(path, tmp_path / "old").set_index("session_id").loc["s-lines"]
    assert (before["messages"], after["messages"]) == (400, 350)
    assert after["peak_tokens"] != before["peak_tokens"]


def test_a_commit_merges_its_rows_by_their_id_range_not_by_walking_an_index(tmp_path: Path) -> None:
    """Grouped by session, SQLite walked the whole (session, turn) covering index to find a commit's new
    rows: 1.7 s at every commit into a store of 2,000,000 messages. Every statement the merge runs reads
    its source table by the id range (or by session, for a recount), never by a scan."""
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(title="t")
        store.append_messages(sid, [user("a"), assistant("b")], tokenizer=get_tokenizer("chars/4"))
        statements: list[str] = []
        with store.transaction() as conn:
            conn.set_trace_callback(statements.append)
            store.append_messages(sid, [user("c")], tokenizer=get_tokenizer("chars/4"))
            store.record_event(
                sid, ContextEvent(kind="guard", trigger="turn_preflight", outcome="forced_final")
            )
        conn.set_trace_callback(None)
        merges = [s for s in statements if s.lstrip().startswith(f"INSERT INTO {ROLLUP_TABLE}")]
        assert len(merges) >= 2  # messages and events
        plans = {s: [r[3] for r in conn.execute(f"EXPLAIN QUERY PLAN {s}")] for s in merges}
    for statement, plan in plans.items():
        reads = [step for step in plan if step.startswith(("SCAN", "SEARCH")) and "CONSTANT" not in step]
        assert reads and all("INTEGER PRIMARY KEY (rowid>?)" in step for step in reads), (statement, plan)
