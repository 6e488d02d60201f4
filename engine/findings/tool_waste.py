"""Detectors of waste in tool use: repeated reads, stale and unused results, unused tool offers."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

from engine.compaction.tool_calls import describe_call
from engine.findings.calls import ENGINE_TOOL_NAMES, ToolCall, file_uses, later_use, tool_calls
from engine.findings.terms import _examples, _power_of_two_below, message_terms, text_terms
from engine.findings.view import MIN_DISTINCTIVE_TERMS, MIN_FINDING_TOKENS, Finding, SessionView
from engine.messages import (
    ToolUseBlock,
)

# -- detectors ----------------------------------------------------------------------------------------


def find_repeated_reads(view: SessionView, calls: Sequence[ToolCall] | None = None) -> list[Finding]:
    """The same output read again: every copy after the first is re-sent for nothing."""
    calls = tool_calls(view) if calls is None else calls
    groups: dict[str, list[ToolCall]] = {}
    for call in calls:
        if call.tokens >= MIN_FINDING_TOKENS and not call.is_mutating and call.text.strip():
            groups.setdefault(call.digest, []).append(call)
    findings = []
    for group in groups.values():
        if len(group) < 2:
            continue
        first, repeats = group[0], group[1:]
        per_request = [(r, sum(c.tokens for c in repeats if r.sends(c.result_seq, result=True)))
                       for r in view.requests]  # fmt: skip
        per_request = [(r, t) for r, t in per_request if t]
        if not per_request:
            continue
        same = "same call" if len({c.key for c in group}) == 1 else "different calls"
        findings.append(
            view.finding(
                "repeated_read",
                title=f"{first.label} read {len(group)} times with identical output",
                detail=(
                    f"{len(group)} results with the same content ({same}; {first.tokens:,} tokens each) "
                    f"at seqs {', '.join(str(c.result_seq) for c in group)}; the copies after the first "
                    f"were re-sent with {len(per_request)} request(s)."
                ),
                seqs=[s for c in group for s in (c.use_seq, c.result_seq)],
                turn_index=repeats[0].turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (older copies become placeholders; the latest read stays)",
            )
        )
    return findings


def find_stale_results(view: SessionView, calls: Sequence[ToolCall] | None = None) -> list[Finding]:
    """An output superseded by a later read of the same thing that returned something else."""
    calls = tool_calls(view) if calls is None else calls
    first_of_digest: dict[str, ToolCall] = {}
    by_key: dict[str, list[ToolCall]] = {}
    for call in calls:
        first_of_digest.setdefault(call.digest, call)
        if not call.is_mutating:
            by_key.setdefault(call.key, []).append(call)
    findings = []
    for group in by_key.values():
        # Only first copies: later identical copies are already repeated_read findings.
        stale = [
            (old, new)
            for old, new in itertools.pairwise(group)
            if old.digest != new.digest
            and first_of_digest[old.digest] is old
            and old.tokens >= MIN_FINDING_TOKENS
        ]
        if not stale:
            continue
        per_request = []
        for r in view.requests:
            tokens = sum(
                old.tokens
                for old, new in stale
                if r.sends(old.result_seq, result=True) and r.sends(new.result_seq, result=True)
            )
            if tokens:
                per_request.append((r, tokens))
        if not per_request:
            continue
        label = group[0].label
        findings.append(
            view.finding(
                "stale_result",
                title=f"{label}: {len(stale)} earlier output(s) superseded by a later read",
                detail=(
                    "Outputs at seqs "
                    + ", ".join(f"{old.result_seq} ({old.tokens:,} tokens)" for old, _ in stale)
                    + f" stayed in the context after a later call of the same {'file read' if group[0].key.startswith('file:') else 'command'} "
                    f"returned different content (seqs {', '.join(str(new.result_seq) for _, new in stale)})."
                ),
                seqs=[s for old, new in stale for s in (old.use_seq, old.result_seq, new.result_seq)],
                turn_index=stale[0][1].turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (superseded outputs become placeholders)",
            )
        )
    return findings


def find_unused_results(
    view: SessionView, calls: Sequence[ToolCall] | None = None, *, threshold_bytes: int | None = None
) -> list[Finding]:
    """Oversized results none of whose own identifiers ever appear in a later assistant message.

    A result's identifiers are words that look like code or paths (underscores, digits, dots,
    slashes, inner capitals) and that no earlier message held. The first request after the
    result had to send it; every request after that re-sent it for nothing. A file's content
    that a later call uses (an Edit or Write of that file, its path in a command) was referred
    to again, whatever identifiers the later calls quote.
    """
    calls = tool_calls(view) if calls is None else calls
    threshold = view.offload_threshold_bytes if threshold_bytes is None else threshold_bytes
    first_seen: dict[str, int] = {}
    last_assistant: dict[str, int] = {}
    for row in view.messages:
        terms = message_terms(row.message)
        for term in terms:
            first_seen.setdefault(term, row.seq)
            if row.message.role == "assistant":
                last_assistant[term] = row.seq
    copies: dict[str, int] = {}
    for call in calls:
        copies[call.digest] = copies.get(call.digest, 0) + 1
    uses = file_uses(view.messages)
    findings = []
    for call in calls:
        # A result read more than once is a repeated_read finding; counting it here too would double it.
        if call.size_bytes <= threshold or call.is_error or copies[call.digest] > 1:
            continue
        if any(
            later_use(uses, path, call.result_seq) for path, _ in describe_call(call.name, call.input).files
        ):
            continue
        own = {t for t in text_terms(call.text) if first_seen.get(t) == call.result_seq}
        if len(own) < MIN_DISTINCTIVE_TERMS or any(last_assistant.get(t, -1) > call.result_seq for t in own):
            continue
        carriers = view.carriers(call.result_seq, result=True)
        per_request = [(r, call.tokens) for r in carriers[1:]]
        if not per_request:
            continue
        findings.append(
            view.finding(
                "unused_result",
                title=f"{call.tokens:,}-token result of {call.label} never referred to again",
                detail=(
                    f"{call.size_bytes:,} bytes of output; none of its {len(own):,} identifiers of its own "
                    f"(e.g. {', '.join(_examples(own))}) appear in a later "
                    f"assistant message or tool input, yet {len(per_request)} later request(s) re-sent it."
                ),
                seqs=(call.use_seq, call.result_seq),
                turn_index=call.turn_index,
                per_request=per_request,
                fix="clear_tool_results keep=3 (a read_result output is not offloaded again)"
                if call.name in ENGINE_TOOL_NAMES
                else f"result_offload_threshold = {_power_of_two_below(call.size_bytes)} "
                "(bytes: the output is stored, the context gets a preview and a read_result reference)",
            )
        )
    return findings


def find_unused_tools(view: SessionView) -> list[Finding]:
    """Tool definitions sent with requests and never called (ctxdesk's own tools left out:
    read_result, tool_search, compact_context and final_report are sent only when needed)."""
    called = {b.name for m in view.messages for b in m.message.blocks if isinstance(b, ToolUseBlock)}
    unused = [
        t for t in view.tools if t.tokens > 0 and t.name not in called and t.name not in ENGINE_TOOL_NAMES
    ]
    per_request = []
    for r in view.requests:
        if r.components is not None and r.components.tools == 0:
            continue
        # The session manager records which tools each request sent (deferred ones were not).
        sent = [t for t in unused if r.tools_sent is None or t.name in r.tools_sent]
        if sent:
            per_request.append((r, sum(t.tokens for t in sent)))
    if not per_request:
        return []
    unused = [
        t for t in unused if any(r.tools_sent is None or t.name in r.tools_sent for r, _ in per_request)
    ]
    tokens = sum(t.tokens for t in unused)
    names = ", ".join(t.name for t in sorted(unused, key=lambda t: (-t.tokens, t.name)))
    if all(t.category == "builtin" for t in unused):
        fix = "stop offering them (builtin tools are never deferred): remove them from the agent's tool list"
    elif view.settings is not None:
        # Deferral keeps definitions under this share of the budget, least recently used (never
        # called) first: the share of what was sent without the unused ones defers exactly those.
        sent_tokens = max((r.components.tools for r, _ in per_request if r.components), default=0)
        sent_tokens = sent_tokens or sum(t.tokens for t in view.tools)
        share = max(0, sent_tokens - tokens) / view.settings.budget_tokens
        fix = (
            f"tool_deferral_threshold = {max(0.001, math.floor(share * 1000) / 1000):g} "
            "(MCP and skill tools wait behind tool_search until asked for)"
        )
    else:
        fix = "defer them behind tool_search (lower tool_deferral_threshold), or stop offering them"
    return [
        view.finding(
            "unused_tools",
            title=f"{len(unused)} tool definition(s) sent with {len(per_request)} request(s) and never called",
            detail=f"{names}: {tokens:,} tokens of definitions, sent with {len(per_request)} request(s).",
            seqs=(),
            turn_index=per_request[0][0].turn_index,
            per_request=per_request,
            fix=fix,
        )
    ]
