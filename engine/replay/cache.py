"""A provider's prompt cache over a replayed session: what each request reads and writes.

A request is a sequence of parts (the head: system prompt and tools; then each message), each a
content key and its tokens. A prefix is read from the cache only when the same parts, in the same
order, were cached by an earlier request still alive (used within the cache's lifetime), so an
edit that rewrites the cached prefix loses the cache from that point on.

- Anthropic (explicit breakpoints, as agents place them: after the head and on the last message):
  the cached prefixes are the head and each earlier request's whole prompt; what is not read is
  written (billed as a cache write); nothing under ``MIN_CACHED_TOKENS`` is cached.
- OpenAI (automatic): any prefix of an earlier prompt is cached, read in 128-token steps from 1,024
  tokens; writing costs nothing beyond the input.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field

from engine.prompt.cache_policy import ANTHROPIC_CACHE_S, OPENAI_CACHE_S

#: Below this many tokens a prefix is not cached (Anthropic's minimum for its Sonnet/Opus models;
#: OpenAI's automatic caching starts at the same size).
MIN_CACHED_TOKENS = 1024
#: OpenAI reads a cached prefix in steps of this many tokens.
OPENAI_CACHE_STEP = 128


@dataclass(frozen=True)
class CacheRules:
    provider: str
    lifetime_s: int
    writes_billed: bool  # Anthropic bills cache writes; OpenAI's automatic cache does not
    every_prefix: bool  # OpenAI caches every prefix; Anthropic only at breakpoints
    step: int = 1


ANTHROPIC_CACHE = CacheRules("anthropic", ANTHROPIC_CACHE_S, writes_billed=True, every_prefix=False)
OPENAI_CACHE = CacheRules(
    "openai", OPENAI_CACHE_S, writes_billed=False, every_prefix=True, step=OPENAI_CACHE_STEP
)


def cache_rules_for(provider: str | None, model: str | None = None) -> CacheRules:
    """Anthropic's rules for Anthropic models (and unknown ones, the explicit kind), else OpenAI's."""
    name = f"{provider or ''} {model or ''}".lower()
    if "anthropic" in name or "claude" in name or not name.strip():
        return ANTHROPIC_CACHE
    return OPENAI_CACHE


@dataclass(frozen=True)
class CacheUse:
    read: int
    written: int  # billed cache writes (0 under OpenAI's rules)


@dataclass
class PromptCache:
    """The prefixes one provider holds for one replayed session (the replay's only mutable state
    besides the policies' own): prefix digest -> (tokens, last used)."""

    rules: CacheRules
    entries: dict[str, tuple[int, float | None]] = field(default_factory=dict)

    def send(self, parts: Sequence[tuple[str, int]], at_s: float | None) -> CacheUse:
        """Read what the cache holds of a request of ``parts``, then cache it as the rules say."""
        digests, ends = _prefixes(parts)
        total = ends[-1] if ends else 0
        read = 0
        for digest, end in zip(reversed(digests), reversed(ends), strict=True):
            if self._alive(digest, at_s):
                read = end
                self.entries[digest] = (end, at_s)
                break
        read = read // self.rules.step * self.rules.step
        if read < MIN_CACHED_TOKENS:
            read = 0
        cached = zip(digests, ends, strict=True) if self.rules.every_prefix else _breakpoints(digests, ends)
        for digest, end in cached:
            if end >= MIN_CACHED_TOKENS:
                self.entries[digest] = (end, at_s)
        written = total - read if self.rules.writes_billed and total >= MIN_CACHED_TOKENS else 0
        return CacheUse(read, written)

    def _alive(self, digest: str, at_s: float | None) -> bool:
        entry = self.entries.get(digest)
        if entry is None:
            return False
        used = entry[1]
        return at_s is None or used is None or at_s - used <= self.rules.lifetime_s


def _prefixes(parts: Sequence[tuple[str, int]]) -> tuple[list[str], list[int]]:
    digests: list[str] = []
    ends: list[int] = []
    running = hashlib.blake2b(digest_size=16)
    total = 0
    for key, tokens in parts:
        running.update(key.encode())
        running.update(b"\0")
        total += tokens
        digests.append(running.copy().hexdigest())
        ends.append(total)
    return digests, ends


def _breakpoints(digests: list[str], ends: list[int]) -> list[tuple[str, int]]:
    """The head (first part) and the whole prompt: where agents put Anthropic's breakpoints."""
    if not digests:
        return []
    return [(digests[0], ends[0]), (digests[-1], ends[-1])]
