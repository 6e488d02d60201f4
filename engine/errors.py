"""Every error ctxdesk raises on purpose, one tree.

    ContextDeskError                    base: catch this to catch everything of ours
    ├── ConfigError                     settings file or model table is invalid
    ├── ValidationError                 bad input to an engine call (seeds' VALIDATION_ERROR)
    │   └── MessageFormatError          a message or block cannot be parsed (index, field)
    ├── TokenizerError                  unknown tokenizer id, or BPE data missing/corrupt
    ├── StoreError                      the session database cannot be used
    │   ├── NotADatabaseError           the file is not a ctxdesk (or not a SQLite) database
    │   ├── SchemaVersionError          written by a newer ctxdesk than this one
    │   └── NotFoundError               a session, snapshot or blob does not exist
    ├── ResultStoreError                read_result: bad ref id, offset, or foreign session
    ├── SummarizerUnavailableError      the summarizer failed (seeds' SERVICE_UNAVAILABLE)
    ├── ContextOverflowError            a request cannot be made to fit, even after compaction
    ├── OutputError                     a report/diff cannot be written where asked (--out)
    ├── ProviderError                   the model provider failed (529/5xx, connection; status, retryable)
    │   └── ContextLengthExceededError  the provider rejected the prompt as too long (400)
    ├── ExportError                     a telemetry endpoint refused or could not be reached (endpoint, status)
    └── ImportFormatError               a transcript file is none of the formats we read

Errors carry what was wrong (which input, which field, which limit) as attributes
as well as in the message, so callers can act on them without parsing text.
"""

from __future__ import annotations

from typing import Any


class ContextDeskError(Exception):
    """Base class of every error ctxdesk raises on purpose."""


class ConfigError(ContextDeskError):
    """A settings file, settings value or model table is invalid."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None) -> None:
        self.source = source
        self.field = field
        where = " ".join(
            part for part in (f"in {source}" if source else "", f"at {field}" if field else "") if part
        )
        super().__init__(f"{message} ({where})" if where else message)


class ValidationError(ContextDeskError):
    """Bad input to an engine call: empty message list, zero max tokens, negative offset..."""

    def __init__(self, message: str, *, field: str | None = None, value: Any = None) -> None:
        self.field = field
        self.value = value
        super().__init__(message)


class MessageFormatError(ValidationError):
    """A message or content block cannot be parsed; names the message index and field."""

    def __init__(
        self, message: str, *, index: int | None = None, field: str | None = None, value: Any = None
    ):
        self.index = index
        prefix = f"message {index}" if index is not None else "message"
        if field:
            prefix += f", field {field!r}"
        super().__init__(f"{prefix}: {message}", field=field, value=value)


class TokenizerError(ContextDeskError):
    """An unknown tokenizer id, or BPE data that is missing or fails its sha256 check."""


class StoreError(ContextDeskError):
    """The session database cannot be opened, read or written."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}: {path}" if path else message)


class NotADatabaseError(StoreError):
    """The file is not SQLite, or is SQLite but holds no ctxdesk schema."""


class SchemaVersionError(StoreError):
    """The database was written by a newer schema version than this code knows."""

    def __init__(self, message: str, *, path: str | None = None, found: int = 0, supported: int = 0):
        self.found = found
        self.supported = supported
        super().__init__(message, path=path)


class NotFoundError(StoreError):
    """A session, snapshot, blob or event that was asked for does not exist."""


class ResultStoreError(ContextDeskError):
    """read_result was called with an unknown ref id, a bad offset, or another session's ref."""

    def __init__(self, message: str, *, ref_id: str | None = None) -> None:
        self.ref_id = ref_id
        super().__init__(message)


class SummarizerUnavailableError(ContextDeskError):
    """The summarizer could not produce a summary; history and cached summary are untouched."""

    def __init__(self, message: str, *, summarizer: str | None = None, status: int | None = None):
        self.summarizer = summarizer
        self.status = status
        super().__init__(message)


class ContextOverflowError(ContextDeskError):
    """A request cannot fit its model's window even after every compaction strategy."""

    def __init__(self, message: str, *, limit: int = 0, projected: int = 0) -> None:
        self.limit = limit
        self.projected = projected
        super().__init__(message)


class OutputError(ContextDeskError):
    """An output path (``report --out``, ``diff --out``) is not a regular file, or writing it failed."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.path = path
        super().__init__(f"{message}: {path}" if path else message)


class ProviderError(ContextDeskError):
    """The model provider failed: overloaded (529), a 5xx, a connection error, or a bad request."""

    def __init__(
        self, message: str, *, provider: str | None = None, status: int | None = None, retryable: bool = False
    ) -> None:
        self.provider = provider
        self.status = status
        self.retryable = retryable
        super().__init__(message)


class ContextLengthExceededError(ProviderError):
    """The provider rejected the request because the prompt does not fit the model's window."""


class ExportError(ContextDeskError):
    """An export endpoint (``ctxdesk export otlp --endpoint``) could not be reached or refused what was sent."""

    def __init__(self, message: str, *, endpoint: str | None = None, status: int | None = None) -> None:
        self.endpoint = endpoint
        self.status = status
        super().__init__(message)


class ImportFormatError(ContextDeskError):
    """A transcript file is none of the formats ctxdesk imports, or is malformed."""

    def __init__(self, message: str, *, path: str | None = None, line: int | None = None) -> None:
        self.path = path
        self.line = line
        where = path or ""
        if line is not None:
            where += f":{line}"
        super().__init__(f"{where}: {message}" if where else message)
