"""Cache-aware policies (#17): cache-read share and input cost per session, beside the agent alone.

A scripted agent runs a tool session through the proxy's ``plan_edits``. It behaves as Claude Code
does on its own: every request re-sends its whole history, and once a request's prompt reaches its
auto-compact point (``ResolvedModelSettings.compact_tokens``: the effective window, window - max
output - buffer, x compact_threshold) it sends one summarizing request over that history and goes
on from a summary alone, a full rebuild of the prefix. That agent with no policy is the baseline;
each policy row is the same agent with the policy on (it compacts when what the model received
reaches the point, as Claude Code reads its usage). "unedited, no window" is the same requests
with no auto-compaction at all. A provider's prefix cache is modelled as the messages each request
shares with the previous one (Anthropic: a breakpoint on the last message, read only when the
request extends it; OpenAI: any shared prefix). ``python -m bench.bench_cache_policy [--quick]``.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any

from bench.report import Table, render_table

#: What the agent appends to its history to have it summarized (Claude Code sends one such request).
SUMMARIZE = "Summarize this conversation so far for a continuation: files read, findings, next steps."
#: Seconds between a scripted agent's calls, and of the idle pause (past any provider's cache lifetime).
CALL_S = 10.0
PAUSE_S = 2 * 60 * 60
#: Lines of the summary the agent continues from (about 1.5k tokens, a typical Claude Code summary).
SUMMARY_LINES = 60
#: How long the modelled provider keeps a prefix cached after its last use (engine.prompt.cache_policy).
CACHE_S = {True: 5 * 60, False: 60 * 60}  # Anthropic breakpoints / OpenAI's automatic cache
#: An interactive session: the agent works in turns of this many calls, and the person reads each
#: turn's outcome for one of these pauses (minutes) before the next prompt.
TURN_CALLS = (5, 15)
HUMAN_PAUSES_MIN = (1, 3, 7, 12, 25, 70)


def tool_rounds(rounds: int, *, seed: int, sizes: tuple[int, int]) -> list[list[dict[str, Any]]]:
    """The session's script: each round a tool call and its result, of a random number of lines."""
    rng = random.Random(seed)
    script = []
    for i in range(rounds):
        lines = rng.randint(*sizes)
        text = "\n".join(f"src/parser_{i}.py:{n}: value_{i}_{n} = compute({n}, {i})" for n in range(lines))
        script.append([
            {"role": "assistant", "content": [{"type": "tool_use", "id": f"t{i}", "name": "Read", "input": {"n": i}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": f"t{i}", "content": text}]},
        ])  # fmt: skip
    return script


def human_pauses(rounds: int, *, seed: int) -> dict[int, float]:
    """An interactive session's pauses: round index -> seconds the session idled before it (a person
    reading the last turn's outcome), between turns of ``TURN_CALLS`` calls."""
    rng = random.Random(seed)
    pauses, index = {}, rng.randint(*TURN_CALLS)
    while index < rounds:
        pauses[index] = 60.0 * rng.choice(HUMAN_PAUSES_MIN)
        index += rng.randint(*TURN_CALLS)
    return pauses


def summary_message(index: int) -> dict[str, Any]:
    """The agent's history after its ``index``-th auto-compaction starts with this one message."""
    lines = "\n".join(f"- src/parser_{n}.py: read; value_{n} computed, checked" for n in range(SUMMARY_LINES))
    return {"role": "user", "content": f"Summary {index} of the conversation so far:\n{lines}"}


def with_breakpoint(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages with a cache_control breakpoint on the last block, as Claude Code sends them."""
    last = messages[-1]
    blocks = (
        last["content"] if isinstance(last["content"], list) else [{"type": "text", "text": last["content"]}]
    )
    marked = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
    return [*messages[:-1], {**last, "content": [*blocks[:-1], marked]}]


def unmarked(value: Any) -> Any:
    """A message without cache_control markers: they are not part of what a cache matches."""
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def shared_prefix(previous: list[str] | None, texts: list[str]) -> int:
    """Messages a request shares with the previous one from the start: what a prefix cache reads."""
    shared = 0
    while (
        previous is not None and shared < min(len(previous), len(texts)) and previous[shared] == texts[shared]
    ):
        shared += 1
    return shared


@dataclass
class Sent:
    """One request as the model received it: its messages' bytes (markers aside), and why it was sent."""

    texts: list[str]
    edited: bool  # the policy made a new edit in this request
    compaction: bool  # the agent's own summarizing request
    after_compaction: bool  # the first request from the agent's new summary prefix
    round: int = 0  # the script's round that sent it
    rebuilt: int = 0  # tokens written to the cache again: sent before, not read now


@dataclass
class Replay:
    total: int = 0  # prompt tokens sent (messages)
    cached: int = 0  # of which read from the cache
    new: int = 0  # appended since the previous request (beyond its messages): never cached
    edits: int = 0  # requests where the policy made a new edit
    compactions: int = 0  # the agent's own auto-compactions
    requests: list[Sent] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.cached / self.total if self.total else 1.0

    @property
    def resent_share(self) -> float:
        """Of the tokens sent again (all but the newly appended), the share read from the cache."""
        resent = self.total - self.new
        return self.cached / resent if resent else 1.0

    def cost(self, read: float, write: float) -> float:
        """Input cost in uncached-input tokens: what is not read is written to the cache."""
        return (self.total - self.cached) * write + self.cached * read


def replay(
    script: list[list[dict[str, Any]]],
    policies: Any,
    *,
    model: str,
    breakpoints: bool,
    compact_at: int | None,
    pause_before: int | None = None,
    watch_expiry: bool = True,
    pauses: dict[int, float] | None = None,
) -> Replay:
    """The scripted agent's requests through ``plan_edits`` (``policies`` None: forwarded as sent).

    ``compact_at``: the agent's auto-compact point in prompt tokens (None: it never compacts).
    ``pause_before``: the session idles ``PAUSE_S`` before that round (its calls are otherwise
    ``CALL_S`` apart), long enough for the provider's cache to expire: that request reads nothing.
    ``pauses``: more such idle times (round index -> seconds); the cache expires in those longer than
    ``CACHE_S``.
    ``watch_expiry`` False: the policies are not told the time (as before cache expiry was weighed).
    ``breakpoints`` (Anthropic): the cache holds the previous request at its last-message
    breakpoint and is read only when this request extends it unchanged; otherwise (OpenAI) any
    shared message prefix is read."""
    from engine.proxy.policy.policies import SessionPolicyState, plan_edits
    from engine.proxy.recording.record_parts import is_new_edit
    from engine.settings import resolve_model_settings
    from engine.tokens import get_tokenizer

    tokenizer = get_tokenizer("anthropic")
    resolved = resolve_model_settings(model, "anthropic" if breakpoints else "openai")
    state, out, counts = SessionPolicyState(), Replay(), {}
    previous: list[str] | None = None  # what the provider's cache holds (None: nothing)
    sent_before = 0  # messages the previous request sent
    round_index = 0
    clock = 0.0
    idle = dict(pauses or {})
    if pause_before is not None:
        idle[pause_before] = PAUSE_S

    def send(messages: list[dict[str, Any]], *, compaction: bool = False, after: bool = False) -> int:
        nonlocal previous, sent_before
        body = {"model": model, "max_tokens": 4096, "system": "You are a coding agent.",
                "messages": with_breakpoint(messages) if breakpoints else messages}  # fmt: skip
        edited = False
        if policies is not None:
            outcome = plan_edits("anthropic_messages", body, policies, tokenizer=tokenizer, resolved=resolved,
                                 state=state, now=clock if watch_expiry else None)  # fmt: skip
            edited = any(is_new_edit(e) for e in outcome.edits)  # not an earlier edit sent again
            body = outcome.body or body
        texts = [json.dumps(unmarked(m), ensure_ascii=False) for m in body["messages"]]
        tokens = [counts.get(t) or counts.setdefault(t, tokenizer.count(t)) for t in texts]
        shared = shared_prefix(previous, texts)
        if breakpoints and previous is not None and shared < len(previous):
            shared = 0
        appended = sum(tokens[sent_before:])
        out.total += sum(tokens)
        out.cached += sum(tokens[:shared])
        out.new += appended
        out.edits += edited
        rebuilt = sum(tokens) - sum(tokens[:shared]) - appended
        out.requests.append(Sent(texts, edited, compaction, after, round_index, rebuilt))
        previous, sent_before = texts, len(texts)
        return sum(tokens)

    history: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing parser test."}]
    after = False
    for index, pair in enumerate(script):
        round_index = index
        history = [*history, *pair]
        clock += idle.get(index, CALL_S)
        if idle.get(index, 0.0) > CACHE_S[breakpoints]:
            previous = None  # the cache expired while the session idled
        prompt = send(history, after=after)
        after = False
        if compact_at is not None and prompt >= compact_at and index < len(script) - 1:
            send([*history, {"role": "user", "content": SUMMARIZE}], compaction=True)
            out.compactions += 1
            history, after = [summary_message(out.compactions)], True
    return out


def policy_rows() -> list[tuple[str, Any]]:
    """The rows after the baselines: name and the proxy's Policies."""
    from engine.policy_settings import ClearToolResultsPolicy, CompactionPolicy, OffloadPolicy, Policies

    def clear(**knobs: Any) -> Any:
        return Policies(clear_tool_results=ClearToolResultsPolicy(**knobs))

    return [
        ("clear: trigger 20k, keep 2 (eager)", clear(trigger=20_000, keep=2)),
        ("clear: trigger 20k, keep 2, clear_at_least 15k", clear(trigger=20_000, keep=2, clear_at_least=15_000)),
        ("clear: trigger 20k, keep 2, cache_aware", clear(trigger=20_000, keep=2, cache_aware=True)),
        ("clear: trigger 10k, keep 2, cache_aware", clear(trigger=10_000, keep=2, cache_aware=True)),
        ("clear: trigger 20k, keep 2, cache_aware strict", clear(trigger=20_000, keep=2, cache_aware="strict")),
        ("offload: threshold_bytes 4000", Policies(offload=OffloadPolicy(threshold_bytes=4_000))),
        ("compaction: chain, trigger 0.6", Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.6))),
        ("compaction: chain, trigger 0.6, cache_aware",
         Policies(compaction=CompactionPolicy(strategy="chain", trigger=0.6, cache_aware=True))),
    ]  # fmt: skip


#: (cache, breakpoints, model whose window the session stays inside, model whose window it reaches)
CACHES = [
    ("Anthropic breakpoints", True, "claude-sonnet-4-6", "claude-sonnet-4-5"),
    ("OpenAI automatic prefix cache", False, "gpt-5", "gpt-4o"),
]
COLUMNS = [
    "policy",
    "agent compactions",
    "policy edits",
    "prompt tokens sent",
    "cache-read share",
    "share vs agent alone",
    "re-sent tokens read from cache",
    "rebuilt tokens",
    "input cost vs agent alone",
]
SESSIONS = {"30": (30, (20, 40)), "80": (80, (5, 160))}
#: The interactive session: the 80-call script in turns with a person's pauses between them.
INTERACTIVE = "80"
INTERACTIVE_SEED = 23
#: The round before which the paused session idles.
PAUSE_AT = 39


def compact_point(model: str, breakpoints: bool) -> int:
    from engine.settings import resolve_model_settings

    return resolve_model_settings(model, "anthropic" if breakpoints else "openai").compact_tokens


def session_table(
    cache: str, breakpoints: bool, model: str, session: str, pause_before: int | None,
    pauses: dict[int, float] | None = None,
) -> Table:  # fmt: skip
    """Every row's replay of one scripted session on one model's cache and window (``pauses``: the
    interactive session's idle times)."""
    from engine.cost import prices_for

    rounds, sizes = SESSIONS[session]
    script = tool_rounds(rounds, seed=17, sizes=sizes)
    point = compact_point(model, breakpoints)
    prices = prices_for(model)
    read = prices.cache_read / prices.input if prices else 0.1
    write = prices.cache_write_5m / prices.input if prices and prices.cache_write_5m else 1.0

    def run_one(policies: Any, compact_at: int | None, watch_expiry: bool = True) -> Replay:
        return replay(script, policies, model=model, breakpoints=breakpoints, compact_at=compact_at,
                      pause_before=pause_before, watch_expiry=watch_expiry, pauses=pauses)  # fmt: skip

    unedited, alone = run_one(None, None), run_one(None, point)
    where = "reaches" if alone.compactions else "stays inside"
    paused = f", idle {PAUSE_S / 3600:g} h before call {pause_before + 1}" if pause_before is not None else ""
    if pauses:
        paused = (f", in turns of {TURN_CALLS[0]}-{TURN_CALLS[1]} calls with a person's pauses of "
                  f"{', '.join(f'{p / 60:g}' for p in pauses.values())} min between them")  # fmt: skip
    table = Table(
        f"Cache-aware policies, {cache} ({model}): {rounds} calls{paused}, {where} the window "
        f"(auto-compact at {point:,} prompt tokens)",
        COLUMNS,
        baseline="the agent alone: the same session, no policy, compacting itself at its own point",
    )
    base = alone.cost(read, write)
    rows = [("unedited, no window (never compacts)", unedited), ("agent alone (baseline)", alone)]
    rows += [(n, run_one(p, point)) for n, p in policy_rows()]
    if pause_before is not None or pauses:  # what knowing that the cache expired saves
        name, aware = next((n, p) for n, p in policy_rows() if n.endswith("cache_aware"))
        rows.append((f"{name}, cache expiry not weighed", run_one(aware, point, watch_expiry=False)))
    for name, m in rows:
        table.add(
            name, m.compactions, m.edits, m.total, round(m.share, 3), round(m.share - alone.share, 3),
            round(m.resent_share, 3), m.total - m.cached - m.new, round(m.cost(read, write) / base, 3),
        )  # fmt: skip
    table.notes.append(
        f"Prices of {model} as ratios to uncached input: cache read x{read:.2f}, write x{write:.2f}; "
        "rebuilt tokens: uncached tokens beyond the newly appended ones (the agent's own compaction, "
        "a cache expired in a pause and every policy edit rebuild the prefix after them); re-sent tokens "
        "read from cache: cached / (prompt - newly appended), the cache-read share of what was sent before."
    )
    return table


def run(quick: bool = False) -> list[Table]:
    runs = [("30", 0)] if quick else [("30", 0), ("80", 0), ("80", 1)]  # (session, 0 inside / 1 reaching)
    tables = [
        session_table(cache, breakpoints, models[reach], session, None)
        for cache, breakpoints, *models in CACHES
        for session, reach in runs
    ]
    if not quick:  # the session idles once, long enough for its cache to expire
        tables += [
            session_table(cache, breakpoints, models[0], "80", PAUSE_AT)
            for cache, breakpoints, *models in CACHES
        ]
        # a person's pauses between turns: the Anthropic cache's 5 minutes expire in the longer ones
        cache, breakpoints, *models = CACHES[0]
        pauses = human_pauses(SESSIONS[INTERACTIVE][0], seed=INTERACTIVE_SEED)
        tables += [session_table(cache, breakpoints, m, INTERACTIVE, None, pauses) for m in models]
    tables[-1].notes.append(
        "cache-read share = cached / prompt tokens. Inside the window the agent alone sends everything "
        "unedited, and a policy that removes tokens lowers the share even with no rebuild (the newly "
        "appended output is uncached either way and the prompt it is divided by shrinks); a policy that "
        "never edits keeps the baseline's share. Reaching the window, the agent's own compaction rebuilds "
        "its whole prefix from a summary; a policy that keeps the prompt under the point avoids it. "
        "The agent's summarizing request is modelled as reusing its system prompt and tools (a cache read); "
        "with its own system prompt it would miss once more (~the point's tokens). The proxy's trigger and "
        "must-clear tests (engine.proxy.policy.policies) count the prompt as sent, earlier clearings included. "
        "Idle past the provider's cache lifetime (Anthropic 5 min, or 1 h with ttl 1h; OpenAI taken as 1 h), "
        "a request reads nothing from the cache: cache_aware then clears whatever is over the trigger, as "
        "the rebuild costs nothing extra (the row 'cache expiry not weighed' is the same policy without it). "
        'cache_aware "strict" clears only then (or when the window forces it): it never rewrites a '
        "prefix the provider still holds, so no request rebuilds more than the agent alone's and the "
        "re-sent tokens read from cache are at least the agent's; without pauses past the cache it "
        "sends what the agent sends."
    )
    return tables


if __name__ == "__main__":
    for t in run(quick="--quick" in sys.argv):
        print(render_table(t))
