"""The walk of issue #34, measured: which ctxdesk modules one proxied request and one imported Claude Code
transcript pass through, and how often control returns to a module it had left.

    python scripts/module_walk.py              # both walks
    python scripts/module_walk.py proxy        # one Anthropic Messages request, through ProxyServer to its record
    python scripts/module_walk.py claude-code  # one real Claude Code transcript, through import_file to its rows

A "return" is a call into a module that is already on the call stack below another ctxdesk module (A calls B,
which calls back into A: the reader who followed A into B must go back to A to follow on). The same walk is
also counted by rooms: a module in a package is in that package's room (engine.proxy.transport.relay in
engine.proxy.transport, engine.store.sqlite in engine.store), a top-level module is its own room. Ordinary returns to
a caller are not counted, nor the resumption of a generator expression, comprehension or lambda, which a reader
reads in the function that wrote it. Each walk is measured after one warm-up of the same kind, so lazy imports
and first-use caches are not part of it.
"""

from __future__ import annotations

import argparse
import collections
import functools
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "dashboard")
LEXICAL = {"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"}
CLAUDE_CODE_FILE = (
    ROOT
    / "tests/fixtures/real_agents/claude-code/compact_auto/transcripts/005e4ed3-208c-4f24-ac39-ceb1cfae1fa5.jsonl"
)


@functools.cache  # asked for every module on the stack at every call the profiler sees
def room_of(module: str) -> str:
    """The package a module is in (its room); a top-level module (engine.tokens) is its own."""
    parts = module.split(".")
    if parts[-1] == "__init__":
        parts = parts[:-1]
    is_package = (ROOT.joinpath(*parts) / "__init__.py").is_file()
    return ".".join(parts if is_package or len(parts) <= 2 else parts[:-1])


def module_of(filename: str) -> str | None:
    """The dotted ctxdesk module a code file is, None outside engine/ and dashboard/."""
    try:
        relative = Path(filename).relative_to(ROOT)
    except ValueError:
        return None
    if relative.parts[0] not in PACKAGES:
        return None
    return ".".join(relative.with_suffix("").parts)


@dataclass
class Walk:
    """What the profiler saw while ``on``: modules entered, module-to-module calls, returns."""

    on: bool = False
    stacks: dict[int, list[str | None]] = field(default_factory=lambda: collections.defaultdict(list))
    visits: collections.Counter[str] = field(default_factory=collections.Counter)
    returns: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    room_visits: collections.Counter[str] = field(default_factory=collections.Counter)
    room_returns: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)

    def profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        stack = self.stacks[threading.get_ident()]
        if event == "return":
            if stack:
                stack.pop()
            return
        if event != "call":
            return
        module = module_of(frame.f_code.co_filename)
        if module and frame.f_code.co_name in LEXICAL:
            module = None  # read where it is written: neither a room entered nor a return
        if self.on and module:
            ours = [m for m in stack if m]
            if ours and ours[-1] != module and module in ours:
                left = list(dict.fromkeys(ours[ours.index(module) :]))
                self.returns[(" > ".join(left), f"{module}:{frame.f_code.co_name}")] += 1
            self.visits[module] += 1
            rooms, room = [room_of(m) for m in ours], room_of(module)
            if rooms and rooms[-1] != room and room in rooms:
                left = list(dict.fromkeys(rooms[rooms.index(room) :]))
                self.room_returns[(" > ".join(left), f"{module}:{frame.f_code.co_name}")] += 1
            self.room_visits[room] += 1
        stack.append(module)

    def measured(self, run: Callable[[], None]) -> None:
        """Run ``run`` with the profiler on in every thread (threads started before are profiled too: the
        profile is installed before the scenario starts them and only counts while ``on``)."""
        self.on = True
        try:
            run()
        finally:
            self.on = False

    def returns_into(self, package: str) -> dict[tuple[str, str], int]:
        """The returns whose target module is under ``package``."""
        return {key: n for key, n in self.returns.items() if key[1].startswith(package + ".")}

    def report(self, title: str, package: str) -> str:
        inside = sorted(m for m in self.visits if m.startswith(package + "."))
        lines = [
            f"== {title}",
            f"modules under {package}: {len(inside)}; ctxdesk modules in all: {len(self.visits)}; "
            f"returns to a module left: {sum(self.returns.values())} ({len(self.returns)} distinct)",
            "  " + ", ".join(m.removeprefix(package + ".") for m in inside),
        ]
        lines += [f"  {n:4d} x  {left} > back to {into}" for (left, into), n in self.returns.most_common()]
        rooms = sorted(r for r in self.room_visits if r == package or r.startswith(package + "."))
        lines += [
            f"rooms under {package}: {len(rooms)}; ctxdesk rooms in all: {len(self.room_visits)}; "
            f"returns to a room left: {sum(self.room_returns.values())} ({len(self.room_returns)} distinct)",
            "  " + ", ".join(r.removeprefix(package + ".") or "(the package itself)" for r in rooms),
        ]
        lines += [
            f"  {n:4d} x  {left} > back to {into}" for (left, into), n in self.room_returns.most_common()
        ]
        return "\n".join(lines)


def proxy_walk() -> Walk:
    """One Anthropic Messages request through ProxyServer to its stored record (a scripted upstream)."""
    sys.path.insert(0, str(ROOT / "tests"))
    import anthropic
    from model_server import ScriptedServer
    from model_server import anthropic as scripted

    from engine.proxy import ProxyServer, Upstreams

    walk = Walk()
    threading.setprofile(walk.profile)
    sys.setprofile(walk.profile)
    try:
        upstream = ScriptedServer()
        scripted.install(upstream)
        with upstream, tempfile.TemporaryDirectory() as tmp:
            ups = Upstreams(
                anthropic=upstream.base_url, openai=upstream.base_url + "/v1", read_timeout_s=120.0
            )
            with ProxyServer(Path(tmp) / "proxy.db", upstreams=ups) as proxy:
                client = anthropic.Anthropic(
                    base_url=proxy.base_url, api_key="sk-ant-walk-0123456789", max_retries=0
                )
                upstream.queue(scripted.text("Hello."), scripted.text("Again."))
                history: list[dict[str, Any]] = [{"role": "user", "content": "Hi"}]

                def one_request() -> None:
                    client.messages.create(
                        model="claude-sonnet-4-6", max_tokens=50, system="Be brief.", messages=history
                    )
                    proxy.recorder.flush()

                one_request()  # warm-up
                history += [
                    {"role": "assistant", "content": "Hello."},
                    {"role": "user", "content": "Once more"},
                ]
                walk.measured(one_request)
                client.close()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    return walk


def claude_code_walk() -> Walk:
    """One real Claude Code transcript through import_file to its rows (warmed on the file less two lines)."""
    from engine.importers.api import import_file
    from engine.store import SessionStore

    lines = CLAUDE_CODE_FILE.read_text(encoding="utf-8").splitlines(keepends=True)
    walk = Walk()
    with tempfile.TemporaryDirectory() as tmp:
        warm, measured = Path(tmp) / "warm.jsonl", Path(tmp) / "measured.jsonl"
        warm.write_text("".join(lines[:-2]), encoding="utf-8")
        measured.write_text("".join(lines), encoding="utf-8")
        with SessionStore(Path(tmp) / "warm.db") as store:
            import_file(warm, store)
        sys.setprofile(walk.profile)
        try:
            with SessionStore(Path(tmp) / "walk.db") as store:
                walk.measured(lambda: import_file(measured, store))
        finally:
            sys.setprofile(None)
    return walk


#: name: (the walk, what it follows, the package whose modules it counts)
WALKS: dict[str, tuple[Callable[[], Walk], str, str]] = {
    "proxy": (proxy_walk, "one proxied Anthropic request, to its stored record", "engine.proxy"),
    "claude-code": (
        claude_code_walk,
        f"one Claude Code transcript ({CLAUDE_CODE_FILE.name}), to its rows",
        "engine.importers",
    ),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("walks", nargs="*", metavar="WALK", help="proxy, claude-code (default: both)")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.walks) - set(WALKS))
    if unknown:
        parser.error(f"no such walk: {', '.join(unknown)} (choose from {', '.join(WALKS)})")
    for name in args.walks or WALKS:
        run, title, package = WALKS[name]
        print(run().report(title, package))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
