"""The request built from a per-message cache (AnthropicHistory) is the request built from scratch,
whatever happens to the history between calls: appends, parallel tool results merged across
calls, a failed turn taken back, compaction replacing it, an edited message; and the breakpoint
count kept alongside equals a walk of the body. The cached dicts are never changed by a request."""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.messages import Message, ToolResultBlock, assistant, tool_use, user
from engine.prompt import (
    AnthropicHistory,
    PromptBuilder,
    PromptSection,
    build_anthropic_request,
    count_cache_breakpoints,
    to_anthropic_request,
)
from engine.tokens import get_tokenizer

PROMPT = PromptBuilder(
    get_tokenizer("anthropic"), sections=[PromptSection("base_instructions", "You help.")]
).build()
TOOLS = [{"name": "read", "description": "read a file", "input_schema": {"type": "object"}}]


def _message(kind: int, i: int) -> Message:
    if kind == 0:
        return user(f"question {i}")
    if kind == 1:
        return assistant(f"answer {i}", tool_use(f"t{i}", "read", path=f"f{i}.py", cache_control={"x": 1}))
    if kind == 2:
        return Message(role="tool", content=[ToolResultBlock(tool_use_id=f"t{i}", content=f"out {i}")])
    return assistant("")  # nothing cacheable: the breakpoint goes further back


ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(st.integers(0, 3), min_size=1, max_size=4)),
        st.tuples(st.just("pop"), st.integers(1, 3)),
        st.tuples(st.just("replace"), st.integers(0, 5)),
        st.tuples(st.just("edit"), st.integers(0, 50)),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_cached_requests_equal_requests_built_from_scratch(steps):
    cache = AnthropicHistory()
    history: list[Message] = []
    counter = 0
    previous = None
    for op, arg in steps:
        if op == "append":
            for kind in arg:
                counter += 1
                history.append(_message(kind, counter))
        elif op == "pop":
            del history[max(0, len(history) - arg) :]
        elif op == "replace":
            history = [user("summary of earlier conversation"), *history[len(history) - arg :]] if arg else []
        elif history:  # an edit makes a new list: the same list object is only appended to or cut
            i = arg % len(history)
            history = list(history)
            history[i] = (
                history[i].model_copy(update={"meta": {"edited": True}}) if arg % 2 else user("edited")
            )
        if not history:
            continue
        kwargs = {"model": "claude-sonnet-4-6", "max_tokens": 1024}
        body, breakpoints = build_anthropic_request(PROMPT, history, TOOLS, history=cache, **kwargs)
        expected = to_anthropic_request(PROMPT, history, TOOLS, **kwargs)
        assert body == expected
        assert breakpoints == count_cache_breakpoints(expected)
        # building this request changed nothing in the one before (their dicts are shared)
        if previous is not None:
            assert previous[0] == previous[1]
        previous = (body, copy.deepcopy(body))
