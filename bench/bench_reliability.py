"""Memory and time under load (issue #22's figures), each beside its baseline, in fresh processes.

Peak RSS is the child's own (VmHWM of its address space, bench.child_peak), so one step's peak is not
hidden by another's:
- offloading a 200 MB tool output: peak growth against the output's size (target <= 2x);
- refusing a 1 GB file that is not a transcript: peak against a bare ``ctxdesk --help`` (the head
  is read, never the file);
- ``report --format json`` on a 200k-message engine-written session: peak against the same
  process reporting a 2k-message session, and the time;
- the dashboard's timeline data (per-turn rows, per-call rows, markers, guard/request events)
  for that session: seconds against the target 3 s;
- opening a 200 MB output in the dashboard (first, middle, last page and a search): growth;
- ``run_turn`` overhead beside the guard alone (bench_run_turn) at 10k messages;
- ``ctxdesk import`` of a 2 GB single-line file (refused at the per-line cap, peak against the cap) and
  of a million small lines (seconds against 60 s).
``--quick`` shrinks every size (20 MB, 100 MB, 4k messages, 1k messages, a 256 MB line, 5k lines).
"""

from __future__ import annotations

import json
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

from bench.child_peak import run_python
from bench.report import Table

MB = 1 << 20
GB = 1 << 30
SIZES = {"offload": 200 * MB, "reject": GB, "messages": 200_000, "small": 2_000, "turns": 10_000,
         "long_line": 2 * GB, "lines": 1_000_000}  # fmt: skip
QUICK = {"offload": 20 * MB, "reject": 100 * MB, "messages": 4_000, "small": 1_000, "turns": 1_000,
         "long_line": 256 * MB, "lines": 5_000}  # fmt: skip
TIMELINE_TARGET_S = 3.0
#: #32.9: a million small lines imported in at most this many seconds.
MILLION_LINES_TARGET_S = 60.0


def python_peak(code: str) -> tuple[dict[str, Any], int, float]:
    """Run ``code`` (which prints one JSON object) in a fresh interpreter: (its JSON, peak, s)."""
    run = run_python("-c", code, capture_stdout=True)
    if run.code != 0:
        raise RuntimeError(f"benchmark child failed ({run.code}): {run.stderr[-2000:]}")
    return json.loads(run.stdout.strip().splitlines()[-1]), run.peak, run.seconds


def cli_peak(*args: str) -> tuple[int, str, int, float]:
    """(exit code, stderr, peak RSS, seconds) of ``python -m engine.cli ARGS``."""
    run = run_python("-m", "engine.cli", *args)
    return run.code, run.stderr, run.peak, run.seconds


def make_session(db: Path, messages: int) -> str:
    """An engine-written-like session: user/assistant pairs, one request event per reply."""
    code = textwrap.dedent(f"""
        import json
        from engine.events import ComponentTokens, ContextEvent, ProviderUsage
        from engine.messages import assistant, user
        from engine.store import SessionStore
        from engine.tokens import get_tokenizer
        tok = get_tokenizer("gpt-4.1")
        with SessionStore({str(db)!r}) as store:
            sid = store.create_session(model="gpt-4.1", provider="openai", title="{messages} messages")
            total = 0
            for start in range(0, {messages}, 10_000):
                batch = []
                for i in range(start, min(start + 10_000, {messages}), 2):
                    batch += [user(f"question {{i}}: what does step {{i}} do?"),
                              assistant(f"answer {{i}}: it updates the ledger and returns.")]
                with store.batched_costs():  # cost rows in one pass per batch, as an import writes them
                    rows = store.append_messages(sid, batch, tokenizer=tok)
                    for row in rows[1::2]:
                        total += 30
                        store.record_event(sid, ContextEvent(
                            kind="request", trigger="user_input", outcome="ok", provider="openai",
                            model="gpt-4.1", turn_index=row.seq // 2, context_window=1_000_000,
                            max_output_tokens=32_000, buffer_tokens=0, limit_tokens=968_000,
                            projected_tokens=total, components=ComponentTokens(system=50, conversation=total),
                            usage=ProviderUsage(input_tokens=total, output_tokens=12), message_seq=row.seq,
                            details={{"step": 0, "messages_sent": row.seq}}))
        print(json.dumps({{"session": sid}}))
    """)
    result, _, _ = python_peak(code)
    return str(result["session"])


def offload_row(size: int, folder: Path) -> list[Any]:
    code = textwrap.dedent(f"""
        import json
        from tests.reliability.big_output import main
        print(json.dumps(main({str(folder / "offload.db")!r}, {size})))
    """)
    figures, _, _ = python_peak(code)
    growth = figures["offload_peak_growth"]
    return [
        f"offload a {size // MB} MB tool output: peak growth",
        "MB",
        round(growth / MB),
        size // MB,
        "the output's size",
        round(growth / size, 2),
        "<= 2x",
        round(figures["offload_s"], 1),
    ]


def reject_row(size: int, folder: Path) -> list[Any]:
    big = folder / "not-a-transcript.jsonl"
    with big.open("wb") as fh:
        fh.write(b"2025-03-14T12:00:00Z INFO [worker-3] request ok\n" * 4000)
        fh.truncate(size)
    code, err, peak, seconds = cli_peak("import", str(big), "--db", str(folder / "reject.db"))
    if code != 1 or "ctxdesk: error:" not in err:
        raise RuntimeError(f"the file was not refused: exit {code}, {err[-500:]}")
    big.unlink()
    _, _, base, _ = cli_peak("--help")
    return [
        f"refuse a {size // MB:,} MB file that is no transcript: peak",
        "MB",
        round(peak / MB),
        round(base / MB),
        "ctxdesk --help",
        round(peak / base, 2),
        "head only",
        round(seconds, 1),
    ]


def report_rows(db: Path, small_db: Path, messages: int, small: int, folder: Path) -> list[list[Any]]:
    code, err, peak, seconds = cli_peak(
        "report", str(db), "--format", "json", "--out", str(folder / "r.json")
    )
    if code != 0:
        raise RuntimeError(f"report failed: {err[-800:]}")
    _, _, base, base_s = cli_peak(
        "report", str(small_db), "--format", "json", "--out", str(folder / "s.json")
    )
    size = (folder / "r.json").stat().st_size
    return [
        [
            f"report JSON of a {messages:,}-message session ({size / MB:,.0f} MB written): peak",
            "MB",
            round(peak / MB),
            round(base / MB),
            f"same, {small:,} messages ({base_s:.1f} s)",
            round(peak / base, 2),
            "streamed output",
            round(seconds, 1),
        ]
    ]


def timeline_row(db: Path, session_id: str, messages: int) -> list[Any]:
    code = textwrap.dedent(f"""
        import json, time
        from dashboard import analysis, data
        con = data.connect([{str(db)!r}])
        db = data.db_labels([__import__("pathlib").Path({str(db)!r})])[0]
        t0 = time.perf_counter()
        turns = data.timeline(con, db, {session_id!r})
        marks = data.markers(con, db, {session_id!r})
        t_turns = time.perf_counter() - t0
        calls = data.requests(con, db, {session_id!r})
        per_call = analysis.per_call(calls, marks)
        checks = data.events(con, db, {session_id!r}, ("guard", "request"))
        total = time.perf_counter() - t0
        print(json.dumps({{"turns_s": t_turns, "total_s": total, "rows": len(turns), "calls": len(calls),
                          "events": len(checks)}}))
    """)
    figures, peak, _ = python_peak(code)
    return [
        f"timeline data of a {messages:,}-message session ({figures['calls']:,} calls; peak {peak / MB:,.0f} MB)",
        "s",
        round(figures["total_s"], 2),
        TIMELINE_TARGET_S,
        f"target (per-turn rows alone: {figures['turns_s']:.2f} s)",
        round(figures["total_s"] / TIMELINE_TARGET_S, 2),
        "<= 1",
        round(figures["total_s"], 2),
    ]


def blob_row(size: int, folder: Path) -> list[Any]:
    db = folder / "offload.db"  # written by offload_row: one output of ``size`` bytes
    code = textwrap.dedent(f"""
        import json, resource, time
        from dashboard import data
        from dashboard.data import blob_pages
        from engine.store import SessionStore
        with SessionStore({str(db)!r}, read_only=True) as store:
            (session,) = store.list_sessions()
            ref = store.list_blobs(session.id)[0].ref_id
        con = data.connect([{str(db)!r}])
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        t0 = time.perf_counter()
        reader = blob_pages.open_blob(con, "offload", ref)
        reader.page(1); reader.page(reader.pages // 2); reader.page(reader.pages)
        hits = reader.search("worker-3", limit=50)
        growth = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        print(json.dumps({{"growth": growth, "s": time.perf_counter() - t0, "size": reader.size}}))
    """)
    figures, _, _ = python_peak(code)
    return [
        f"dashboard: open a {figures['size'] // MB} MB output (3 pages + search): peak growth",
        "MB",
        round(figures["growth"] / MB),
        figures["size"] // MB,
        "the output's size",
        round(figures["growth"] / figures["size"], 2),
        "paged, never whole",
        round(figures["s"], 1),
    ]


def run_turn_row(size: int, folder: Path, *, seed_calls: bool = False) -> list[Any]:
    """With ``seed_calls`` the stored history's replies have their request events and cost rows."""
    from bench.bench_run_turn import QUICK_TURNS, measure
    from bench.corpus import generate_history

    r = measure(size, generate_history(size), QUICK_TURNS * 2, folder, seed_calls=seed_calls)
    overhead = (r["turn_s"] - r["guard_s"]) * 1000
    calls = f" + {r['calls']:,} priced calls" if seed_calls else ""
    return [
        f"run_turn at {size:,} messages{calls} (instant client, median): overhead {overhead:.1f} ms "
        f"({(r['best_s'] - r['guard_s']) * 1000:.1f} ms best, {(r['cpu_s'] - r['guard_s']) * 1000:.1f} ms CPU)",
        "ms/turn",
        round(r["turn_s"] * 1000, 2),
        round(r["guard_s"] * 1000, 3),
        "the guard alone",
        round(r["turn_s"] / r["guard_s"], 1),
        "overhead <= 5 ms",
        round(r["turn_s"], 4),
    ]


def long_line_row(size: int, folder: Path) -> list[Any]:
    """``ctxdesk import`` of a Claude Code file whose one line is ``size`` bytes: refused at the per-line
    cap, in memory bounded by twice the cap (the file is sparse past its head: NUL bytes inside a string)."""
    from engine.importers.lines import MAX_LINE_BYTES

    path = folder / "one-long-line.jsonl"
    head = b'{"type": "user", "sessionId": "s", "uuid": "u", "message": {"role": "user", "content": "'
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size - 4)
        fh.seek(0, 2)
        fh.write(b'"}}\n')
    code, err, peak, seconds = cli_peak("import", str(path), "--db", str(folder / "long-line.db"))
    path.unlink()
    if code == 0 or "ctxdesk: error:" not in err:
        raise RuntimeError(f"the {size // MB:,} MB line was not refused: exit {code}, {err[-500:]}")
    return [
        f"import a {size // MB:,} MB single-line file: refused at the {MAX_LINE_BYTES // MB} MB per-line cap, peak",
        "MB",
        round(peak / MB),
        MAX_LINE_BYTES // MB,
        "the per-line cap",
        round(peak / MAX_LINE_BYTES, 2),
        "refused, <= 2x the cap",
        round(seconds, 1),
    ]


def claude_code_lines(path: Path, lines: int) -> None:
    """A Claude Code transcript of ``lines`` small lines: one session, user prompts and replies with usage."""
    parent = None
    with path.open("w", encoding="utf-8") as fh:
        for i in range(lines):
            reply = i % 2 == 1
            line = {
                "type": "assistant" if reply else "user", "sessionId": "s-lines", "uuid": f"u{i:08d}",
                "parentUuid": parent, "timestamp": f"2026-01-{1 + i // 86_400 % 28:02d}T"
                f"{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z", "cwd": "/repo",
                "version": "2.1.0", "isSidechain": False, "userType": "external",
                "message": {
                    "id": f"msg_{i}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                    "content": [{"type": "text", "text": f"done {i}"}], "stop_reason": "end_turn",
                    "usage": {"input_tokens": 10 + i % 5_000, "output_tokens": 3},
                } if reply else {"role": "user", "content": f"step {i}: run the check"},
            }  # fmt: skip
            fh.write(json.dumps(line) + "\n")
            parent = line["uuid"]


def many_lines_row(lines: int, folder: Path) -> list[Any]:
    """``ctxdesk import`` of ``lines`` small lines (#32.9: a million took more than 9 minutes)."""
    path = folder / "many-lines.jsonl"
    claude_code_lines(path, lines)
    code, err, peak, seconds = cli_peak("import", str(path), "--db", str(folder / "many-lines.db"))
    size = path.stat().st_size
    path.unlink()
    if code != 0:
        raise RuntimeError(f"import of {lines:,} lines failed: exit {code}, {err[-500:]}")
    return [
        f"import {lines:,} small lines ({size / MB:,.0f} MB, one Claude Code session; peak {peak / MB:,.0f} MB)",
        "s",
        round(seconds, 1),
        MILLION_LINES_TARGET_S,
        "target for a million lines",
        round(seconds / MILLION_LINES_TARGET_S * 1_000_000 / lines, 2),
        "<= 1 (scaled to a million)",
        round(seconds, 1),
    ]


def run(quick: bool = False) -> Table:
    sizes = QUICK if quick else SIZES
    table = Table(
        title="Reliability: memory and time on huge inputs (fresh processes, peak RSS of each)",
        columns=["measure", "unit", "ctxdesk", "baseline", "baseline is", "ratio", "target", "seconds"],
        baseline="each row's own: the input's size, a bare ctxdesk process, a small session, the target",
    )
    with tempfile.TemporaryDirectory(prefix="ctxdesk-bench-reliability-") as name:
        folder = Path(name)
        table.add(*offload_row(sizes["offload"], folder))
        table.add(*blob_row(sizes["offload"], folder))
        table.add(*reject_row(sizes["reject"], folder))
        table.add(*long_line_row(sizes["long_line"], folder))
        table.add(*many_lines_row(sizes["lines"], folder))
        big, small = folder / "big.db", folder / "small.db"
        session_id = make_session(big, sizes["messages"])
        make_session(small, sizes["small"])
        for row in report_rows(big, small, sizes["messages"], sizes["small"], folder):
            table.add(*row)
        table.add(*timeline_row(big, session_id, sizes["messages"]))
        table.add(*run_turn_row(sizes["turns"], folder))
    table.notes.append(
        "peak RSS of each child (its own VmHWM); the 1 GB file is sparse (its head is log text, the rest NUL bytes)"
    )
    return table


if __name__ == "__main__":
    from bench.report import render_table

    print(render_table(run(quick="--quick" in sys.argv)))
