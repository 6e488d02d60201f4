"""``ctxdesk proxy``: a local HTTP proxy that records exactly what any agent sends its model.

Three groups over one ``wire`` package (a ``WireApi`` per wire format: everything that differs
between Anthropic Messages, OpenAI Chat and OpenAI Responses). Transport: ``relay`` (the agents'
port) with ``admission`` (who is served), ``websocket``, ``http1``, ``connections``, ``streams``,
``handoff`` and ``app`` (what the relay does not frame), ``answers``, ``policy_step``, ``read_rounds``, ``server``.
Policy: ``controller``, ``policies``, ``compaction_policy``, ``edits``, ``policy_file``, ``read_result``, ``live``.
Recording: ``exchange``, ``recorder``, ``writer``, ``record_parts``, ``sessions``.
"""

from engine.proxy.app import ANTHROPIC_UPSTREAM, OPENAI_UPSTREAM, Upstreams, create_app
from engine.proxy.exchange import Exchange
from engine.proxy.recorder import Recorder
from engine.proxy.server import ProxyServer, check_host, is_loopback
from engine.proxy.writer import UNPARSED_SESSION

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
