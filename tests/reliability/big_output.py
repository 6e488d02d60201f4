"""Offload one huge tool output in a fresh process and report time and peak memory as JSON.

``python -m tests.reliability.big_output DB BYTES`` builds a log-like text of BYTES UTF-8 bytes
(non-ASCII included), offloads it through ResultStore, reads a page from its middle and greps
it, and prints what each step cost. A separate process, so the peak is this work's alone.
"""

from __future__ import annotations

import hashlib
import json
import resource
import sys
import time

from engine.offload import ResultStore, run_read_result_tool
from engine.store import SessionStore

LINE = "2025-03-14T12:00:00.000Z INFO [worker-3] request ok ✓ 200 12.5ms\n"


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def main(db: str, size: int) -> dict:
    store = SessionStore(db)
    session_id = store.create_session(title="big output")
    results = ResultStore(store, session_id)
    content = LINE * (size // len(LINE.encode("utf-8")))
    data = content.encode("utf-8")
    before = peak_rss_bytes()
    started = time.perf_counter()
    offloaded = results.offload(content, tool_name="bash", tool_use_id="toolu_big")
    offload_s = time.perf_counter() - started
    after_offload = peak_rss_bytes()
    page = results.read(offloaded.ref_id, offset=len(content) // 2, limit=2_000)
    grep = run_read_result_tool(results, {"ref_id": offloaded.ref_id, "pattern": "worker-3"})
    blob = store.get_blob(offloaded.ref_id, with_content=True)
    store.close()
    return {
        "utf8_bytes": len(data),
        "offload_s": offload_s,
        "offload_peak_growth": after_offload - before,
        "reference_text": offloaded.text,
        "tokens_inline": offloaded.event.details["tokens_inline"],
        "tokens_estimated": offloaded.event.details["tokens_inline_estimated"],
        "stored_sha_matches": blob.sha256
        == hashlib.sha256(data).hexdigest()
        == hashlib.sha256(blob.content).hexdigest(),
        "page_head": page.splitlines()[0],
        "page_body_chars": len(page.split("\n", 1)[1]),
        "grep_head": grep.splitlines()[0],
        "grep_lines": len(grep.splitlines()),
    }


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], int(sys.argv[2]))))
