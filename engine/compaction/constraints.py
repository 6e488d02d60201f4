"""What counts as a user's constraint, defined once: the phrases, the sentences that hold one,
and the stopwords left out of a sentence's key terms.

The offline summarizer keeps these sentences verbatim; ``engine.findings`` reports a compaction
that lost one. Both read the definitions here, so "a constraint" means the same thing in both.
"""

from __future__ import annotations

import re

#: Phrases that make a sentence a constraint ("never ...", "keep ... compatibility", ...).
#: Matched case-insensitively as whole words; a phrase ending in a space needs a word after it.
CONSTRAINT_PHRASES: tuple[str, ...] = (
    "must",
    "must not",
    "mustn't",
    "never",
    "always",
    "do not",
    "don't",
    "dont",
    "should not",
    "shouldn't",
    "make sure",
    "ensure",
    "require",
    "required",
    "requires",
    "requirement",
    "only use",
    "avoid",
    "prefer",
    "no more than",
    "at most",
    "at least",
    "not allowed",
    "forbidden",
    "stick to",
    "compatibility",
    "compatible",
    "keep it",
    "keep the",
    "keep them",
    "keep all",
    "keep using",
    "off-limits",
    "off limits",
    "under no circumstances",
)
#: Words too common to tell two sentences apart; left out of key terms and focus words.
_STOPWORD_TEXT = """a about above after again all also an and any are as at be because been before being below
    between both but by can could did do does doing done down during each ever every few for from
    further had has have having her here hers how if in into is it it's its just make made more most
    my no nor not of off on once one only onto or other our ours out over own please same she should
    so some such sure than that the their theirs them then there these they this those through to too
    two under until up use used using very want was we were what when where which while who whom why
    will with would you your yours need focus summary summarize keep"""
STOPWORDS = frozenset(_STOPWORD_TEXT.split())


def _phrase_pattern() -> re.Pattern[str]:
    """The phrases grouped by first letter, matched in lower-cased text: the scan then tests one
    branch per letter (the regex engine skips positions whose letter starts no phrase), where one
    case-insensitive alternation behind a look-behind tried every phrase at every position."""
    groups: dict[str, list[str]] = {}
    for phrase in sorted(CONSTRAINT_PHRASES, key=len, reverse=True):
        groups.setdefault(phrase[0], []).append(re.escape(phrase[1:]).replace("'", "['’]"))
    branches = "|".join(f"{re.escape(first)}(?:{'|'.join(rest)})" for first, rest in groups.items())
    return re.compile(f"(?:{branches})(?![\\w'’-])")


_CONSTRAINT = _phrase_pattern()
#: What may not precede a phrase (it must start a word).
_WORD_CHARS = frozenset("_'’-")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_'’-]{2,}")
#: Each phrase's first word, lower case: a text holding none of them cannot hold a constraint.
_NEEDLES = tuple(sorted({p.split()[0].split("-")[0].replace("'", "").lower() for p in CONSTRAINT_PHRASES}))


def _has_phrase(text: str) -> bool:
    low = text.lower()
    for match in _CONSTRAINT.finditer(low):
        at = match.start()
        if at == 0 or not (low[at - 1].isalnum() or low[at - 1] in _WORD_CHARS):
            return True
    return False


def is_constraint(sentence: str) -> bool:
    """True when the sentence states a constraint (one of ``CONSTRAINT_PHRASES``)."""
    if sentence.isascii():
        low = sentence.lower().replace("'", "")
        if not any(needle in low for needle in _NEEDLES):
            return False
    return _has_phrase(sentence)


def holds_constraint(text: str) -> bool:
    """True when some sentence of ``text`` may state a constraint (one scan of the whole text)."""
    return _has_phrase(text)


def constraint_sentences(text: str) -> list[str]:
    """Sentences of ``text`` (whitespace collapsed) that state a constraint."""
    out = []
    for part in _SENTENCE_END.split(text):
        sentence = " ".join(part.split())
        if sentence and is_constraint(sentence):
            out.append(sentence)
    return out


def words(text: str) -> set[str]:
    """Lower-cased words of three characters or more."""
    return {w.lower().strip("'’-") for w in _WORD.findall(text)}


def key_terms(sentence: str) -> set[str]:
    """Lower-cased content words of a sentence (stopwords and constraint phrases left out)."""
    return {w for w in words(sentence) if w not in STOPWORDS and w not in _PHRASE_WORDS}


_PHRASE_WORDS = frozenset(w.replace("’", "'") for p in CONSTRAINT_PHRASES for w in p.split())
