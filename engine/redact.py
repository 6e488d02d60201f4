"""Redaction of key-shaped strings from everything ctxdesk records: events, message metadata, logs, reports.

A provider error may echo the caller's key (``401 invalid x-api-key sk-ant-...``); an agent may put a
token in a header that ends up in metadata. :func:`redact_secrets` replaces each such value with
``[REDACTED]``. Transcript content (what the model saw) is kept verbatim.
"""

from __future__ import annotations

import logging
import re
from typing import Any

REDACTED = "[REDACTED]"

#: Well-known key formats, found anywhere in a text.
_KEY_FORMATS = (
    r"sk-ant-[A-Za-z0-9_\-]{16,}",  # Anthropic
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_\-]{20,}",  # OpenAI
    r"AIza[0-9A-Za-z_\-]{30,}",  # Google
    r"gh[pousr]_[A-Za-z0-9]{30,}",  # GitHub
    r"xox[abprs]-[A-Za-z0-9\-]{10,}",  # Slack
    r"AKIA[0-9A-Z]{16}",  # AWS access key id
)
#: A value after a credential's name: header-like names take any separator, generic words need ``:`` or ``=``
#: (so "the API key rotation" in a summary stays as it is).
_NAMED_VALUE = (
    r"(?i)(?:(?P<hname>x-api-key|x-goog-api-key|authorization|bearer)(?P<hsep>[\"']?\s*[:=]?\s*[\"']?\s*(?:bearer\s+)?)"
    r"|(?P<gname>api[_\-]?key|access[_\-]?token|client[_\-]?secret|secret|password)(?P<gsep>[\"']?\s*[:=]\s*[\"']?\s*))"
    r"(?P<value>(?!\[REDACTED\])[A-Za-z0-9_\-\.~+/]{8,}=*)"
)
#: A key starts a word: "ctxdesk-real-agents-0123456789" holds "sk-" but is a folder name, not a key.
_KEYS = re.compile(r"(?<![A-Za-z0-9_\-])(?:" + "|".join(f"(?:{p})" for p in _KEY_FORMATS) + ")")
_NAMED = re.compile(_NAMED_VALUE)
#: Quick scans first (most texts hold no key): the patterns above try their lookbehind or their
#: case-insensitive names at every character, ~100 ns each, a fifth of an import's writes.
#: A key matches _KEYS_HINT wherever it matches _KEYS; an ASCII text holds one of the
#: _NAME_HINTS (lowercased) wherever it matches _NAMED (non-ASCII text takes the full scan:
#: IGNORECASE folds characters such as U+017F to ASCII letters that lower() keeps apart).
_KEYS_HINT = re.compile("|".join(_KEY_FORMATS))
_NAME_HINTS = ("api-key", "api_key", "apikey", "authorization", "bearer", "access", "secret", "password")


def redact_secrets(text: str) -> str:
    """``text`` with API keys, bearer tokens and named credential values replaced by ``[REDACTED]``."""
    if not text:
        return text
    if _KEYS_HINT.search(text) is not None:
        text = _KEYS.sub(REDACTED, text)
    if text.isascii():
        lowered = text.lower()
        if not any(hint in lowered for hint in _NAME_HINTS):
            return text
    return _NAMED.sub(_keep_name, text)


def _keep_name(match: re.Match[str]) -> str:
    name = match.group("hname") or match.group("gname")
    separator = match.group("hsep") if match.group("hname") else match.group("gsep")
    return f"{name}{separator}{REDACTED}"


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
    "install_log_redaction",
    "redact_json_text",
    "redact_secrets",
    "redact_value",
]
