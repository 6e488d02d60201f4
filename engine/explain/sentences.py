"""The one sentence the page and ``ctxdesk why`` put first: for a compaction ("Claude Code
compacted itself at call 16: its estimate reached 155,979 of 167,000 tokens (auto-compact at limit
180,000 − 13,000)"), a failed call (engine.explain.failures), and the session as a whole."""

from __future__ import annotations

from engine.explain.explanations import CompactionExplanation, Ending, FailedCall
from engine.store import StoredEvent
from engine.textfmt import article


def compaction_sentence(c: CompactionExplanation, agent_label: str, event: StoredEvent) -> str:
    at = f"at call {c.call}" if c.call else "before its first call"
    sizes = _sizes(c)
    if c.trigger == "reactive":
        after = f" after call {c.after_failed_call} was refused as too long" if c.after_failed_call else ""
        who = {"agent": agent_label, "ctxdesk": "ctxdesk", "proxy": "The proxy", "user": "The user"}[c.by]
        return f"{who} compacted reactively{after}{sizes}{_far_below(c, 'the provider')}"
    if c.by == "agent" and c.trigger == "auto":
        if c.tokens_before is None:
            return f"{agent_label} compacted itself {at}{sizes}"
        if c.threshold_tokens:
            if c.tokens_before > c.threshold_tokens:  # past the point, not "X of Y" with X > Y
                reached = (
                    f"reached {c.tokens_before:,} tokens, past its compaction point of {c.threshold_tokens:,}"
                )
            else:
                reached = f"reached {c.tokens_before:,} of {c.threshold_tokens:,} tokens"
            head = f"{agent_label} compacted itself {at}: its estimate {reached} ({c.threshold_rule})"
            counted = c.last_call_tokens
            if counted is not None and counted >= c.threshold_tokens > c.tokens_before:
                head += f"; the provider counted {counted:,} for call {c.call}"
            elif c.tokens_before < c.threshold_tokens and (counted is None or counted < c.threshold_tokens):
                head += "; that is below the default point, so a lower auto-compact setting not recorded in the file was in force"
            return head
        limit = f" of {article(c.limit_tokens)} {c.limit_tokens:,}-token limit" if c.limit_tokens else ""
        rule = f" ({c.threshold_rule})" if c.threshold_rule else ""
        return (
            f"{agent_label} compacted itself {at}: its context reached {c.tokens_before:,} tokens{limit}{rule}"
            f"{_far_below(c, agent_label)}"
        )
    if c.trigger == "manual":
        if c.by == "agent" and agent_label == "ctxdesk":
            who, how = "The model", "called compact_context"
        else:
            who = agent_label if c.by == "agent" else "The user"
            how = "asked for a compaction" if c.by == "agent" else "compacted by hand"
        said = f" with the instructions “{_clip(c.instructions)}”" if c.instructions else ""
        return f"{who} {how} {at}{said}{sizes}"
    if c.trigger == "policy":
        policy = event.details.get("policy") or "compaction"
        return f"The proxy's {policy} policy compacted the request {at}{sizes}"
    # ctxdesk's own threshold
    if c.reached_tokens is not None and c.limit_tokens:
        rule = (
            f"; {c.threshold_rule} = {c.threshold_tokens:,}"
            if c.threshold_rule and c.threshold_tokens
            else ""
        )
        return (
            f"ctxdesk compacted {at}: the guard's estimate of the request reached {c.reached_tokens:,} of "
            f"{c.limit_tokens:,} tokens ({c.share:.1%}{rule}){sizes.replace(':', '; messages', 1)}"
        )
    return f"ctxdesk compacted {at}{sizes}"


def ending_sentence(ended: Ending, agent_label: str) -> str:
    return ended.detail if ended.detail else f"{agent_label} ended: {ended.cause}"


def headline(
    ended: Ending,
    compactions: tuple[CompactionExplanation, ...],
    failed: tuple[FailedCall, ...],
    agent_label: str,
) -> str:
    """The sentence first on the page: an ending other than a finish, else the last failed call
    (with what the agent did about it), else the last compaction, else how it finished."""
    if ended.cause not in ("finished", "unknown") or not (compactions or failed):
        return ending_sentence(ended, agent_label)
    if failed:
        return failed[-1].sentence
    more = f" ({len(compactions)} compactions in all)" if len(compactions) > 1 else ""
    return compactions[-1].sentence + more


def _sizes(c: CompactionExplanation) -> str:
    if c.tokens_before is None:
        return ""
    if c.tokens_after is None:
        return f": {c.tokens_before:,} tokens before"
    return f": {c.tokens_before:,} → {c.tokens_after:,} tokens"


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: Below this share of the limit, a compaction forced by the window says the limit held is not the one
#: in force (agents compact at 75-95% of theirs; a provider refuses only past its own).
FAR_BELOW_SHARE = 0.5


def _far_below(c: CompactionExplanation, whose: str) -> str:
    """What a compaction forced far below the limit held for the call says of that limit: it is not
    the window ``whose`` (the agent, the provider) worked with, e.g. a window set in the agent's own
    config or a model served with a smaller one. "" when it came near the limit."""
    share = c.share
    if share is None or share >= FAR_BELOW_SHARE or c.limit_tokens is None:
        return ""
    return (
        f" — {share:.0%} of the {c.limit_tokens:,}-token limit held for this model, so {whose} worked with a"
        " smaller window than that (give it in Model settings)"
    )
