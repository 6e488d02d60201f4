"""The components' residual (``unattributed_tokens``, ``components_basis``, migration m006) and the
session roll-ups' limit, on both backends: what is recorded reads back, an older database gains the
columns without losing a row, and the roll-ups' peak is the Python limit rule's."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.limit import recorded_limit
from engine.store import SessionStore, StoredEvent
from engine.store import schema as schema_module
from engine.store.factory import open_store
from engine.store.pg_rollups import LIMIT_BASE, SESSION_TOTALS, rollup_sql, totals_sql
from tests.old_schema import opened_without
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param(
        "postgresql", id="postgresql", marks=pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
    ),
]


def _target(backend: str, folder: Path) -> str:
    return str(folder / "sessions.db") if backend == "sqlite" else fresh_url()


@pytest.fixture(params=BACKENDS)
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return _target(str(request.param), tmp_path)


@pytest.fixture
def store(target: str) -> Iterator[SessionStore]:
    with open_store(target) as s:
        yield s


def _columns(store: SessionStore, event_id: int) -> tuple[object, ...]:
    with store.transaction() as conn:
        row = conn.execute(
            f"SELECT unattributed_tokens, components_basis FROM context_events WHERE id = {store.P}",
            (event_id,),
        ).fetchone()
    return tuple(row)


MEASURED = ComponentTokens(system=1_200, tools=3_400, conversation=5_000, tool_results=700)


@pytest.mark.parametrize(
    ("components", "basis", "stored"),
    [
        pytest.param(
            MEASURED.model_copy(update={"unattributed": 2_345}),
            "reconciled",
            (2_345, "reconciled"),
            id="reconciled with a residual",
        ),
        pytest.param(MEASURED, "exact", (0, "exact"), id="exact: nothing unattributed"),
        pytest.param(MEASURED, "estimate", (0, "estimate"), id="estimate"),
        pytest.param(MEASURED, None, (0, None), id="basis not said"),
        pytest.param(None, None, (None, None), id="no components: both NULL"),
    ],
)
def test_the_residual_and_basis_are_recorded_and_read_back(
    store: SessionStore, components: ComponentTokens | None, basis: str | None, stored: tuple[object, ...]
) -> None:
    sid = store.create_session()
    event = ContextEvent(
        kind="request", outcome="ok", components=components, components_basis=basis,  # type: ignore[arg-type]
        usage=ProviderUsage(input_tokens=12_645) if components else None, projected_tokens=12_645,
    )  # fmt: skip
    event_id = store.record_event(sid, event)
    assert _columns(store, event_id) == stored
    (read,) = store.list_events(sid)
    assert read.components == components
    assert read.components_basis == basis
    if components is not None:
        assert read.components.total == components.total  # the residual counts in the total
        assert read.components.measured == MEASURED.total


def _pre_m006(monkeypatch: pytest.MonkeyPatch, target: str) -> tuple[str, list[int]]:
    """A database migrated only up to m005 holding a session with one component-bearing event."""
    with opened_without(monkeypatch, target, "m006_component_residual") as old:
        sid = old.create_session(session_id="old")
        with old.transaction() as conn:
            conn.execute(
                "INSERT INTO context_events (session_id, seq, kind, system_tokens, skills_tokens,"
                " tools_tokens, summary_tokens, conversation_tokens, tool_results_tokens, offloaded_bytes,"
                f" projected_tokens, created_utc) VALUES ({old.P}, 0, 'request', 10, 0, 20, 0, 30, 40, 0, 100, {old.P})",
                (sid, "2026-11-28T00:00:00.000000Z"),
            )
            names = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name")]
    return sid, names


def test_an_older_database_gains_the_columns_and_keeps_its_events(
    target: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sid, names = _pre_m006(monkeypatch, target)
    assert "m006_component_residual" not in names
    with open_store(target) as store:
        (old,) = store.list_events(sid)
        assert old.components == ComponentTokens(system=10, tools=20, conversation=30, tool_results=40)
        assert old.components_basis is None
        new_id = store.record_event(
            sid,
            ContextEvent(
                kind="request",
                components=MEASURED.model_copy(update={"unattributed": 5}),
                components_basis="reconciled",
            ),
        )
        assert _columns(store, new_id) == (5, "reconciled")
        with store.transaction() as conn:
            applied = [r[0] for r in conn.execute("SELECT name FROM _migrations ORDER BY name")]
        assert applied == sorted(name for name, _ in schema_module.MIGRATIONS)


def test_a_read_only_open_of_an_older_file_reads_its_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    sid, _ = _pre_m006(monkeypatch, str(path))
    with SessionStore(path, read_only=True) as store:
        (old,) = store.list_events(sid)
    assert old.components is not None and old.components.unattributed == 0
    assert old.components_basis is None


# -- the roll-ups' limit is engine.limit's -----------------------------------------------------

maybe = st.one_of(st.none(), st.integers(min_value=0, max_value=400_000))
request_events = st.builds(
    lambda limit, window, reserve, buffer, projected: ContextEvent(
        kind="request",
        limit_tokens=limit,
        context_window=window,
        max_output_tokens=reserve,
        buffer_tokens=buffer,
        projected_tokens=projected,
    ),
    maybe,
    maybe,
    maybe,
    maybe,
    st.integers(min_value=0, max_value=300_000),
)
#: A guard and a note between the calls: only requests count for the peak and the last limit.
other_events = st.sampled_from(
    [
        ContextEvent(kind="guard", outcome="ok", limit_tokens=10, projected_tokens=9_999),
        ContextEvent(kind="note"),
    ]
)


def _python_totals(events: list[StoredEvent]) -> tuple[float | None, int | None]:
    """(peak share in %, last limit) by engine.limit.recorded_limit."""
    requests = [(e, recorded_limit(e)) for e in events if e.kind == "request"]
    shares = [
        e.projected_tokens * 100 / limit for e, limit in requests if limit and e.projected_tokens is not None
    ]
    limits = [limit for _, limit in requests if limit]
    return (max(shares) if shares else None), (limits[-1] if limits else None)


def _sql_totals(store: SessionStore, sid: str, backend: str) -> tuple[float | None, int | None]:
    sql = rollup_sql("context_events") if backend == "postgresql" else totals_sql("context_events")
    with store.transaction() as conn:
        rows = [r for r in conn.execute(sql).fetchall() if r[0] == sid]
    if not rows:
        return None, None
    row = dict(zip(["session_id", *SESSION_TOTALS["context_events"]], rows[0], strict=True))
    last = row["last_limit"]
    return row["peak_usage_pct"], (None if last is None else int(last) % LIMIT_BASE)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_rollups_peak_and_last_limit_follow_the_python_limit_rule(backend: str, tmp_path: Path) -> None:
    with open_store(_target(backend, tmp_path)) as store:

        @settings(max_examples=25, deadline=None)
        @given(st.lists(st.one_of(request_events, other_events), min_size=1, max_size=8))
        def check(events: list[ContextEvent]) -> None:
            sid = store.create_session()
            for event in events:
                store.record_event(sid, event)
            peak, last = _python_totals(store.list_events(sid))
            sql_peak, sql_last = _sql_totals(store, sid, backend)
            assert sql_last == last
            assert (sql_peak is None) == (peak is None)
            if peak is not None:
                assert sql_peak == pytest.approx(peak, rel=1e-12)

        check()


def test_inspect_shows_the_basis_the_residual_and_the_limit_every_page_uses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from engine.cli import main

    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        sid = store.create_session(session_id="s-1", model="claude-x")
        store.record_event(
            sid,
            ContextEvent(
                kind="request", context_window=200_000, max_output_tokens=32_000,  # no limit_tokens recorded
                components=MEASURED.model_copy(update={"unattributed": 2_345}), components_basis="reconciled",
                usage=ProviderUsage(input_tokens=12_645),
            ),
        )  # fmt: skip
    assert main(["inspect", str(path), sid]) == 0
    header, dashes, row = capsys.readouterr().out.split("\n\n")[1].splitlines()[1:4]
    spans = [(m.start(), m.end()) for m in re.finditer(r"-+", dashes)]
    cells = {header[a:b].strip(): row[a:b].strip() for a, b in spans}
    assert cells["unattributed"] == "2,345" and cells["total"] == cells["provider"] == "12,645"
    assert cells["basis"] == "reconciled" and cells["limit"] == "168,000"  # recorded_limit: window - reserve
