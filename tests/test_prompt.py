"""Prompt assembly: section order, token counts, cache breakpoints, request bodies, fallback."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.convert import from_anthropic, to_anthropic
from engine.deferral import TOOL_SEARCH_TOOL
from engine.errors import ValidationError
from engine.messages import Message, ThinkingBlock, assistant, tool_result, tool_use, user
from engine.offload import READ_RESULT_TOOL
from engine.prompt import (
    MAX_CACHE_BREAKPOINTS,
    SECTION_ORDER,
    SUMMARY_TITLE,
    AssembledPrompt,
    PromptBuilder,
    PromptSection,
    build_prompt_or_concat,
    count_cache_breakpoints,
    to_anthropic_request,
    to_openai_request,
)
from engine.tokens import get_tokenizer

TOK = get_tokenizer("cl100k_base")

SECTIONS = {
    "base_instructions": "You are a careful coding agent.",
    "project_rules": "Run the tests before you commit.",
    "memories": "The user prefers short answers.",
    "skills": "Skill pdf_forms: fill in PDF forms from data.",
    "scratchpad": "Plan: 1. read the failing test.",
    "context_status": "Context: 41% of 200,000 tokens used.",
}


def full_prompt(*, order: list[str] | None = None, summary: str | None = None) -> AssembledPrompt:
    builder = PromptBuilder(TOK)
    for kind in order or list(reversed(SECTIONS)):
        builder.add(kind, SECTIONS[kind])  # type: ignore[arg-type]
    if summary:
        builder.add("summary", summary, title=SUMMARY_TITLE)
    return builder.build()


def history() -> list[Message]:
    return [
        user("Fix the failing test in tests/test_io.py"),
        assistant("Reading it.", tool_use("tu_1", "read_file", path="tests/test_io.py")),
        tool_result("tu_1", "def test_io():\n    assert read() == 1\n"),
        assistant("The fixture is stale; updating it."),
    ]


TOOLS = [
    {
        "name": "read_file",
        "description": "Read a file.",
        "input_schema": {"type": "object", "properties": {}},
    },
    READ_RESULT_TOOL,
    TOOL_SEARCH_TOOL,
]


# -- build -----------------------------------------------------------------------------------


def test_cacheable_sections_come_first_in_the_stable_order():
    prompt = full_prompt()
    assert [s.kind for s in prompt.sections] == [
        "base_instructions",
        "project_rules",
        "memories",
        "skills",
        "scratchpad",
        "context_status",
    ]
    assert prompt.text == "\n\n".join(SECTIONS[s.kind] for s in prompt.sections)


def test_a_section_marked_not_cacheable_moves_after_the_cacheable_run():
    prompt = (
        PromptBuilder(TOK)
        .add("memories", "Today's memories.", cacheable=False)
        .add("context_status", "Status.")
        .add("base_instructions", "Base.")
        .add("skills", "Skills.")
        .build()
    )
    assert [(s.kind, s.is_cacheable) for s in prompt.sections] == [
        ("base_instructions", True),
        ("skills", True),
        ("memories", False),
        ("context_status", False),
    ]
    assert prompt.breakpoints == (1,)


def test_sections_of_one_kind_keep_the_order_they_were_added_in():
    prompt = (
        PromptBuilder(TOK)
        .add("project_rules", "rule A")
        .add("base_instructions", "B")
        .add("project_rules", "rule C")
        .build()
    )
    assert prompt.blocks == ("B", "rule A", "rule C")


def test_empty_sections_are_left_out():
    prompt = PromptBuilder(TOK).add("base_instructions", "Base.").add("memories", "  \n").build()
    assert [s.kind for s in prompt.sections] == ["base_instructions"]


def test_section_tokens_are_counted_per_section_and_by_budget_component():
    prompt = full_prompt(summary="Earlier we fixed the parser.")
    assert prompt.section_tokens == tuple(TOK.count(b) for b in prompt.blocks)
    by_kind = dict(zip((s.kind for s in prompt.sections), prompt.section_tokens, strict=True))
    assert prompt.components == {
        "skills": by_kind["skills"],
        "summary": by_kind["summary"],
        "system": sum(t for k, t in by_kind.items() if k not in ("skills", "summary")),
    }
    assert prompt.tokens == sum(prompt.components.values())


def test_one_breakpoint_ends_the_cacheable_run():
    prompt = full_prompt()
    assert prompt.breakpoints == (3,)  # skills, the last cacheable section


def test_a_summary_gets_the_run_before_it_cached_separately():
    prompt = full_prompt(summary="Earlier we fixed the parser.")
    kinds = [s.kind for s in prompt.sections]
    assert kinds.index("summary") == 4
    assert prompt.blocks[4] == f"# {SUMMARY_TITLE}\n\nEarlier we fixed the parser."
    assert prompt.breakpoints == (3, 4)


def test_no_cacheable_sections_means_no_breakpoints():
    prompt = PromptBuilder(TOK).add("scratchpad", "notes").add("context_status", "status").build()
    assert prompt.breakpoints == ()
    assert PromptBuilder(TOK, max_breakpoints=0).add("base_instructions", "b").build().breakpoints == ()


def test_unknown_section_kind_is_a_validation_error():
    with pytest.raises(ValidationError, match="prompt section 0 has kind 'persona'"):
        PromptBuilder(TOK).add("persona", "x").build()  # type: ignore[arg-type]


# -- Anthropic request -----------------------------------------------------------------------


def test_anthropic_request_marks_system_tools_and_last_message():
    body = to_anthropic_request(full_prompt(), history(), TOOLS, model="claude-sonnet-4-5", max_tokens=1024)
    assert body["model"] == "claude-sonnet-4-5"
    assert body["max_tokens"] == 1024
    system = body["system"]
    assert [b["text"] for b in system] == list(full_prompt().blocks)
    assert [i for i, b in enumerate(system) if "cache_control" in b] == [3]
    assert system[3]["cache_control"] == {"type": "ephemeral"}
    assert [("cache_control" in t) for t in body["tools"]] == [False, False, True]
    last = body["messages"][-1]
    assert last == {
        "role": "assistant",
        "content": [
            {
                "type": "text",
                "text": "The fixture is stale; updating it.",
                "cache_control": {"type": "ephemeral"},
            }
        ],
    }
    assert count_cache_breakpoints(body) == 3


def test_anthropic_request_maps_tool_use_and_results():
    body = to_anthropic_request(full_prompt(), history(), [], model="m", max_tokens=10)
    assert "tools" not in body
    assert body["messages"][1]["content"][1] == {
        "type": "tool_use",
        "id": "tu_1",
        "name": "read_file",
        "input": {"path": "tests/test_io.py"},
    }
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {
                "type": "tool_result",
                "tool_use_id": "tu_1",
                "content": "def test_io():\n    assert read() == 1\n",
            }
        ],
    }


def test_summary_is_injected_as_a_system_section_not_a_message():
    summary = "The user asked to fix tests/test_io.py; the fixture was stale."
    messages = history()
    body = to_anthropic_request(full_prompt(), messages, TOOLS, model="m", max_tokens=10, summary=summary)
    assert len(body["messages"]) == len(messages)
    assert summary not in json.dumps(body["messages"])
    texts = [b["text"] for b in body["system"]]
    assert f"# {SUMMARY_TITLE}\n\n{summary}" in texts
    assert count_cache_breakpoints(body) == MAX_CACHE_BREAKPOINTS


def test_a_new_summary_replaces_the_old_one():
    prompt = full_prompt(summary="old summary")
    body = to_anthropic_request(prompt, history(), [], model="m", max_tokens=10, summary="new summary")
    texts = " ".join(b["text"] for b in body["system"])
    assert "new summary" in texts and "old summary" not in texts


def test_inputs_are_not_mutated():
    before = json.loads(json.dumps(TOOLS))
    to_anthropic_request(full_prompt(), history(), TOOLS, model="m", max_tokens=10)
    assert before == TOOLS
    assert "cache_control" not in READ_RESULT_TOOL


def test_cache_control_kept_from_an_imported_transcript_is_replaced_by_ours():
    imported = from_anthropic(
        [
            {
                "role": "user",
                "content": [{"type": "text", "text": f"q{i}", "cache_control": {"type": "ephemeral"}}],
            }
            if i % 2 == 0
            else {"role": "assistant", "content": f"a{i}"}
            for i in range(8)
        ]
    )
    assert to_anthropic(imported)[0]["content"][0]["cache_control"] == {"type": "ephemeral"}
    body = to_anthropic_request(full_prompt(summary="s"), imported, TOOLS, model="m", max_tokens=10)
    assert count_cache_breakpoints(body) == MAX_CACHE_BREAKPOINTS
    assert count_cache_breakpoints(body["messages"]) == 1
    assert "cache_control" in body["messages"][-1]["content"][0]


def test_tools_in_openai_shape_are_converted_and_anthropic_server_tools_kept():
    tools = [
        {
            "type": "function",
            "function": {"name": "f", "description": "F.", "parameters": {"type": "object"}},
        },
        {"type": "bash_20250124", "name": "bash", "cache_control": {"type": "ephemeral"}},
        READ_RESULT_TOOL,
    ]
    body = to_anthropic_request(full_prompt(), history(), tools, model="m", max_tokens=10)
    assert body["tools"][0] == {"name": "f", "description": "F.", "input_schema": {"type": "object"}}
    assert body["tools"][1] == {"type": "bash_20250124", "name": "bash"}
    assert body["tools"][2] == READ_RESULT_TOOL | {"cache_control": {"type": "ephemeral"}}


def test_a_tool_input_key_named_cache_control_is_data_and_kept():
    messages = [user("go"), assistant("", tool_use("tu_9", "configure", cache_control="on"))]
    body = to_anthropic_request(full_prompt(), messages, [], model="m", max_tokens=10)
    assert body["messages"][1]["content"][0]["input"] == {"cache_control": "on"}


def test_the_last_message_breakpoint_skips_thinking_blocks():
    messages = [
        user("hi"),
        Message(role="assistant", content=[ThinkingBlock(thinking="hmm", signature="sig")]),
    ]
    body = to_anthropic_request(full_prompt(), messages, [], model="m", max_tokens=10)
    assert "cache_control" not in body["messages"][1]["content"][0]
    assert body["messages"][0]["content"] == [
        {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    ]


section_kinds = st.lists(st.sampled_from(SECTION_ORDER), max_size=10)


@settings(max_examples=100, deadline=None)
@given(section_kinds, st.lists(st.booleans(), max_size=10), st.booleans(), st.booleans(), st.booleans())
def test_never_more_than_four_cache_breakpoints(kinds, cacheable, with_tools, with_messages, with_summary):
    builder = PromptBuilder(TOK)
    for i, kind in enumerate(kinds):
        builder.add(kind, f"section {i}", cacheable=cacheable[i] if i < len(cacheable) else None)
    body = to_anthropic_request(
        builder.build(),
        history() if with_messages else [],
        TOOLS if with_tools else [],
        model="m",
        max_tokens=10,
        summary="summary" if with_summary else None,
    )
    assert count_cache_breakpoints(body) <= MAX_CACHE_BREAKPOINTS
    assert count_cache_breakpoints(body.get("system", [])) <= MAX_CACHE_BREAKPOINTS - 2


# -- OpenAI request --------------------------------------------------------------------------


def test_openai_request_puts_the_system_prompt_first_without_breakpoints():
    body = to_openai_request(
        full_prompt(), history(), TOOLS, model="gpt-4o", max_tokens=512, summary="Earlier."
    )
    messages = body["messages"]
    assert messages[0]["role"] == "system"
    assert messages[0]["content"].startswith(SECTIONS["base_instructions"])
    assert f"# {SUMMARY_TITLE}\n\nEarlier." in messages[0]["content"]
    assert count_cache_breakpoints(body) == 0
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[2]["tool_calls"] == [
        {
            "id": "tu_1",
            "type": "function",
            "function": {"name": "read_file", "arguments": '{"path":"tests/test_io.py"}'},
        }
    ]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "tu_1",
        "content": "def test_io():\n    assert read() == 1\n",
    }
    assert body["tools"][1]["function"]["name"] == "read_result"
    assert body["max_completion_tokens"] == 512


# -- fallback --------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusFromBrokenSource(PromptSection):
    """A dynamic section whose source fails, as a status line reading a missing file would."""

    def render(self) -> str:
        with open("/nonexistent/ctxdesk/status.txt") as fh:
            return fh.read()


def test_a_section_that_raises_falls_back_to_plain_concatenation():
    sections = [
        PromptSection("base_instructions", "Base."),
        StatusFromBrokenSource("context_status", "Status unknown."),
        PromptSection("project_rules", "Rules.", title="Rules"),
    ]
    prompt, events = build_prompt_or_concat(sections, tokenizer=TOK)
    assert prompt.degraded
    assert prompt.text == "Base.\n\nStatus unknown.\n\n# Rules\n\nRules."
    assert prompt.breakpoints == ()
    assert prompt.section_tokens == (TOK.count(prompt.text),)
    (event,) = events
    assert (event.kind, event.outcome) == ("degraded", "plain_concatenation")
    assert event.details["subsystem"] == "prompt"
    assert "prompt section 1 (context_status) failed to render: FileNotFoundError" in event.details["error"]
    body = to_anthropic_request(prompt, history(), TOOLS, model="m", max_tokens=10, summary="S.")
    assert [("cache_control" in b) for b in body["system"]] == [False]
    assert body["system"][0]["text"].endswith(f"# {SUMMARY_TITLE}\n\nS.")


def test_a_section_of_unknown_kind_falls_back_too():
    sections = [PromptSection("base_instructions", "Base."), PromptSection("persona", "Pirate.")]  # type: ignore[arg-type]
    prompt, events = build_prompt_or_concat(sections, tokenizer=TOK)
    assert prompt.text == "Base.\n\nPirate."
    assert events[0].details["subsystem"] == "prompt"


def test_good_sections_build_without_events():
    prompt, events = build_prompt_or_concat([PromptSection("base_instructions", "Base.")], tokenizer=TOK)
    assert (prompt.degraded, events, prompt.breakpoints) == (False, [], (0,))


def test_the_context_status_is_sent_after_the_cached_conversation_not_in_the_system_prompt():
    messages = [*history(), user("Now run the whole suite.")]
    body = to_anthropic_request(full_prompt(), messages, TOOLS, model="claude-sonnet-4-5", max_tokens=1024)
    system_text = "\n\n".join(b["text"] for b in body["system"])
    assert SECTIONS["context_status"] not in system_text and SECTIONS["scratchpad"] not in system_text
    assert SECTIONS["base_instructions"] in system_text
    last = body["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": f"{SECTIONS['scratchpad']}\n\n{SECTIONS['context_status']}"}
    assert "cache_control" in last[-2] and "cache_control" not in last[-1]
    assert count_cache_breakpoints(body) <= MAX_CACHE_BREAKPOINTS


def test_a_changed_context_status_keeps_the_previous_requests_cached_prefix_byte_stable():
    """What the provider caches ends at the last breakpoint: everything before it must not change
    when only the status changes between two calls."""

    def body(status: str, messages: list[Message]) -> dict:
        builder = PromptBuilder(TOK)
        builder.add("base_instructions", SECTIONS["base_instructions"])
        builder.add("context_status", status)
        return to_anthropic_request(builder.build(), messages, TOOLS, model="m", max_tokens=64)

    first_messages = [*history(), user("Now run the whole suite.")]
    first = body("Context: 41% used.", first_messages)
    second = body("Context: 57% used.", [*first_messages, assistant("Running."), user("And?")])

    def prefix(request: dict) -> str:
        # the request serialized up to and including the block that carries the conversation's breakpoint
        text = json.dumps({"system": request["system"], "tools": request["tools"]}, sort_keys=True)
        for message in request["messages"]:
            content = message["content"]  # the API reads a string as one text block: compare them so
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            for block in blocks:
                clean = (
                    {k: v for k, v in block.items() if k != "cache_control"}
                    if isinstance(block, dict)
                    else block
                )
                text += json.dumps(clean, sort_keys=True)
                if isinstance(block, dict) and "cache_control" in block:
                    return text
        return text

    assert prefix(second).startswith(prefix(first))
