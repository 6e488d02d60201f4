"""Redaction of credentials from everything ctxdesk records: the session database, logs, reports.

A provider error may echo the caller's key (``401 invalid x-api-key sk-ant-...``); an OAuth form
body carries a ``refresh_token``; a tool output holds ``ANTHROPIC_API_KEY=...``. :func:`redact_secrets`
replaces each such value with ``[REDACTED]``, keeping the name. The session store passes every text it
writes through it (:func:`redact_row`, its one write boundary): nothing at rest holds a credential,
transcripts and exact requests included, which are otherwise kept exactly as sent.
"""

from __future__ import annotations

import functools
import heapq
import logging
import re
from collections.abc import Collection, Iterable
from typing import Any

REDACTED = "[REDACTED]"

#: Well-known key formats, found anywhere in a text.
_KEY_FORMATS = (
    r"sk-ant-[A-Za-z0-9_\-]{16,}",  # Anthropic (API keys, OAuth tokens)
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",  # OpenAI
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack
    r"AKIA[0-9A-Z]{16}",  # AWS access key id
    r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}",  # a JSON Web Token
)
#: A key starts a word: "ctxdesk-real-agents-0123456789" holds "sk-" but is a folder name, not a key.
_KEYS = re.compile(r"(?<![A-Za-z0-9_\-])(?:" + "|".join(f"(?:{p})" for p in _KEY_FORMATS) + ")")
#: Quick scan first (most texts hold no key): a key matches _KEYS_HINT wherever it matches _KEYS.
_KEYS_HINT = re.compile("|".join(_KEY_FORMATS))

#: A value after a credential's name, matched on the ASCII-lowercased text (a case-insensitive
#: pattern costs ~20x more per character). Header-like names take any separator; generic words need
#: ``:`` or ``=`` (so "the API key rotation" in a summary stays as it is); either may be quoted, also
#: inside JSON text (``\"``). A value is 8+ key characters, not one already redacted, not a call or a
#: subscript (``get_secret(``) and not a dotted name (``os.environ``, ``settings.api_key``): code that
#: handles a secret is kept, the secret itself is not. A URL's password (``scheme://user:pw@``) too,
#: unless it is a placeholder (``${TOKEN}``, ``<password>``, ``%s``, ``***``).
_QUOTE = r"(?:\\?[\"'])?"
_NAMED = re.compile(
    r"(?:(?:x-(?:goog-)?api-key|authorization|bearer)"
    rf"{_QUOTE}\s*[:=]?\s*{_QUOTE}\s*(?:(?:bearer|basic|token)\s+)?"
    r"|(?:(?:api|access|secret|private|client|auth)[_\-]?(?:key|secret)|(?:access|refresh|id|auth|session)[_\-]?token"
    rf"|secret|passw(?:or)?d){_QUOTE}\s*[:=]\s*{_QUOTE}\s*)"
    r"(?!\[redacted\])(?![a-z_]++(?:\.[a-z_]++)++(?![a-z0-9_\-.~+/=]))"
    r"(?P<value>[a-z0-9_\-.~+/]{8,}+=*+)(?![(\[])"
    r"|(?<=[a-z0-9])://[^\s/:@\"'\\]+:(?![$<{%*])(?P<password>[^\s/@\"'\\]+)@"
)
#: Every match of _NAMED holds a match of one of these (a generic name's last word with its separator,
#: a header name, ``://``) at most _NAME_REACH characters after its start: _NAMED is tried only there
#: (tried at every character it costs ~0.3 s per MB). Two patterns: each alone scans faster than both.
#: Each alternative starts with a literal, so the regex engine skips ahead to a possible first
#: character instead of trying every alternative at every position (``(?:key|secret)...`` ran 2x slower).
_ANCHORS = (
    re.compile("|".join(rf"{word}{_QUOTE}\s*[:=]" for word in ("key", "secret", "token", r"passw(?:or)?d"))),
    re.compile(r"x-(?:goog-)?api-key|authorization|bearer|://"),
)
_NAME_REACH = 16
#: Both anchors in one pattern, to test whether a text holds one (:func:`_has_anchor`: most stored
#: texts, long tool outputs too, hold none; the two-pattern merge below costs ~10 µs per text and a
#: regex scan of every character of a long one).
_ANY_ANCHOR = re.compile("|".join(a.pattern for a in _ANCHORS))
#: A key's first character follows none of these (the lookbehind of _KEYS).
_WORD_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
#: Lowercases ASCII letters only: the text keeps its length, so spans found in it are the original's.
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def redact_secrets(text: str) -> str:
    """``text`` with API keys, tokens, passwords and other named credential values replaced by
    ``[REDACTED]`` (the name is kept: ``x-api-key [REDACTED]``). Idempotent; the text itself when
    there is nothing to redact."""
    if not text:
        return text
    if len(text) <= _CACHED_CHARS:  # a model, a kind, a provider: the same few short texts row after row
        redacted = _redact_short(text)
        return text if redacted == text else redacted
    if _known.get(text, _MAYBE) != _MAYBE:
        return text
    return _redact(text)


#: Texts up to this length are redacted once per distinct value (:func:`_redact_short`).
_CACHED_CHARS = 64


def _redact(text: str) -> str:
    has_key = _has_key(text)
    if has_key:
        text = _KEYS.sub(REDACTED, text)
    lowered = text.lower()
    full = len(lowered) == len(text)
    if not full:  # a few non-ASCII letters lowercase to two characters
        lowered = text.translate(_ASCII_LOWER)
    if not _has_anchor(lowered):  # most texts, long tool outputs too: substring searches, no regex scan
        if full and not has_key:  # what _may_need_redaction tests: no key, no anchor
            _remember(text, _NOTHING)
        return text
    out, pos, scanned = [], 0, 0
    anchors = heapq.merge(*(a.finditer(lowered) for a in _ANCHORS), key=lambda m: m.start())
    for anchor in anchors:
        if anchor.start() < scanned:
            continue
        match = _named_match(lowered, max(scanned, anchor.start() - _NAME_REACH), anchor.start())
        if match is None:
            continue
        group = "value" if match.start("value") >= 0 else "password"
        out += [text[pos : match.start(group)], REDACTED]
        pos = scanned = match.end(group)
    if out:
        return "".join(out) + text[pos:]
    if not has_key:
        _remember(text, _KEPT)
    return text


_redact_short = functools.lru_cache(maxsize=16_384)(_redact)


#: The first word of each of _ANY_ANCHOR's alternatives that a separator must follow; the others
#: (``x-api-key``, ``authorization``, ...) are literal texts, found by a substring search.
_ANCHOR_WORDS = ("key", "secret", "token", "passw")


def _has_anchor(lowered: str) -> bool:
    """``_ANY_ANCHOR.search(lowered) is not None``, tried only where one of its words is: the regex
    tries its eight alternatives at every character (4 µs over a 600-character event row, where
    the words occur two or three times, as in ``"tokenizer":``). Each alternative is a literal text
    (``://``, ``authorization``, ``bearer``, ``x-api-key``, ``x-goog-api-key``) or one of
    _ANCHOR_WORDS followed by a separator."""
    if "://" in lowered or "authorization" in lowered or "bearer" in lowered:
        return True
    if "api-key" in lowered and ("x-api-key" in lowered or "x-goog-api-key" in lowered):
        return True
    for word in _ANCHOR_WORDS:
        at = lowered.find(word)
        while at >= 0:
            if _ANY_ANCHOR.match(lowered, at) is not None:
                return True
            at = lowered.find(word, at + 1)
    return False


def _may_hold_key(text: str) -> bool:
    """False when no key format can match in ``text``: each starts with one of these (and GitHub's
    ``gh?_``) — substring searches, a third of the cost of _KEYS_HINT's scan."""
    return (
        "sk-" in text or "AIza" in text or "AKIA" in text or "eyJ" in text or "xox" in text
        or ("gh" in text and "_" in text)
    )  # fmt: skip


def _has_key(text: str) -> bool:
    """True when _KEYS matches in ``text`` (its lookbehind, tried at every character, costs more)."""
    if not _may_hold_key(text):
        return False
    hint = _KEYS_HINT.search(text)
    while hint is not None:
        start = hint.start()
        if start == 0 or text[start - 1] not in _WORD_CHARS:
            return True
        hint = _KEYS_HINT.search(text, start + 1)
    return False


def _named_match(lowered: str, first: int, last: int) -> re.Match[str] | None:
    """The leftmost match of _NAMED starting between ``first`` and ``last``."""
    for start in range(first, last + 1):
        if (match := _NAMED.match(lowered, start)) is not None:
            return match
    return None


def redact_bytes(data: bytes) -> bytes:
    """``data`` (a raw body: a form, a query string) with secrets redacted as in its text; bytes that
    are not UTF-8 are kept as they are around them. The same object when nothing is redacted."""
    if not data:
        return data
    text = bytes(data).decode("utf-8", "surrogateescape")
    redacted = redact_secrets(text)
    return data if redacted is text else redacted.encode("utf-8", "surrogateescape")


def redact_row(values: Iterable[Any], *, keys: Collection[int] = ()) -> list[Any]:
    """The values of a row about to be written, every text redacted but the row's keys (the
    positions in ``keys``: a session id is an identity others refer to, not free text): the session
    database's write boundary. Every text engine/store writes goes through here, or through
    :func:`redact_secrets` before something derived from it is computed (a stored message, a part's
    content hash)."""
    row = values if isinstance(values, list | tuple) else list(values)
    # the keys' texts scanned too (they may only add a false alarm): no test of each position
    if _scanned_clean([v for v in row if isinstance(v, str)]):
        return list(row)  # the common row: one scan of its texts together, no call per value
    return [redact_secrets(v) if isinstance(v, str) and i not in keys else v for i, v in enumerate(row)]


def holds_no_secret(texts: Iterable[str | None]) -> bool:
    """True when :func:`redact_secrets` leaves each of ``texts`` as it is (None and "" are left too):
    the texts of one row are scanned together first, so a row without credentials costs one scan."""
    present = [t for t in texts if t]
    return _scanned_clean(present) or all(redact_secrets(t) is t for t in present)


def _scanned_clean(texts: list[str]) -> bool:
    """True when one scan of ``texts`` together shows nothing to redact; False: maybe something (or
    too long to scan twice: see _ROW_SCAN_CHARS)."""
    if not texts:
        return True
    if sum(map(len, texts)) > _ROW_SCAN_CHARS:
        return False
    joined = "\n".join(texts)
    known = _known.get(joined)
    if known is not None and known != _KEPT:
        return known == _NOTHING
    if _may_need_redaction(joined):
        if known is None:
            _remember(joined, _MAYBE)
        return False
    _remember(joined, _NOTHING)
    return True


#: What is known of a text of at least _KNOWN_MIN_CHARS, by the text itself (exact), up to
#: _KNOWN_MAX_CHARS in all: a history repeats its texts (tool definitions each session, an agent's
#: instructions every turn, a resumed session's copied conversation, a tool output in the message
#: and in the exact request), and a lookup costs a hash, not a scan. _NOTHING: nothing to redact
#: in it nor in any piece of it (:func:`_may_need_redaction` is False); _KEPT: redact_secrets
#: leaves it as it is (it names a credential with no value: "the refresh_token: see below");
#: _MAYBE: a row's texts joined, to be redacted text by text.
_NOTHING, _KEPT, _MAYBE = 2, 1, 0
_KNOWN_MIN_CHARS = 256
_KNOWN_MAX_CHARS = 16_000_000
_known: dict[str, int] = {}
_known_chars = 0


def _remember(text: str, verdict: int) -> None:
    # No lock (a process forked while another thread held one would wait on it forever): each dict
    # operation is atomic; threads racing here can only misadd _known_chars, recounted at eviction.
    global _known_chars
    if len(text) < _KNOWN_MIN_CHARS or len(text) > _KNOWN_MAX_CHARS // 4:
        return
    if text not in _known:
        if _known_chars + len(text) > _KNOWN_MAX_CHARS:
            for old in list(_known)[: len(_known) // 2 + 1]:  # the oldest half (insertion order)
                _known.pop(old, None)
            _known_chars = sum(map(len, _known))
        _known_chars += len(text)
    _known[text] = verdict


#: A row's texts up to this many characters are scanned together first (:func:`redact_row`); a
#: longer row is redacted text by text (a row that holds a credential would be scanned twice).
_ROW_SCAN_CHARS = 4_096


def _may_need_redaction(text: str) -> bool:
    """False when :func:`redact_secrets` leaves ``text`` and every piece of it as they are: no key
    format can start in it and no credential's name (an anchor) is in it. Each test finds whatever
    it finds in a piece in the whole text too, so the texts of a row are tested joined, once."""
    if _has_key(text):  # a key starts a word: a value's first character follows the separator
        return True
    return _has_anchor(text.lower())  # lowercases more than ASCII: finds only more, never fewer, anchors


def redact_value(value: Any) -> Any:
    """A JSON-like value with every string redacted (dict keys kept)."""
    if isinstance(value, str):
        return redact_secrets(value)
    if isinstance(value, dict):
        return {k: redact_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_value(v) for v in value]
    return value


def redact_json_text(text: str | None) -> str | None:
    """Serialized JSON with secrets redacted; stays valid JSON (quotes are never matched)."""
    return None if text is None else redact_secrets(text)


#: Loggers whose records are redacted (ctxdesk's own).
REDACTED_LOGGERS = ("engine", "dashboard")


def install_log_redaction() -> None:
    """Redact every log record of ctxdesk's loggers, whatever handler later writes it (idempotent).

    Wraps the log record factory rather than adding handler filters, because records of child
    loggers (``engine.session``) never pass through a parent logger's filters.
    """
    factory = logging.getLogRecordFactory()
    if getattr(factory, "_ctxdesk_redacting", False):
        return

    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = factory(*args, **kwargs)
        if record.name.split(".", 1)[0] in REDACTED_LOGGERS:
            try:
                message = record.getMessage()
            except (TypeError, ValueError):
                return record
            redacted = redact_secrets(message)
            if redacted != message:
                record.msg, record.args = redacted, None
        return record

    make_record._ctxdesk_redacting = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(make_record)


__all__ = [
    "REDACTED",
    "holds_no_secret",
    "install_log_redaction",
    "redact_bytes",
    "redact_json_text",
    "redact_row",
    "redact_secrets",
    "redact_value",
]
