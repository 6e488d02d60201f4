"""OpenHands trajectories: a JSON event list, evaluation output lines with ``history``, or the
resolver output of old OpenHands (``events`` reads the event form, ``legacy`` the V0 histories).
"""

from __future__ import annotations

from engine.importers.documents import Document
from engine.importers.formats import SNIFF_LINES, ImportFormat, objects_of
from engine.importers.formats.openhands.events import (
    is_openhands_event,
    is_openhands_record,
    parse_openhands_events,
    parse_openhands_record,
)
from engine.importers.formats.openhands.legacy import is_openhands_legacy, parse_openhands_legacy
from engine.importers.parsing.parsed import ParsedSession, SourceProblem

__all__ = ["FORMAT", "is_openhands_event", "is_openhands_legacy", "is_openhands_record"]


def sniff(doc: Document) -> bool:
    if doc.lines is not None and doc.lines:
        first = doc.lines[0][1]
        if is_openhands_record(first) or is_openhands_legacy(first):
            return True
    if isinstance(doc.value, dict):
        return is_openhands_legacy(doc.value) or is_openhands_record(doc.value)
    objects = objects_of(doc)
    if not objects or all("role" in v for v in objects):  # a role list is a chat, never events
        return False
    return sum(is_openhands_event(v) for v in objects[:SNIFF_LINES]) >= min(2, len(objects))


def parse(doc: Document, key: str) -> list[ParsedSession]:
    if doc.lines is None and is_openhands_legacy(doc.value):
        return [parse_openhands_legacy(doc.value, key=key)]
    if doc.lines is None and isinstance(doc.value, list):
        return [parse_openhands_events(doc.value, key=key)]
    records = doc.lines if doc.lines is not None else ((1, doc.value),)
    sessions = []
    for line, record in records:
        issue = record.get("issue") if isinstance(record.get("issue"), dict) else {}
        instance = record.get("instance_id") or record.get("number") or issue.get("number")
        parse_record = parse_openhands_legacy if is_openhands_legacy(record) else parse_openhands_record
        try:
            sessions.append(parse_record(record, key=f"{key}:{instance or line}"))
        except SourceProblem as exc:
            raise SourceProblem(str(exc), line=line if doc.lines is not None else None) from exc
    return sessions


FORMAT = ImportFormat(
    name="openhands",
    agent="OpenHands",
    sniff=sniff,
    parse=parse,
    reads=frozenset({"lines", "json"}),
    files="trajectory `.json`, evaluation `output.jsonl`, resolver output",
)
