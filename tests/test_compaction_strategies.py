"""Each compaction strategy as a pure plan: table-driven cases with tiny message builders."""

from __future__ import annotations

import json
from collections.abc import Sequence

import pytest

from engine.compaction import (
    Chain,
    ClearToolResults,
    CompactionResult,
    OfflineSummarizer,
    PlanContext,
    RollingIterations,
    Sandwich,
    SummaryCache,
    TreeSummary,
    compact,
    parse_strategy,
    plan_compaction,
)
from engine.compaction.result import is_summary_message, measure
from engine.errors import SummarizerUnavailableError, ValidationError
from engine.messages import (
    DocumentBlock,
    ImageBlock,
    Message,
    TextBlock,
    ToolResultBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)
from engine.tokens import get_tokenizer
from engine.turns import has_orphans, is_safe_cut

TOKENIZER = get_tokenizer("o200k_base")
BIG = "0123456789 abcdefghij " * 120  # ~1,000 tokens of tool output


class RecordingSummarizer:
    """A summarizer double that records what it was asked and answers with a fixed text."""

    name = "recording"

    def __init__(self, text: str = "SUMMARY", *, fail: Exception | None = None) -> None:
        self.text = text
        self.fail = fail
        self.calls: list[tuple[list[Message], str | None, int]] = []

    def summarize(
        self, messages: Sequence[Message], *, instructions: str | None = None, max_tokens: int = 2000
    ):
        self.calls.append((list(messages), instructions, max_tokens))
        if self.fail:
            raise self.fail
        return self.text


def turn(n: int, *, tools: int = 1, size: str = BIG, pinned: bool = False) -> list[Message]:
    """One turn: a user request, ``tools`` tool rounds with big results, a closing reply."""
    out = [user(f"request {n}", pinned=pinned)]
    for k in range(tools):
        tid = f"t{n}_{k}"
        out.append(
            assistant(f"calling tool {k}", tool_use(tid, "shell_exec", command=f"cat file_{n}_{k}.txt"))
        )
        out.append(tool_result(tid, size))
    out.append(assistant(f"reply {n}"))
    return out


def history(turns: int, **kwargs) -> list[Message]:
    return [m for n in range(turns) for m in turn(n, **kwargs)]


def plan(messages, strategy, *, target: int, summarizer=None, summary=None, seqs=None, cache=(), window=None,
         instructions=None, **settings) -> CompactionResult:  # fmt: skip
    ctx = PlanContext(
        target_tokens=target,
        tokenizer=TOKENIZER,
        summarizer=summarizer or RecordingSummarizer(),
        summary=summary,
        instructions=instructions,
        seqs=seqs,
        cache=tuple(cache),
        context_window=window,
    )
    return plan_compaction(messages, parse_strategy(strategy, **settings), ctx)


def tokens(messages) -> int:
    return measure(messages, None, TOKENIZER).total


def check_result(messages: list[Message], result: CompactionResult, summary: str | None = None) -> None:
    """Invariants every plan keeps."""
    assert not has_orphans(result.messages)
    assert list(result.source_indices) == sorted(result.source_indices)
    assert set(result.removed).isdisjoint(result.source_indices)
    assert set(result.removed) | set(result.source_indices) == set(range(len(messages)))
    assert result.before_tokens == measure(messages, summary, TOKENIZER).total
    assert result.after_tokens == measure(result.messages, result.summary, TOKENIZER).total
    assert result.after_count == len(result.messages)
    assert not any(is_summary_message(m) for m in result.messages)
    for i, m in zip(result.source_indices, result.messages, strict=True):
        if i not in result.cleared:
            assert m == messages[i]


# -- clear_tool_results ----------------------------------------------------------------------------


def test_clear_tool_results_writes_the_documented_placeholder():
    messages = history(4)
    result = plan(
        messages, "clear_tool_results", target=tokens(messages) - 500, keep=1, seqs=list(range(100, 116))
    )
    check_result(messages, result)
    first = result.messages[2].content[0]
    size = len(BIG.encode())
    assert first.text == (
        f'[Tool result cleared — {size:,} bytes from "shell_exec" (transcript seq 102). '
        "Ask to re-run or use read_result if it was stored.]"
    )
    assert first.tool_use_id == "t0_0"
    assert result.cleared == (2,)
    assert result.removed == ()
    assert result.summary is None
    assert result.strategies_run == ("clear_tool_results",)


def test_clear_tool_results_clears_oldest_first_only_as_much_as_needed():
    messages = history(4)
    result = plan(messages, "clear_tool_results", target=tokens(messages) - 1500, keep=0)
    assert result.cleared == (2, 6)
    assert result.fits


def test_clear_tool_results_never_clears_the_most_recent_tool_uses():
    messages = history(4)
    result = plan(messages, "clear_tool_results", target=100, keep=2)
    assert result.cleared == (2, 6)  # t2_0 and t3_0 are the two most recent uses
    assert not result.fits


@pytest.mark.parametrize(
    ("settings", "reason"),
    [
        ({"exclude_tools": ["shell_exec"]}, "no tool results eligible"),
        ({"clear_at_least": 50_000}, "less than clear_at_least"),
        ({"trigger": {"type": "input_tokens", "value": 100_000}}, "below trigger"),
        ({"keep": {"type": "tool_uses", "value": 10}}, "no tool results eligible"),
    ],
    ids=["excluded-tool", "clear-at-least", "anthropic-shaped-trigger", "keep-all"],
)
def test_clear_tool_results_noops_with_a_reason(settings, reason):
    messages = history(4)
    result = plan(messages, "clear_tool_results", target=100, **settings)
    assert result.noop
    assert reason in result.reason
    assert result.messages == tuple(messages)


def test_clear_tool_results_can_clear_inputs_too():
    write = tool_use("w1", "write_file", path="notes.md", content="x" * 2000)
    messages = [user("write it"), assistant("", write), tool_result("w1", BIG), *history(2)]
    result = plan(messages, "clear_tool_results", target=100, keep=0, clear_tool_inputs=["write_file"])
    size = len(json.dumps(write.input, ensure_ascii=False))
    assert result.messages[1].content[0].input == {"_cleared": f"input of {size:,} bytes cleared"}
    assert result.messages[4] == messages[4]  # shell_exec inputs are not in the list
    assert 1 in result.cleared
    assert not has_orphans(result.messages)


def test_clear_tool_results_keeps_a_pinned_result_verbatim():
    messages = history(3)
    messages[2] = messages[2].model_copy(update={"pinned": True})
    result = plan(messages, "clear_tool_results", target=100, keep=0)
    assert result.messages[2] == messages[2]
    assert 2 not in result.cleared


# -- summarize / truncate / sliding_window ------------------------------------------------------------


def test_summarize_keeps_the_summary_apart_from_the_history():
    messages = history(6)
    summarizer = RecordingSummarizer("## Decisions\n- use X")
    result = plan(messages, "summarize", target=tokens(messages) // 2, summarizer=summarizer)
    check_result(messages, result)
    assert result.summary == "## Decisions\n- use X"
    assert all("use X" not in m.text for m in result.messages)
    assert is_safe_cut(messages, result.source_indices[0])
    assert result.removed == tuple(range(result.source_indices[0]))
    assert result.fits
    assert result.summarizer == "recording"
    assert result.after_components.summary == TOKENIZER.count("## Decisions\n- use X")


def test_summarize_passes_instructions_and_folds_in_the_earlier_summary():
    messages = history(4)
    summarizer = RecordingSummarizer()
    result = plan(
        messages, "summarize", target=3000, summarizer=summarizer, summary="OLD", instructions="focus on API"
    )
    (sent, instructions, max_tokens) = summarizer.calls[0]
    assert instructions == "focus on API"
    assert is_summary_message(sent[0]) and sent[0].text == "OLD"
    assert max_tokens == 3000 - tokens(result.messages)  # what the kept turns leave of the target


@pytest.mark.parametrize("share", [0.1, 0.25, 0.5])
def test_summarize_lands_within_the_target_at_every_ratio(share):
    messages = history(12, tools=2)
    target = int(tokens(messages) * share)
    result = compact(messages, strategy="summarize", target_tokens=target, tokenizer=TOKENIZER)
    assert result.fits
    assert result.after_tokens >= 0.6 * target  # the summary takes the room the kept turns leave


def test_summarize_cannot_cut_a_single_turn():
    messages = turn(0, tools=5)
    result = plan(messages, "summarize", target=100)
    assert result.noop
    assert "no safe turn boundary" in result.reason


def test_summarize_caches_its_head_and_a_later_run_folds_in_only_new_messages():
    messages = history(12)
    first = RecordingSummarizer("FIRST")
    done = plan(messages, "summarize", target=tokens(messages) // 3, summarizer=first)
    (entry,) = done.cache
    assert (entry.strategy, entry.range_start, entry.range_end) == ("summarize", 0, done.source_indices[0])
    grown = [*messages, *history(16)[48:]]
    again = RecordingSummarizer("SECOND")
    later = plan(grown, "summarize", target=tokens(messages) // 3, summarizer=again, cache=[entry])
    (sent, _, _) = again.calls[0]
    assert is_summary_message(sent[0]) and sent[0].text == "FIRST"
    assert sent[1:] == grown[entry.range_end : later.source_indices[0]]  # nothing before the cached range
    assert later.summary == "SECOND" and "cached summary of the first" in later.reason


def test_chain_does_not_clear_results_a_summary_replaces():
    messages = history(40)
    result = plan(messages, "chain", target=tokens(messages) // 10, summarizer=OfflineSummarizer(TOKENIZER))
    check_result(messages, result)
    assert result.strategies_run[:2] == ("clear_tool_results", "summarize") and result.fits
    cleared_at = [
        int(r.split("cleared ")[1].split(" ")[0]) for r in result.reason.split("; ") if "cleared " in r
    ]
    assert cleared_at and cleared_at[0] < 40  # only results of the tail that could be kept


def test_summarizer_failure_propagates_and_leaves_the_input_alone():
    messages = history(4)
    before = [m.model_copy() for m in messages]
    failing = RecordingSummarizer(fail=SummarizerUnavailableError("down", summarizer="x", status=529))
    with pytest.raises(SummarizerUnavailableError):
        plan(messages, "summarize", target=100, summarizer=failing)
    assert messages == before


def test_pinned_messages_inside_the_summarized_range_stay_in_place():
    messages = history(2) + turn(2, pinned=True) + history(3)[8:]
    result = plan(messages, "summarize", target=1200)
    check_result(messages, result)
    kept_pinned = [m for m in result.messages if m.pinned]
    assert kept_pinned == [messages[8]]
    assert result.messages[0] == messages[8]
    sent = RecordingSummarizer()
    plan(messages, "summarize", target=1200, summarizer=sent)
    assert messages[8] not in sent.calls[0][0]


def test_truncate_drops_oldest_turns_without_summary():
    messages = history(6)
    result = plan(messages, "truncate", target=tokens(messages) // 2, summary="kept summary")
    check_result(messages, result, summary="kept summary")
    assert result.summary == "kept summary"
    assert result.fits
    assert result.messages[-1] == messages[-1]


def test_sliding_window_snaps_to_a_turn():
    messages = history(5)  # 4 messages per turn
    result = plan(messages, "sliding_window", target=10, keep_messages=6)
    check_result(messages, result)
    assert result.source_indices[0] == 12  # 20 - 6 = 14 snapped back to the turn start at 12
    assert result.reason.startswith("kept the last 8 messages")


# -- sandwich ----------------------------------------------------------------------------------------


def test_sandwich_keeps_top_and_bottom_and_summarizes_the_middle():
    messages = history(6)  # 24 messages
    result = plan(messages, "sandwich", target=tokens(messages) // 2, preserve_top=4, preserve_bottom=4)
    check_result(messages, result)
    start = result.source_indices[4]
    assert result.source_indices == (0, 1, 2, 3, *range(start, 24))
    assert start <= 20  # at least the last 4, grown back to use the target
    assert result.cache == (SummaryCache("sandwich", 4, start, "SUMMARY", 0, "recording"),)


@pytest.mark.parametrize("share", [0.25, 0.5])
def test_sandwich_grows_its_bottom_to_use_the_target(share):
    messages = history(16, tools=2)
    target = int(tokens(messages) * share)
    result = compact(messages, strategy="sandwich", target_tokens=target, tokenizer=TOKENIZER)
    assert result.fits
    assert result.after_tokens >= 0.6 * target


def test_sandwich_snaps_edges_so_no_tool_pair_is_split():
    messages = history(6)
    result = plan(messages, "sandwich", target=100, preserve_top=2, preserve_bottom=2)
    # Edges 2 and 22 would each split a tool_use (1, 21) from its result (2, 22): keep the pairs.
    assert result.cache[0].range_start == 3
    assert result.cache[0].range_end == 21
    assert not has_orphans(result.messages)


def test_sandwich_reuses_the_cached_summary_only_for_the_exact_range():
    messages = history(6)
    cached = SummaryCache("sandwich", 5, 19, "CACHED", 0, "recording")
    summarizer = RecordingSummarizer()
    hit = plan(messages, "sandwich", target=100, cache=[cached], summarizer=summarizer)
    assert hit.summary == "CACHED"
    assert summarizer.calls == []
    grown = [*messages, *turn(6)]
    miss = plan(grown, "sandwich", target=100, cache=[cached], summarizer=summarizer)
    assert miss.summary == "SUMMARY"
    assert len(summarizer.calls) == 1
    assert miss.cache[0].range_end == len(grown) - 5


def test_sandwich_waits_for_its_trigger_share_of_the_window():
    messages = history(6)
    total = tokens(messages)
    below = plan(messages, "sandwich", target=100, window=int(total / 0.69))
    above = plan(messages, "sandwich", target=100, window=int(total / 0.71))
    assert below.noop and "below trigger" in below.reason
    assert not above.noop


# -- rolling_iterations / tree_summary -----------------------------------------------------------------


def test_rolling_iterations_keeps_the_last_n_raw_and_caches_the_fold():
    messages = history(8)
    result = plan(messages, "rolling_iterations", target=100, keep_iterations=3)
    assert result.source_indices[0] == 20
    assert result.cache == (SummaryCache("rolling_iterations", 0, 20, "SUMMARY", 0, "recording"),)


def test_rolling_iterations_reuses_its_summary_until_k_more_iterations_pile_up():
    config = RollingIterations(keep_iterations=2, resummarize_every=3)
    cached = SummaryCache("rolling_iterations", 0, 8, "CACHED", 0, "recording")
    summarizer = RecordingSummarizer("NEW")
    reuse = plan(history(6), config, target=100, cache=[cached], summarizer=summarizer)  # 4 raw < 2 + 3
    assert reuse.summary == "CACHED" and summarizer.calls == []
    assert reuse.source_indices[0] == 8
    refresh = plan(history(7), config, target=100, cache=[cached], summarizer=summarizer)  # 5 raw
    assert refresh.summary == "NEW"
    assert refresh.source_indices[0] == 20
    (sent, _, _) = summarizer.calls[0]
    assert sent[0].text == "CACHED" and sent[1] == history(7)[8]


def test_rolling_iterations_truncates_the_summarizer_prompt():
    summarizer = RecordingSummarizer()
    plan(history(6), "rolling_iterations", target=100, keep_iterations=1, tool_result_max_chars=100,
         prompt_max_tokens=100_000, summarizer=summarizer)  # fmt: skip
    (sent, _, _) = summarizer.calls[0]
    results = [b for m in sent for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert results and all(len(b.text) < 200 for b in results)
    tight = RecordingSummarizer()
    plan(
        history(6),
        "rolling_iterations",
        target=100,
        keep_iterations=1,
        prompt_max_tokens=300,
        summarizer=tight,
    )
    assert TOKENIZER.count_messages(tight.calls[0][0]) <= 300


def test_rolling_iterations_folds_in_pieces_and_drops_nothing():
    messages = history(40)  # 160 messages
    tight = RecordingSummarizer()
    result = plan(messages, "rolling_iterations", target=100, keep_iterations=4, prompt_max_tokens=3_000,
                  summarizer=tight)  # fmt: skip
    assert len(tight.calls) > 1 and "pieces" in result.reason
    assert all(TOKENIZER.count_messages(sent) <= 3_000 for sent, _, _ in tight.calls)
    folded = [m for sent, _, _ in tight.calls for m in sent if not is_summary_message(m)]
    assert len(folded) == result.source_indices[0] == 144  # every older message, none dropped
    assert all(is_summary_message(sent[0]) for sent, _, _ in tight.calls[1:])  # each piece carries the last
    offline = plan(messages, "rolling_iterations", target=100, keep_iterations=4, prompt_max_tokens=3_000,
                   summarizer=OfflineSummarizer(TOKENIZER))  # fmt: skip
    assert "(144 messages" in offline.summary


def test_tree_summary_records_levels_and_reuses_cached_leaves():
    messages = history(10)
    config = TreeSummary(leaf_turns=2, fanout=2, keep_recent_turns=2)
    first = plan(messages, config, target=100)
    levels = sorted({e.level for e in first.cache})
    assert levels == [0, 1, 2]
    leaves = [e for e in first.cache if e.level == 0]
    assert [(e.range_start, e.range_end) for e in leaves] == [(0, 8), (8, 16), (16, 24), (24, 32)]
    assert first.source_indices[0] == 32
    summarizer = RecordingSummarizer()
    plan(messages, config, target=100, cache=first.cache, summarizer=summarizer)
    assert summarizer.calls == []


# -- emergency ----------------------------------------------------------------------------------------


def test_emergency_drops_about_half_the_turns_and_notes_it():
    messages = history(6)
    result = plan(messages, "emergency", target=10**9, summary="earlier")
    check_result(messages, result, summary="earlier")
    assert result.source_indices[0] == 12  # 3 of 6 turns dropped, regardless of the target
    assert result.summary.startswith("earlier\n\n[Context compressed after a provider context-length error")


def test_emergency_keeps_media_references():
    image = ImageBlock(source={"type": "url", "url": "https://example.com/shot.png"})
    doc = DocumentBlock(source={"type": "file", "file_id": "file_abc"}, title="spec.pdf")
    messages = [
        Message(role="user", content=[TextBlock(text="look"), image, doc]),
        assistant("ok"),
        *history(3),
    ]
    result = plan(messages, "emergency", target=100)
    assert "- Dropped image (url https://example.com/shot.png) from message 0." in result.summary
    assert '- Dropped document "spec.pdf" (file file_abc) from message 0.' in result.summary


def test_emergency_on_one_unsplittable_turn_keeps_only_the_latest_user_message():
    messages = turn(0, tools=4)
    result = plan(messages, "emergency", target=100)
    assert result.messages == (messages[0],)
    assert "kept only the most recent user message" in result.reason


# -- chain ---------------------------------------------------------------------------------------------


def test_chain_stops_once_the_history_fits():
    messages = history(6)
    result = plan(messages, "chain", target=tokens(messages) - 1500)
    assert result.strategies_run == ("clear_tool_results",)
    assert result.fits


def test_chain_reports_each_strategy_that_ran_and_maps_indices_to_the_input():
    messages = history(8)
    result = plan(messages, "chain", target=1200)
    check_result(messages, result)
    assert result.strategies_run[:2] == ("clear_tool_results", "summarize")
    assert result.summary == "SUMMARY"
    assert set(result.cleared) <= set(result.source_indices)
    assert "clear_tool_results: cleared" in result.reason


def test_chain_with_custom_steps():
    chain = Chain(
        steps=[ClearToolResults(keep=0, exclude_tools=["shell_exec"]), Sandwich(preserve_top=1)],
        cut_inside_turns=False,
    )
    messages = history(5)
    result = plan(messages, chain, target=100)
    assert result.strategies_run == ("sandwich",)
    assert result.reason.startswith("clear_tool_results: no tool results eligible")


def test_every_step_a_noop_is_a_noop_chain():
    messages = turn(0, tools=3)
    chain = Chain(steps=[ClearToolResults(keep=10), Sandwich()], cut_inside_turns=False)
    result = plan(messages, chain, target=10)
    assert result.noop and result.strategies_run == ()


def test_chain_cuts_inside_a_last_turn_that_alone_exceeds_the_target():
    messages = [user("Port the exporter to the v2 API.")]
    for k in range(22):  # one 45-message turn of ~30k tokens; clearing its results is not enough
        call = tool_use(f"t{k}", "bash", command=f"make step{k}")
        messages += [assistant(f"step {k}: {BIG[:1200]}", call), tool_result(f"t{k}", BIG)]
    messages.append(assistant("All steps done."))
    target = 4_000
    assert tokens(messages[-3:]) < target < tokens(messages)
    result = plan(messages, "chain", target=target, summarizer=OfflineSummarizer(TOKENIZER))
    check_result(messages, result)
    assert result.fits
    assert result.messages[0] == messages[0]  # the turn's request is kept beside the cut
    assert result.messages[-1] == messages[-1]
    assert "cutting inside a turn" in result.reason
    dropped = compact(messages, strategy="chain", target_tokens=target, tokenizer=TOKENIZER, summarizer=None)
    assert dropped.fits and not has_orphans(dropped.messages)


def test_chain_summarizes_a_last_turns_request_that_alone_exceeds_the_target():
    # A pasted continuation summary opens the last turn and is alone over the target: the cut
    # inside the turn drops it into the summary instead of keeping it and starving the summary.
    messages = [
        *history(4),
        user(
            "Carry on from here. "
            + " ".join(f"note{k} the exporter uses port {8000 + k}" for k in range(400))
        ),
        assistant("reading", tool_use("last", "read_file", path="util.py")),
        tool_result("last", "def helper(x): return x * 2"),
        assistant("util.py doubles x."),
    ]
    target = 1_500
    assert tokens(messages[-4:-3]) > target
    result = plan(messages, "chain", target=target, summarizer=OfflineSummarizer(TOKENIZER))
    check_result(messages, result)
    assert result.fits
    assert messages[-4] not in result.messages
    assert result.messages[-3:] == tuple(messages[-3:])  # the tool pair stays together
    assert "Carry on from here" in result.summary
    recording = RecordingSummarizer()
    plan(messages, "chain", target=target, summarizer=recording)
    assert recording.calls[-1][2] > target // 2  # the summary gets what the tail leaves, not a floor


# -- compact() -----------------------------------------------------------------------------------------


def test_compact_defaults_to_half_the_tokens_with_the_offline_summarizer():
    messages = history(6)
    result = compact(messages, summarizer=OfflineSummarizer())
    assert result.target_tokens == result.before_tokens // 2
    assert result.fits
    assert compact(messages, strategy="summarize").summarizer == "offline"  # no API key in tests


def test_compact_counts_with_the_models_tokenizer():
    messages = history(3)
    claude = compact(messages, model="claude-sonnet-4-5", strategy="truncate")
    gpt = compact(messages, model="gpt-4o", strategy="truncate")
    assert claude.before_tokens == get_tokenizer("anthropic").count_messages(messages)
    assert gpt.before_tokens == get_tokenizer("o200k_base").count_messages(messages)


@pytest.mark.parametrize(
    ("messages", "kwargs", "field"),
    [
        ([], {}, "messages"),
        (history(2), {"target_tokens": 0}, "target_tokens"),
        (history(2), {"strategy": "shrink"}, "strategy"),
        (history(2), {"strategy": "sandwich", "preserve_top": -1}, "preserve_top"),
        (history(2), {"strategy": "summarize", "bogus": 1}, "bogus"),
    ],
    ids=["empty", "zero-target", "unknown-strategy", "bad-setting", "unknown-setting"],
)
def test_compact_rejects_bad_input(messages, kwargs, field):
    with pytest.raises(ValidationError) as info:
        compact(messages, **kwargs)
    assert info.value.field == field


def test_strategy_configs_read_like_anthropic_context_editing():
    config = parse_strategy(
        {
            "type": "clear_tool_results",
            "trigger": {"type": "input_tokens", "value": 30_000},
            "keep": {"type": "tool_uses", "value": 3},
            "clear_at_least": {"type": "input_tokens", "value": 5_000},
            "exclude_tools": ["web_search"],
            "clear_tool_inputs": False,
        }
    )
    assert config == ClearToolResults(
        trigger=30_000, keep=3, clear_at_least=5_000, exclude_tools=("web_search",)
    )
    assert parse_strategy("chain").steps == (
        ClearToolResults(),
        parse_strategy("summarize"),
        parse_strategy("truncate"),
    )


def test_tool_result_media_survives_clearing_as_a_size():
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "A" * 8000})
    messages = [
        user("shoot"),
        assistant("", tool_use("s1", "screenshot")),
        Message(role="user", content=[ToolResultBlock(tool_use_id="s1", content=[image])]),
        *history(2),
    ]
    result = plan(messages, "clear_tool_results", target=100, keep=0)
    assert result.messages[2].content[0].text.startswith("[Tool result cleared — 8,")


def test_a_cleared_failing_result_keeps_its_error_line():
    trace = (
        "Traceback (most recent call last):\n  File \"a.py\", line 3\nKeyError: 'tenant_42'\n" + "x\n" * 800
    )
    messages = [user("run"), assistant("", tool_use("e1", "bash", command="make")), tool_result("e1", trace, is_error=True),
                *history(2)]  # fmt: skip
    result = plan(messages, "clear_tool_results", target=100, keep=0)
    text = result.messages[2].content[0].text
    assert text.startswith("[Tool result cleared — ")
    assert 'from "bash" (message 2), which failed with "KeyError: \'tenant_42\'". Ask to re-run' in text


def test_default_target_is_half_the_tokens_capped_at_half_the_known_window():
    from engine.compaction.operations import default_target, model_window

    window = model_window("gpt-4o")
    assert window and window > 0
    assert default_target(40_000, "gpt-4o") == 20_000
    assert default_target(10 * window, "gpt-4o") == window // 2
    assert default_target(10 * window, "no-such-model-xyz") == 5 * window
    assert default_target(10 * window, None) == 5 * window


def test_default_summarizer_is_offline_without_a_key_and_anthropic_with_one():
    from engine.compaction import AnthropicSummarizer, default_summarizer

    assert isinstance(default_summarizer({}), OfflineSummarizer)
    with_key = default_summarizer({"ANTHROPIC_API_KEY": "sk-test"})
    assert isinstance(with_key, AnthropicSummarizer)
    with_key.close()
