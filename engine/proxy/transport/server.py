"""Running the proxy: the relay (:mod:`engine.proxy.transport.relay`) on the agents' port and the Starlette app
on an internal loopback port under uvicorn, one event loop for both, in the foreground (the CLI)
or in a background thread (tests, bench)."""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import uvicorn
from starlette.routing import BaseRoute

from engine.errors import ConfigError
from engine.proxy.policy.controller import Controller
from engine.proxy.policy.live import LiveCompactions
from engine.proxy.policy.policy_file import PolicyFile
from engine.proxy.recording.recorder import OnRecorded, Recorder
from engine.proxy.transport.admission import MAX_BODY_BYTES
from engine.proxy.transport.app import SHUTDOWN_FLUSH_S, Upstreams, create_app
from engine.proxy.transport.connections import Origin
from engine.proxy.transport.http1 import HEAD_LIMIT
from engine.proxy.transport.relay import Relay
from engine.settings import Settings

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
#: GIL switch interval while serving (Python's default is 5 ms).
SWITCH_INTERVAL_S = 0.0005


def is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


def check_host(host: str, *, allow_remote: bool) -> None:
    if not is_loopback(host) and not allow_remote:
        raise ConfigError(
            f"--host {host} would let other machines use your API keys through this proxy; "
            "pass --allow-remote to do it anyway",
            field="host",
        )


class ProxyServer:
    """The proxy on ``host:port`` (port 0: any free port) with its recorder; a context manager.

    ``settings_file`` (TOML) gives model windows and in-flight policies, re-read on change.
    """

    def __init__(
        self,
        db_path: str | Path,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        upstreams: Upstreams | None = None,
        settings: Settings | None = None,
        settings_file: str | Path | None = None,
        allow_remote: bool = False,
        max_body_bytes: int = MAX_BODY_BYTES,
        routes: Sequence[BaseRoute] = (),
        on_recorded: OnRecorded | None = None,
    ) -> None:
        """``on_recorded``: told what each recorded exchange stored (``--export-otlp``'s live exporter)."""
        check_host(host, allow_remote=allow_remote)
        self.routes = tuple(routes)
        self.allow_remote = allow_remote
        self.max_body_bytes = max_body_bytes
        self.policy_file = PolicyFile(settings_file, settings)
        # the recorder reads the settings in force (re-read on change), as the policies do
        self.recorder = Recorder(db_path, settings=lambda: self.policy_file.settings, on_recorded=on_recorded)
        self.live = LiveCompactions(db_path)
        self.host, self._port = host, port
        self.upstreams = upstreams or Upstreams()
        self.controller = Controller(self.policy_file, self.live)
        self.app = create_app(
            self.recorder,
            self.upstreams,
            self.controller,
            allow_remote=allow_remote,
            max_body_bytes=max_body_bytes,
            extra_routes=routes,
        )
        config = uvicorn.Config(
            self.app,
            host="127.0.0.1",  # the app is reached through the relay only
            port=0,
            log_level="warning",
            access_log=False,
            server_header=False,
            date_header=False,
            lifespan="on",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=3600,  # the relay's kept-alive connections to the app stay open
            # the C parser (httptools) and uvloop where it exists: measured 0.5 ms less added time
            # to first byte on 0.6 MB bodies than h11 and asyncio, and a p99 about half (docs/proxy.md)
            http="httptools",
            loop="auto",
        )
        self.server = uvicorn.Server(config)
        self.relay: Relay | None = None
        self._front: asyncio.Server | None = None
        self._listening = threading.Event()
        self._on_listening: Callable[[], None] | None = None  # run()'s: told once the port is bound
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        if self._front is None:
            raise RuntimeError("the proxy is not listening yet")
        return int(self._front.sockets[0].getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 20.0) -> ProxyServer:
        self._thread = threading.Thread(target=self._run_loop, name="ctxdesk-proxy", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._listening.is_set():
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the proxy did not start")
            time.sleep(0.01)
        return self

    def _run_loop(self) -> None:
        with asyncio.Runner(loop_factory=self.server.config.get_loop_factory()) as runner:
            runner.run(self._serve())

    async def _serve(self) -> None:
        """The app under uvicorn on an internal port, the relay on the agents' port, until told to stop."""
        inner = socket.create_server(("127.0.0.1", 0))
        app_task = asyncio.ensure_future(self.server.serve(sockets=[inner]))
        while not self.server.started:
            if app_task.done():
                await app_task
                return
            await asyncio.sleep(0.005)
        self.relay = Relay(
            self.recorder, self.controller, anthropic=self.upstreams.anthropic, openai=self.upstreams.openai,
            app_origin=Origin("http", "127.0.0.1", inner.getsockname()[1]),
            connect_timeout_s=self.upstreams.connect_timeout_s, read_timeout_s=self.upstreams.read_timeout_s,
            allow_remote=self.allow_remote, max_body_bytes=self.max_body_bytes,
            app_paths=frozenset(path for r in self.routes if (path := getattr(r, "path", None))),
        )  # fmt: skip
        try:
            self._front = await asyncio.start_server(
                self.relay.serve, self.host, self._port, limit=HEAD_LIMIT
            )
        except BaseException as exc:
            self.server.should_exit = True
            await app_task
            if isinstance(exc, OSError):
                where = f"{self.host}:{self._port}"
                raise ConfigError(f"cannot listen on {where}: {exc.strerror or exc}", field="port") from exc
            raise
        self._listening.set()
        if self._on_listening is not None:
            self._on_listening()
        try:
            while not self.server.should_exit and not app_task.done():
                await asyncio.sleep(0.05)
        finally:
            self._front.close()
            self.relay.close()
            self.server.should_exit = True
            await app_task
            await self.relay.aclose()

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(SHUTDOWN_FLUSH_S + 5)  # the app's shutdown waits for answered requests
        self.recorder.close()
        self.live.close()
        self.policy_file.close()

    def __enter__(self) -> ProxyServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def run(self, on_listening: Callable[[], None] | None = None) -> None:
        """Serve in the foreground until interrupted (Ctrl-C), then finish recording;
        ``on_listening`` is called once the agents' port is bound."""
        self._on_listening = on_listening
        # The writer thread parses and counts whole requests; a short switch interval lets the
        # event loop take the GIL back quickly, so relaying never waits behind a recording.
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        try:
            self._run_loop()
        finally:
            self.recorder.close()
            self.live.close()
            self.policy_file.close()
