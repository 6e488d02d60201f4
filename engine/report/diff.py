"""Two contexts side by side: a session's current context or one of its snapshots, compared
per component and message by message (by content hash)."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from pathlib import Path

from engine.budget import measure_components
from engine.errors import NotFoundError, ValidationError
from engine.events import COMPONENTS
from engine.messages import Message
from engine.report.lookup import split_target, threads_of
from engine.report.shapes import ChangeStatus, Components, DiffReport, DiffSide, MessageChange
from engine.store import SessionRecord, SessionStore, message_kind
from engine.store.factory import is_database_url
from engine.tokens import get_tokenizer

PREVIEW_CHARS = 80


class _Side:
    def __init__(self, spec: str, record: SessionRecord, snapshot_id: int | None, description: str,
                 messages: list[Message], summary: str | None, store: SessionStore) -> None:  # fmt: skip
        self.spec, self.record, self.snapshot_id, self.description = spec, record, snapshot_id, description
        self.messages, self.summary = messages, summary
        self.tokenizer = get_tokenizer(record.tokenizer or record.model or "chars/4")
        system = record.metadata.get("system_prompt")
        counted = measure_components(
            tokenizer=self.tokenizer,
            system=system if isinstance(system, str) else "",
            summary=summary,
            messages=messages,
        )
        tools = sum(t.tokens for t in store.list_tools(record.id))
        self.components = counted.model_copy(update={"tools": tools})

    def model(self) -> DiffSide:
        return DiffSide(
            spec=self.spec, session_id=self.record.id, snapshot_id=self.snapshot_id,
            description=self.description, tokenizer=self.tokenizer.id, exact=self.tokenizer.exact,
            message_count=len(self.messages), components=Components.of(self.components), summary=self.summary,
        )  # fmt: skip


#: The largest id a database row can have (SQLite and PostgreSQL 64-bit integers).
_MAX_ID = 2**63 - 1


def parse_side(spec: str, db: str | None) -> tuple[Path | str, str | None, int | None]:
    """``DB:SESSION[@SNAPSHOT_ID]`` (or ``SESSION[@ID]`` with --db) -> (db, session, snapshot id)."""
    head, snapshot = spec, None
    if "@" in spec:
        head, _, tail = spec.rpartition("@")
        if not (tail.isascii() and tail.isdigit()) or int(tail) > _MAX_ID:
            raise ValidationError(
                f"snapshot id must be a number up to {_MAX_ID} in {spec!r}", field="snapshot", value=tail
            )
        snapshot = int(tail)
    if db is not None:  # a file, or a postgresql:// URL (kept as a str)
        return (db if is_database_url(db) else Path(db)), head or None, snapshot
    path, session = split_target(head)
    return path, session, snapshot


def load_side(store: SessionStore, spec: str, session: str | None, snapshot_id: int | None) -> _Side:
    record = store.get_session(threads_of(store, session)[0])
    if snapshot_id is not None:
        snap = store.get_snapshot(snapshot_id)
        if snap.session_id != record.id:
            raise NotFoundError(f"snapshot {snapshot_id} does not belong to session {record.id!r}")
        return _Side(spec, record, snapshot_id, f"snapshot {snapshot_id} ({snap.strategy}, through seq "
                     f"{snap.through_seq})", snap.messages, snap.summary, store)  # fmt: skip
    messages, summary, through = store.load_resume_history(record.id)
    described = (
        "transcript (never compacted)"
        if through < 0
        else f"current context (snapshot through seq {through} + later)"
    )
    return _Side(spec, record, None, described, messages, summary, store)


def snapshot_pair(store: SessionStore, spec: str, session: str | None) -> tuple[_Side, _Side]:
    """--snapshots: the previous state and the latest snapshot of one session."""
    record = store.get_session(threads_of(store, session)[0])
    snaps = store.list_snapshots(record.id)
    if not snaps:
        raise NotFoundError(f"session {record.id!r} has no snapshots to compare")
    latest = load_side(store, f"{spec}@{snaps[-1].id}", record.id, snaps[-1].id)
    if len(snaps) > 1:
        return load_side(store, f"{spec}@{snaps[-2].id}", record.id, snaps[-2].id), latest
    covered = [m.message for m in store.load_messages(record.id) if m.seq <= snaps[-1].through_seq]
    before = _Side(spec, record, None, f"transcript through seq {snaps[-1].through_seq} (before snapshot {snaps[-1].id})",
                   covered, None, store)  # fmt: skip
    return before, latest


def diff_contexts(a: _Side, b: _Side) -> DiffReport:
    """Compare two contexts by message content hash, in order (difflib over the hash lists)."""
    hashes_a = [m.content_hash for m in a.messages]
    hashes_b = [m.content_hash for m in b.messages]
    summarized = bool(b.summary) and b.summary != a.summary
    gone: ChangeStatus = "summarized" if summarized else "removed"
    changes: list[MessageChange] = []

    def change(status: ChangeStatus, i: int | None, j: int | None) -> MessageChange:
        m = b.messages[j] if j is not None else a.messages[i]  # type: ignore[index]
        return MessageChange(
            status=status, a_index=i, b_index=j, role=m.role, kind=message_kind(m),
            a_tokens=a.tokenizer.count_message(a.messages[i]) if i is not None else None,
            b_tokens=b.tokenizer.count_message(b.messages[j]) if j is not None else None,
            content_hash=m.content_hash, preview=" ".join(m.text.split())[:PREVIEW_CHARS],
        )  # fmt: skip

    matcher = difflib.SequenceMatcher(None, hashes_a, hashes_b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            changes.extend(change("kept", i, j) for i, j in zip(range(i1, i2), range(j1, j2), strict=True))
            continue
        pairs = _pair_changed(a.messages, range(i1, i2), b.messages, range(j1, j2))
        paired_a = {i for i, _ in pairs}
        paired_b = {j for _, j in pairs}
        changes.extend(change(gone, i, None) for i in range(i1, i2) if i not in paired_a)
        changes.extend(change("changed", i, j) for i, j in pairs)
        changes.extend(change("added", None, j) for j in range(j1, j2) if j not in paired_b)
    counts = {s: 0 for s in ChangeStatus.__args__}
    tokens = {s: 0 for s in ChangeStatus.__args__}
    for c in changes:
        counts[c.status] += 1
        tokens[c.status] += (c.b_tokens if c.b_tokens is not None else c.a_tokens) or 0
    ca, cb = a.components, b.components
    delta = {name: getattr(cb, name) - getattr(ca, name) for name in COMPONENTS} | {
        "total": cb.total - ca.total
    }
    return DiffReport(
        a=a.model(), b=b.model(), component_delta=delta, counts=counts, tokens=tokens,
        comparable=a.tokenizer.id == b.tokenizer.id, changes=changes,
    )  # fmt: skip


def _pair_changed(a: Sequence[Message], ia: range, b: Sequence[Message], ib: range) -> list[tuple[int, int]]:
    """Messages of a replaced block that are the same message changed (same id or tool ids):
    a cleared tool result, an edited text."""
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for i in ia:
        ids = {*a[i].tool_use_ids, *a[i].tool_result_ids}
        for j in ib:
            if j in used or a[i].role != b[j].role:
                continue
            same_id = a[i].id is not None and a[i].id == b[j].id
            if same_id or (ids and ids == {*b[j].tool_use_ids, *b[j].tool_result_ids}):
                pairs.append((i, j))
                used.add(j)
                break
    return pairs
