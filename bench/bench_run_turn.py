"""ctxdesk's own cost per ``run_turn`` as history grows, beside the guard alone in the same run.

A session of N messages (the seeded corpus) is written to a real SQLite file and resumed; each
timed turn is ``SessionManager.run_turn`` against a client that answers at once (no tokenizer, no
network), so what is measured is ctxdesk: assembling and measuring the request, the guard, building
the provider payload, recording the messages, request event and cost row. The baseline is the
guard's own per-turn work on the same history (running totals, components, a guard evaluation),
timed the way bench_guard's manager row does. Overhead = run_turn - guard; the target is <= 5 ms.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.bench_guard import session_manager_turns
from bench.common import EXACT_ID, fresh_tokenizer
from bench.corpus import generate_history
from bench.report import Table, ms
from engine.clients import ModelRequest, ModelResponse
from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.guard import GuardTarget
from engine.messages import assistant, user
from engine.session import SessionManager
from engine.settings import Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

SIZES = (1_000, 10_000, 100_000)
QUICK_SIZES = (200, 1_000)
TURNS = 20
QUICK_TURNS = 8
MODEL = "gpt-4.1"
#: A window no corpus size reaches: every turn is an ordinary one (no compaction in the timing).
BENCH_WINDOW = 1_000_000_000
TARGET_MS = 5.0


class InstantClient:
    """Answers every request at once with a fixed reply and usage (no counting of its own)."""

    provider = "openai"

    def __init__(self, model: str) -> None:
        self.model = model
        self.calls = 0

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        usage = ProviderUsage(input_tokens=request.estimated_prompt_tokens or 0, output_tokens=3)
        return ModelResponse(message=assistant("ok"), usage=usage, stop_reason="end_turn")


def bench_settings() -> Settings:
    return Settings.from_dict({"models": {MODEL: {"context_window": BENCH_WINDOW}}})


def guard_only(messages: list[Any], turns: list[Any], tokenizer: Any) -> float:
    """Median seconds per turn of the guard's own work: bench_guard's manager row (running
    totals, components, a guard evaluation; the totals checked against a recount)."""
    target = GuardTarget.from_settings(resolve_model_settings(MODEL, settings=bench_settings()))
    return session_manager_turns(messages, turns, fresh_tokenizer(EXACT_ID), target)


def run_turns(db: Path, session_id: str, turns: int) -> tuple[float, float, float, float]:
    """(median and best seconds per run_turn, seconds to resume, median CPU seconds per run_turn:
    this process's own, which a machine shared with other work does not inflate) on the stored session."""
    client = InstantClient(MODEL)
    with SessionStore(db) as store:
        t0 = time.perf_counter()
        manager = SessionManager(
            client,
            store,
            session_id=session_id,
            resume=True,
            settings=bench_settings(),
            system_prompt="Bench.",
        )
        resume_s = time.perf_counter() - t0
        per_turn: list[float] = []
        cpu: list[float] = []
        for i in range(turns):
            t0, c0 = time.perf_counter(), time.process_time()
            manager.run_turn(f"turn {i}: what next?")
            per_turn.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
    timed = per_turn[1:] or per_turn
    return statistics.median(timed), min(timed), resume_s, statistics.median(cpu[1:] or cpu)


def measure(
    size: int, corpus: list[Any], turns: int, folder: Path, *, seed_calls: bool = False
) -> dict[str, Any]:
    """Per-turn figures on a stored session of ``size`` corpus messages; with ``seed_calls``
    every assistant message of it has its request event and cost row, as a long recorded session
    has (so each turn's cost row is written after that many earlier calls)."""
    tokenizer = get_tokenizer(MODEL)
    messages = corpus[:size]
    db = folder / f"turns-{size}{'-calls' if seed_calls else ''}.db"
    calls = 0
    with SessionStore(db) as store:
        session_id = store.create_session(model=MODEL, title=f"{size} messages")
        for start in range(0, size, 5_000):
            with store.batched_costs():
                rows = store.append_messages(session_id, messages[start : start + 5_000], tokenizer=tokenizer)
                for row in (r for r in rows if seed_calls and r.message.role == "assistant"):
                    calls += 1
                    store.record_event(session_id, _seed_request(row.seq, row.turn_index))
    turn_s, best_s, resume_s, cpu_s = run_turns(db, session_id, turns)
    guard_s = guard_only(messages, [user(f"turn {i}: what next?") for i in range(turns)], tokenizer)
    return {
        "size": size, "turn_s": turn_s, "best_s": best_s, "guard_s": guard_s, "resume_s": resume_s, "calls": calls,
        "cpu_s": cpu_s,
    }  # fmt: skip


def _seed_request(seq: int, turn_index: int) -> ContextEvent:
    """The request event of a seeded reply: its usage priced as the instant client's replies are."""
    return ContextEvent(
        kind="request", trigger="user_input", outcome="ok", provider="openai", model=MODEL,
        turn_index=turn_index, projected_tokens=1_000, components=ComponentTokens(conversation=1_000),
        usage=ProviderUsage(input_tokens=1_000, output_tokens=3), message_seq=seq,
    )  # fmt: skip


def run(quick: bool = False) -> Table:
    sizes = QUICK_SIZES if quick else SIZES
    turns = QUICK_TURNS if quick else TURNS
    corpus = generate_history(max(sizes))
    table = Table(
        title="run_turn overhead as history grows (instant client)",
        columns=[
            "messages",
            "run_turn ms/turn",
            "best ms/turn",
            "CPU ms/turn",
            "guard alone ms/turn",
            "overhead ms/turn",
            "<= 5 ms",
            "resume s",
        ],
        baseline="the guard's own per-turn work on the same history, timed in the same run",
    )
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-turns-") as folder:
        for size, seed_calls in [*((s, False) for s in sizes), (max(sizes), True)]:
            r = measure(size, corpus, turns, Path(folder), seed_calls=seed_calls)
            overhead = (r["turn_s"] - r["guard_s"]) * 1000
            table.add(
                f"{size:,}" + (f" + {r['calls']:,} priced calls" if seed_calls else ""),
                ms(r["turn_s"]),
                ms(r["best_s"]),
                ms(r["cpu_s"]),
                ms(r["guard_s"]),
                f"{overhead:.2f}",
                "yes" if overhead <= TARGET_MS else "no",
                f"{r['resume_s']:.2f}",
            )
    table.notes.append(
        f"median (and best) of {turns} turns after the first, overhead from the median; CPU: this process's own "
        f"CPU time per turn (median), which other work on a shared machine does not inflate; a turn = one user message, one model call, the reply "
        "recorded (messages, request event, cost row) in the session's SQLite file; '+ N priced calls': every "
        "assistant message of the stored history has its request event and cost row"
    )
    return table


if __name__ == "__main__":
    import sys

    from bench.report import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
