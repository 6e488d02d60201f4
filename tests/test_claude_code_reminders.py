"""The TodoWrite reminder Claude Code 1.0.x sent but did not log (engine.importers.formats
.claude_code.reminders): rebuilt where its rule puts it, only for the versions that sent it
unlogged, and it makes the provider's growth at that call add up."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.calibration_pairs import store_growth_pairs
from engine.importers import import_file
from engine.importers.formats.claude_code.reminders import (
    TODO_REMINDER,
    TURNS_BETWEEN_REMINDERS,
    TURNS_SINCE_WRITE,
    _Step,
    add_todo_reminders,
    reminder_due,
    sends_unlogged_reminders,
)
from engine.importers.formats.claude_code.thread import Thread
from engine.importers.parsing.parsed import CallInfo, ParsedMessage
from engine.messages import Message, assistant, is_user_input, tool_result, tool_use, user
from engine.store import SessionStore
from engine.tokens import get_tokenizer
from tests.conftest import FIXTURES

#: Claude Code 1.0.98: its first sub-agent (lines 16-36) is 7 assistant messages (content blocks)
#: past its last TodoWrite after its 6th call, so its 7th call's request carried the reminder.
CLAUDE_CODE_1_0 = FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl"

A, W, R = _Step(assistant=True), _Step(assistant=True, todo_write=True), _Step(reminder=True)
U = _Step()
DUE_CASES = [
    ("nothing yet", [], False),
    ("six assistant messages since the TodoWrite (itself counted)", [W, U, *[A, U] * 5], False),
    ("seven since the TodoWrite", [W, U, *[A, U] * 6], True),
    ("never a TodoWrite, seven assistant messages", [U, *[A, U] * 7], True),
    ("a reminder two assistant messages ago", [W, *[A] * 8, R, A, A], False),
    ("a reminder three assistant messages ago", [W, *[A] * 8, R, A, A, A], True),
    ("a TodoWrite call after a text block counts once", [A, W, *[A] * 5], False),
]  # fmt: skip


@pytest.mark.parametrize(("name", "steps", "due"), DUE_CASES, ids=[c[0] for c in DUE_CASES])
def test_the_rule_of_claude_code_1_0(name: str, steps: list[_Step], due: bool) -> None:
    assert (TURNS_SINCE_WRITE, TURNS_BETWEEN_REMINDERS) == (7, 3)  # cli.js 1.0.98 and 1.0.108
    assert reminder_due(steps) is due


@pytest.mark.parametrize(
    ("version", "sends"),
    [
        ("1.0.98", True),
        ("1.0.108", True),
        ("1.0.97", False),
        ("2.0.0", False),
        ("2.1.197", False),
        (None, False),
    ],
)
def test_only_the_versions_that_sent_it_unlogged(version: str | None, sends: bool) -> None:
    from engine.importers.formats.claude_code.requests import parse_version

    assert sends_unlogged_reminders(parse_version(version)) is sends


def _carries_reminder(message: Message) -> bool:
    """The reminder's text is in one of the message's blocks (or a tool result's own blocks)."""
    texts: list[str] = []
    for block in message.blocks:
        content = getattr(block, "content", None)
        texts += [getattr(block, "text", "") or ""]
        texts += [content] if isinstance(content, str) else [getattr(b, "text", "") for b in content or []]
    return any(TODO_REMINDER in text for text in texts)


def _messages(store: SessionStore) -> list[Message]:
    return [row.message for s in store.list_sessions() for row in store.load_messages(s.id)]


def test_a_real_1_0_transcript_gets_the_reminder_where_claude_code_sent_it(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        import_file(CLAUDE_CODE_1_0, store)
        sub = next(s for s in store.list_sessions() if s.parent_session_id is not None)
        rows = store.load_messages(sub.id)
        carrying = [row for row in rows if _carries_reminder(row.message)]
        assert len(carrying) == 1
        reminded = carrying[0].message
        assert reminded.meta["reconstructed"] == ["todo_reminder"]
        assert not is_user_input(reminded)  # folded into the tool result: still no turn of its own
        calls_before = sum(1 for row in rows[: carrying[0].seq] if row.message.role == "assistant")
        assert calls_before == 6

        pairs = [p for group in store_growth_pairs([store]).values() for p in group]
    reminder_tokens = get_tokenizer("anthropic").count(TODO_REMINDER)
    # the provider's own count of what that call added (674) against ours, with and without it
    pair = next(p for p in pairs if p.provider == 674)
    assert abs(pair.static - pair.provider) / pair.provider < 0.03
    assert abs(pair.static - reminder_tokens - pair.provider) / pair.provider > 0.10


def test_a_2_x_transcript_gets_none(tmp_path: Path) -> None:
    lines = [json.loads(line) for line in CLAUDE_CODE_1_0.read_text(encoding="utf-8").splitlines()]
    relabelled = tmp_path / "relabelled.jsonl"
    relabelled.write_text(
        "\n".join(json.dumps({**o, "version": "2.1.0"} if "version" in o else o) for o in lines) + "\n",
        encoding="utf-8",
    )
    with SessionStore(tmp_path / "s.db") as store:
        import_file(relabelled, store)
        assert not any(_carries_reminder(m) for m in _messages(store))


def _thread(kinds: list[str]) -> Thread:
    """A thread of tool calls: ``w`` a TodoWrite call, ``b`` any other, each answered."""
    messages = [ParsedMessage(user("go"))]
    for n, kind in enumerate(kinds):
        name = "TodoWrite" if kind == "w" else "Bash"
        messages.append(ParsedMessage(assistant("", tool_use(f"t{n}", name)), call=CallInfo(model="claude")))
        messages.append(ParsedMessage(tool_result(f"t{n}", "ok")))
    messages.append(ParsedMessage(assistant("done"), call=CallInfo(model="claude")))
    return Thread(messages=messages, uuid_index={})


@given(st.lists(st.sampled_from("wb"), max_size=40))
def test_reminders_only_add_text_to_tool_results(kinds: list[str]) -> None:
    thread = _thread(kinds)
    before = [pm.message for pm in thread.messages]
    added = add_todo_reminders(thread)
    after = [pm.message for pm in thread.messages]
    assert len(after) == len(before)
    changed = [(b, a) for b, a in zip(before, after, strict=True) if a != b]
    assert len(changed) == added
    for old, new in changed:
        assert old.tool_result_ids and new.tool_result_ids == old.tool_result_ids
        assert not is_user_input(new)
    # reminders at least TURNS_BETWEEN_REMINDERS assistant messages (content blocks) apart
    reminded = [i for i, m in enumerate(after) if m != before[i]]
    for a, b in itertools.pairwise(reminded):
        between = sum(len(m.blocks) for m in after[a:b] if m.role == "assistant")
        assert between >= TURNS_BETWEEN_REMINDERS
