"""The canonical message model: views, builders, predicates, immutability, hashing."""

from __future__ import annotations

import json

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    hashed_json,
    is_tool_result_only,
    is_user_input,
    tool_result,
    tool_use,
    user,
)
from tests.strategies import HEAVY, histories

# -- views ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "blocks"),
    [
        pytest.param(user("hi"), [TextBlock(text="hi")], id="string"),
        pytest.param(user(""), [], id="empty-string"),
        pytest.param(Message(role="user", content=[]), [], id="empty-list"),
        pytest.param(
            assistant("go", tool_use("t", "ls")),
            [TextBlock(text="go"), ToolUseBlock(id="t", name="ls")],
            id="blocks",
        ),
    ],
)
def test_blocks_view(message: Message, blocks: list[object]) -> None:
    assert message.blocks == blocks


def test_text_joins_text_and_tool_result_text_only() -> None:
    message = Message(
        role="user",
        content=[
            ToolResultBlock(
                tool_use_id="t", content=[TextBlock(text="out"), ImageBlock(), TextBlock(text="more")]
            ),
            ImageBlock(),
            TextBlock(text="note"),
            ThinkingBlock(thinking="hidden"),
        ],
    )
    assert message.text == "out\nmore\nnote"


def test_tool_ids() -> None:
    message = assistant("", tool_use("a", "ls"), tool_use("b", "cat", path="x"))
    assert message.tool_use_ids == ["a", "b"]
    assert tool_result("a", "ok").tool_result_ids == ["a"]
    assert user("hi").tool_use_ids == [] and user("hi").tool_result_ids == []


# -- builders and predicates ----------------------------------------------------------------


def test_assistant_builder_uses_a_string_without_tools() -> None:
    assert assistant("hello").content == "hello"
    assert assistant().content == ""
    assert assistant("", tool_use("t", "ls")).content == [ToolUseBlock(id="t", name="ls")]


def test_tool_use_builder_takes_input_as_keywords() -> None:
    assert tool_use("t1", "read", path="a.py", limit=5).input == {"path": "a.py", "limit": 5}


def test_tool_result_builder() -> None:
    message = tool_result("t1", "boom", is_error=True)
    assert message.role == "user"
    assert message.content == [ToolResultBlock(tool_use_id="t1", content="boom", is_error=True)]


@pytest.mark.parametrize(
    ("message", "result_only", "user_input"),
    [
        pytest.param(user("hi"), False, True, id="user-text"),
        pytest.param(Message(role="user", content=[]), False, True, id="user-empty"),
        pytest.param(tool_result("t", "x"), True, False, id="anthropic-result"),
        pytest.param(
            Message(role="tool", content=[ToolResultBlock(tool_use_id="t", content="x")]),
            True,
            False,
            id="tool-role",
        ),
        pytest.param(
            Message(role="user", content=[ToolResultBlock(tool_use_id="t"), TextBlock(text="and")]),
            False,
            True,
            id="result-plus-text",
        ),
        pytest.param(assistant("x"), False, False, id="assistant"),
    ],
)
def test_predicates(message: Message, result_only: bool, user_input: bool) -> None:
    assert is_tool_result_only(message) is result_only
    assert is_user_input(message) is user_input


# -- validation and immutability ------------------------------------------------------------


def test_messages_are_frozen() -> None:
    message = user("hi")
    with pytest.raises(pydantic.ValidationError):
        message.content = "changed"  # type: ignore[misc]


@pytest.mark.parametrize(
    "data",
    [
        pytest.param({"role": "system", "content": "x"}, id="system-role"),
        pytest.param({"role": "user", "content": "x", "extra": 1}, id="extra-field"),
        pytest.param({"role": "user", "content": [{"type": "video"}]}, id="unknown-block"),
        pytest.param(
            {"role": "assistant", "content": [{"type": "tool_use", "id": "", "name": "x"}]}, id="empty-id"
        ),
        pytest.param(
            {"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {}}]},
            id="block-extra",
        ),
    ],
)
def test_invalid_messages_are_rejected(data: dict[str, object]) -> None:
    with pytest.raises(pydantic.ValidationError):
        Message.model_validate(data)


def test_with_content_keeps_identity_fields() -> None:
    original = Message(role="user", content="a", id="m1", pinned=True, meta={"k": "v"})
    edited = original.with_content([TextBlock(text="b")])
    assert (edited.role, edited.id, edited.pinned, edited.meta) == ("user", "m1", True, {"k": "v"})
    assert edited.content == [TextBlock(text="b")]
    assert original.content == "a"


# -- hashing and equality -------------------------------------------------------------------


def test_equality_ignores_the_hash_cache() -> None:
    hashed, fresh = user("same"), user("same")
    assert hashed.content_hash
    assert hashed == fresh


def test_content_hash_covers_role_and_content_only() -> None:
    base = user("text")
    assert (
        Message(role="user", content="text", pinned=True, id="x", meta={"a": 1}).content_hash
        == base.content_hash
    )
    assert Message(role="assistant", content="text").content_hash != base.content_hash
    assert user("text!").content_hash != base.content_hash
    assert Message(role="user", content=[TextBlock(text="text")]).content_hash != base.content_hash


def test_content_hash_follows_a_copy_with_new_content() -> None:
    original = user("before")
    assert original.content_hash
    copied = original.model_copy(update={"content": "after"})
    assert copied.content_hash == user("after").content_hash
    assert original.content_hash == user("before").content_hash


def test_media_sources_are_kept_verbatim() -> None:
    source = {"type": "base64", "media_type": "application/pdf", "data": "JVBE", "extra": [1, 2]}
    block = DocumentBlock(source=source, title="t")
    assert Message(role="user", content=[block]).model_dump()["content"][0]["source"] == source


@HEAVY
@given(histories())
def test_messages_survive_a_json_round_trip(messages: list[Message]) -> None:
    for message in messages:
        again = Message.model_validate_json(message.model_dump_json())
        assert again == message
        assert again.content_hash == message.content_hash


_TEXTS = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=40)


@given(
    role=st.sampled_from(["user", "assistant", "tool"]),
    content=st.one_of(_TEXTS, st.lists(_TEXTS.map(lambda s: TextBlock(text=s)), max_size=3)),
    extra=st.booleans(),
)
def test_the_hashed_json_of_text_is_what_json_dumps_writes(role: str, content: object, extra: bool) -> None:
    """Text is written directly (the fast path of every transcript line): the very text json.dumps of the
    dumped blocks writes, surrogates, quotes and control characters included; other blocks go through it."""
    if extra and isinstance(content, list):
        content = [*content, ToolUseBlock(id="t", name="n", input={"k": "v"})]
    dumped = json.dumps(
        {"role": role, "content": content if isinstance(content, str) else [b.model_dump(mode="json") for b in content]},
        sort_keys=True, ensure_ascii=False, separators=(",", ":"),
    )  # fmt: skip
    assert hashed_json(role, content) == dumped
