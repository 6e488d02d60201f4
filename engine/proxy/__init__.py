"""``ctxdesk proxy``: a local HTTP proxy that records exactly what any agent sends its model.

``app`` (routing, forwarding, streaming relay) with ``answers`` (its own 502/504 and
refusals) and ``anthropic_reads`` / ``openai_reads`` (the read_result rounds it answers
itself, over the one loop in ``read_rounds``); ``apis`` / ``responses`` (per-API parsing of requests and answers); ``sessions``
(which session a request belongs to); ``recorder`` (queue + writer thread) with ``writer`` /
``record_parts`` (what is written to the session database); ``controller`` / ``policies`` /
``policy_file`` / ``edits`` / ``read_result`` (in-flight policies); ``live`` (live
compactions); ``server`` (uvicorn, foreground or background thread).
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
