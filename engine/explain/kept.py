"""What a compaction kept and what it dropped, from the messages it removed or cleared:

- instructions: the user's own words (harness boilerplate left out, ``constraints.user_words``);
  a constraint sentence alone when the message holds some, else its first line;
- files read or edited (``describe_call`` reads every agent's tool dialect);
- errors (failed tool calls), with the later call that fixed them;
- shell commands.

An item is kept when the summary and the messages the compaction left still carry it (half of
an instruction's or error's key terms, a file's path, a command's text), or, for a file, when a
later call uses it again (it was "referred to again": the agent re-read or edited it). A result a
clearing compaction emptied is dropped content whatever still names its file.

The session's tool calls are read once (:class:`ToolHistory`) and shared by its compactions.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from engine.compaction.constraints import constraint_sentences, key_terms, user_words, words
from engine.compaction.failures import is_failure_output
from engine.compaction.tool_calls import ToolCall, describe_call
from engine.explain.calls import Calls
from engine.explain.explanations import ContextItem
from engine.findings.calls import FileUse, later_use
from engine.findings.view import CONSTRAINT_KEPT_SHARE
from engine.messages import ToolResultBlock, ToolUseBlock, is_user_input
from engine.store import StoredMessage

ITEM_CHARS = 200


@dataclass(frozen=True, slots=True)
class ToolRun:
    """One tool call of the transcript: where it was asked for, what it did, how it came back."""

    use_seq: int
    name: str
    described: ToolCall
    result_seq: int | None
    result_text: str
    failed: bool


@dataclass(frozen=True)
class ToolHistory:
    """The session's tool calls in order, and the lookups the items need (built once per session)."""

    runs: tuple[ToolRun, ...]
    uses: tuple[FileUse, ...]
    #: (tool, command) -> sorted seqs of its calls that succeeded: "fixed by a later call".
    successes: dict[tuple[str, str | None], list[int]]

    @classmethod
    def of(cls, messages: Sequence[StoredMessage]) -> ToolHistory:
        pending: dict[str, tuple[int, str, ToolCall]] = {}
        runs: list[ToolRun] = []
        for row in messages:
            for block in row.message.blocks:
                if isinstance(block, ToolUseBlock):
                    pending[block.id] = (row.seq, block.name, describe_call(block.name, block.input))
                elif isinstance(block, ToolResultBlock) and block.tool_use_id in pending:
                    seq, name, described = pending.pop(block.tool_use_id)
                    failed = block.is_error or is_failure_output(block.text, reads_file=described.reads_file)
                    runs.append(ToolRun(seq, name, described, row.seq, block.text, failed))
        runs += [ToolRun(seq, name, described, None, "", False) for seq, name, described in pending.values()]
        runs.sort(key=lambda r: r.use_seq)
        uses = tuple(
            FileUse(r.use_seq, path, action, r.name) for r in runs for path, action in r.described.files
        )
        successes: dict[tuple[str, str | None], list[int]] = {}
        for r in runs:
            if r.result_seq is not None and not r.failed:
                successes.setdefault((r.name, r.described.command), []).append(r.use_seq)
        return cls(tuple(runs), uses, successes)

    def fixed_after(self, run: ToolRun) -> int | None:
        """The seq of the first later call of the same tool (the same command, for a shell) that succeeded."""
        later = self.successes.get((run.name, run.described.command), [])
        at = bisect.bisect_right(later, run.use_seq)
        return later[at] if at < len(later) else None


def kept_and_dropped(
    messages: Sequence[StoredMessage],
    removed: Iterable[int],
    cleared: Iterable[int],
    surviving_text: str,
    *,
    calls: Calls,
    history: ToolHistory | None = None,
) -> tuple[tuple[ContextItem, ...], tuple[ContextItem, ...]]:
    """(kept, dropped) items of the messages a compaction ``removed`` (summarized or dropped) and
    ``cleared`` (tool results emptied), against the text that survived it."""
    removed, cleared = set(removed), set(cleared)
    if not removed and not cleared:
        return (), ()
    history = history or ToolHistory.of(messages)
    surviving = words(surviving_text)
    low_text = surviving_text.lower()
    kept: list[ContextItem] = []
    dropped: list[ContextItem] = []
    seen: set[tuple[str, str]] = set()

    def add(item: ContextItem, is_kept: bool) -> None:
        key = (item.kind, item.text.lower())
        if key not in seen:
            seen.add(key)
            (kept if is_kept else dropped).append(item)

    for row in messages:
        if row.seq in removed and is_user_input(row.message):
            for text in _instructions(row.message.text):
                terms = key_terms(text)
                is_kept = not terms or len(terms & surviving) / len(terms) >= CONSTRAINT_KEPT_SHARE
                detail = (
                    "in the summary or the kept messages"
                    if is_kept
                    else f"missing: {', '.join(sorted(terms - surviving)[:6])}"
                )
                add(ContextItem(kind="instruction", text=_clip(text), seq=row.seq, detail=detail), is_kept)
    for run in history.runs:
        only_cleared = run.use_seq not in removed and run.result_seq in cleared
        if run.use_seq not in removed and not only_cleared:
            continue
        for path, action in run.described.files:
            add(*_file_item(path, action, run.use_seq, low_text, history.uses, calls, cleared=only_cleared))
        if run.described.command:
            command = run.described.command
            is_kept = command.lower()[:60] in low_text
            add(
                ContextItem(
                    kind="command", text=_clip(command), seq=run.use_seq,
                    detail="named in the summary or the kept messages" if is_kept else "not in the summary",
                ),
                is_kept,
            )  # fmt: skip
        if run.failed:
            add(*_error_item(run, surviving, history, calls))
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
    name = path.rsplit("/", 1)[-1].lower()
    named = path.lower() in low_text or ("." in name and name in low_text)
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
        call = calls.at_message(again.seq)
        parts.append(f"referred to again by {again.tool}" + (f" at call {call}" if call else ""))
    if not cleared and not named and again is None:
        parts.append("not in the summary and never used again")
    is_kept = not cleared and (named or again is not None)
    return ContextItem(kind="file", text=path, seq=seq, detail="; ".join(parts)), is_kept


def _error_item(
    run: ToolRun, surviving: set[str], history: ToolHistory, calls: Calls
) -> tuple[ContextItem, bool]:
    text = run.result_text
    line = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip()), text.strip())
    terms = key_terms(line)
    is_kept = bool(terms) and len(terms & surviving) / len(terms) >= CONSTRAINT_KEPT_SHARE
    detail = "in the summary" if is_kept else "not in the summary"
    fixed = history.fixed_after(run)
    if fixed is not None:
        call = calls.at_message(fixed)
        detail += f"; fixed by a later {run.name}" + (f" at call {call}" if call else "")
    seq = run.result_seq if run.result_seq is not None else run.use_seq
    return ContextItem(kind="error", text=_clip(f"{run.name}: {line}"), seq=seq, detail=detail), is_kept


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= ITEM_CHARS else text[: ITEM_CHARS - 1] + "…"
