"""The proxy's memory on hostile sizes (#32.5), each case in a fresh process that runs the proxy, a
local upstream and the agent's side, its growth read from its own high-water mark (VmHWM):

- a 500 MB request body at the default limit (64 MiB): refused from its head with a 413, so the
  growth is a fraction of the body (target: <= 1.5x the body, or a refusal at the limit);
- the same body with ``--max-body-mb`` raised over it: forwarded whole, recorded as its prefix,
  size and hash past 32 MiB (target <= 1.5x the body);
- an answer of 2.1 MB gzip that inflates to 2 GB: relayed as it came, the recorder inflates at
  most 32 MiB (target: refused at the limit, <= 100 MB growth).

``--quick``: 100 MB bodies (still past the 64 MiB body and 32 MiB record limits) and a 200 MB bomb. Run by ``python -m bench --only reliability``.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

from bench.child_peak import run_python
from bench.report import Table

MB = 1 << 20
SIZES = {"body": 500 * MB, "bomb": 2048 * MB}
QUICK = {"body": 100 * MB, "bomb": 200 * MB}
CHUNK = MB
GROWTH_TARGET_BYTES = 100 * MB
BODY_RATIO_TARGET = 1.5


# -- the child's side ---------------------------------------------------------------------------
def _vm(name: str) -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith(name + ":"))


def _gzip_stream(size: int) -> bytes:
    """``size`` zero bytes gzipped, made a chunk at a time (never ``size`` bytes in memory)."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(CHUNK)
    parts = [packer.compress(zeros) for _ in range(size // CHUNK)]
    return b"".join([*parts, packer.flush()])


class _Upstream:
    """Takes one request at a time (its body read and dropped) and answers with ``answer``."""

    def __init__(self, answer: bytes) -> None:
        self.answer = answer
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            conn, _ = self.sock.accept()
            with conn:
                data = b""
                while b"\r\n\r\n" not in data:
                    data += conn.recv(65536)
                head, _, rest = data.partition(b"\r\n\r\n")
                length = next(
                    int(line.split(b":")[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length")
                )
                left = length - len(rest)
                while left > 0 and (got := conn.recv(min(left, CHUNK))):
                    left -= len(got)
                conn.sendall(self.answer)


def _send(port: int, body_size: int) -> bytes:
    """An agent's request of ``body_size`` bytes of JSON, sent a chunk at a time; the answer's head."""
    prefix = b'{"model":"claude-sonnet-4-6","max_tokens":5,"messages":[{"role":"user","content":"'
    suffix = b'"}]}'
    filler = (b"the agent pasted a large log line here " * (CHUNK // 39 + 1))[:CHUNK]  # text, not one word
    head = (
        "POST /v1/messages HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"connection: close\r\ncontent-length: {body_size}\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=120) as sock:
        try:
            sock.sendall(head + prefix)
            left = body_size - len(prefix) - len(suffix)
            while left > 0:
                sock.sendall(filler[: min(left, CHUNK)])
                left -= min(left, CHUNK)
            sock.sendall(suffix)
        except OSError:  # refused mid-body: the proxy answered and closed
            pass
        answer = b""
        try:
            while chunk := sock.recv(1 << 16):
                answer += chunk
                if len(answer) > 1 << 16:
                    break
        except OSError:
            pass
    return answer.split(b"\r\n", 1)[0]


def child(case: str, size: int, folder: Path) -> dict[str, Any]:
    """One case in this process: its answer's status line and the growth of this process's peak."""
    from engine.proxy import ProxyServer, Upstreams

    ok = b'{"type":"message","role":"assistant","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn"}'
    answer = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
        len(ok),
        ok,
    )
    bomb = b""
    if case == "bomb":
        bomb = _gzip_stream(size)
        answer = (
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-encoding: gzip\r\n"
            b"content-length: %d\r\n\r\n" % len(bomb)
        ) + bomb
    upstream = _Upstream(answer)
    limit = {"refused": None, "raised": size + MB, "bomb": None}[case]
    kwargs = {"max_body_bytes": limit} if limit else {}
    with ProxyServer(folder / f"{case}.db", upstreams=Upstreams(anthropic=upstream.url), **kwargs) as proxy:
        _send(proxy.port, 1000)  # warm: imports, the recorder's first write
        proxy.recorder.flush(60)
        before = _vm("VmHWM")
        status = _send(proxy.port, 1000 if case == "bomb" else size)
        proxy.recorder.flush(300)
        growth = _vm("VmHWM") - before
    from engine.store import SessionStore

    with SessionStore(folder / f"{case}.db", read_only=True) as store:
        rows = [r for s in store.list_sessions() for r in store.list_requests(s.id)]
    last = max(rows, key=lambda r: r.id)
    return {
        "status": status.decode("latin-1"), "growth": growth, "compressed": len(bomb),
        "recorded": f"{last.request_bytes:,} bytes, {'answer parsed' if last.response else 'no answer parsed'}",
    }  # fmt: skip


# -- the table --------------------------------------------------------------------------------
def _run_case(case: str, size: int, folder: Path) -> dict[str, Any]:
    run = run_python(
        "-m", "bench.bench_proxy_memory", "--child", case, str(size), str(folder), capture_stdout=True
    )
    if run.code != 0:
        raise RuntimeError(f"proxy memory child {case} failed ({run.code}): {run.stderr[-2000:]}")
    return {**json.loads(run.stdout.strip().splitlines()[-1]), "seconds": run.seconds}


def run(quick: bool = False) -> Table:
    sizes = QUICK if quick else SIZES
    table = Table(
        title="Reliability: the proxy's memory on a huge request body and a decompression bomb (fresh processes)",
        columns=["measure", "answer", "recorded", "growth MB", "input MB", "ratio", "target", "seconds"],
        baseline="the input's size (the body, or the bomb's inflated size)",
    )
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-proxy-memory-") as name:
        folder = Path(name)
        for case, label, target in (
            (
                "refused",
                "request body at the default --max-body-mb (64)",
                f"<= {BODY_RATIO_TARGET}x or refused",
            ),
            ("raised", "request body, --max-body-mb raised over it", f"<= {BODY_RATIO_TARGET}x"),
        ):
            got = _run_case(case, sizes["body"], folder)
            ratio = got["growth"] / sizes["body"]
            table.add(label, got["status"], got["recorded"], round(got["growth"] / MB, 1), sizes["body"] // MB, round(ratio, 3), target,
                      round(got["seconds"], 1))  # fmt: skip
        got = _run_case("bomb", sizes["bomb"], folder)
        table.add(
            f"gzip answer of {got['compressed'] / MB:.1f} MB inflating to {sizes['bomb'] // MB} MB",
            got["status"], got["recorded"], round(got["growth"] / MB, 1), sizes["bomb"] // MB, round(got["growth"] / sizes["bomb"], 4),
            f"refused at 32 MiB, <= {GROWTH_TARGET_BYTES // MB} MB", round(got["seconds"], 1),
        )  # fmt: skip
    table.notes.append(
        "growth: the process's VmHWM after the case less before it (the proxy, its upstream and the agent's side "
        "in one process; the agent streams its body a MiB at a time and the upstream drops what it reads)"
    )
    return table


if __name__ == "__main__":
    if "--child" in sys.argv:
        parser = argparse.ArgumentParser()
        parser.add_argument("--child", nargs=3, metavar=("CASE", "SIZE", "FOLDER"))
        case, size, folder = parser.parse_args().child
        print(json.dumps(child(case, int(size), Path(folder))))
    else:
        from bench.report import render_table

        print(render_table(run(quick="--quick" in sys.argv)))
