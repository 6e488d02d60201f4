"""The per-text count cache: a cached count equals a fresh one, and the cache stays bounded."""

from __future__ import annotations

import engine.tokens as tokens_module
from engine.tokens import Tokenizer, get_tokenizer


def _fresh(name: str) -> Tokenizer:
    tokenizer = get_tokenizer(name)
    return Tokenizer(tokenizer.info, tokenizer._count_text)


def test_cached_text_counts_equal_fresh_counts() -> None:
    texts = ["short", "def f(x):\n    return x * 2  # doubled\n" * 40, "ünïcødé path /a/b/c.py " * 30]
    for name in ("o200k_base", "cl100k_base", "anthropic", "chars/4"):
        cold, warm = _fresh(name), get_tokenizer(name)
        for text in texts:
            first, again = warm.count(text), warm.count(text)
            assert first == again == cold._count_text(text)


def test_text_cache_keeps_within_its_character_budget(monkeypatch) -> None:
    monkeypatch.setattr(tokens_module, "_TEXT_CACHE_MAX_CHARS", 1_000)
    tokenizer = _fresh("cl100k_base")
    for i in range(100):
        text = f"{i:04d} " + "word " * 20
        assert tokenizer.count(text) == tokenizer._count_text(text)
        assert tokenizer._text_cache_chars == sum(len(t) for t in tokenizer._text_cache) <= 1_000


def test_clear_cache_forgets_counts() -> None:
    tokenizer = _fresh("o200k_base")
    tokenizer.count("a text long enough to be kept in the cache " * 3)
    tokenizer.clear_cache()
    assert tokenizer._text_cache == {} and tokenizer._text_cache_chars == 0
