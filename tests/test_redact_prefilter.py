"""redact_secrets' quick scans skip only texts the full patterns would leave as they are."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.redact import _KEYS, _NAMED, REDACTED, _keep_name, redact_secrets

FRAGMENTS = [
    "sk-ant-", "sk-proj-", "sk-", "AIza", "ghp_", "xoxb-", "AKIA", "x-api-key", "X-Goog-Api-Key", "Authorization",
    "BEARER ", "api_key", "ApiKey", "access-token", "client_secret", "Secret", "PASSWORD", "ſecret", "ſk-",
    ": ", "=", '"', "'", " ", "-", "_", "abcdefghij", "ABCDEFGHIJKLMNOP", "0123456789", "ctxdesk", "é", "\n",
    REDACTED,
]  # fmt: skip


def _full_scan(text: str) -> str:
    return _NAMED.sub(_keep_name, _KEYS.sub(REDACTED, text)) if text else text


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=6), max_size=30).map("".join))
def test_redaction_equals_the_full_scan(text: str) -> None:
    assert redact_secrets(text) == _full_scan(text)


def test_examples_still_redacted() -> None:
    assert redact_secrets("401 invalid x-api-key sk-ant-" + "a" * 30) == f"401 invalid x-api-key {REDACTED}"
    assert redact_secrets('{"password": "hunter2hunter2"}') == f'{{"password": "{REDACTED}"}}'
    assert redact_secrets("ſecret=abcdefghijkl") == _full_scan("ſecret=abcdefghijkl")
    plain = '{"openai_role": "developer", "timestamp": "2026-11-24T06:26:17.443Z"}'
    assert redact_secrets(plain) is plain
