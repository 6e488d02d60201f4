"""``ctxdesk proxy``: a local HTTP proxy that records exactly what any agent sends its model.

Three packages over one ``wire`` package (a ``WireApi`` per wire format: everything that differs
between Anthropic Messages, OpenAI Chat and OpenAI Responses): ``transport`` (the agents' port, the
relay, the proxy's own answers, running it), ``policy`` (the in-flight policies, decided per request
by the engine's own clearing, compaction and guard) and ``recording`` (each exchange into the session
database, off the request path). A request goes transport -> policy -> transport -> recording -> store.
"""

from engine.proxy.recording.exchange import Exchange
from engine.proxy.recording.recorder import Recorder
from engine.proxy.recording.writer import UNPARSED_SESSION
from engine.proxy.transport.app import ANTHROPIC_UPSTREAM, OPENAI_UPSTREAM, Upstreams, create_app
from engine.proxy.transport.server import ProxyServer, check_host, is_loopback

__all__ = [
    "ANTHROPIC_UPSTREAM",
    "OPENAI_UPSTREAM",
    "UNPARSED_SESSION",
    "Exchange",
    "ProxyServer",
    "Recorder",
    "Upstreams",
    "check_host",
    "create_app",
    "is_loopback",
]
