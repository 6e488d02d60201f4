"""Hypothesis strategies shared by the tests: canonical histories and provider-shape message dicts.

``histories(native=None)`` draws lists of :class:`Message` in which every tool_use is answered by a
later tool_result (orphan-free); ``native="anthropic"`` / ``"openai"`` restricts them to what that
provider's shape expresses exactly. ``anthropic_dicts()`` / ``openai_dicts()`` draw request-shape
dicts with the provider quirks a converter must keep (cache_control, explicit defaults, JSON
arguments formatting, ``content: null``). Text is arbitrary Unicode without lone surrogates.
"""

from __future__ import annotations

import functools
import itertools
import json
import string
from typing import Any, Literal

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

Native = Literal["anthropic", "openai"] | None

#: Settings for tests drawing whole histories: generation is rich by design, and a loaded CI
#: machine must not turn wall-clock limits into flaky failures.
HEAVY = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: HEAVY, for tests that share a function-scoped fixture (a store) across examples.
HEAVY_WITH_FIXTURE = settings(
    HEAVY, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)

# -- atoms ----------------------------------------------------------------------------------

texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=30)
nonempty_texts = st.text(alphabet=st.characters(exclude_categories=("Cs",)), min_size=1, max_size=20)
names = st.text(alphabet=string.ascii_letters + string.digits + "_-", min_size=1, max_size=12)
base64_data = st.text(alphabet=string.ascii_letters + string.digits + "+/", min_size=1, max_size=24)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(texts, inner, max_size=3),
    max_leaves=5,
)
tool_inputs = st.dictionaries(texts, json_values, max_size=3)

image_sources = st.one_of(
    st.builds(
        lambda mt, data: {"type": "base64", "media_type": mt, "data": data},
        st.sampled_from(["image/png", "image/jpeg", "image/gif", "image/webp"]),
        base64_data,
    ),
    names.map(lambda n: {"type": "url", "url": f"https://example.com/{n}.png"}),
)
pdf_sources = base64_data.map(lambda d: {"type": "base64", "media_type": "application/pdf", "data": d})
text_doc_sources = texts.map(lambda t: {"type": "text", "media_type": "text/plain", "data": t})
file_sources = names.map(lambda n: {"type": "file", "file_id": f"file-{n}"})

text_blocks = st.builds(TextBlock, text=texts)
image_blocks = st.builds(ImageBlock, source=image_sources)


@functools.cache
def document_blocks(native: Native = None) -> st.SearchStrategy[DocumentBlock]:
    if native == "openai":
        sources = pdf_sources | file_sources
    elif native == "anthropic":
        sources = pdf_sources | text_doc_sources
    else:
        sources = pdf_sources | text_doc_sources | file_sources
    return st.builds(DocumentBlock, source=sources, title=st.none() | texts)


@functools.cache
def thinking_blocks(native: Native = None) -> st.SearchStrategy[ThinkingBlock]:
    plain = st.builds(ThinkingBlock, thinking=texts, signature=st.none() | names)
    if native == "openai":
        return st.builds(ThinkingBlock, thinking=texts)
    return plain | st.builds(ThinkingBlock, redacted=st.just(True), data=base64_data)


@functools.cache
def media_blocks(native: Native = None) -> st.SearchStrategy[Any]:
    return image_blocks | document_blocks(native)


# -- canonical histories --------------------------------------------------------------------


@functools.cache
def _user_input(native: Native) -> st.SearchStrategy[Message]:
    content = texts | st.lists(text_blocks | media_blocks(native), max_size=3)
    if native:
        return st.builds(Message, role=st.just("user"), content=content)
    return st.builds(
        Message,
        role=st.just("user"),
        content=content,
        pinned=st.booleans(),
        id=st.none() | names,
        meta=st.just({}) | st.dictionaries(names, json_values, max_size=2),
    )


@functools.cache
def _assistant_prefix(native: Native) -> st.SearchStrategy[list[Any]]:
    """What an assistant message holds before its tool uses: thinking, then text."""
    thinking = st.lists(thinking_blocks(native), max_size=1 if native == "openai" else 2)
    text = st.lists(text_blocks, max_size=3)
    return st.tuples(thinking, text).map(lambda parts: [*parts[0], *parts[1]])


@st.composite
def _assistant(draw: st.DrawFn, native: Native, ids: list[str]) -> Message:
    uses = [ToolUseBlock(id=i, name=draw(names), input=draw(tool_inputs)) for i in ids]
    if not uses and draw(st.booleans()):
        content: str | list[Any] = draw(texts)
    else:
        content = [*draw(_assistant_prefix(native)), *uses]
        if native == "openai" and len(content) == 1 and isinstance(content[0], TextBlock):
            # OpenAI renders a lone text block as a plain string, which parses back as one.
            content = content[0].text
    return Message(role="assistant", content=content, id=None if native else draw(st.none() | names))


@functools.cache
def _result_content(native: Native) -> st.SearchStrategy[str | list[Any]]:
    if native == "openai":
        return texts | st.lists(text_blocks, max_size=3)
    return texts | st.lists(text_blocks | media_blocks(native), max_size=3)


@st.composite
def _tool_results(draw: st.DrawFn, native: Native, ids: list[str]) -> list[Message]:
    results = [
        ToolResultBlock(
            tool_use_id=i,
            content=draw(_result_content(native)),
            is_error=native != "openai" and draw(st.booleans()),
        )
        for i in ids
    ]
    as_tool_role = native == "openai" or (native is None and draw(st.booleans()))
    if as_tool_role:
        return [Message(role="tool", content=[r]) for r in results]
    trailing = draw(st.lists(text_blocks, max_size=1 if native is None else 0))
    return [Message(role="user", content=[*results, *trailing])]


@st.composite
def histories(draw: st.DrawFn, native: Native = None, max_turns: int = 3) -> list[Message]:
    """An orphan-free history: turns of user input, tool rounds (uses then results), replies."""
    counter = itertools.count()
    messages: list[Message] = []
    if native is None and draw(st.booleans()):
        messages.append(draw(_assistant(native, [])))
    for _ in range(draw(st.integers(0, max_turns))):
        messages.append(draw(_user_input(native)))
        for _ in range(draw(st.integers(0, 2))):
            prefix = draw(st.sampled_from(["toolu", "call", "t"]))
            ids = [f"{prefix}_{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            messages.append(draw(_assistant(native, ids)))
            messages.extend(draw(_tool_results(native, ids)))
        if draw(st.booleans()):
            messages.append(draw(_assistant(native, [])))
    return messages


# -- Anthropic request-shape dicts ----------------------------------------------------------

_cache_control = st.just({"type": "ephemeral"})


def _maybe(draw: st.DrawFn, block: dict[str, Any], key: str, values: st.SearchStrategy[Any]) -> None:
    if draw(st.booleans()):
        block[key] = draw(values)


@st.composite
def _anthropic_text(draw: st.DrawFn) -> dict[str, Any]:
    block = {"type": "text", "text": draw(texts)}
    _maybe(draw, block, "cache_control", _cache_control)
    _maybe(draw, block, "citations", st.none() | st.just([]))
    return block


@st.composite
def _anthropic_media(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        block: dict[str, Any] = {"type": "image", "source": draw(image_sources)}
    else:
        block = {"type": "document", "source": draw(pdf_sources | text_doc_sources)}
        _maybe(draw, block, "title", texts)
        _maybe(draw, block, "context", texts)
        _maybe(draw, block, "citations", st.builds(lambda e: {"enabled": e}, st.booleans()))
    _maybe(draw, block, "cache_control", _cache_control)
    return block


@st.composite
def _anthropic_thinking(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"type": "redacted_thinking", "data": draw(base64_data)}
    block = {"type": "thinking", "thinking": draw(texts)}
    _maybe(draw, block, "signature", names)
    return block


ANTHROPIC_TEXT = _anthropic_text()
ANTHROPIC_MEDIA = _anthropic_media()
ANTHROPIC_THINKING = _anthropic_thinking()


@st.composite
def _anthropic_tool_result(draw: st.DrawFn, tool_use_id: str) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": tool_use_id}
    _maybe(draw, block, "content", texts | st.lists(ANTHROPIC_TEXT | ANTHROPIC_MEDIA, max_size=3))
    _maybe(draw, block, "is_error", st.booleans())
    _maybe(draw, block, "cache_control", _cache_control)
    return block


@st.composite
def anthropic_dicts(draw: st.DrawFn, max_turns: int = 3) -> list[dict[str, Any]]:
    """Anthropic Messages API request messages, tool uses answered in the next user message."""
    counter = itertools.count()
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, max_turns))):
        user_content = texts | st.lists(ANTHROPIC_TEXT | ANTHROPIC_MEDIA, max_size=3)
        out.append({"role": "user", "content": draw(user_content)})
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"toolu_{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            blocks = draw(st.lists(ANTHROPIC_THINKING, max_size=2))
            blocks += draw(st.lists(ANTHROPIC_TEXT, max_size=2))
            for i in ids:
                use = {"type": "tool_use", "id": i, "name": draw(names), "input": draw(tool_inputs)}
                _maybe(draw, use, "cache_control", _cache_control)
                blocks.append(use)
            out.append({"role": "assistant", "content": blocks})
            results = [draw(_anthropic_tool_result(i)) for i in ids]
            out.append({"role": "user", "content": results + draw(st.lists(ANTHROPIC_TEXT, max_size=1))})
        if draw(st.booleans()):
            out.append({"role": "assistant", "content": draw(texts | st.lists(ANTHROPIC_TEXT, max_size=2))})
    return out


# -- OpenAI chat-completions dicts ----------------------------------------------------------

_ARGUMENT_STYLES = (
    lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":")),
    lambda v: json.dumps(v),
    lambda v: json.dumps(v, indent=2),
    lambda v: json.dumps(v, ensure_ascii=True, separators=(",", ":")),
)


@st.composite
def _openai_part(draw: st.DrawFn, kinds: tuple[str, ...]) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    if kind == "text":
        return {"type": "text", "text": draw(texts)}
    if kind == "image_url":
        if draw(st.booleans()):
            url = f"data:{draw(st.sampled_from(['image/png', 'image/jpeg']))};base64,{draw(base64_data)}"
        else:
            url = f"https://example.com/{draw(names)}.png"
        image = {"url": url}
        _maybe(draw, image, "detail", st.sampled_from(["auto", "low", "high"]))
        return {"type": "image_url", "image_url": image}
    file: dict[str, Any] = (
        {"file_data": f"data:application/pdf;base64,{draw(base64_data)}"}
        if draw(st.booleans())
        else {"file_id": f"file-{draw(names)}"}
    )
    _maybe(draw, file, "filename", names.map(lambda n: f"{n}.pdf"))
    return {"type": "file", "file": file}


OPENAI_TEXT_PART = _openai_part(("text",))
OPENAI_USER_PART = _openai_part(("text", "image_url", "file"))


@st.composite
def _openai_tool_call(draw: st.DrawFn, call_id: str) -> dict[str, Any]:
    arguments = draw(tool_inputs)
    style = draw(st.sampled_from(_ARGUMENT_STYLES))
    text = "" if not arguments and draw(st.booleans()) else style(arguments)
    return {"id": call_id, "type": "function", "function": {"name": draw(names), "arguments": text}}


@st.composite
def _openai_assistant(draw: st.DrawFn, ids: list[str]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    content = draw(st.sampled_from(["absent", "null", "text", "parts"]))
    if content == "null":
        message["content"] = None
    elif content == "text":
        message["content"] = draw(texts)
    elif content == "parts":
        message["content"] = draw(st.lists(OPENAI_TEXT_PART, max_size=3))
    if ids:
        message["tool_calls"] = [draw(_openai_tool_call(i)) for i in ids]
    elif draw(st.booleans()):
        message["tool_calls"] = draw(st.sampled_from([None, []]))
    _maybe(draw, message, "reasoning_content", st.none() | texts)
    _maybe(draw, message, "refusal", st.none() | texts)
    _maybe(draw, message, "name", names)
    return message


@st.composite
def openai_dicts(draw: st.DrawFn, max_turns: int = 3) -> list[dict[str, Any]]:
    """OpenAI chat-completions messages (system prompt excluded), tool calls answered in order."""
    counter = itertools.count()
    out: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, max_turns))):
        user_content = texts | st.lists(OPENAI_USER_PART, max_size=3)
        user: dict[str, Any] = {"role": "user", "content": draw(user_content)}
        _maybe(draw, user, "name", names)
        out.append(user)
        for _ in range(draw(st.integers(0, 2))):
            ids = [f"call_{next(counter)}" for _ in range(draw(st.integers(1, 3)))]
            out.append(draw(_openai_assistant(ids)))
            for i in ids:
                content = draw(texts | st.lists(OPENAI_TEXT_PART, max_size=2))
                tool: dict[str, Any] = {"role": "tool", "tool_call_id": i, "content": content}
                _maybe(draw, tool, "name", names)
                out.append(tool)
        if draw(st.booleans()):
            out.append(draw(_openai_assistant([])))
    return out
