"""``report --format json`` is written while it is read (engine.report.stream): the text is the
one the whole :class:`Report` renders to, its CI gates read the same roll-ups, and the rows it reads
by the hundred thousand share their pydantic field-name sets."""

from __future__ import annotations

import io
import shutil
from pathlib import Path

import pytest

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.messages import assistant, user
from engine.report.build import build_report
from engine.report.run import EXIT_GATE_FAILED, render, run_report
from engine.report.stream import report_json_pieces
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DEMOS = sorted((ROOT / "data").glob("demo-*.db"))


@pytest.mark.parametrize("demo", DEMOS, ids=[d.stem for d in DEMOS])
def test_the_streamed_json_is_the_whole_reports_json(demo: Path, tmp_path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):  # a copy: the reading side never touches data/
        if Path(f"{demo}{suffix}").exists():
            shutil.copy(f"{demo}{suffix}", tmp_path / f"d.db{suffix}")
    with SessionStore(tmp_path / "d.db", read_only=True) as store:
        ids = [s.id for s in store.list_sessions()]
        whole = render(build_report(store, ids, source="demo"), "json")
        streamed = "".join(report_json_pieces(store, ids, source="demo"))
    assert len(ids) > 1
    assert '"calls": [\n' in streamed and '"requests": [\n' in streamed  # lists were streamed
    assert streamed == whole


def _session(path: Path, pcts: list[int]) -> str:
    with SessionStore(path) as store:
        sid = store.create_session(model="gpt-4.1", provider="openai")
        for i, pct in enumerate(pcts):
            (_, reply) = store.append_messages(
                sid, [user(f"q{i}"), assistant(f"a{i}")], tokenizer=get_tokenizer("chars/4")
            )
            store.record_event(
                sid, ContextEvent(kind="note", trigger="turn_preflight", outcome="note", turn_index=i)
            )
            store.record_event(
                sid,
                ContextEvent(
                    kind="request", trigger="user_input", outcome="ok", provider="openai", model="gpt-4.1",
                    turn_index=i, limit_tokens=1000, projected_tokens=pct * 10,
                    components=ComponentTokens(conversation=pct * 10),
                    usage=ProviderUsage(input_tokens=pct * 10, output_tokens=2), message_seq=reply.seq,
                ),
            )  # fmt: skip
    return sid


def test_an_empty_session_streams_empty_lists_as_the_whole_report_does(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "e.db") as store:
        sid = store.create_session(model="gpt-4.1")
        whole = render(build_report(store, [sid], source="e"), "json")
        streamed = "".join(report_json_pieces(store, [sid], source="e"))
    assert '"requests": []' in streamed
    assert streamed == whole


@pytest.mark.parametrize(("fail_over", "code"), [(40, EXIT_GATE_FAILED), (80, 0)])
def test_the_fail_over_gate_reads_the_streamed_reports_peak(
    tmp_path: Path, fail_over: int, code: int
) -> None:
    db = tmp_path / "g.db"
    sid = _session(db, [10, 70, 30])
    out, err = io.StringIO(), io.StringIO()
    result = run_report(f"{db}:{sid}", fmt="json", fail_over=fail_over, stdout=out, stderr=err)
    assert result == code
    assert '"peak_usage_pct": 70.0' in out.getvalue()
    assert ("peak context usage 70.0%" in err.getvalue()) == (code == EXIT_GATE_FAILED)


def test_rows_read_share_their_field_name_sets_and_copies_do_not_change_them(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    sid = _session(db, [10, 20])
    with SessionStore(db, read_only=True) as store:
        events = store.list_events(sid)
        messages = store.load_messages(sid)
    requests = [e for e in events if e.kind == "request"]
    assert requests[0].model_fields_set is requests[1].model_fields_set
    assert requests[0].usage.model_fields_set is requests[1].usage.model_fields_set  # type: ignore[union-attr]
    assert messages[0].model_fields_set is messages[3].model_fields_set
    assert messages[0].message.model_fields_set is messages[1].message.model_fields_set
    before = set(requests[1].model_fields_set)
    copied = requests[0].model_copy(update={"seq": 99})
    assert copied.seq == 99 and requests[0].seq != 99
    assert requests[1].model_fields_set == before
