"""The Model settings page's what-if (#35.4): which variants to replay from the page's choices, and
the replay (:func:`engine.replay.replay_session`) as the side-by-side table, a per-call frame (drawn
by :func:`dashboard.figures.whatif_figure`) and one sentence with the answer. Pure: no streamlit, no I/O."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pandas as pd

from engine.replay import (
    AnthropicCompact,
    AsSent,
    ClearToolUses,
    CtxdeskPolicies,
    OpenAICompaction,
    Policies,
    SessionReplay,
    Variant,
    VariantReplay,
)

#: Anthropic's documented floor for ``compact_20260112``'s trigger (AnthropicCompact refuses less).
ANTHROPIC_COMPACT_MIN = 50_000

#: The side-by-side table's columns, in words (key of ``VariantReplay.totals`` -> heading).
TOTAL_COLUMNS = {
    "variant": "Context management",
    "prompt_tokens": "Prompt tokens (sum)",
    "peak_prompt_tokens": "Largest prompt",
    "cache_read_tokens": "Cache reads",
    "cache_write_tokens": "Cache writes",
    "cost_usd": "Cost (USD)",
    "compactions": "Compactions",
    "edited_calls": "Calls edited",
    "refused_calls": "Calls refused",
}
#: The columns comparing a variant with the history as sent (blank on the recorded row).
VERSUS_COLUMNS = ("Prompt tokens vs as sent", "Cost vs as sent", "Cache lost (calls)")
#: The table's columns in order: each comparison beside the number it compares.
TABLE_ORDER = (
    "Context management", "Prompt tokens (sum)", "Prompt tokens vs as sent", "Largest prompt", "Cache reads",
    "Cache writes", "Cache lost (calls)", "Cost (USD)", "Cost vs as sent", "Compactions", "Calls edited",
    "Calls refused",
)  # fmt: skip


@dataclass(frozen=True)
class WhatIfChoices:
    """The page's inputs: one set of clearing parameters for the provider's edit and ctxdesk's
    policy alike (Anthropic's ``clear_tool_uses_20250919`` names), each side's compaction point."""

    trigger: int = 100_000
    keep: int = 3
    clear_at_least: int = 0
    exclude_tools: tuple[str, ...] = ()
    clear_tool_inputs: bool = False
    provider_compact_trigger: int = 150_000  # compact_20260112 trigger / OpenAI compact_threshold
    ctxdesk_compact_share: float = 0.9  # of the effective window (ctxdesk's compaction policy)
    cache_aware: bool | Literal["strict"] = False  # ctxdesk's policies only: the provider has none


def variants_for(cache_provider: str, choices: WhatIfChoices) -> list[Variant]:
    """As sent first (the baseline); then the provider's clearing (Anthropic only: OpenAI has none)
    and its server-side compaction; then ctxdesk's clearing and compaction with the same parameters.

    Raises pydantic's ValidationError on a value the provider refuses (compact_20260112 under 50,000)."""
    clearing = {
        "trigger": choices.trigger, "keep": choices.keep, "clear_at_least": choices.clear_at_least,
        "exclude_tools": choices.exclude_tools, "clear_tool_inputs": choices.clear_tool_inputs,
    }  # fmt: skip
    variants: list[Variant] = [AsSent()]
    if cache_provider == "anthropic":
        variants += [ClearToolUses(**clearing), AnthropicCompact(trigger=choices.provider_compact_trigger)]
    else:
        variants.append(OpenAICompaction(compact_threshold=choices.provider_compact_trigger))
    cache_aware = choices.cache_aware
    variants += [
        CtxdeskPolicies(policies=Policies(clear_tool_results={**clearing, "cache_aware": cache_aware})),
        CtxdeskPolicies(
            policies=Policies(
                compaction={"trigger": choices.ctxdesk_compact_share, "cache_aware": cache_aware}
            )
        ),
    ]
    return variants


def rows_of(replay: SessionReplay) -> list[VariantReplay]:
    """The provider's own usage first (when every call recorded it), then each variant."""
    return ([replay.recorded] if replay.recorded is not None else []) + list(replay.variants)


def cache_losses(variant: VariantReplay, base: VariantReplay) -> int:
    """Calls on which ``variant`` read less from the cache than the history as sent did: its edit
    changed a prefix the provider still held, so that call paid to write it again."""
    return sum(
        v.cache_read_tokens < b.cache_read_tokens for v, b in zip(variant.calls, base.calls, strict=True)
    )


def totals_table(replay: SessionReplay) -> pd.DataFrame:
    """One row per variant (the provider's own usage first, when recorded), its totals in words,
    and how it compares with the history as the agent sent it."""
    rows = [r.totals() for r in rows_of(replay)]
    frame = pd.DataFrame(rows, columns=list(TOTAL_COLUMNS)).rename(columns=TOTAL_COLUMNS)
    versus: dict[str, list[str]] = {name: [] for name in VERSUS_COLUMNS}
    base = replay.variants[0] if replay.variants else None
    for row in rows_of(replay):
        if base is None or row is replay.recorded:
            for name in VERSUS_COLUMNS:
                versus[name].append("")
            continue
        prompt, cost = row.total("prompt_tokens"), row.total("cost_usd")
        base_prompt, base_cost = base.total("prompt_tokens"), base.total("cost_usd")
        versus["Prompt tokens vs as sent"].append(_change(prompt, base_prompt))
        versus["Cost vs as sent"].append(
            f"{_signed_usd(cost - base_cost)} ({_change(cost, base_cost)})" if replay.priced else ""
        )
        versus["Cache lost (calls)"].append(str(cache_losses(row, base)))
    for name, values in versus.items():
        frame[name] = values
    return frame[list(TABLE_ORDER)]


#: The per-call frame's columns (one row per call of each variant).
FRAME_COLUMNS = (
    "call", "variant", "role", "prompt_tokens", "cache_read_tokens", "cache_write_tokens", "cost_so_far_usd",
    "compactions", "edits",
)  # fmt: skip


def per_call_frame(replay: SessionReplay) -> pd.DataFrame:
    """Long form for the per-call chart: call number (from 1), variant, its role (``recorded``: the
    provider's usage, ``as_sent``: the baseline, ``variant``), prompt tokens, cache reads and writes,
    cost so far and the edits made on the call."""
    records = []
    for row in rows_of(replay):
        role = "recorded" if row is replay.recorded else "as_sent" if row is replay.variants[0] else "variant"
        spent = 0.0
        for number, call in enumerate(row.calls, start=1):
            spent += call.cost_usd
            records.append({
                "call": number, "variant": row.label, "role": role, "prompt_tokens": call.prompt_tokens,
                "cache_read_tokens": call.cache_read_tokens, "cache_write_tokens": call.cache_write_tokens,
                "cost_so_far_usd": spent, "compactions": call.compactions, "edits": "; ".join(call.edits),
            })  # fmt: skip
    return pd.DataFrame(records, columns=FRAME_COLUMNS)


def variant_sentence(variant: VariantReplay, base: VariantReplay, *, priced: bool) -> str:
    """What ``variant`` would have done against the history as sent, in one clause:
    'would have sent 31% fewer prompt tokens and cost $0.42 less, losing the cache 3 times'."""
    prompt, base_prompt = int(variant.total("prompt_tokens")), int(base.total("prompt_tokens"))
    if prompt == base_prompt:
        tokens = "sent the same prompt tokens"
    else:
        share = _share(abs(prompt - base_prompt) / base_prompt) if base_prompt else "all"
        tokens = f"sent {share} {'fewer' if prompt < base_prompt else 'more'} prompt tokens ({abs(prompt - base_prompt):,})"
    parts = [tokens]
    if priced:
        saved = base.total("cost_usd") - variant.total("cost_usd")
        parts.append(
            f"cost {_usd(saved)} less"
            if saved > 0
            else f"cost {_usd(-saved)} more"
            if saved < 0
            else "cost the same"
        )
    text = "would have " + " and ".join(parts)
    lost = cache_losses(variant, base)
    text += f", losing the cache {_times(lost)}" if lost else ", never losing the cache"
    compactions = int(variant.total("compactions"))
    return text + (f", compacting {_times(compactions)}" if compactions else "")


def headline(replay: SessionReplay) -> str:
    """The answer in one sentence: the variant that saves the most (money when priced, else prompt
    tokens) against the history as the agent sent it, or why none does."""
    if not replay.variants or not replay.variants[0].calls:
        if replay.failed_calls:
            return f"No successful call to replay: all {replay.failed_calls} calls failed (nothing billed)."
        return "No call to replay."
    base, others = replay.variants[0], replay.variants[1:]
    calls = len(base.calls)
    changed = [v for v in others if any(c.edits or c.refused for c in v.calls)]
    if not changed:
        return (
            f"Over {calls} calls no variant edited anything: the largest prompt was "
            f"{base.peak_prompt_tokens:,} tokens, under every trigger chosen."
        )
    key = "cost_usd" if replay.priced else "prompt_tokens"
    best = min(changed, key=lambda v: (v.total(key), v.total("prompt_tokens")))
    sentence = f"Over {calls} calls, {best.label} {variant_sentence(best, base, priced=replay.priced)}."
    if replay.priced and best.total("cost_usd") >= base.total("cost_usd"):
        sentence = (
            f"No variant costs less than the history as sent ({_usd(base.total('cost_usd'))}); the closest: "
            + (sentence[0].lower() + sentence[1:])
        )
    if not replay.priced:
        sentence += (
            f" {replay.model or 'This model'} has no list price in the model table: costs are not compared."
        )
    return sentence


def fidelity(replay: SessionReplay) -> str:
    """How closely the unedited replay follows what the provider recorded: the replay's check."""
    if replay.recorded is None or not replay.variants:
        return (
            "The provider's usage is not recorded for every call: the replay's baseline is its own measure."
        )
    ours, theirs = replay.variants[0], replay.recorded
    same = sum(o.prompt_tokens == t.prompt_tokens for o, t in zip(ours.calls, theirs.calls, strict=True))
    read, recorded_read = int(ours.total("cache_read_tokens")), int(theirs.total("cache_read_tokens"))
    text = (
        f"Unedited, the replay sends the provider's prompt tokens on {same} of {len(ours.calls)} calls; "
        f"its cache reads {read:,} tokens where the provider read {recorded_read:,}"
    )
    if recorded_read:
        text += f" ({_signed_share(read, recorded_read)})"
    if replay.priced:  # every variant is compared with the replay's own baseline, not the bill
        cost, billed = ours.total("cost_usd"), theirs.total("cost_usd")
        text += f", and costs {_usd(cost)} where the provider's usage costs {_usd(billed)}"
    if replay.failed_calls:
        text += f"; {replay.failed_calls} failed call(s) are not replayed"
    return text + "."


def _usd(value: float) -> str:
    return f"${value:,.2f}" if abs(value) >= 0.01 or value == 0 else f"${value:,.4f}"


def _signed_usd(value: float) -> str:
    return ("+" if value > 0 else "-" if value < 0 else "±") + _usd(abs(value))


def _signed_share(value: float, base: float) -> str:
    return f"{(value - base) / base:+.1%}" if base else ""


def _change(value: float, base: float) -> str:
    """``value`` against ``base`` signed, to the precision it needs: +31%, -2.4%, -0.04%, -<0.01%, ±0%."""
    if not base:
        return ""
    change = (value - base) / base
    return "±0%" if change == 0 else ("+" if change > 0 else "-") + _share(abs(change)).replace("under ", "<")


def _share(share: float) -> str:
    """A share in words precise enough not to read as nothing: 31%, 2.4%, 0.04%."""
    if share >= 0.095:
        return f"{share:.0%}"
    return f"{share:.1%}" if share >= 0.001 else f"{share:.2%}" if share >= 0.0001 else "under 0.01%"


def _times(n: int) -> str:
    return "once" if n == 1 else "twice" if n == 2 else f"{n} times"
