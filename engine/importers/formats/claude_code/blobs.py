"""Large tool outputs Claude Code saved under ``<session>/tool-results/``: each becomes the blob of
the tool_result whose ``<persisted-output>`` names it, and the calls that sent its preview count
its bytes as offloaded."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from engine.importers.parsing.parsed import ParsedSession, SavedOutput
from engine.messages import ToolResultBlock, ToolUseBlock

_PERSISTED = re.compile(r"tool-results/([^\s<>\"']+)")


@dataclass
class ToolResultFile:
    """A large tool output Claude Code saved under ``<session>/tool-results/``."""

    name: str
    content: bytes
    path: str | None = None


#: An offloaded tool output for the writer (the importers' generic saved output).
ClaudeCodeBlob = SavedOutput


def assign_blobs(sessions: list[ParsedSession], files: Sequence[ToolResultFile]) -> None:
    """Each saved output becomes the blob of the tool_result whose ``<persisted-output>`` names
    it, in whichever thread (main or sub-agent) that result is; one blob per file."""
    by_name = {f.name: f for f in files}
    linked: set[str] = set()
    for session in sessions:
        session.blobs = _blobs(session, by_name, linked)
        _count_offloaded(session, session.blobs)
    unlinked = sorted(set(by_name) - linked)
    if unlinked and sessions:
        sessions[0].notes.append(
            f"{len(unlinked)} saved tool output(s) named by no tool result: {', '.join(unlinked)}"
        )


def _blobs(
    session: ParsedSession, by_name: dict[str, ToolResultFile], linked: set[str]
) -> list[ClaudeCodeBlob]:
    if not by_name:
        return []
    tool_names = {
        b.id: b.name for pm in session.messages for b in pm.message.blocks if isinstance(b, ToolUseBlock)
    }
    blobs: list[ClaudeCodeBlob] = []
    for pm in session.messages:
        for block in pm.message.blocks:
            if not isinstance(block, ToolResultBlock) or "tool-results/" not in block.text:
                continue
            for name in _PERSISTED.findall(block.text):
                file = by_name.get(name)
                if file is None or name in linked:
                    continue
                linked.add(name)
                blobs.append(
                    ClaudeCodeBlob(
                        tool_use_id=block.tool_use_id,
                        content=file.content,
                        tool_name=tool_names.get(block.tool_use_id),
                        preview=block.text[:2000],
                        source_path=file.path,
                    )
                )
    return blobs


def _count_offloaded(session: ParsedSession, blobs: Sequence[ClaudeCodeBlob]) -> None:
    """Each call's ``offloaded_bytes``: saved outputs whose preview it sent instead of them."""
    sizes = {b.tool_use_id: len(b.content) for b in blobs}
    if not sizes:
        return
    messages = [pm.message for pm in session.messages]
    for call in session.calls:
        if call.sent is None or call.components is None:
            continue
        sent = {u for i in call.sent.indexes() for u in messages[i].tool_result_ids}
        offloaded = sum(size for use_id, size in sizes.items() if use_id in sent)
        if offloaded:
            call.components = call.components.model_copy(update={"offloaded_bytes": offloaded})
