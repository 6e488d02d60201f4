"""Key-shaped strings never reach the session database's events, message metadata or logs."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from engine import ContextEvent, SessionStore, get_tokenizer, install_log_redaction, redact_secrets
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
        pytest.param(
            "grant_type=refresh_token&refresh_token=rt0123456789&client_secret=cs9876543210&client_id=app",
            "grant_type=refresh_token&refresh_token=[REDACTED]&client_secret=[REDACTED]&client_id=app",
            id="an OAuth form body",
        ),
        pytest.param(
            '{"model":"x","api_key":"zzzzzzzzzzzzz","max_tokens":10}',
            '{"model":"x","api_key":"[REDACTED]","max_tokens":10}',
            id="a body field in compact JSON",
        ),
        pytest.param(
            '{\\"password\\": \\"hunter2hunter2\\"}',
            '{\\"password\\": \\"[REDACTED]\\"}',
            id="JSON inside JSON",
        ),
        pytest.param(
            "DATABASE_URL=postgresql://app:s3cret@db:5432/x",
            "DATABASE_URL=postgresql://app:[REDACTED]@db:5432/x",
            id="a URL's password",
        ),
        pytest.param(
            "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG",
            "AWS_SECRET_ACCESS_KEY=[REDACTED]",
            id="an env line",
        ),
        pytest.param(
            "Authorization: Basic dXNlcjpwYXNzd29yZA==", "Authorization: Basic [REDACTED]", id="basic auth"
        ),
        pytest.param(
            "token eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
            "token [REDACTED]",
            id="a JWT",
        ),
        pytest.param(
            "client = Anthropic(api_key=settings.api_key); password = os.environ",
            None,
            id="code naming a secret",
        ),
        pytest.param("secret = get_secret(name)", None, id="a call"),
        pytest.param('"input_tokens": 123456789, "cache_creation_input_tokens": 0', None, id="usage fields"),
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


def test_importing_engine_leaves_logging_alone_and_the_entry_points_redact() -> None:
    """``import engine`` changes nothing process-wide; the CLI, the dashboard and a SessionManager
    install the redaction explicitly."""
    probe = (
        "import logging; f = logging.getLogRecordFactory(); import engine; "
        "assert logging.getLogRecordFactory() is f; "
        "from engine.cli import main; main(['--version']); "
        "assert getattr(logging.getLogRecordFactory(), '_ctxdesk_redacting', False)"
    )
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    sources = {  # the other entry points (a Streamlit script, a manager needing a model client)
        "dashboard/app.py": "install_log_redaction()",
        "engine/session/manager.py": "install_log_redaction()",
    }
    root = Path(__file__).resolve().parents[1]
    assert all(call in (root / path).read_text() for path, call in sources.items())


def test_engine_log_records_are_redacted(caplog):
    install_log_redaction()  # as every entry point does
    with caplog.at_level(logging.WARNING, logger="engine.session"):
        logging.getLogger("engine.session").warning("provider said: invalid x-api-key %s", KEY)
    assert KEY not in caplog.text
    assert "[REDACTED]" in caplog.text
