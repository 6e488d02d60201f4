"""What a compaction kept and what it dropped, from the messages it removed or cleared:

- instructions: the user's own words (harness boilerplate left out, ``constraints.user_words``);
  a constraint sentence alone when the message holds some, else its first line;
- files read or edited (``describe_call`` reads every agent's tool dialect);
- errors (failed tool calls), with the later call that fixed them;
- shell commands.

An item is kept when the summary and the messages the compaction left still carry it (half of
an instruction's or error's key terms, a file's path, a command's text), or, for a file, when a
later call uses it again (it was "referred to again": the agent re-read or edited it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from engine.compaction.constraints import constraint_sentences, key_terms, user_words, words
from engine.compaction.failures import is_failure_output
from engine.compaction.tool_calls import describe_call
from engine.explain.calls import Calls
from engine.explain.model import ContextItem
from engine.findings.calls import FileUse, file_uses, later_use
from engine.findings.model import CONSTRAINT_KEPT_SHARE
from engine.messages import ToolResultBlock, ToolUseBlock, is_user_input
from engine.store import StoredMessage

ITEM_CHARS = 200


def kept_and_dropped(
    messages: Sequence[StoredMessage],
    removed: Iterable[int],
    cleared: Iterable[int],
    surviving_text: str,
    *,
    calls: Calls,
) -> tuple[tuple[ContextItem, ...], tuple[ContextItem, ...]]:
    """(kept, dropped) items of the messages a compaction ``removed`` (summarized or dropped) and
    ``cleared`` (tool results emptied), against the text that survived it."""
    removed, cleared = set(removed), set(cleared)
    if not removed and not cleared:
        return (), ()
    surviving = words(surviving_text)
    low_text = surviving_text.lower()
    uses = file_uses(messages)
    results = {
        b.tool_use_id: (m.seq, b)
        for m in messages
        for b in m.message.blocks
        if isinstance(b, ToolResultBlock)
    }
    kept: list[ContextItem] = []
    dropped: list[ContextItem] = []
    seen: set[tuple[str, str]] = set()

    def add(item: ContextItem, is_kept: bool) -> None:
        key = (item.kind, item.text.lower())
        if key not in seen:
            seen.add(key)
            (kept if is_kept else dropped).append(item)

    last = max(removed | cleared)
    for row in messages:
        if row.seq > last:
            break
        seq, message = row.seq, row.message
        if seq in removed and is_user_input(message):
            for text in _instructions(message.text):
                terms = key_terms(text)
                share = len(terms & surviving) / len(terms) if terms else 1.0
                is_kept = share >= CONSTRAINT_KEPT_SHARE
                detail = (
                    "in the summary or the kept messages"
                    if is_kept
                    else f"missing: {', '.join(sorted(terms - surviving)[:6])}"
                )
                add(ContextItem(kind="instruction", text=_clip(text), seq=seq, detail=detail), is_kept)
        if message.role != "assistant":
            continue
        for block in message.blocks:
            if not isinstance(block, ToolUseBlock):
                continue
            described = describe_call(block.name, block.input)
            result_seq, result = results.get(block.id, (None, None))
            gone = seq in removed or (result_seq is not None and result_seq in cleared)
            if not gone:
                continue
            only_cleared = seq not in removed  # the call stays; only its result's content went
            for path, action in described.files:
                add(*_file_item(path, action, seq, low_text, uses, calls, cleared=only_cleared))
            if described.command:
                command = described.command
                is_kept = command.lower()[:60] in low_text
                add(
                    ContextItem(
                        kind="command", text=_clip(command), seq=seq,
                        detail="named in the summary or the kept messages" if is_kept else "not in the summary",
                    ),
                    is_kept,
                )  # fmt: skip
            if result is not None and (
                result.is_error or is_failure_output(result.text, reads_file=described.reads_file)
            ):
                add(
                    *_error_item(
                        result.text,
                        block.name,
                        result_seq or seq,
                        surviving,
                        described.command,
                        messages,
                        calls,
                    )
                )
    return tuple(kept), tuple(dropped)


def _instructions(text: str) -> list[str]:
    """The instructions in a user message: its constraint sentences, else its first line."""
    own = user_words(text)
    if not own:
        return []
    sentences = constraint_sentences(own)
    if sentences:
        return sentences
    first = next((line.strip() for line in own.splitlines() if line.strip()), "")
    return [first] if first else []


def _file_item(
    path: str, action: str, seq: int, low_text: str, uses: Sequence[FileUse], calls: Calls, *, cleared: bool
) -> tuple[ContextItem, bool]:
    named = path.lower() in low_text or (
        path.rsplit("/", 1)[-1].lower() in low_text and "." in path.rsplit("/", 1)[-1]
    )
    again = later_use(uses, path, seq)
    what = {"read": "read", "edited": "edited", "written": "written", "deleted": "deleted"}.get(
        action, "used"
    )
    parts = [f"{what} at message {seq}"]
    if cleared:  # the content is gone whatever names the path; the agent can read it again
        parts.append("its content cleared, the call naming it kept")
    elif named:
        parts.append("named in the summary or the kept messages")
    if again is not None:
        call = _call_at(calls, again.seq)
        parts.append(f"referred to again by {again.tool}" + (f" at call {call}" if call else ""))
    if not cleared and not named and again is None:
        parts.append("not in the summary and never used again")
    is_kept = not cleared and (named or again is not None)
    return ContextItem(kind="file", text=path, seq=seq, detail="; ".join(parts)), is_kept


def _error_item(
    text: str,
    tool: str,
    seq: int,
    surviving: set[str],
    command: str | None,
    messages: Sequence[StoredMessage],
    calls: Calls,
) -> tuple[ContextItem, bool]:
    line = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), text.strip())
    terms = key_terms(line)
    is_kept = bool(terms) and len(terms & surviving) / len(terms) >= CONSTRAINT_KEPT_SHARE
    fixed = _fixed_by(tool, command, seq, messages)
    detail = "in the summary" if is_kept else "not in the summary"
    if fixed is not None:
        call = _call_at(calls, fixed)
        detail += f"; fixed by a later {tool}" + (f" at call {call}" if call else "")
    return ContextItem(kind="error", text=_clip(f"{tool}: {line}"), seq=seq, detail=detail), is_kept


def _fixed_by(tool: str, command: str | None, seq: int, messages: Sequence[StoredMessage]) -> int | None:
    """The seq of a later call of the same tool (the same command, for a shell) that succeeded."""
    uses: dict[str, tuple[int, str | None]] = {}
    for row in messages:
        for block in row.message.blocks:
            if isinstance(block, ToolUseBlock) and row.seq > seq and block.name == tool:
                uses[block.id] = (row.seq, describe_call(block.name, block.input).command)
            elif isinstance(block, ToolResultBlock) and block.tool_use_id in uses:
                use_seq, later_command = uses.pop(block.tool_use_id)
                if command is not None and later_command != command:
                    continue
                if not block.is_error and not is_failure_output(block.text):
                    return use_seq
    return None


def _call_at(calls: Calls, message_seq: int) -> int | None:
    """The call whose reply is the message at ``message_seq`` (or the first after it)."""
    for call in calls.calls:
        if call.message_seq is not None and call.message_seq >= message_seq:
            return call.number
    return None


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ITEM_CHARS else text[: ITEM_CHARS - 1] + "…"
