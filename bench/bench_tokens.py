"""Token counting: ctxdesk against raw tiktoken on the same text, and the heuristics' error.

Throughput: a batch of messages per kind of content, counted by plain tiktoken (the baseline),
by ctxdesk cold (empty cache: hash, encode, store), warm (cache hit on the same objects) and
reloaded (cache hit on new objects with the same content, as after reading the store).
Error: each heuristic's count of the same texts against the exact o200k_base count.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from bench.common import EXACT_ID, fresh_copies, fresh_tokenizer, raw_counter
from bench.corpus import KINDS, sample_texts
from bench.report import Table, ms, ratio, timed
from engine.messages import Message
from engine.tokens import ANTHROPIC_ESTIMATOR, HEURISTICS, MESSAGE_OVERHEAD_TOKENS, get_tokenizer

TEXTS = 200
QUICK_TEXTS = 20
TEXT_CHARS = 2_000
REPEAT = 5
QUICK_REPEAT = 2


def _best_time(setup: Callable[[], object], run: Callable[[object], object], repeat: int) -> float:
    """Best time of ``run(setup())`` over ``repeat`` runs, the setup left out of the clock."""
    times = []
    for _ in range(repeat):
        state = setup()
        t0 = time.perf_counter()
        run(state)
        times.append(time.perf_counter() - t0)
    return min(times)


def batches(quick: bool, *, seed: int) -> list[tuple[str, list[str]]]:
    """(kind, texts) for each kind of content, then ("all", every text)."""
    out = [(k, sample_texts(k, QUICK_TEXTS if quick else TEXTS, seed=seed, chars=TEXT_CHARS)) for k in KINDS]
    return [*out, ("all", [t for _, texts in out for t in texts])]


def throughput(quick: bool = False) -> Table:
    count = raw_counter(EXACT_ID)
    repeat = QUICK_REPEAT if quick else REPEAT
    table = Table(
        title="Token counting: ctxdesk against raw tiktoken (ms per batch, best of runs)",
        columns=[
            "content",
            "messages",
            "tokens",
            "raw tiktoken (baseline)",
            "raw MB/s",
            "ctxdesk cold",
            "cold ÷ raw",
            "ctxdesk warm",
            "warm ÷ raw",
            "warm, reloaded objects",
            "reloaded ÷ raw",
        ],
        baseline=f"len(encoding.encode_ordinary(text)) with tiktoken {EXACT_ID}, same texts, this run.",
    )
    for kind, texts in batches(quick, seed=0):
        messages = [Message(role="user", content=t) for t in texts]
        size_mb = sum(len(t.encode("utf-8")) for t in texts) / 1e6
        raw_s = timed(lambda texts=texts: [count(t) for t in texts], repeat=repeat)

        def cold_run(state: object) -> None:
            tokenizer, batch = state
            for m in batch:
                tokenizer.count_message(m)

        cold_s = _best_time(
            lambda messages=messages: (fresh_tokenizer(EXACT_ID), fresh_copies(messages)), cold_run, repeat
        )
        warm_tokenizer = fresh_tokenizer(EXACT_ID)
        tokens = sum(warm_tokenizer.count_message(m) for m in messages)
        warm_s = timed(lambda m=messages, t=warm_tokenizer: [t.count_message(x) for x in m], repeat=repeat)
        reloaded_s = _best_time(
            lambda messages=messages, t=warm_tokenizer: (t, fresh_copies(messages)), cold_run, repeat
        )
        if tokens != sum(count(t) + MESSAGE_OVERHEAD_TOKENS for t in texts):
            raise AssertionError(f"{kind}: ctxdesk's count differs from tiktoken's plus framing")
        table.add(
            kind,
            len(messages),
            tokens,
            ms(raw_s),
            size_mb / raw_s,
            ms(cold_s),
            ratio(cold_s, raw_s),
            ms(warm_s),
            ratio(warm_s, raw_s),
            ms(reloaded_s),
            ratio(reloaded_s, raw_s),
        )
    table.notes += [
        "Cold: a new Tokenizer (empty cache) and new message objects: content hash, encode, cache store.",
        "Warm: the same objects again (cache hit). Reloaded: new objects with the same content, as "
        "messages read back from the store (the content hash is recomputed, the count is not).",
        f"Counts are checked equal to tiktoken's plus {MESSAGE_OVERHEAD_TOKENS} tokens of framing per message.",
    ]
    return table


def heuristic_error(quick: bool = False) -> Table:
    exact = raw_counter(EXACT_ID)
    estimators = {name: get_tokenizer(name) for name in (*HEURISTICS, ANTHROPIC_ESTIMATOR, "cl100k_base")}
    table = Table(
        title=f"Heuristic error against the exact {EXACT_ID} count (% of exact)",
        columns=[
            "content",
            f"{EXACT_ID} tokens",
            *(f"{name} %" for name in estimators),
            *(f"{name} mean abs %" for name in estimators),
        ],
        baseline=f"tiktoken {EXACT_ID} on the same texts. Signed: error of the batch total; mean abs: "
        "mean of each text's absolute error.",
    )
    for kind, texts in batches(quick, seed=1):
        truth = [exact(t) for t in texts]
        total = sum(truth)
        signed, mean_abs = [], []
        for tokenizer in estimators.values():
            estimates = [tokenizer.count(t) for t in texts]
            signed.append((sum(estimates) - total) * 100 / total)
            mean_abs.append(
                statistics.fmean(abs(e - x) * 100 / x for e, x in zip(estimates, truth, strict=True))
            )
        table.add(kind, total, *signed, *mean_abs)
    table.notes += [
        "chars/4 and runes*2/5 count Unicode code points (Python len).",
        "anthropic = cl100k_base x 1.17, calibrated on Claude's own counts: it aims at Claude's tokenizer, "
        "so it reads high against o200k_base by design; its error against provider counts is in the "
        "accuracy table.",
        "cl100k_base is exact for GPT-4-era models; shown for how far two exact encodings differ.",
    ]
    return table


def run(quick: bool = False) -> list[Table]:
    return [throughput(quick), heuristic_error(quick)]
