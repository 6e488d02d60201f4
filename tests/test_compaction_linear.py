"""The one-pass helpers compaction plans with agree with the definitions they replace.

Each helper answers, for every cut or text at once, what a direct per-cut (or per-regex)
computation would; these tests hold them to that definition on generated histories, messy ones
included (reused tool ids, results before their uses, pins anywhere).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.compaction import PlanContext, SummaryCache, extract, failures, offline_lines
from engine.compaction.cuts import fitting_cut
from engine.compaction.operations import history_seqs
from engine.compaction.result import pinned_in, pinned_tokens_before, snap_head_cut
from engine.compaction.strategies import prompt_pieces
from engine.messages import Message, TextBlock, ToolResultBlock, assistant, tool_result, tool_use, user
from engine.store import SessionStore
from engine.tokens import REPLY_PRIMING_TOKENS, get_tokenizer
from engine.turns import find_safe_boundary, is_safe_cut, safe_cut_points, turn_spans
from tests.strategies import HEAVY
from tests.test_compaction_properties import long_histories

TOKENIZER = get_tokenizer("chars/4")


def _pinned(message: Message, pin: bool) -> Message:
    return message.model_copy(update={"pinned": pin}) if pin else message


_ids = st.sampled_from("abc")
#: Messages with ids from a small pool (reused ids, results before uses, unanswered uses), any pinned.
messy_messages = st.builds(
    _pinned,
    st.one_of(
        st.text(min_size=1, max_size=12).map(user),
        st.text(max_size=12).map(assistant),
        st.lists(_ids, min_size=1, max_size=2).map(
            lambda ids: assistant("", *(tool_use(i, "bash", cmd="ls") for i in ids))
        ),
        _ids.map(lambda i: tool_result(i, "output " * 5)),
        _ids.map(
            lambda i: Message(
                role="user", content=[ToolResultBlock(tool_use_id=i, content="out"), TextBlock(text="and")]
            )
        ),
        _ids.map(lambda i: Message(role="tool", content=[ToolResultBlock(tool_use_id=i, content="out")])),
    ),
    st.booleans(),
)
histories = st.one_of(long_histories, st.lists(messy_messages, max_size=25))


# -- cuts ----------------------------------------------------------------------------------------


@HEAVY
@given(histories)
def test_pinned_tokens_before_is_pinned_in_at_every_cut(messages: list[Message]) -> None:
    tokens = [TOKENIZER.count_message(m) for m in messages]
    for cuts in (list(range(len(messages) + 1)), safe_cut_points(messages)):
        expected = [sum(tokens[i] for i in pinned_in(messages, 0, cut)) for cut in cuts]
        assert pinned_tokens_before(messages, cuts, tokens) == expected


@HEAVY
@given(histories, st.integers(1, 3), st.integers(0, 60), st.floats(0.05, 1.0))
def test_fitting_cut_is_the_first_cut_whose_kept_cost_fits(
    messages: list[Message], keep_turns: int, reserve: int, share: float
) -> None:
    tokens = [TOKENIZER.count_message(m) for m in messages]
    ctx = PlanContext(target_tokens=max(1, int(sum(tokens) * share)), tokenizer=TOKENIZER)
    spans = turn_spans(messages)
    limit = spans[-keep_turns][0] if len(spans) > keep_turns else -1
    cuts = [c for c in range(1, limit + 1) if is_safe_cut(messages, c)]

    def kept_cost(cut: int) -> int:
        pinned = sum(tokens[i] for i in pinned_in(messages, 0, cut))
        return sum(tokens[cut:]) + pinned + REPLY_PRIMING_TOKENS + reserve

    expected = next((c for c in cuts if kept_cost(c) <= ctx.target_tokens), cuts[-1]) if cuts else None
    assert fitting_cut(messages, ctx, keep_turns, reserve) == expected


@HEAVY
@given(histories, st.integers(-2, 30), st.sampled_from(["backward", "forward"]))
def test_snap_head_cut_keeps_a_safe_index_else_snaps_like_find_safe_boundary(
    messages: list[Message], index: int, prefer: str
) -> None:
    if 0 < index < len(messages) and is_safe_cut(messages, index):
        expected: int | None = index
    else:
        expected = find_safe_boundary(
            messages, index, prefer="forward" if prefer == "forward" else "backward"
        )
    assert snap_head_cut(messages, index, prefer=prefer) == expected
    assert snap_head_cut(messages, index, prefer=prefer, cuts=safe_cut_points(messages)) == expected


@HEAVY
@given(histories, st.integers(1, 400), st.integers(0, 300), st.sampled_from([0, 20, 200]))
def test_prompt_pieces_fold_every_message_in_order_each_piece_within_its_room(
    messages: list[Message], max_tokens: int, carry: int, result_chars: int
) -> None:
    ctx = PlanContext(target_tokens=1, tokenizer=TOKENIZER)
    pieces = prompt_pieces(
        messages, max_tokens=max_tokens, carry_tokens=carry, result_chars=result_chars, ctx=ctx
    )
    flat = [m for piece in pieces for m in piece]
    assert len(flat) == len(messages) and all(pieces)  # nothing dropped, no empty piece
    for original, sent in zip(messages, flat, strict=True):  # in order, each at most clipped
        assert (sent.role, sent.tool_use_ids, sent.tool_result_ids) == (
            original.role,
            original.tool_use_ids,
            original.tool_result_ids,
        )
    room = max(max_tokens - carry, max_tokens // 2, 1)
    for piece in pieces:
        assert len(piece) == 1 or TOKENIZER.count_messages(piece) <= room


def test_plan_context_finds_the_newest_cached_summary_of_a_range() -> None:
    old = SummaryCache("tree_summary", 0, 4, "OLD", 0, "offline")
    new = SummaryCache("tree_summary", 0, 4, "NEW", 0, "offline")
    other_level = SummaryCache("tree_summary", 0, 4, "LEVEL 1", 1, "offline")
    ctx = PlanContext(target_tokens=1, tokenizer=TOKENIZER, cache=(old, other_level, new))
    assert ctx.cached("tree_summary", 0, 4) is new
    assert ctx.cached("tree_summary", 0, 4, level=1) is other_level
    assert ctx.cached("tree_summary", 0, 5) is None
    assert ctx.cached("sandwich", 0, 4) is None


# -- mapping a snapshot back to transcript seqs ----------------------------------------------------


def same_message(a: Message, b: Message) -> bool:
    """The definition history_seqs matches by: same content, same id, or same role and tool ids."""
    if a.content_hash == b.content_hash or (a.id is not None and a.id == b.id):
        return True
    ids_a = {*a.tool_use_ids, *a.tool_result_ids}
    return bool(ids_a) and a.role == b.role and ids_a == {*b.tool_use_ids, *b.tool_result_ids}


def reference_seqs(transcript: list[Message], history: list[Message], through: int) -> list[int | None]:
    """history_seqs by its definition: each snapshot message takes the first match after the last."""
    covered, later = transcript[: through + 1], list(range(through + 1, len(transcript)))
    seqs: list[int | None] = []
    cursor = 0
    for message in history[: len(history) - len(later)]:
        found = next((k for k in range(cursor, len(covered)) if same_message(message, covered[k])), None)
        seqs.append(found)
        cursor = cursor if found is None else found + 1
    return [*seqs, *later]


def cleared(message: Message) -> Message:
    """A copy with its tool results replaced, as clear_tool_results leaves it (same tool ids)."""
    blocks = [
        ToolResultBlock(tool_use_id=b.tool_use_id, content="[cleared]")
        if isinstance(b, ToolResultBlock)
        else b
        for b in message.blocks
    ]
    return message.with_content(blocks)


@settings(HEAVY, max_examples=40)
@given(st.lists(messy_messages, min_size=1, max_size=20), st.data())
def test_history_seqs_takes_the_first_match_after_the_last(
    tmp_path_factory: pytest.TempPathFactory, transcript: list[Message], data: st.DataObject
) -> None:
    transcript = [m.model_copy(update={"id": f"m{i}"}) if i % 3 == 0 else m for i, m in enumerate(transcript)]
    through = data.draw(st.integers(0, len(transcript) - 1))
    covered = st.integers(0, through).map(lambda k: transcript[k])
    picks = st.one_of(
        covered,  # the same message
        covered.map(lambda m: m.with_content("edited")),  # matched by id only, if it has one
        covered.map(cleared),  # matched by role and tool ids
        messy_messages,  # matched by content at most
    )
    snapshot = data.draw(st.lists(picks, max_size=20))
    history = [*snapshot, *transcript[through + 1 :]]
    with SessionStore(tmp_path_factory.mktemp("seqs") / "sessions.db") as store:
        session = store.create_session()
        store.append_messages(session, transcript, tokenizer=TOKENIZER)
        assert history_seqs(store, session, history, through) == reference_seqs(transcript, history, through)


# -- the offline summarizer's prefiltered patterns ---------------------------------------------------

PREFILTERED = {
    f"{module.__name__}.{name}": value
    for module in (offline_lines, failures)
    for name, value in vars(module).items()
    if isinstance(value, extract.Prefiltered)
}
#: One phrase per alternative of the prefiltered regexes, written from the regexes, not the needles.
PHRASES = (
    *("must", "must not", "mustn't", "never", "always", "do not", "don't", "should not", "shouldn't"),
    *("make sure", "ensure", "require", "requires", "required", "requirement", "only use", "avoid"),
    *("prefer", "no more than", "at most", "at least", "without", "keep it", "keep the", "keep them"),
    *("keep all", "stick to", "not allowed", "forbidden"),
    *("decided", "decide to", "decision", "go with", "going with", "went with", "chose", "choose"),
    *("chosen", "opted", "opt for", "settled on", "will use", "we'll use", "i'll use", "let's use"),
    *("use sqlite instead", "instead of", "switch to", "switched to", "switching to", "moving to"),
    *("migrate to", "migrated to", "migrating to", "the plan is", "approach is", "agreed"),
    *("TODO", "FIXME", "next step", "next steps", "still need to", "still have to", "remaining"),
    *("left to do", "follow-up", "follow up", "not done", "not yet done", "- [ ]"),
    *("need to", "needs to", "I'll", "I will", "we'll", "we will", "will add", "will write", "will update"),
    *("will fix", "will implement", "will run", "will check", "later", "afterwards", "then I"),
    *("fix", "fixed", "fixes", "resolved", "resolves", "solved", "the issue was", "the problem is"),
    *("the cause was", "the bug is", "caused by", "because", "root cause", "changed", "updated"),
    *("added", "installed", "renamed", "works now", "passes now", "now passing", "workaround"),
    *("command not found", "No such file or directory", "Permission denied", "exit code 2"),
    *("exit status 3", "exit status 0", "Process exited with code 1", "Exit Code: 2", "error TS2345:"),
    *("still to do", "to-do"),
)
#: Pieces that make texts near a match: phrases in other cases, word edges, and characters that
#: match ASCII letters case-insensitively without being ASCII (long s, Kelvin sign, dotted I).
PIECES = st.one_of(
    st.sampled_from(PHRASES),
    st.sampled_from(PHRASES).map(str.upper),
    st.sampled_from(PHRASES).map(str.title),
    st.sampled_from([" ", "", "x", "_", "-", ".", "?", "/", "\t", "ſ", "K", "İ", "é", "1", "0", ":"]),
    st.text(max_size=4),
)
texts = st.lists(PIECES, max_size=8).map("".join)


@pytest.mark.parametrize("name", sorted(PREFILTERED))
@settings(HEAVY, max_examples=400)
@given(text=texts)
def test_a_prefiltered_pattern_finds_what_its_regex_finds(name: str, text: str) -> None:
    pattern = PREFILTERED[name]
    found, expected = pattern.search(text), pattern.regex.search(text)
    assert (found and found.group()) == (expected and expected.group())


@pytest.mark.parametrize("name", sorted(PREFILTERED))
@settings(HEAVY, max_examples=200)
@given(sentences=st.lists(texts, max_size=4))
def test_searching_the_sentences_of_a_text_finds_what_the_regex_finds(
    name: str, sentences: list[str]
) -> None:
    pattern = PREFILTERED[name]
    text = ". ".join(sentences)
    search = pattern.within(text.lower() if text.isascii() else None)
    for piece in [*offline_lines._sentences(text), *sentences, text]:
        found, expected = search(piece), pattern.regex.search(piece)
        assert (found and found.group()) == (expected and expected.group())


KNOWN_SENTENCES = (
    "We decided to use sqlite.",
    "we'LL USE the cache instead.",
    "ſtill need to add the test.",  # a long s: matches case-insensitively, and is not ASCII
    "nothing to see here",
)


@pytest.mark.parametrize(
    "text",
    [*PHRASES, *map(str.upper, PHRASES), *(f"so {p}, ok" for p in PHRASES), *KNOWN_SENTENCES],
)
def test_prefiltered_patterns_agree_on_every_alternative(text: str) -> None:
    for pattern in PREFILTERED.values():
        assert bool(pattern.search(text)) == bool(pattern.regex.search(text)), pattern.regex.pattern
