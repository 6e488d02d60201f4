"""Cline's tool calls and results, as the model saw them, made tool_use / tool_result blocks.

Cline (and Roo Code, Kilo Code) send a tool's result as user text: a header block
``[read_file for 'cli.py'] Result:`` then the output blocks, up to the next header or the
``<environment_details>`` block. The call it answers is either a native ``tool_use`` block of the
reply before it (newer versions) or the XML the model wrote in its text (``<read_file><path>
cli.py</path></read_file>``, the original protocol). Left as text, the output counts as user
input, a native call looks unanswered, and clearing old tool results finds nothing: here each
result becomes a ``tool_result`` of its call (the header kept as the result's first line, so no
token is lost), and an XML call becomes a ``tool_use`` block (its XML kept in the message's meta,
``cline_tool_xml``, so the text as sent can be rebuilt).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from engine.importers.parsing.parsed import ParsedMessage
from engine.messages import ImageBlock, Message, TextBlock, ToolResultBlock, ToolUseBlock

#: ``[name]`` or ``[name for 'target']`` then `` Result:``.
RESULT_HEADER = re.compile(r"^\[(?P<name>[A-Za-z_][\w-]*)(?: for '(?P<target>.*)')?\] Result:\s*$", re.S)
ENVIRONMENT = "<environment_details>"
_PARAM = re.compile(r"<(?P<key>[A-Za-z_][\w-]*)>(?P<value>.*?)</(?P=key)>", re.S)


@dataclass(frozen=True)
class TextResult:
    """One result a user message carries as text: the tool's name and the blocks it spans."""

    name: str
    start: int
    end: int  # exclusive: the next header, the environment details, or the message's end


def text_results(message: Message) -> list[TextResult]:
    """The results a user message carries as text blocks, in order."""
    blocks = message.blocks
    heads = [
        (i, match.group("name"))
        for i, b in enumerate(blocks)
        if isinstance(b, TextBlock) and (match := RESULT_HEADER.match(b.text.strip()))
    ]
    out = []
    for n, (start, name) in enumerate(heads):
        end = heads[n + 1][0] if n + 1 < len(heads) else len(blocks)
        for j in range(start + 1, end):
            block = blocks[j]
            if isinstance(block, TextBlock) and block.text.lstrip().startswith(ENVIRONMENT):
                end = j
                break
        out.append(TextResult(name, start, end))
    return out


def pair_text_results(messages: list[ParsedMessage]) -> int:
    """Turn every text-carried result into a tool_result of its call, in place; returns how many."""
    paired = 0
    for i in range(1, len(messages)):
        pm = messages[i]
        if pm.message.role != "user":
            continue
        results = text_results(pm.message)
        previous = messages[i - 1]
        if not results or previous.message.role != "assistant":
            continue
        answered = set(pm.message.tool_result_ids)
        calls = [c for c in _calls_for(previous, [r.name for r in results], seq=i) if c.id not in answered]
        if not calls:
            continue
        blocks = list(pm.message.blocks)
        made: dict[int, ToolResultBlock] = {}  # at the header's index
        folded: set[int] = set()  # the header and output blocks each result took
        used: set[str] = set()
        for result in results:
            call = next((c for c in calls if c.name == result.name and c.id not in used), None)
            if call is None:
                continue
            used.add(call.id)
            content = [b for b in blocks[result.start : result.end] if isinstance(b, (TextBlock, ImageBlock))]
            made[result.start] = ToolResultBlock(tool_use_id=call.id, content=content)
            folded.update(range(result.start, result.end))
        if not made:
            continue
        # Anthropic puts tool results first in their user message: the results, then the rest
        rest = [b for j, b in enumerate(blocks) if j not in folded]
        pm.message = pm.message.with_content([*(made[j] for j in sorted(made)), *rest])
        paired += len(made)
    return paired


def _calls_for(reply: ParsedMessage, names: list[str], *, seq: int) -> list[ToolUseBlock]:
    """The calls a reply made that text results may answer: its native tool_use blocks still
    unanswered, else the XML calls in its text (made tool_use blocks of the reply, in place)."""
    native = [b for b in reply.message.blocks if isinstance(b, ToolUseBlock)]
    if native:
        return native
    blocks: list[object] = []
    calls: list[ToolUseBlock] = []
    xml: list[str] = []
    wanted = set(names)
    for block in reply.message.blocks:
        if not isinstance(block, TextBlock):
            blocks.append(block)
            continue
        text, found = block.text, []
        for name in wanted:
            match = re.search(rf"<{re.escape(name)}>(?P<body>.*?)</{re.escape(name)}>", text, re.S)
            if match:
                found.append((match.start(), match.end(), name, match.group("body")))
        if not found:
            blocks.append(block)
            continue
        start, end, name, body = min(found)  # Cline runs the first tool of a reply
        params = {m.group("key"): m.group("value").strip("\n") for m in _PARAM.finditer(body)}
        call = ToolUseBlock(id=f"cline-xml-{seq}-{len(calls)}", name=name, input=params)
        before = text[:start].rstrip()
        after = text[end:].strip()
        blocks += [TextBlock(text=before)] if before else []
        blocks.append(call)
        blocks += [TextBlock(text=after)] if after else []
        calls.append(call)
        xml.append(text[start:end])
    if calls:
        meta = {**reply.message.meta, "cline_tool_xml": xml}
        reply.message = reply.message.model_copy(update={"content": blocks, "meta": meta})
    return calls
