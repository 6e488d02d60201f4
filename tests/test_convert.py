"""Converters: lossless round trips (hypothesis), cross-provider mapping, typed format errors."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from anthropic.types import Message as AnthropicMessage
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import from_anthropic, from_openai, to_anthropic, to_openai
from engine.errors import MessageFormatError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    tool_result,
    tool_use,
    user,
)
from tests.strategies import HEAVY, anthropic_dicts, histories, openai_dicts

# -- lossless round trips -------------------------------------------------------------------


@settings(HEAVY, max_examples=200)
@given(anthropic_dicts())
def test_anthropic_dicts_survive_a_round_trip(dicts: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(dicts)
    assert to_anthropic(from_anthropic(dicts)) == original
    assert dicts == original  # the input is not mutated


@settings(HEAVY, max_examples=200)
@given(openai_dicts())
def test_openai_dicts_survive_a_round_trip(dicts: list[dict[str, Any]]) -> None:
    original = copy.deepcopy(dicts)
    assert to_openai(from_openai(dicts)) == original
    assert dicts == original


@settings(HEAVY, max_examples=200)
@given(histories(native="anthropic"))
def test_anthropic_native_messages_survive_a_round_trip(messages: list[Message]) -> None:
    assert from_anthropic(to_anthropic(messages)) == messages


@settings(HEAVY, max_examples=200)
@given(histories(native="openai"))
def test_openai_native_messages_survive_a_round_trip(messages: list[Message]) -> None:
    assert from_openai(to_openai(messages)) == messages


@HEAVY
@given(anthropic_dicts())
def test_anthropic_meta_is_plain_json(dicts: list[dict[str, Any]]) -> None:
    for message in from_anthropic(dicts):
        assert json.loads(json.dumps(message.meta)) == message.meta


@HEAVY
@given(openai_dicts())
def test_openai_messages_convert_to_anthropic_and_back_keeping_content(dicts: list[dict[str, Any]]) -> None:
    """Cross-provider: what both shapes express (text, tool calls and results) survives."""
    messages = from_openai(dicts)
    again = from_anthropic(to_anthropic(messages))
    uses = [b for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert [b for m in again for b in m.blocks if isinstance(b, ToolUseBlock)] == uses
    results = [b.tool_use_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert [b.tool_use_id for m in again for b in m.blocks if isinstance(b, ToolResultBlock)] == results


# -- provider quirks kept in meta -----------------------------------------------------------


def test_cache_control_is_kept_until_the_block_changes() -> None:
    d = {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]}
    [message] = from_anthropic([d])
    assert message.content == [TextBlock(text="hi")]
    assert to_anthropic([message]) == [d]
    edited = message.with_content([TextBlock(text="bye")])
    assert to_anthropic([edited]) == [{"role": "user", "content": [{"type": "text", "text": "bye"}]}]


@pytest.mark.parametrize(
    "d",
    [
        pytest.param(
            {"role": "assistant", "content": [{"type": "thinking", "thinking": "x", "signature": None}]},
            id="null-signature",
        ),
        pytest.param(
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": None, "is_error": None}],
            },
            id="null-result-fields",
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t"}]}, id="no-result-content"
        ),
        pytest.param(
            {
                "role": "user",
                "content": [{"type": "document", "source": {"type": "text", "data": "d"}, "title": None}],
            },
            id="null-title",
        ),
        pytest.param(
            {
                "role": "assistant",
                "content": "hi",
                "tool_calls": None,
                "refusal": None,
                "reasoning_content": None,
            },
            id="openai-nulls",
        ),
    ],
)
def test_explicit_nulls_and_absent_defaults_survive(d: dict[str, Any]) -> None:
    if "tool_calls" in d:
        assert to_openai(from_openai([d])) == [d]
    else:
        assert to_anthropic(from_anthropic([d])) == [d]


def test_openai_arguments_formatting_is_kept() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{\n  "a": 1\n}'}}
    d = {"role": "assistant", "content": None, "tool_calls": [call]}
    [message] = from_openai([d])
    assert message.content == [ToolUseBlock(id="c1", name="f", input={"a": 1})]
    assert to_openai([message]) == [d]
    assert (
        to_openai([message.with_content([tool_use("c1", "f", a=2)])])[0]["tool_calls"][0]["function"][
            "arguments"
        ]
        == '{"a":2}'
    )


def test_openai_name_survives_an_edit() -> None:
    [message] = from_openai([{"role": "user", "content": "hi", "name": "alice"}])
    assert to_openai([message.with_content("bye")]) == [{"role": "user", "content": "bye", "name": "alice"}]


@pytest.mark.parametrize(
    ("content", "expected_blocks"),
    [
        pytest.param(None, [], id="null"),
        pytest.param("", [TextBlock(text="")], id="empty-string"),
        pytest.param([{"type": "text", "text": "a"}], [TextBlock(text="a")], id="one-part-list"),
    ],
)
def test_openai_assistant_content_forms_round_trip(content: Any, expected_blocks: list[Any]) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    d = {"role": "assistant", "content": content, "tool_calls": [call]}
    [message] = from_openai([d])
    assert message.content == [*expected_blocks, ToolUseBlock(id="c1", name="f")]
    assert to_openai([message]) == [d]


def test_empty_openai_arguments_mean_no_input() -> None:
    d = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": ""}}],
    }
    [message] = from_openai([d])
    assert message.content == [ToolUseBlock(id="c1", name="f", input={})]
    assert to_openai([message]) == [d]


def test_reasoning_content_becomes_a_thinking_block() -> None:
    d = {"role": "assistant", "content": "answer", "reasoning_content": "because"}
    [message] = from_openai([d])
    assert message.content == [ThinkingBlock(thinking="because"), TextBlock(text="answer")]
    assert to_openai([message]) == [d]


def test_tool_message_becomes_a_tool_role_result() -> None:
    [message] = from_openai([{"role": "tool", "tool_call_id": "c1", "content": "42"}])
    assert message == Message(role="tool", content=[ToolResultBlock(tool_use_id="c1", content="42")])


# -- SDK objects ----------------------------------------------------------------------------

_RESPONSE = {
    "id": "msg_01",
    "type": "message",
    "role": "assistant",
    "model": "claude-sonnet-4-5",
    "content": [
        {"type": "thinking", "thinking": "plan", "signature": "sig"},
        {"type": "text", "text": "Running it."},
        {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"cmd": "ls", "timeout": None}},
    ],
    "stop_reason": "tool_use",
    "stop_sequence": None,
    "usage": {"input_tokens": 10, "output_tokens": 5},
}


def test_anthropic_sdk_message_converts_to_request_params() -> None:
    sdk = AnthropicMessage.model_validate(_RESPONSE)
    [message] = from_anthropic(sdk)
    assert message.id == "msg_01"
    assert message.content == [
        ThinkingBlock(thinking="plan", signature="sig"),
        TextBlock(text="Running it."),
        ToolUseBlock(id="toolu_1", name="bash", input={"cmd": "ls", "timeout": None}),
    ]
    assert message.meta["anthropic"]["response"]["stop_reason"] == "tool_use"
    assert to_anthropic([message]) == [{"role": "assistant", "content": _RESPONSE["content"]}]


def test_sdk_content_blocks_inside_a_dict_message_are_accepted() -> None:
    sdk = AnthropicMessage.model_validate(_RESPONSE)
    messages = from_anthropic([{"role": "assistant", "content": sdk.content}])
    assert to_anthropic(messages) == [{"role": "assistant", "content": _RESPONSE["content"]}]


def test_a_single_message_is_accepted() -> None:
    assert from_anthropic({"role": "user", "content": "hi"}) == [user("hi")]
    assert to_openai(user("hi")) == [{"role": "user", "content": "hi"}]


# -- cross-provider mapping -----------------------------------------------------------------


def test_tool_role_messages_merge_into_one_anthropic_user_message() -> None:
    messages = from_openai(
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
                    {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"x":1}'}},
                ],
            },
            {"role": "tool", "tool_call_id": "a", "content": "A"},
            {"role": "tool", "tool_call_id": "b", "content": "B"},
            {"role": "user", "content": "thanks"},
        ]
    )
    assert to_anthropic(messages) == [
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "g", "input": {"x": 1}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b", "content": "B"},
            ],
        },
        {"role": "user", "content": "thanks"},
    ]


def test_anthropic_tool_results_become_one_openai_tool_message_each() -> None:
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "iVBO"})
    message = Message(
        role="user",
        content=[
            ToolResultBlock(tool_use_id="a", content="A"),
            ToolResultBlock(tool_use_id="b", content=[TextBlock(text="B"), image], is_error=True),
            TextBlock(text="and also"),
        ],
    )
    assert to_openai([message]) == [
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": [{"type": "text", "text": "B"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "and also"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBO"}},
            ],
        },
    ]


def test_anthropic_assistant_renders_as_openai_tool_calls() -> None:
    message = Message(
        role="assistant",
        content=[
            ThinkingBlock(thinking="hmm", signature="s"),
            ThinkingBlock(redacted=True, data="opaque"),
            TextBlock(text="Let me look."),
            tool_use("t1", "read", path="ü.txt"),
        ],
    )
    assert to_openai([message]) == [
        {
            "role": "assistant",
            "content": "Let me look.",
            "reasoning_content": "hmm",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"ü.txt"}'},
                }
            ],
        }
    ]


@pytest.mark.parametrize(
    ("block", "part"),
    [
        pytest.param(
            ImageBlock(source={"type": "url", "url": "https://x/y.png"}),
            {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            id="image-url",
        ),
        pytest.param(
            DocumentBlock(
                source={"type": "base64", "media_type": "application/pdf", "data": "JVBE"}, title="a.pdf"
            ),
            {"type": "file", "file": {"file_data": "data:application/pdf;base64,JVBE", "filename": "a.pdf"}},
            id="pdf",
        ),
        pytest.param(
            DocumentBlock(source={"type": "text", "media_type": "text/plain", "data": "notes"}),
            {"type": "text", "text": "notes"},
            id="text-document",
        ),
    ],
)
def test_media_renders_as_openai_parts(block: Any, part: dict[str, Any]) -> None:
    assert to_openai([Message(role="user", content=[block])]) == [{"role": "user", "content": [part]}]


def test_history_builders_render_for_both_providers() -> None:
    history = [
        user("hi"),
        Message(role="assistant", content=[tool_use("t1", "ls")]),
        tool_result("t1", "a b"),
    ]
    assert from_anthropic(to_anthropic(history)) == history
    assert to_openai(history)[-1] == {"role": "tool", "tool_call_id": "t1", "content": "a b"}


# -- format errors name the message and field -----------------------------------------------

_ANTHROPIC_ERRORS = [
    pytest.param({"content": "hi"}, 0, "role", id="missing-role"),
    pytest.param({"role": "system", "content": "be brief"}, 0, "role", id="system-role"),
    pytest.param({"role": "robot", "content": "hi"}, 0, "role", id="unknown-role"),
    pytest.param({"role": "user"}, 0, "content", id="missing-content"),
    pytest.param({"role": "user", "content": 5}, 0, "content", id="bad-content-type"),
    pytest.param({"role": "user", "content": None}, 0, "content", id="null-content"),
    pytest.param({"role": "user", "content": ["hi"]}, 0, "content[0]", id="block-not-an-object"),
    pytest.param({"role": "user", "content": [{"type": "video"}]}, 0, "content[0].type", id="unknown-block"),
    pytest.param(
        {"role": "user", "content": [{"text": "hi"}]}, 0, "content[0].type", id="block-without-type"
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "tool_result", "content": "x"}]},
        0,
        "content[0].tool_use_id",
        id="tool-result-without-id",
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "", "content": "x"}]},
        0,
        "content[0].tool_use_id",
        id="tool-result-empty-id",
    ),
    pytest.param(
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "ls"}]},
        0,
        "content[0].input",
        id="tool-use-input-not-object",
    ),
    pytest.param(
        {"role": "assistant", "content": [{"type": "text", "text": 3}]},
        0,
        "content[0].text",
        id="text-not-string",
    ),
    pytest.param(
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "is_error": 1}]},
        0,
        "content[0].is_error",
        id="is-error-not-a-boolean",
    ),
    pytest.param(
        {"role": "assistant", "content": [{"type": "redacted_thinking"}]},
        0,
        "content[0].data",
        id="redacted-thinking-without-data",
    ),
    pytest.param(
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t", "content": [{"type": "tool_use"}]}],
        },
        0,
        "content[0].content[0].type",
        id="tool-result-holds-a-tool-use",
    ),
]


@pytest.mark.parametrize(("message", "index", "field"), _ANTHROPIC_ERRORS)
def test_malformed_anthropic_message_raises_format_error(message: Any, index: int, field: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        from_anthropic([{"role": "user", "content": "fine"}, message])
    assert (caught.value.index, caught.value.field) == (index + 1, field)
    assert f"message {index + 1}" in str(caught.value)


def test_system_message_error_points_to_the_prompt_builder() -> None:
    with pytest.raises(MessageFormatError, match="prompt builder"):
        from_openai([{"role": "system", "content": "You are terse."}])


_OPENAI_ERRORS = [
    pytest.param({"role": "developer", "content": "x"}, "role", id="developer-role"),
    pytest.param({"role": "function", "content": "x"}, "role", id="legacy-function-role"),
    pytest.param({"role": "user", "content": None}, "content", id="user-null-content"),
    pytest.param({"role": "user", "content": [{"type": "audio"}]}, "content[0].type", id="unknown-part"),
    pytest.param(
        {"role": "user", "content": [{"type": "image_url", "image_url": {}}]},
        "content[0].image_url.url",
        id="image-without-url",
    ),
    pytest.param({"role": "assistant", "content": 1}, "content", id="assistant-bad-content"),
    pytest.param({"role": "assistant", "tool_calls": {"id": "x"}}, "tool_calls", id="tool-calls-not-a-list"),
    pytest.param(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{a"}}],
        },
        "tool_calls[0].function.arguments",
        id="arguments-not-json",
    ),
    pytest.param(
        {
            "role": "assistant",
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}],
        },
        "tool_calls[0].function.arguments",
        id="arguments-not-an-object",
    ),
    pytest.param(
        {
            "role": "assistant",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
        "tool_calls[0].id",
        id="tool-call-without-id",
    ),
    pytest.param(
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]},
        "tool_calls[0].type",
        id="custom-tool-call",
    ),
    pytest.param({"role": "tool", "content": "x"}, "tool_call_id", id="tool-without-call-id"),
    pytest.param({"role": "tool", "tool_call_id": "c", "content": None}, "content", id="tool-null-content"),
]


@pytest.mark.parametrize(("message", "field"), _OPENAI_ERRORS)
def test_malformed_openai_message_raises_format_error(message: Any, field: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        from_openai([{"role": "user", "content": "fine"}, message])
    assert (caught.value.index, caught.value.field) == (1, field)


@pytest.mark.parametrize(
    ("convert", "message", "field"),
    [
        pytest.param(
            to_anthropic, Message(role="tool", content="loose"), "content", id="anthropic-tool-string"
        ),
        pytest.param(
            to_openai,
            Message(role="tool", content=[TextBlock(text="x")]),
            "content[0]",
            id="openai-tool-text",
        ),
        pytest.param(
            to_openai,
            Message(role="user", content=[ImageBlock(source={"type": "file", "file_id": "f"})]),
            "content[0].source.type",
            id="image-file-source",
        ),
        pytest.param(
            to_openai,
            Message(role="assistant", content=[ImageBlock(source={"type": "url", "url": "u"})]),
            "content[0]",
            id="assistant-image",
        ),
        pytest.param(
            to_openai, Message(role="user", content=[tool_use("t", "f")]), "content[0]", id="user-tool-use"
        ),
    ],
)
def test_unrenderable_message_raises_format_error(convert: Any, message: Message, field: str) -> None:
    with pytest.raises(MessageFormatError) as caught:
        convert([user("ok"), message])
    assert (caught.value.index, caught.value.field) == (1, field)


@pytest.mark.parametrize("bad", ["just a string", 42, [user("already canonical")]])
def test_from_rejects_what_is_not_a_message_list(bad: Any) -> None:
    with pytest.raises(MessageFormatError):
        from_anthropic(bad)


def test_tool_input_that_is_not_json_cannot_go_to_openai() -> None:
    message = Message(role="assistant", content=[ToolUseBlock(id="t", name="f", input={"when": object()})])
    with pytest.raises(MessageFormatError) as caught:
        to_openai([message])
    assert caught.value.field == "content[0].input"


def test_to_rejects_plain_dicts() -> None:
    with pytest.raises(MessageFormatError, match=r"expected an engine\.messages\.Message"):
        to_anthropic([{"role": "user", "content": "hi"}])


@given(st.text(alphabet=st.characters(exclude_categories=("Cs",))))
def test_any_text_survives_both_shapes(text: str) -> None:
    assert from_anthropic(to_anthropic([user(text)])) == [user(text)]
    assert from_openai(to_openai([user(text)])) == [user(text)]
