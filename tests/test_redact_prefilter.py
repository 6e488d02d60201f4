"""redact_secrets' quick scans (key hints, anchors, the ASCII-lowercased text) find exactly what the
full patterns, tried at every character, would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.redact import _ASCII_LOWER, _KEYS, _NAMED, REDACTED, holds_no_secret, redact_row, redact_secrets

FRAGMENTS = [
    "sk-ant-", "sk-proj-", "sk-", "AIza", "ghp_", "xoxb-", "AKIA", "eyJ", ".", "x-api-key", "X-Goog-Api-Key",
    "Authorization", "BEARER ", "Basic ", "api_key", "ApiKey", "access-token", "refresh_token", "client_secret",
    "Secret", "PASSWORD", "passwd", "https://", "user", ":", "@", ": ", "=", '"', '\\"', "'", " ", "-", "_",
    "abcdefghij", "ABCDEFGHIJKLMNOP", "0123456789", "os.environ", "get(", "ctxdesk", "\n", "&", "?", REDACTED,
]  # fmt: skip


def _full_scan(text: str) -> str:
    """The reference: every pattern tried at every character of the text lowercased as redact_secrets
    does it (str.lower, or ASCII letters only where str.lower changes the length)."""
    text = _KEYS.sub(REDACTED, text)
    lowered = text.lower() if len(text.lower()) == len(text) else text.translate(_ASCII_LOWER)
    out, pos = [], 0
    for match in _NAMED.finditer(lowered):
        group = "value" if match.start("value") >= 0 else "password"
        out += [text[pos : match.start(group)], REDACTED]
        pos = match.end(group)
    return "".join(out) + text[pos:]


ascii_texts = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(st.characters(max_codepoint=127), max_size=6), max_size=30
).map("".join)


@settings(max_examples=500, deadline=None)
@given(ascii_texts)
def test_redaction_equals_the_full_scan(text: str) -> None:
    assert redact_secrets(text) == _full_scan(text)


@settings(max_examples=200, deadline=None)
@given(ascii_texts)
def test_redaction_is_idempotent(text: str) -> None:
    once = redact_secrets(text)
    assert redact_secrets(once) == once


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from([*FRAGMENTS, "é", "İ", "ſ", "\u212a"]), max_size=30).map("".join))
def test_non_ascii_letters_keep_the_spans_in_place(text: str) -> None:
    """'İ'.lower() is two characters: spans found in the lowered text must still fit the original."""
    assert redact_secrets(text) == _full_scan(text)


def test_examples_still_redacted() -> None:
    assert redact_secrets("401 invalid x-api-key sk-ant-" + "a" * 30) == f"401 invalid x-api-key {REDACTED}"
    assert redact_secrets('{"password": "hunter2hunter2"}') == f'{{"password": "{REDACTED}"}}'
    assert redact_secrets("İ password=hunter2hunter2") == f"İ password={REDACTED}"
    plain = '{"openai_role": "developer", "timestamp": "2026-11-24T06:26:17.443Z"}'
    assert redact_secrets(plain) is plain


rows = st.lists(
    st.none()
    | st.integers()
    | st.lists(st.sampled_from([*FRAGMENTS, "İ", "\u212a"]), max_size=12).map("".join),
    max_size=8,
)


@settings(max_examples=400, deadline=None)
@given(rows)
def test_a_row_scanned_together_is_redacted_as_value_by_value(row: list[object]) -> None:
    """redact_row scans a row's texts joined first: what it finds in one value it finds in the whole."""
    one_by_one = [redact_secrets(v) if isinstance(v, str) else v for v in row]
    assert redact_row(row) == one_by_one
    texts = [v for v in row if isinstance(v, str)]
    assert holds_no_secret(texts) == all(redact_secrets(t) == t for t in texts)


def test_a_row_with_one_secret_among_clean_texts() -> None:
    row = ("claude-sonnet-4-5", '{"tokenizer": "cl100k"}', 12, None, "export API_KEY=abcdefgh12345678")
    assert redact_row(row) == [*row[:4], f"export API_KEY={REDACTED}"]
    assert redact_row(row, keys=(4,)) == list(row)  # a key is kept as it is
    assert not holds_no_secret(row[:2] + row[4:]) and holds_no_secret(row[:2])


#: A tool output's worth of text without anything to redact, to make a text long enough to be remembered.
FILLER = "def main():\n    return run(path, tokens=3)  # ctxdesk-real-agents\n" * 5


@settings(max_examples=300, deadline=None)
@given(ascii_texts, st.booleans())
def test_a_long_text_is_redacted_alike_each_time_it_comes(text: str, first: bool) -> None:
    """Long texts found clean are remembered (a history repeats them): the second time a text comes,
    from redact_secrets or inside a row, the answer is the full scan's, secret or not."""
    long = FILLER + text if first else text + FILLER
    for _ in range(2):
        assert redact_secrets(long) == _full_scan(long)
        assert redact_row([long, "claude-sonnet-4-5"]) == [_full_scan(long), "claude-sonnet-4-5"]


def test_only_texts_left_as_they_are_are_remembered_and_the_memory_is_bounded(monkeypatch) -> None:
    import engine.redact as redact

    monkeypatch.setattr(redact, "_known", {})
    monkeypatch.setattr(redact, "_known_chars", 0)
    monkeypatch.setattr(redact, "_KNOWN_MAX_CHARS", 20 * len(FILLER))
    secret = FILLER + "export API_KEY=abcdefgh12345678"
    for _ in range(2):
        assert redact_secrets(secret) == FILLER + f"export API_KEY={REDACTED}"
        assert redact_row([secret, "x"]) == [FILLER + f"export API_KEY={REDACTED}", "x"]
    assert redact._known.get(secret) is None
    named = FILLER + "the refresh_token: see below"  # a credential's name, no value: kept as it is
    for _ in range(2):
        assert redact_secrets(named) is named
        assert redact_row([named, secret]) == [named, FILLER + f"export API_KEY={REDACTED}"]
    assert redact._known[named] == redact._KEPT
    for n in range(100):
        text = f"{FILLER}{n}"
        assert redact_secrets(text) is text
        assert redact._known[text] == redact._NOTHING  # the newest is kept
        assert redact._known_chars == sum(map(len, redact._known)) <= redact._KNOWN_MAX_CHARS
    assert len(redact._known) < 20
