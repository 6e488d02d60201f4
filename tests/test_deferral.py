"""Tool deferral: which tools wait behind tool_search, BM25 search over them, per-turn promotion."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_deferral_catalog import BUILTIN_TOOLS, MCP_TOOLS, catalog_specs

from engine.deferral import (
    TOOL_SEARCH_TOOL,
    DeferralPlan,
    ToolRegistry,
    ToolSpec,
    bm25f_scores,
    defer_or_load_all,
    deferral_budget,
    plan_deferral,
    run_tool_search_tool,
    search_tools,
    tokenize,
    tool_fields,
)
from engine.errors import ValidationError
from engine.tokens import get_tokenizer

TOK = get_tokenizer("cl100k_base")


def tool(
    name: str, description: str = "", *params: str, category: str = "mcp", used: int | None = None
) -> ToolSpec:
    """A tool whose definition costs more than tool_search's unless a description is given."""
    definition = {
        "name": name,
        "description": description or f"The {name} tool. " + "It does one useful thing well. " * 40,
        "input_schema": {"type": "object", "properties": {p: {"type": "string"} for p in params}},
    }
    return ToolSpec(definition=definition, category=category, last_used_turn=used)  # type: ignore[arg-type]


def cost(*specs: ToolSpec | dict[str, Any]) -> int:
    return sum(TOK.count_tool(s.definition if isinstance(s, ToolSpec) else s) for s in specs)


def names(specs: Any) -> list[str]:
    return [s.name for s in specs]


# -- plan_deferral -----------------------------------------------------------------------------


def test_under_budget_nothing_is_deferred_and_tool_search_is_not_added():
    specs = catalog_specs()
    plan = plan_deferral(specs, budget_tokens=cost(*specs), tokenizer=TOK)
    assert plan.deferred == ()
    assert names(plan.active) == names(specs)
    assert plan.note is None
    assert plan.tokens_before == plan.tokens_after == cost(*specs)


def test_over_budget_defers_mcp_first_and_adds_tool_search_with_a_note():
    specs = catalog_specs()
    builtin_and_skills = [s for s in specs if s.category != "mcp"]
    budget = cost(*builtin_and_skills, TOOL_SEARCH_TOOL) + 200
    plan = plan_deferral(specs, budget_tokens=budget, tokenizer=TOK)
    assert {s.category for s in plan.deferred} == {"mcp"}
    assert plan.active[-1].definition == TOOL_SEARCH_TOOL
    assert "tool_search" in names(plan.active)
    assert plan.tokens_after == cost(*plan.active) <= budget
    assert (
        plan.note == f"[{len(plan.deferred)} tools deferred to save context. Use tool_search to find them.]"
    )
    assert set(names(plan.active)) | set(plan.deferred_names) == {*names(specs), "tool_search"}


def test_builtin_tools_are_never_deferred_even_when_the_budget_cannot_be_met():
    specs = catalog_specs()
    plan = plan_deferral(specs, budget_tokens=0, tokenizer=TOK)
    assert names(plan.active) == [d["name"] for d in BUILTIN_TOOLS] + ["tool_search"]
    assert len(plan.deferred) == len(MCP_TOOLS) + 2
    assert plan.is_over_budget
    assert "still exceeds" in plan.reason


def test_skill_tools_are_deferred_only_after_every_mcp_tool():
    specs = [
        tool("a_skill", category="skill", used=None),
        tool("mcp__s__x", used=9),
        tool("mcp__s__y", used=8),
    ]
    budget = cost(TOOL_SEARCH_TOOL, specs[0]) - 1
    plan = plan_deferral(specs, budget_tokens=budget, tokenizer=TOK)
    assert plan.deferred_names == ["a_skill", "mcp__s__x", "mcp__s__y"]
    plan = plan_deferral(specs, budget_tokens=cost(TOOL_SEARCH_TOOL, specs[0]), tokenizer=TOK)
    assert sorted(plan.deferred_names) == ["mcp__s__x", "mcp__s__y"]


@pytest.mark.parametrize(
    ("used", "first_deferred"),
    [
        ({"mcp__a__t": 5, "mcp__b__t": None, "mcp__c__t": 2}, "mcp__b__t"),
        ({"mcp__a__t": 5, "mcp__b__t": 7, "mcp__c__t": 2}, "mcp__c__t"),
        ({"mcp__a__t": 1, "mcp__b__t": 1, "mcp__c__t": 1}, "mcp__a__t"),
    ],
    ids=["never-used-first", "least-recent-first", "ties-in-given-order"],
)
def test_least_recently_used_tools_are_deferred_first(used, first_deferred):
    specs = [tool(name, used=turn) for name, turn in used.items()]
    # Room for tool_search and two of the three: exactly one is deferred.
    budget = cost(TOOL_SEARCH_TOOL) + cost(*specs) - cost(specs[0])
    plan = plan_deferral(specs, budget_tokens=budget, tokenizer=TOK)
    assert plan.deferred_names == [first_deferred]


def test_deferral_stops_as_soon_as_under_budget():
    specs = [tool(f"mcp__s__t{i}") for i in range(10)]
    budget = cost(*specs) // 2
    plan = plan_deferral(specs, budget_tokens=budget, tokenizer=TOK)
    assert plan.tokens_after <= budget
    # One deferral fewer would not have fit.
    assert plan.tokens_after + cost(plan.deferred[-1]) > budget
    assert plan.deferred_names == [f"mcp__s__t{i}" for i in range(len(plan.deferred))]


def test_pinned_tools_stay_active():
    specs = [tool("mcp__s__a"), tool("mcp__s__b"), tool("mcp__s__c")]
    plan = plan_deferral(specs, budget_tokens=0, tokenizer=TOK, pinned_active=["mcp__s__b"])
    assert "mcp__s__b" in names(plan.active)
    assert plan.deferred_names == ["mcp__s__a", "mcp__s__c"]


def test_deferral_that_would_not_save_tokens_is_not_done():
    specs = [tool("shell", "Run " * 200, category="builtin"), tool("mcp__s__tiny", "x")]
    plan = plan_deferral(specs, budget_tokens=10, tokenizer=TOK)
    assert plan.deferred == ()
    assert "would not save" in plan.reason


def test_one_deferred_tool_is_named_in_the_singular():
    specs = [tool("mcp__s__big"), tool("keep", category="builtin")]
    plan = plan_deferral(specs, budget_tokens=cost(TOOL_SEARCH_TOOL, specs[1]), tokenizer=TOK)
    assert plan.note == "[1 tool deferred to save context. Use tool_search to find them.]"


@pytest.mark.parametrize(
    ("tools", "kwargs", "message"),
    [
        ([tool("a"), tool("a")], {"budget_tokens": 10}, "duplicate tool names"),
        ([tool("a")], {"budget_tokens": -1}, "budget_tokens must be >= 0"),
    ],
)
def test_plan_deferral_rejects_bad_input(tools, kwargs, message):
    with pytest.raises(ValidationError, match=message):
        plan_deferral(tools, tokenizer=TOK, **kwargs)


def test_deferral_budget_is_a_share_of_the_effective_window():
    assert deferral_budget(200_000) == 20_000
    assert deferral_budget(128_000, 0.25) == 32_000
    with pytest.raises(ValidationError):
        deferral_budget(100_000, 0)


categories = st.sampled_from(["builtin", "mcp", "skill"])
tool_lists = st.lists(
    st.tuples(categories, st.none() | st.integers(0, 20), st.integers(1, 60)), min_size=1, max_size=25
)


@settings(max_examples=150, deadline=None)
@given(tool_lists, st.integers(0, 3000))
def test_deferral_invariants(rows, budget):
    specs = [
        tool(f"t{i}", "word " * size, category=category, used=used)
        for i, (category, used, size) in enumerate(rows)
    ]
    plan = plan_deferral(specs, budget_tokens=budget, tokenizer=TOK)
    active, deferred = names(plan.active), plan.deferred_names
    assert set(active) - {"tool_search"} | set(deferred) == set(names(specs))
    assert not set(active) & set(deferred)
    assert all(s.category != "builtin" for s in plan.deferred)
    assert ("tool_search" in active) == bool(deferred)
    assert plan.tokens_after == cost(*plan.active)
    assert plan.tokens_after <= plan.tokens_before or not deferred
    if deferred:
        assert plan.tokens_after < plan.tokens_before
        # MCP before skills: a deferred skill means every MCP tool is deferred.
        if any(s.category == "skill" for s in plan.deferred):
            assert all(s.name in deferred for s in specs if s.category == "mcp")
        # Either it fits, or everything deferrable went.
        assert not plan.is_over_budget or all(s.name in deferred for s in specs if s.category != "builtin")


# -- tokenization and BM25 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        ("mcp__github__create_pull_request", ["mcp", "github", "create", "pull", "request"]),
        ("getUserProfile", ["user", "profile"]),
        ("HTTPServer dryRun", ["http", "server", "dry", "run"]),
        ("PR review comments", ["pull", "request", "review", "comment"]),
        ("list the repos and branches", ["list", "repository", "branch"]),
        ("queries of the DB", ["query", "database"]),
        ("status access analysis", ["status", "access", "analysis"]),
    ],
)
def test_tokenize_splits_names_folds_plurals_and_expands_abbreviations(text, terms):
    assert tokenize(text) == terms


def test_tool_fields_separate_name_server_parameters_and_description():
    fields = tool_fields(MCP_TOOLS[0])
    assert fields["name"] == ["create", "pull", "request"]
    assert fields["server"] == ["github"]
    assert {"owner", "repository", "title", "head", "base", "body", "draft"} <= set(fields["params"])
    assert "branch" in fields["description"]  # from the parameters' own descriptions


def test_a_word_in_the_name_outweighs_the_same_word_in_the_description():
    docs = [
        tool_fields(tool("mcp__x__archive", "Store old records.", "ids").definition),
        tool_fields(tool("mcp__x__store", "Archive a record for later.", "ids").definition),
        tool_fields(tool("mcp__x__other", "Nothing related.", "archive").definition),
    ]
    archive_name, archive_description, archive_param = bm25f_scores("archive", docs)
    assert archive_name > archive_param > archive_description > 0


def test_bm25_scores_are_zero_for_tools_sharing_no_term():
    docs = [tool_fields(d) for d in MCP_TOOLS]
    assert set(bm25f_scores("zebra quantum", docs)) == {0.0}
    assert bm25f_scores("anything", []) == []


MCP_SPECS = [ToolSpec.from_definition(d) for d in MCP_TOOLS]


@pytest.mark.parametrize(
    ("query", "expected_first"),
    [
        ("create a pull request", "mcp__github__create_pull_request"),
        ("PR review comments", "mcp__github__get_pull_request_comments"),
        ("merge PR", "mcp__github__merge_pull_request"),
        ("comment on an issue", "mcp__github__add_issue_comment"),
        ("run a sql query", "mcp__postgres__query"),
        ("list tables in the database", "mcp__postgres__list_tables"),
        ("send a message to a slack channel", "mcp__slack__post_message"),
        ("react with an emoji", "mcp__slack__add_reaction"),
        ("take a screenshot of the page", "mcp__playwright__browser_take_screenshot"),
        ("rename a file", "mcp__filesystem__move_file"),
        ("read a file", "mcp__filesystem__read_file"),
        ("what time is it in Tokyo", "mcp__time__convert_time"),
    ],
)
def test_search_ranks_the_intended_tool_first(query, expected_first):
    hits = search_tools(query, MCP_SPECS, k=5)
    assert hits[0].name == expected_first, [(h.name, h.score) for h in hits]
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)


def test_search_is_not_substring_matching():
    # Neither "PR" nor "review comments" occurs in the name; the description says
    # "pull request review comments".
    description = next(
        d["description"] for d in MCP_TOOLS if d["name"] == "mcp__github__get_pull_request_comments"
    )
    assert "PR review comments".lower() not in description.lower()
    assert "mcp__github__get_pull_request_comments" in names(
        h.spec for h in search_tools("PR review comments", MCP_SPECS)
    )


def test_search_for_nothing_related_returns_no_hits():
    assert search_tools("zebra quantum entanglement", MCP_SPECS) == []


# -- the registry ------------------------------------------------------------------------------


def registry(budget: int | None = None) -> ToolRegistry:
    specs = catalog_specs()
    builtins = [s for s in specs if s.category == "builtin"]
    return ToolRegistry(specs, tokenizer=TOK, budget_tokens=budget or cost(*builtins, TOOL_SEARCH_TOOL) + 50)


def test_registry_defers_on_creation_and_records_a_deferral_event():
    reg = registry()
    assert {s.name for s in reg.deferred} >= {d["name"] for d in MCP_TOOLS}
    (event,) = reg.plan_events
    assert (event.kind, event.outcome) == ("deferral", "deferred")
    assert event.details["tokens_after"] < event.details["tokens_before"]
    assert "mcp__github__create_pull_request" in event.details["deferred"]


def test_search_promotes_hits_for_the_current_turn_only():
    reg = registry()
    reg.start_turn(3)
    result = reg.search("create a pull request", k=2)
    assert result.hits[0].name == "mcp__github__create_pull_request"
    active = names(reg.active)
    assert "mcp__github__create_pull_request" in active
    assert "mcp__github__create_pull_request" not in names(reg.deferred)
    assert len(active) == len(set(active))
    assert result.event.kind == "tool_search"
    assert result.event.turn_index == 3
    assert result.event.details["query"] == "create a pull request"
    assert result.event.details["misses"] is False
    assert [h["name"] for h in result.event.details["hits"]] == [h.name for h in result.hits]
    assert all(h["score"] > 0 for h in result.event.details["hits"])

    reg.start_turn(4)
    assert "mcp__github__create_pull_request" not in names(reg.active)
    assert "mcp__github__create_pull_request" in names(reg.deferred)


def test_a_search_miss_is_recorded():
    reg = registry()
    result = reg.search("zebra quantum")
    assert result.hits == ()
    assert result.event.outcome == "miss"
    assert result.event.details == {
        "query": "zebra quantum",
        "hits": [],
        "misses": True,
        "deferred_count": len(reg.deferred),
    }
    assert "No deferred tools match" in result.text


def test_recently_used_tools_are_deferred_last_after_the_next_turn():
    specs = [tool("mcp__s__a"), tool("mcp__s__b")]
    reg = ToolRegistry(specs, tokenizer=TOK, budget_tokens=cost(TOOL_SEARCH_TOOL, specs[0]))
    assert reg.plan.deferred_names == ["mcp__s__a"]
    reg.record_use("mcp__s__a", 5)
    reg.start_turn(6)
    assert reg.plan.deferred_names == ["mcp__s__b"]


def test_tool_search_tool_returns_names_descriptions_and_schemas():
    reg = registry()
    text, events = run_tool_search_tool(reg, {"query": "create a pull request", "k": 1})
    assert text.startswith("1 tool found for 'create a pull request'")
    assert "## mcp__github__create_pull_request\nCreate a new pull request in a GitHub repository" in text
    assert '"required": ["owner", "repo", "title", "head", "base"]' in text
    assert [e.kind for e in events] == ["tool_search"]


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({}, "Error: tool_search query must be a non-empty string"),
        ({"query": "   "}, "Error: tool_search query must be a non-empty string"),
        ({"query": "pr", "k": 0}, "Error: k must be a positive integer"),
        ({"query": "pr", "k": "3"}, "Error: k must be a positive integer"),
        ("create", "Error: tool_search input must be an object"),
    ],
)
def test_tool_search_tool_returns_bad_input_as_text(tool_input, message):
    text, events = run_tool_search_tool(registry(), tool_input)
    assert text.startswith(message)
    assert events == []


def test_tool_search_definition_is_a_valid_tool():
    assert TOOL_SEARCH_TOOL["name"] == "tool_search"
    assert TOOL_SEARCH_TOOL["input_schema"]["required"] == ["query"]
    assert 0 < TOK.count_tool(TOOL_SEARCH_TOOL) < 300


# -- fallback ----------------------------------------------------------------------------------


def test_a_definition_that_cannot_be_tokenized_loads_all_tools_and_records_degraded():
    broken = ToolSpec(
        definition={"name": "mcp__odd__tool", "description": "x", "input_schema": {"enum": {1, 2}}},
        category="mcp",
    )
    specs = [*catalog_specs(), broken]
    with pytest.raises(ValidationError, match="tool definition 51 \\('mcp__odd__tool'\\) cannot be counted"):
        plan_deferral(specs, budget_tokens=100, tokenizer=TOK)
    plan, events = defer_or_load_all(specs, budget_tokens=100, tokenizer=TOK)
    assert isinstance(plan, DeferralPlan)
    assert names(plan.active) == names(specs)
    assert plan.deferred == () and plan.tokens_after is None
    (event,) = events
    assert (event.kind, event.outcome) == ("degraded", "all_tools_loaded")
    assert event.details["subsystem"] == "deferral"
    assert "mcp__odd__tool" in event.details["error"]


def test_registry_with_a_broken_definition_sends_every_tool():
    broken = ToolSpec(
        definition={"name": "mcp__odd__tool", "input_schema": {"default": object()}}, category="mcp"
    )
    reg = ToolRegistry([*catalog_specs(), broken], tokenizer=TOK, budget_tokens=0)
    assert len(reg.active) == len(catalog_specs()) + 1
    assert [e.kind for e in reg.plan_events] == ["degraded"]
