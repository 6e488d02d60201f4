"""The older name of the Anthropic fake: now ``tests/model_server/anthropic.py`` (re-exported here).

with FakeAnthropicServer(success("a summary")) as server:
    ...
    assert server.requests[0].body["model"] == "claude-haiku-4-5"
"""

from model_server.anthropic import (
    FakeAnthropicServer,
    ScriptedResponse,
    error_body,
    message_body,
    overloaded,
    prompt_too_long,
    slow,
    success,
)
from model_server.core import RecordedRequest

__all__ = [
    "FakeAnthropicServer",
    "RecordedRequest",
    "ScriptedResponse",
    "error_body",
    "message_body",
    "overloaded",
    "prompt_too_long",
    "slow",
    "success",
]
