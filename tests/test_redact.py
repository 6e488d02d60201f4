"""Key-shaped strings never reach the session database's events, message metadata or logs."""

from __future__ import annotations

import logging

import pytest

from engine import ContextEvent, SessionStore, get_tokenizer, redact_secrets
from engine.messages import user

KEY = "sk-ant-api03-Zx9fQ2mPq7Lr4Ws8Ty1Uv5Nb3Kc6Jd0Hg"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (f"401 invalid x-api-key {KEY}", "401 invalid x-api-key [REDACTED]"),
        ("invalid x-api-key my-own-key-1234", "invalid x-api-key [REDACTED]"),
        ("Authorization: Bearer abcdefghijklmnop", "Authorization: Bearer [REDACTED]"),
        ('{"api_key": "zzzzzzzzzzzzz"}', '{"api_key": "[REDACTED]"}'),
        ("AIzaSyA1234567890123456789012345678901 failed", "[REDACTED] failed"),
        ("sk-proj-abcdefghijklmnopqrstuvwx", "[REDACTED]"),
        ("password=hunter2hunter2", "password=[REDACTED]"),
        ("we discussed API key rotation and the secret ingredient", None),
        ("the keyboard layout; sk-short", None),
        ("/tmp/ctxdesk-real-agents-0123456789abcdef/home", None),
        ("key=sk-ant-api03-abcdefghijklmnopqrstu", "key=[REDACTED]"),
    ],
)
def test_redact_secrets(text, expected):
    assert redact_secrets(text) == (text if expected is None else expected)


def test_a_provider_error_echoing_the_key_is_stored_redacted(tmp_path):
    path = tmp_path / "s.db"
    with SessionStore(path) as store:
        session_id = store.create_session(model="claude-sonnet-4-5")
        store.append_messages(
            session_id,
            [user("hi").model_copy(update={"meta": {"headers": {"x-api-key": KEY}}})],
            tokenizer=get_tokenizer("claude-sonnet-4-5"),
        )
        store.record_event(
            session_id,
            ContextEvent(
                kind="degraded",
                reason=f"401 authentication_error: invalid x-api-key {KEY}",
                details={"error": f"invalid x-api-key {KEY}"},
            ),
        )
        event = store.list_events(session_id)[-1]
        assert KEY not in (event.reason or "") and "[REDACTED]" in event.reason
        assert KEY not in str(event.details)
    assert KEY.encode() not in path.read_bytes()
    for extra in tmp_path.glob("s.db-*"):
        assert KEY.encode() not in extra.read_bytes()


def test_engine_log_records_are_redacted(caplog):
    with caplog.at_level(logging.WARNING, logger="engine.session"):
        logging.getLogger("engine.session").warning("provider said: invalid x-api-key %s", KEY)
    assert KEY not in caplog.text
    assert "[REDACTED]" in caplog.text
