"""One measure of a model call's prompt by component, and its reconciliation with the provider's count.

Every source (the session manager, the proxy, the importers, compaction, the report) measures a
request with :func:`measure_request`, so what counts as system, skills, tools, summary, conversation
and tool results, and what framing each costs, is decided here once:

- **system**: each system block's tokens, plus one message's framing
  (``MESSAGE_OVERHEAD_TOKENS``) whenever a system prompt is sent at all (skills and a summary sent
  in it included): the provider frames the system prompt as it frames a message.
- **skills** / **summary**: each skill text and the compaction summary. Sent in the system prompt
  (the session manager) they cost their text; sent as a text block of a message (Claude Code's
  summary and skill listing) that block's tokens move out of conversation, so nothing is counted twice.
- **tools**: each definition's name, description and schema plus ``TOOL_OVERHEAD_TOKENS``.
- **tool_results**: tool-result blocks (and the whole content of a ``tool`` role message), framing
  of each block included.
- **conversation**: every other block, each message's framing (``MESSAGE_OVERHEAD_TOKENS``) and the
  reply priming (``REPLY_PRIMING_TOKENS``) once per request with messages.

:func:`reconcile` makes a measured call add up to the provider's own prompt count, and
:func:`components_basis` says how the stored numbers were known (exact, reconciled, estimate).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

from pydantic import BaseModel

from engine.errors import ValidationError
from engine.events import COMPONENTS, ComponentsBasis, ComponentTokens
from engine.messages import Message, TextBlock
from engine.tokens import MESSAGE_OVERHEAD_TOKENS, REPLY_PRIMING_TOKENS, Tokenizer

__all__ = [
    "MEASURED_COMPONENTS",
    "SYSTEM_OVERHEAD_TOKENS",
    "HistoryTotals",
    "components_basis",
    "components_with",
    "measure_request",
    "reconcile",
    "reconcile_call",
    "trusted",
]

#: The components our own measure fills (all but ``unattributed``, which only :func:`reconcile` sets).
MEASURED_COMPONENTS: tuple[str, ...] = tuple(c for c in COMPONENTS if c != "unattributed")
#: Framing of the system prompt: the provider frames it as one message.
SYSTEM_OVERHEAD_TOKENS = MESSAGE_OVERHEAD_TOKENS


class HistoryTotals:
    """Running conversation and tool-result tokens of a history that grows by appending.

    ``extend`` costs only the messages appended (their split comes from the tokenizer's cache), and
    only once the totals are read (an importer whose parser measured every call never reads them);
    ``reset`` recounts once, when the history is replaced (compaction, resume). At every point
    the totals equal :func:`measure_request`'s over the same messages, reply priming included.
    """

    __slots__ = ("_conversation", "_messages", "_pending", "_tool_results", "tokenizer")

    def __init__(self, tokenizer: Tokenizer, messages: Iterable[Message] = ()) -> None:
        self.tokenizer = tokenizer
        self._pending: list[Message] = []
        self.reset(messages)

    def reset(self, messages: Iterable[Message] = ()) -> None:
        """Recount from scratch: the history was replaced by ``messages``."""
        self._conversation = self._tool_results = self._messages = 0
        self._pending.clear()
        self.extend(messages)

    def extend(self, messages: Iterable[Message]) -> None:
        """Add messages appended to the history (counted when the totals are next read)."""
        self._pending.extend(messages)

    def _count(self) -> None:
        for message in self._pending:
            talk, results = self.tokenizer.count_message_parts(message)
            self._conversation += talk
            self._tool_results += results
            self._messages += 1
        self._pending.clear()

    @property
    def messages(self) -> int:
        """How many messages the totals cover."""
        return self._messages + len(self._pending)

    @property
    def conversation(self) -> int:
        """Conversation tokens, plus the reply priming a non-empty history costs once."""
        if self._pending:
            self._count()
        if self._conversation or self._tool_results:
            return self._conversation + REPLY_PRIMING_TOKENS
        return 0

    @property
    def tool_results(self) -> int:
        if self._pending:
            self._count()
        return self._tool_results


def measure_request(
    tokenizer: Tokenizer,
    *,
    system: str | Sequence[str],
    tools: Sequence[dict[str, Any]],
    messages: Iterable[Message] | HistoryTotals,
    summary: str | None = None,
    skills: Sequence[str] = (),
    offloaded_bytes: int = 0,
) -> ComponentTokens:
    """The tokens of one request by component (the rule is the module docstring's).

    ``system`` is the system prompt as one text or as its blocks, without the skills and summary
    passed separately; ``messages`` the messages sent, or the running :class:`HistoryTotals` of
    them (then skills and summary are sections of the system prompt). A skill or the summary that
    is the text of a message's text block (compared without surrounding whitespace) counts as
    skills or summary in place of conversation; otherwise it is a section of the system prompt.
    """
    blocks = [b for b in ([system] if isinstance(system, str) else system) if b]
    skill_texts = [s for s in skills if s]
    summary_texts = [summary] if summary else []
    if isinstance(messages, HistoryTotals):
        conversation, tool_results, in_messages = messages.conversation, messages.tool_results, {}
    else:
        keys = {t.strip() for t in (*skill_texts, *summary_texts)} - {""}
        conversation, tool_results, in_messages = _measure_messages(tokenizer, messages, keys)
    sections = 0  # skill and summary texts sent in the system prompt

    def part(texts: list[str]) -> int:
        nonlocal sections
        tokens = 0
        for text in texts:
            found = in_messages.pop(text.strip(), None)
            if found is None:
                sections += 1
            tokens += tokenizer.count(text) if found is None else found
        return tokens

    skills_tokens, summary_tokens = part(skill_texts), part(summary_texts)
    framed = bool(blocks or sections)
    return ComponentTokens(
        system=sum(tokenizer.count(b) for b in blocks) + (SYSTEM_OVERHEAD_TOKENS if framed else 0),
        skills=skills_tokens,
        tools=tokenizer.count_tools(tools) if tools else 0,
        summary=summary_tokens,
        conversation=conversation,
        tool_results=tool_results,
        offloaded_bytes=offloaded_bytes,
    )


def _measure_messages(
    tokenizer: Tokenizer, messages: Iterable[Message], keys: set[str]
) -> tuple[int, int, dict[str, int]]:
    """(conversation, tool_results, tokens of the text blocks whose stripped text is one of ``keys``):
    conversation leaves those blocks out and includes the reply priming."""
    totals = HistoryTotals(tokenizer)
    found: dict[str, int] = {}
    for message in messages:
        totals.extend((message,))
        if keys and not isinstance(message.content, str):
            for block in message.content:
                if isinstance(block, TextBlock) and (key := block.text.strip()) in keys:
                    found[key] = found.get(key, 0) + tokenizer.count_block(block)
        elif keys and message.role != "tool" and message.content.strip() in keys:
            key = message.content.strip()
            found[key] = found.get(key, 0) + tokenizer.count(message.content)
    return totals.conversation - sum(found.values()), totals.tool_results, found


def reconcile(
    components: ComponentTokens, provider_prompt_tokens: int | None, *, max_scale_up: float = 1.0
) -> ComponentTokens:
    """``components`` made to add up to the provider's own count of the call's prompt.

    What is exact afterwards: the total (it is the provider's count). Each measured part keeps its
    measured share of what it accounts for:

    - measured above the provider's count (an estimate that overcounts, a part measured before a
      compaction and carried across it): every measured part is scaled down in proportion, and
      nothing is unattributed; never a negative residual.
    - measured below it: the parts are scaled up by at most ``max_scale_up`` and the rest is
      ``unattributed`` ("Harness, unattributed": harness text the source did not log). Pass
      ``math.inf`` when the measure saw every byte the provider got (the session manager, the proxy,
      a request rebuilt exactly): then a shortfall is only our count's error and the provider's
      own framing of what was sent (e.g. the tool-use prompt Anthropic adds when tools are sent),
      spread over what was sent. The default 1.0 scales nothing up: a source that may miss harness text
      (a transcript without the harness's system prompt) keeps the shortfall unattributed.

    Parts are apportioned in whole tokens by largest remainder, so they sum to the target exactly.
    A count of None or <= 0 (no usage reported) leaves ``components`` as measured. Any
    ``unattributed`` already in ``components`` is recomputed, never added to.
    """
    if provider_prompt_tokens is None or provider_prompt_tokens <= 0:
        return components
    if not (isinstance(max_scale_up, int | float) and max_scale_up >= 1.0):  # NaN fails too
        raise ValidationError(
            f"max_scale_up must be a number >= 1.0 (math.inf allowed), got {max_scale_up!r}",
            field="max_scale_up",
            value=max_scale_up,
        )
    values = components.__dict__
    parts = {name: values[name] for name in MEASURED_COMPONENTS}
    measured = sum(parts.values())
    if measured == 0:
        target = 0  # nothing measured to scale: the whole count is unattributed
    elif measured * max_scale_up >= provider_prompt_tokens:
        target = provider_prompt_tokens
    else:
        target = math.floor(measured * max_scale_up)
    if target != measured:
        parts = _apportion(parts, measured, target)
    return components_with(components, {**parts, "unattributed": provider_prompt_tokens - target})


def components_with(components: ComponentTokens, update: dict[str, int]) -> ComponentTokens:
    """``components.model_copy(update=update)`` (the same values and set of given fields), without
    pydantic's generic copy (1.8 -> 1.0 µs): an import makes one to three per call. ``update``'s
    values are whole token counts its callers computed, as model_copy takes them (unvalidated)."""
    values = {**components.__dict__, **update}
    return trusted(type(components), values, components.__pydantic_fields_set__ | update.keys())


_M = TypeVar("_M", bound=BaseModel)
_set = object.__setattr__  # a frozen model's attributes, set as pydantic's own copy sets them


def trusted(cls: type[_M], values: dict[str, Any], given: set[str]) -> _M:
    """``cls`` holding ``values``, ``given`` its set of given fields, built without validation or
    pydantic's per-field loop (0.7 µs; validating a model of 17 fields costs 2.5, ``model_construct``
    4.6). Only for values validation would keep as they are: every field, in field order, each of
    its field's type and within its bounds (values made from valid models, as a call's cost and
    cache verdict are); ``cls`` a model without extra or private attributes."""
    model = cls.__new__(cls)
    _set(model, "__dict__", values)
    _set(model, "__pydantic_fields_set__", given)
    _set(model, "__pydantic_extra__", None)
    _set(model, "__pydantic_private__", None)
    return model


def _apportion(parts: dict[str, int], measured: int, target: int) -> dict[str, int]:
    """``parts`` (summing to ``measured`` > 0) scaled to sum to ``target`` in whole tokens: each
    floored, the tokens left given to the largest remainders (ties in component order)."""
    scaled = {name: tokens * target // measured for name, tokens in parts.items()}
    left = target - sum(scaled.values())
    if left:
        # the remainders add up to ``left`` parts, each below one: more than ``left`` of them are
        # not zero, so only those are ordered (a call's parts are mostly zero)
        remainders = {name: r for name, tokens in parts.items() if (r := tokens * target % measured)}
        for name in sorted(remainders, key=lambda name: -remainders[name])[:left]:
            scaled[name] += 1
    return scaled


def components_basis(
    measured: ComponentTokens, provider_prompt_tokens: int | None, *, exact_tokenizer: bool
) -> ComponentsBasis:
    """How a call's stored components are known: ``estimate`` without a provider count (None or
    <= 0), ``exact`` when the provider's own tokenizer counted them and they already add up to its
    count, else ``reconciled`` (:func:`reconcile` made them add up)."""
    if provider_prompt_tokens is None or provider_prompt_tokens <= 0:
        return "estimate"
    if exact_tokenizer and measured.measured == provider_prompt_tokens:
        return "exact"
    return "reconciled"


def reconcile_call(
    measured: ComponentTokens,
    provider_prompt_tokens: int | None,
    *,
    exact_tokenizer: bool,
    max_scale_up: float = 1.0,
) -> tuple[ComponentTokens, ComponentsBasis]:
    """What a source records for a call: its components reconciled (:func:`reconcile`) and their
    basis (:func:`components_basis`), for ``ContextEvent.components`` and ``.components_basis``."""
    basis = components_basis(measured, provider_prompt_tokens, exact_tokenizer=exact_tokenizer)
    return reconcile(measured, provider_prompt_tokens, max_scale_up=max_scale_up), basis
