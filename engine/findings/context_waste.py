"""Detectors of waste in the context itself: an uncached prefix, stale thinking, ineffective
compactions, constraints a summary lost."""

from __future__ import annotations

import itertools

from engine.compaction.constraints import constraint_sentences, key_terms
from engine.compaction.constraints import words as _words
from engine.findings.view import (
    CONSTRAINT_KEPT_SHARE,
    INEFFECTIVE_COMPACTION_RATIO,
    MIN_CACHE_REQUESTS,
    MIN_CACHEABLE_PREFIX,
    MIN_FINDING_TOKENS,
    Finding,
    SessionView,
)
from engine.messages import (
    ThinkingBlock,
    is_user_input,
)
from engine.sent import compaction_removals

#: How Anthropic's API drops earlier turns' thinking server-side (named in the fix only for Anthropic sessions).
ANTHROPIC_THINKING_EDIT = (
    ' (context_management edit clear_thinking_20251015, keep={"type": "thinking_turns", "value": 1})'
)


def speaks_anthropic(view: SessionView) -> bool:
    """Whether the session's provider takes Anthropic's parameters (the fixes name them only then)."""
    return (view.session.provider or "") == "anthropic" or "claude" in (view.session.model or "")


def find_uncached_prefix(view: SessionView) -> list[Finding]:
    """A large prompt prefix re-sent at full price on every request because nothing was cached.

    Between compactions a request's prompt starts with the previous request's whole prompt, so
    ``min(previous, this)`` of it could have been a cache read. Under the provider's cache
    pricing, each request would read that prefix and write the rest for the next one.
    """
    used = [r for r in view.requests if r.usage is not None and r.usage.prompt_tokens > 0]
    if len(used) < MIN_CACHE_REQUESTS or any(r.usage and r.usage.cache_read_input_tokens for r in used):
        return []
    stable = [0] + [
        min(a.usage.prompt_tokens, b.usage.prompt_tokens)  # type: ignore[union-attr]
        for a, b in itertools.pairwise(used)
    ]
    reusable = sum(stable)
    if reusable < MIN_CACHEABLE_PREFIX * (len(used) - 1):
        return []
    average = reusable // (len(used) - 1)
    money: float | None = None
    detail = f"{len(used)} requests, none read from the prompt cache; {reusable:,} prompt tokens repeated a prefix the previous request had sent."
    prices = view.prices
    if prices is not None and prices.cache_read is not None and prices.cache_write is not None:
        actual = sum(prices.prompt_cost(r.usage) for r in used)  # type: ignore[arg-type]

        def cached_cost(write: float) -> float:
            return sum(
                s * prices.cache_read + (r.usage.prompt_tokens - s) * write  # type: ignore[union-attr,operator]
                for r, s in zip(used, stable, strict=True)
            )

        money = round(max(0.0, actual - cached_cost(prices.cache_write)), 6)
        saved_1h = max(0.0, actual - cached_cost(prices.cache_write_1h or prices.cache_write))
        detail += f" Caching would have cost ${actual - money:,.4f} instead of ${actual:,.4f} (1-hour writes: saves ${saved_1h:,.4f})."
    anthropic = speaks_anthropic(view)
    return [
        view.finding(
            "uncached_prefix",
            title=f"No prompt caching over {len(used)} requests with a ~{average:,}-token stable prefix",
            detail=detail,
            seqs=(),
            turn_index=used[1].turn_index,
            per_request=[(r, s) for r, s in zip(used, stable, strict=True) if s],
            fix=(
                "add a cache breakpoint after the system prompt and tools, and one on the last message "
                '(cache_control: {"type": "ephemeral"})'
                if anthropic
                else "enable prompt caching (keep the prefix byte-identical between requests)"
            ),
            exact=True,
            tokenizer="provider",
            money=money,
        )
    ]


def find_stale_thinking(view: SessionView) -> list[Finding]:
    """Thinking blocks of earlier turns still re-sent with later requests."""
    thinking = {
        m.seq: (m.turn_index, sum(view.tokenizer.count_block(b) for b in m.message.blocks if isinstance(b, ThinkingBlock)))
        for m in view.messages
        if m.message.role == "assistant" and any(isinstance(b, ThinkingBlock) for b in m.message.blocks)
    }  # fmt: skip
    per_request = []
    seqs: set[int] = set()
    for r in view.requests:
        if not r.thinking_billed:
            continue
        stale = [seq for seq, (turn, _) in thinking.items() if turn < r.turn_index and r.sends(seq)]
        if stale:
            per_request.append((r, sum(thinking[s][1] for s in stale)))
            seqs.update(stale)
    # A few re-sent tokens of thinking are not worth a finding (a 12-token thought was shown as waste).
    if not per_request or max(t for _, t in per_request) < MIN_FINDING_TOKENS:
        return []
    anthropic = speaks_anthropic(view)
    return [
        view.finding(
            "stale_thinking",
            title=f"Thinking blocks of earlier turns re-sent ({max(t for _, t in per_request):,} tokens at most)",
            detail=f"{len(seqs)} assistant message(s) kept their thinking after their turn ended; "
            f"{len(per_request)} later request(s) re-sent it.",
            seqs=seqs,
            turn_index=per_request[0][0].turn_index,
            per_request=per_request,
            fix="drop thinking blocks of finished turns before sending"
            + (ANTHROPIC_THINKING_EDIT if anthropic else ""),
        )
    ]


def find_ineffective_compactions(view: SessionView) -> list[Finding]:
    """Compactions that ran and kept more than 90% of what they were given."""
    findings = []
    for event in view.events:
        d = event.details
        before, after = d.get("before_tokens"), d.get("after_tokens")
        if event.kind != "compaction" or event.outcome != "compacted":
            continue
        if not isinstance(before, int) or not isinstance(after, int) or before <= 0:
            continue
        if after / before <= INEFFECTIVE_COMPACTION_RATIO:
            continue
        target = d.get("target_tokens") if isinstance(d.get("target_tokens"), int) else event.limit_tokens
        shortfall = max(0, after - target) if isinstance(target, int) else 0
        later = [r for r in view.requests if r.event_seq > event.seq]
        per_request = [(r, shortfall) for r in later] if shortfall else []
        ran = [str(s) for s in d.get("strategies_run") or []]
        agents = d.get("by") in ("agent", "user")  # the agent's own compaction, not ctxdesk's
        fix = (
            "the agent's own compaction: its settings decide when and how it compacts (ctxdesk proxy's "
            "compaction policy can compact earlier, with a target)"
            if agents
            else 'strategy = "chain" (clear_tool_results, then summarize, then truncate until the target is met)'
            if "summarize" not in ran
            else "summarize keep_recent_turns=1 (fold more turns into the summary)"
        )
        turn = event.turn_index if event.turn_index is not None else 0
        whose = "The agent's compaction" if agents else "Compaction"
        effect = (
            f"freed only {100 * (before - after) / before:.1f}%"
            if after < before
            else "did not shrink the prompt"
        )
        findings.append(
            view.finding(
                "ineffective_compaction",
                title=f"{whose} at turn {turn} {effect} ({before:,} → {after:,} tokens)",
                detail=(
                    f"Strategies run: {', '.join(ran) or 'unknown'}; target {target if target is not None else 'unknown'}"
                    f"{f' tokens, missed by {shortfall:,}' if shortfall else ''}. "
                    if not agents
                    else "Tokens after: the first prompt sent after it. "
                )
                + "A compaction that frees little still rewrites the prompt prefix (the cache is invalidated) "
                "and will trigger again soon.",
                seqs=compaction_removals(d)[0],
                turn_index=turn,
                per_request=per_request,
                fix=fix,
            )
        )
    return findings


def find_lost_constraints(view: SessionView) -> list[Finding]:
    """Constraints a user stated (or a pinned message held) that a compaction's summary dropped.

    A constraint is a sentence with one of ``engine.compaction.constraints.CONSTRAINT_PHRASES``
    (the phrases the offline summarizer keeps too); it is lost when
    fewer than half of its key terms appear in the summary plus the messages the compaction kept.
    """
    by_seq = {m.seq: m for m in view.messages}
    reported: set[tuple[int, str]] = set()
    findings = []
    for event in view.events:
        if event.kind != "compaction" or event.outcome != "compacted":
            continue
        d = event.details
        removed = compaction_removals(d)[0]
        if not removed:
            continue
        snapshot = view.snapshots.get(d.get("snapshot_id")) if isinstance(d.get("snapshot_id"), int) else None
        summary = (snapshot.summary if snapshot else None) or d.get("summary") or ""
        kept = (
            [m.text for m in snapshot.messages]
            if snapshot
            else [m.message.text for m in view.messages if m.seq not in removed and m.seq <= max(removed)]
        )
        surviving = _words("\n".join([str(summary), *kept]))
        for seq in sorted(removed):
            row = by_seq.get(seq)
            if row is None or not (row.message.pinned or is_user_input(row.message)):
                continue
            lost = []
            for sentence in constraint_sentences(row.message.text, user=row.message.role == "user"):
                terms = key_terms(sentence)
                if (
                    len(terms) >= 2
                    and len(terms & surviving) < CONSTRAINT_KEPT_SHARE * len(terms)
                    and (seq, sentence) not in reported
                ):
                    reported.add((seq, sentence))
                    lost.append((sentence, sorted(terms - surviving)))
            if not lost:
                continue
            quoted = lost[0][0] if len(lost[0][0]) <= 90 else lost[0][0][:89] + "…"
            tokens = sum(view.tokenizer.count(s) for s, _ in lost)
            findings.append(
                Finding(
                    kind="lost_constraint", session_id=view.session_id,
                    title=f"Compaction at turn {event.turn_index or 0} lost a constraint: “{quoted}”",
                    detail="; ".join(f"“{s}” (missing: {', '.join(m)})" for s, m in lost)
                    + f" — from {'pinned' if row.message.pinned else 'user'} message {seq}, absent from the "
                    "summary and the kept messages.",
                    message_seqs=(seq,), turn_index=event.turn_index or row.turn_index, tokens=0,
                    context_tokens=tokens, requests=0, money=None,
                    fix=f"pin message {seq} (pinned=True) so every compaction keeps it, or name the constraint "
                    "in the compaction instructions",
                    exact=view.tokenizer.exact, tokenizer=view.tokenizer.id,
                )
            )  # fmt: skip
    return findings
