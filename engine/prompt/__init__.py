"""Prompt assembly: the system prompt built from typed sections (``sections``: cacheable ones
first, Anthropic cache breakpoints where the stable prefix ends) and the request bodies built
from it, the history and the tools (``requests``: Messages API with breakpoints, Chat
Completions).

``PromptBuilder.build()`` returns an :class:`AssembledPrompt`; ``to_anthropic_request`` /
``to_openai_request`` turn it into a request body. ``build_prompt_or_concat`` is what the
session manager calls: if assembly fails, the sections' texts are joined plainly and a
``degraded`` event says why.
"""

from engine.prompt.requests import (
    EPHEMERAL,
    AnthropicHistory,
    build_anthropic_request,
    count_cache_breakpoints,
    to_anthropic_request,
    to_openai_request,
    volatile_tail,
)
from engine.prompt.sections import (
    DEFAULT_CACHEABLE,
    MAX_CACHE_BREAKPOINTS,
    MAX_SYSTEM_BREAKPOINTS,
    SECTION_COMPONENT,
    SECTION_ORDER,
    SECTION_SEPARATOR,
    SUMMARY_TITLE,
    AssembledPrompt,
    PromptBuilder,
    PromptSection,
    SectionKind,
    build_prompt_or_concat,
    concat_prompt,
)

__all__ = [
    "DEFAULT_CACHEABLE",
    "EPHEMERAL",
    "MAX_CACHE_BREAKPOINTS",
    "MAX_SYSTEM_BREAKPOINTS",
    "SECTION_COMPONENT",
    "SECTION_ORDER",
    "SECTION_SEPARATOR",
    "SUMMARY_TITLE",
    "AnthropicHistory",
    "AssembledPrompt",
    "PromptBuilder",
    "PromptSection",
    "SectionKind",
    "build_anthropic_request",
    "build_prompt_or_concat",
    "concat_prompt",
    "count_cache_breakpoints",
    "to_anthropic_request",
    "to_openai_request",
    "volatile_tail",
]
