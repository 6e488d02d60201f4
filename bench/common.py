"""Shared pieces of the benchmarks: repo paths, cold tokenizers, the corpus cache for one run."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path

from bench.corpus import generate_history
from engine.messages import Message
from engine.tokens import Tokenizer, get_encoding, get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
BENCH_DIR = ROOT / "bench"
RESULTS_DIR = BENCH_DIR / "results"
VENV_DIR = BENCH_DIR / ".venv"
SHARED_SESSIONS = ROOT.parent / "shared" / "sessions"

EXACT_ID = "o200k_base"


def raw_counter(encoding_name: str = EXACT_ID) -> Callable[[str], int]:
    """Plain tiktoken: ``len(encoding.encode_ordinary(text))``, nothing of ours around it."""
    encoding = get_encoding(encoding_name)
    encode = encoding.encode_ordinary

    def count(text: str) -> int:
        return len(encode(text))

    return count


def fresh_tokenizer(encoding_name: str = EXACT_ID) -> Tokenizer:
    """ctxdesk's Tokenizer over an exact encoding, with an empty message cache (the shared
    instance that ``get_tokenizer`` returns stays as warm as it was)."""
    return Tokenizer(get_tokenizer(encoding_name).info, raw_counter(encoding_name))


def fresh_copies(messages: list[Message]) -> list[Message]:
    """New message objects with the same content: no cached content hash, as if just received."""
    return [m.with_content(m.content) for m in messages]


@functools.cache
def history(n: int, seed: int = 0) -> list[Message]:
    """The corpus prefix of ``n`` messages; generated once per run for the largest size asked."""
    return generate_history(n, seed=seed)


def prefix(n: int, *, largest: int, seed: int = 0) -> list[Message]:
    """The first ``n`` messages of the seeded corpus, sliced from one generated ``largest`` list."""
    return history(max(n, largest), seed)[:n]
