"""Tokenizer ids, and which one a model name uses: names only, no encoding loaded.

Below :mod:`engine.tokens` (which counts with them) so that settings can validate and resolve a
model's tokenizer without importing the counters.
"""

from __future__ import annotations

EXACT_ENCODINGS = ("o200k_base", "cl100k_base")
ANTHROPIC_ESTIMATOR = "anthropic"
HEURISTICS = ("chars/4", "runes*2/5")
#: Every tokenizer id :func:`engine.tokens.get_tokenizer` knows, in the order it lists them.
TOKENIZER_IDS = (*EXACT_ENCODINGS, ANTHROPIC_ESTIMATOR, *HEURISTICS)


def tokenizer_ids() -> list[str]:
    return list(TOKENIZER_IDS)


def tokenizer_id_for_model(model: str) -> str:
    """The tokenizer id used for a model name (unknown models get ``chars/4``, an estimate)."""
    name = model.lower().split("/")[-1]
    if name.startswith(("gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4", "chatgpt-4o", "gpt-oss")):
        return "o200k_base"
    if name.startswith(("gpt-4", "gpt-3.5", "text-embedding-3", "text-embedding-ada")):
        return "cl100k_base"
    if "claude" in name:
        return ANTHROPIC_ESTIMATOR
    return "chars/4"
