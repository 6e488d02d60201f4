"""The system prompt built from typed sections, cacheable ones first, with Anthropic cache
breakpoints placed where the stable prefix ends.

``PromptBuilder.build()`` returns an :class:`AssembledPrompt` (text, per-section tokens, cache
breakpoints). ``build_prompt_or_concat`` is what the session manager calls: if assembly fails,
the sections' texts are joined plainly and a ``degraded`` event says why.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from engine.errors import ContextDeskError, TokenizerError, ValidationError
from engine.events import ContextEvent, degraded_event
from engine.tokens import Tokenizer

SectionKind = Literal[
    "base_instructions",
    "project_rules",
    "memories",
    "skills",
    "summary",
    "scratchpad",
    "context_status",
]
#: Sections in prompt order (within the cacheable run and after it).
SECTION_ORDER: tuple[str, ...] = get_args(SectionKind)
#: Whether a kind is cacheable unless the section says otherwise: what changes every turn is not.
DEFAULT_CACHEABLE: dict[str, bool] = {
    "base_instructions": True,
    "project_rules": True,
    "memories": True,
    "skills": True,
    "summary": True,
    "scratchpad": False,
    "context_status": False,
}
#: Budget component each kind counts towards (engine.events.ComponentTokens field names).
SECTION_COMPONENT: dict[str, str] = {kind: "system" for kind in SECTION_ORDER} | {
    "skills": "skills",
    "summary": "summary",
}
SUMMARY_TITLE = "Summary of earlier conversation"
SECTION_SEPARATOR = "\n\n"
#: Anthropic accepts at most this many cache_control blocks in one request.
MAX_CACHE_BREAKPOINTS = 4
#: Breakpoints the system prompt may use: the rest are one at the end of the tools and one on
#: the conversation's last message.
MAX_SYSTEM_BREAKPOINTS = MAX_CACHE_BREAKPOINTS - 2


def _with_title(title: str | None, text: str) -> str:
    return f"# {title}\n\n{text}" if title else text


@dataclass(frozen=True)
class PromptSection:
    """One part of the system prompt. ``cacheable`` None takes the kind's default.

    Subclasses may compute their text in ``render()`` (a context-status line, say); a render
    that raises makes ``build_prompt_or_concat`` fall back to joining the raw ``text``.
    """

    kind: SectionKind
    text: str
    title: str | None = None
    cacheable: bool | None = None

    def render(self) -> str:
        return _with_title(self.title, self.text)

    @property
    def is_cacheable(self) -> bool:
        return DEFAULT_CACHEABLE[self.kind] if self.cacheable is None else self.cacheable


@dataclass(frozen=True)
class AssembledPrompt:
    """The system prompt as sent: one rendered block per section, in order.

    ``breakpoints`` are indices of sections whose block carries a cache breakpoint.
    """

    sections: tuple[PromptSection, ...]
    blocks: tuple[str, ...]
    section_tokens: tuple[int, ...]
    breakpoints: tuple[int, ...]
    tokenizer: Tokenizer = field(repr=False, compare=False)
    degraded: bool = False

    @property
    def text(self) -> str:
        return SECTION_SEPARATOR.join(self.blocks)

    @property
    def tokens(self) -> int:
        return sum(self.section_tokens)

    @property
    def components(self) -> dict[str, int]:
        """Tokens by budget component: ``system``, ``skills`` and ``summary``."""
        totals = {"system": 0, "skills": 0, "summary": 0}
        for section, tokens in zip(self.sections, self.section_tokens, strict=True):
            totals[SECTION_COMPONENT[section.kind]] += tokens
        return totals

    def with_summary(self, summary: str | None) -> AssembledPrompt:
        """This prompt with its summary section replaced by ``summary`` (removed when None)."""
        kept = [s for s in self.sections if s.kind != "summary"]
        if summary:
            kept.append(PromptSection("summary", summary, title=SUMMARY_TITLE))
        if self.degraded:
            return concat_prompt(kept, tokenizer=self.tokenizer)
        return PromptBuilder(self.tokenizer, sections=kept).build()


class PromptBuilder:
    """Collects sections and assembles them; ``add`` returns the builder for chaining."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        *,
        sections: Iterable[PromptSection] = (),
        max_breakpoints: int = MAX_SYSTEM_BREAKPOINTS,
    ) -> None:
        if not 0 <= max_breakpoints <= MAX_SYSTEM_BREAKPOINTS:
            raise ValidationError(
                f"max_breakpoints must be 0..{MAX_SYSTEM_BREAKPOINTS}, got {max_breakpoints}",
                field="max_breakpoints",
            )
        self.tokenizer = tokenizer
        self.max_breakpoints = max_breakpoints
        self.sections: list[PromptSection] = list(sections)

    def add(
        self, kind: SectionKind, text: str, *, title: str | None = None, cacheable: bool | None = None
    ) -> PromptBuilder:
        return self.add_section(PromptSection(kind, text, title=title, cacheable=cacheable))

    def add_section(self, section: PromptSection) -> PromptBuilder:
        self.sections.append(section)
        return self

    def build(self) -> AssembledPrompt:
        """Cacheable sections first, each run in SECTION_ORDER (stable within a kind); empty
        sections dropped; breakpoints at the end of the cacheable run and, when there is room,
        before the summary (which changes at each compaction while what precedes it does not)."""
        checked = [self._check(i, s) for i, s in enumerate(self.sections)]
        ordered = sorted(
            (s for s in checked if s[1].strip()),
            key=lambda s: (not s[0].is_cacheable, SECTION_ORDER.index(s[0].kind)),
        )
        sections = tuple(s for s, _ in ordered)
        blocks = tuple(text for _, text in ordered)
        return AssembledPrompt(
            sections=sections,
            blocks=blocks,
            section_tokens=tuple(self.tokenizer.count(text) for text in blocks),
            breakpoints=self._breakpoints(sections),
            tokenizer=self.tokenizer,
        )

    def _check(self, index: int, section: PromptSection) -> tuple[PromptSection, str]:
        kind = getattr(section, "kind", None)
        if kind not in SECTION_ORDER:
            raise ValidationError(
                f"prompt section {index} has kind {kind!r}; expected one of {', '.join(SECTION_ORDER)}",
                field=f"sections[{index}].kind",
                value=kind,
            )
        try:
            text = section.render()
        except (ContextDeskError, LookupError, TypeError, ValueError, OSError) as exc:
            raise ValidationError(
                f"prompt section {index} ({kind}) failed to render: {type(exc).__name__}: {exc}",
                field=f"sections[{index}]",
            ) from exc
        if not isinstance(text, str):
            raise ValidationError(
                f"prompt section {index} ({kind}) rendered {type(text).__name__}, not str",
                field=f"sections[{index}]",
            )
        return section, text

    def _breakpoints(self, sections: Sequence[PromptSection]) -> tuple[int, ...]:
        cacheable = [i for i, s in enumerate(sections) if s.is_cacheable]
        if not cacheable or self.max_breakpoints == 0:
            return ()
        points = [cacheable[-1]]
        summary = next((i for i in cacheable if sections[i].kind == "summary"), None)
        if self.max_breakpoints > 1 and summary is not None and summary > 0:
            points.insert(0, summary - 1)
        return tuple(sorted(set(points)))


def concat_prompt(sections: Iterable[Any], *, tokenizer: Tokenizer) -> AssembledPrompt:
    """The plain behaviour: the sections' raw texts joined in the order given, as one
    uncached block (sections without a str ``text`` are left out)."""
    texts = [
        _with_title(getattr(s, "title", None), s.text)
        for s in sections
        if isinstance(getattr(s, "text", None), str) and s.text.strip()
    ]
    text = SECTION_SEPARATOR.join(texts)
    blocks = (text,) if text else ()
    section = PromptSection("base_instructions", text, cacheable=False)
    return AssembledPrompt(
        sections=(section,) if text else (),
        blocks=blocks,
        section_tokens=tuple(tokenizer.count(b) for b in blocks),
        breakpoints=(),
        tokenizer=tokenizer,
        degraded=True,
    )


def build_prompt_or_concat(
    sections: Iterable[PromptSection], *, tokenizer: Tokenizer
) -> tuple[AssembledPrompt, list[ContextEvent]]:
    """(prompt, events): the assembled prompt, or on failure the plain concatenation and a
    ``degraded`` event naming the error."""
    sections = list(sections)
    try:
        return PromptBuilder(tokenizer, sections=sections).build(), []
    except (ValidationError, TokenizerError) as exc:
        prompt = concat_prompt(sections, tokenizer=tokenizer)
        return prompt, [degraded_event("prompt", exc, fallback="plain_concatenation", sections=len(sections))]
