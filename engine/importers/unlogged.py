"""What every call of a session sent that its file does not keep (``ParsedSession.unlogged_prefix_in``:
Codex's tool definitions, Gemini CLI's system instruction and tools, Copilot CLI's tools), measured
from the provider's counts: at the first counted call of each context segment, a call with its own
framing apart, or, from a source that keeps only each run's totals, shared among the run's calls.
Each measure is a call's (``CallMeasure``: ``usage``, ``estimate``, ``segment``, ``own_framing``,
``unlogged_tokens``, engine.importers.request_events)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def unlogged_prefixes(measures: Sequence[Any]) -> dict[int, int]:
    """{segment: the provider's count minus our measure at its first call with usage, one with its own
    framing left aside}; a segment with no such call takes the last one measured before it (an estimate:
    nothing better is known)."""
    out: dict[int, int] = {}
    for m in measures:
        unlogged = m.unlogged_tokens
        if m.segment not in out and not m.own_framing and unlogged is not None:
            out[m.segment] = unlogged
    last = None
    for segment in range(max((m.segment for m in measures), default=-1) + 1):
        if segment in out:
            last = out[segment]
        elif last is not None:
            out[segment] = last
    return out


def run_total_prefixes(measures: Sequence[Any], runs: Any) -> dict[int, int]:
    """{call index: its share of what its run's provider total (``provider_run_totals``: a source that
    keeps no call's usage but each run's, in order, ``requests`` calls and ``inputTokens`` the whole
    prompts) leaves over our measure of the run's calls}: so their sum is the provider's. Nothing when
    a call has usage of its own, the runs do not count exactly these calls, or a total falls short."""
    if not isinstance(runs, list) or not measures or any(m.usage is not None for m in measures):
        return {}
    totals: dict[Any, list[int]] = {}  # run -> [calls, prompt tokens], its models together
    for r in runs:
        if not isinstance(r, dict) or not isinstance(r.get("requests"), int) or r["requests"] <= 0:
            return {}
        total = totals.setdefault(r.get("run"), [0, 0])
        total[0] += r["requests"]
        total[1] += int(r.get("inputTokens") or 0)
    if sum(n for n, _ in totals.values()) != len(measures):
        return {}
    out: dict[int, int] = {}
    start = 0
    for n, prompts in totals.values():
        left = prompts - sum(m.estimate for m in measures[start : start + n])
        if left < 0:
            return {}
        share, extra = divmod(left, n)
        out |= {start + k: share + (k < extra) for k in range(n)}
        start += n
    return out


def own_prefixes(measures: Sequence[Any]) -> dict[int, int]:
    """{index of a call with its own framing and usage: the provider's count minus our measure}."""
    return {
        i: m.unlogged_tokens
        for i, m in enumerate(measures)
        if m.own_framing and m.unlogged_tokens is not None
    }


__all__ = ["own_prefixes", "run_total_prefixes", "unlogged_prefixes"]
