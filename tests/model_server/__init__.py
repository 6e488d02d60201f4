"""A scripted model server for running real agent CLIs (and SDKs) offline in tests.

``ScriptedServer`` (core) serves on 127.0.0.1 at a random port and logs every request;
per-API modules add routes: ``anthropic`` (Messages API: streaming and not, count_tokens).
Other APIs live beside it as their own modules, each with an ``install(server)``.

    from tests.model_server import anthropic
    with anthropic.anthropic_server(anthropic.text("hi"), log_path=tmp / "requests.jsonl") as server:
        ...  # point the client at server.base_url
"""

from .core import HttpReply, RecordedRequest, ScriptedServer, read_log, sse_events

__all__ = ["HttpReply", "RecordedRequest", "ScriptedServer", "read_log", "sse_events"]
