"""Findings: each detector on tiny stored sessions (real SQLite, real tiktoken), then on real ones."""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError as PydanticValidationError

from engine.events import ComponentTokens, ContextEvent, ProviderUsage
from engine.findings import (
    ENGINE_TOOL_NAMES,
    MIN_FINDING_TOKENS,
    Finding,
    analyze,
    call_target,
    constraint_sentences,
    find_waste,
    key_terms,
    load_session_view,
    tool_calls,
)
from engine.importers import import_file
from engine.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)
from engine.store import SessionStore, ToolRecord
from engine.tokens import get_tokenizer

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "reports"
CLAUDE_FIXTURE = FIXTURES / "claude-code__fe5e1c67__agent2.jsonl"
OPENHANDS_FIXTURE = FIXTURES / "openhands__ponyc-4595__head12.jsonl"
SHARED_SESSIONS = Path(__file__).resolve().parents[1].parent / "shared" / "sessions"

#: ~1,500 bytes of code-like text: worth a finding, under the 4,096-byte offload threshold.
FILE_A = "\n".join(f"def handler_{i}(request):\n    return respond_{i}(request)" for i in range(30))
FILE_B = FILE_A.replace("respond_", "reply_")
#: ~6,000 bytes of paths nobody asked about.
LISTING = "\n".join(f"node_modules/.pnpm/pkg_{i}@1.{i}.0/dist/index_{i}.js" for i in range(120))


# -- builders ------------------------------------------------------------------------------------


def call(i: int, name: str, output: str, **arguments: Any) -> list[Message]:
    """An assistant tool call and its result."""
    return [assistant("", tool_use(f"toolu_{i}", name, **arguments)), tool_result(f"toolu_{i}", output)]


def read(i: int, path: str, output: str) -> list[Message]:
    return call(i, "Read", output, file_path=path)


def stored_session(
    store: SessionStore,
    messages: Sequence[Message],
    *,
    model: str = "gpt-4o",
    provider: str = "openai",
    usages: Sequence[ProviderUsage | None] | None = None,
    tools: Sequence[ToolRecord] = (),
    tools_tokens: int = 0,
) -> str:
    """A session whose every assistant message is the reply to one recorded request."""
    tokenizer = get_tokenizer(model)
    sid = store.create_session(
        model=model, provider=provider, tokenizer=tokenizer.id, tokens_exact=tokenizer.exact
    )
    rows = store.append_messages(sid, messages, tokenizer=tokenizer)
    replies = [r for r in rows if r.message.role == "assistant"]
    usages = list(usages) if usages is not None else [None] * len(replies)
    for row, usage in zip(replies, usages, strict=True):
        store.record_event(
            sid,
            ContextEvent(
                kind="request", turn_index=row.turn_index, message_seq=row.seq, usage=usage,
                components=ComponentTokens(tools=tools_tokens, conversation=10), details={"messages_sent": row.seq},
            ),
        )  # fmt: skip
    if tools:
        store.upsert_tools(sid, tools)
    return sid


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    return SessionStore(tmp_path / "findings.db")


def kinds(findings: Sequence[Finding]) -> Counter[str]:
    return Counter(f.kind for f in findings)


# -- repeated and stale reads --------------------------------------------------------------------

READ_CASES = [
    (
        "the same file read twice",
        [user("fix it"), *read(1, "a.py", FILE_A), *read(2, "a.py", FILE_A), assistant("done")],
        {"repeated_read": 1},
    ),
    (
        "cat and Read of the same content",
        [user("fix it"), *call(1, "Bash", FILE_A, command="cat a.py"), *read(2, "a.py", FILE_A), assistant("ok")],
        {"repeated_read": 1},
    ),
    (
        "a file that changed between reads",
        [user("fix it"), *read(1, "a.py", FILE_A), *read(2, "a.py", FILE_B), assistant("done")],
        {"stale_result": 1},
    ),
    (
        "small outputs are not worth a finding",
        [user("fix it"), *read(1, "a.py", "x = 1"), *read(2, "a.py", "x = 2"), assistant("done")],
        {},
    ),
    (
        "writes with the same input are not re-reads",
        [user("go"), *call(1, "Write", FILE_A, file_path="a.py", content="x"),
         *call(2, "Write", FILE_A, file_path="a.py", content="x"), assistant("done")],
        {},
    ),
    (
        "a partial read and a whole read are different reads",
        [user("go"), *call(1, "Read", FILE_A, file_path="a.py", offset=1, limit=30), *read(2, "a.py", FILE_B),
         assistant("done")],
        {},
    ),
    (
        "a read whose copy nobody re-sent",
        [user("go"), *read(1, "a.py", FILE_A), *read(2, "a.py", FILE_A)],
        {},
    ),
]  # fmt: skip


@pytest.mark.parametrize(("name", "messages", "expected"), READ_CASES, ids=[c[0] for c in READ_CASES])
def test_read_findings(
    store: SessionStore, name: str, messages: list[Message], expected: dict[str, int]
) -> None:
    sid = stored_session(store, messages)
    assert kinds(find_waste(store, sid)) == Counter(expected)


def test_a_repeated_read_costs_the_copy_times_the_requests_that_re_sent_it(store: SessionStore) -> None:
    messages = [user("fix it"), *read(1, "a.py", FILE_A), *read(2, "a.py", FILE_A), assistant("checking"),
                user("and now?"), assistant("done")]  # fmt: skip
    sid = stored_session(store, messages)
    [finding] = find_waste(store, sid)
    copy = get_tokenizer("gpt-4o").count_block(messages[4].content[0])  # type: ignore[index]
    assert finding.kind == "repeated_read"
    assert finding.title == "a.py read 2 times with identical output"
    assert finding.message_seqs == (1, 2, 3, 4)
    assert finding.turn_index == 0
    assert (finding.context_tokens, finding.requests, finding.tokens) == (copy, 2, 2 * copy)
    assert finding.money == pytest.approx(2 * copy * 2.5e-6)  # gpt-4o input price, no usage recorded
    assert finding.exact and finding.tokenizer == "o200k_base"
    assert "clear_tool_results keep=3" in finding.fix


def test_a_stale_output_is_charged_from_the_later_read_on(store: SessionStore) -> None:
    messages = [user("fix"), *read(1, "a.py", FILE_A), assistant("editing"), *read(2, "a.py", FILE_B),
                assistant("done")]  # fmt: skip
    sid = stored_session(store, messages)
    [finding] = find_waste(store, sid)
    old = get_tokenizer("gpt-4o").count_block(messages[2].content[0])  # type: ignore[index]
    assert finding.kind == "stale_result"
    assert (finding.context_tokens, finding.requests) == (old, 1)  # only the request after the new read
    assert finding.message_seqs == (1, 2, 5)


@pytest.mark.parametrize(
    ("name", "arguments", "key"),
    [
        ("Read of a whole file", ("Read", {"file_path": "/x/a.py"}), "file:/x/a.py"),
        ("cat in a shell", ("Bash", {"command": "cat /x/a.py"}), "file:/x/a.py"),
        ("editor view", ("str_replace_editor", {"command": "view", "path": "/x/a.py"}), "file:/x/a.py"),
        ("editor view of all lines", ("str_replace_editor", {"command": "view", "path": "/x/a.py", "view_range": [1, -1]}), "file:/x/a.py"),
        ("cat of two files", ("Bash", {"command": "cat a b"}), 'call:Bash:{"command":"cat a b"}'),
        ("a range of lines", ("Read", {"file_path": "a", "offset": 5}), 'call:Read:{"file_path":"a","offset":5}'),
    ],
)  # fmt: skip
def test_call_target(name: str, arguments: tuple[str, dict[str, Any]], key: str) -> None:
    assert call_target(*arguments)[0] == key


# -- unused results ------------------------------------------------------------------------------


def listing_session(later_text: str, *, before: str = "list the files") -> list[Message]:
    return [user(before), *call(1, "Bash", LISTING, command="find ."), *call(2, "Bash", "3 files", command="ls"),
            assistant(later_text)]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "messages", "flagged"),
    [
        ("never referred to again", listing_session("The project has three files."), True),
        (
            "an identifier of its own comes back",
            listing_session("pkg_17@1.17.0 is the one to upgrade."),
            False,
        ),
        ("a path segment comes back", listing_session("Look at index_42.js next."), False),
        ("its identifiers were known before", listing_session("done", before=LISTING), False),
    ],
)
def test_unused_results(store: SessionStore, name: str, messages: list[Message], flagged: bool) -> None:
    sid = stored_session(store, messages)
    found = [f for f in find_waste(store, sid) if f.kind == "unused_result"]
    assert bool(found) == flagged
    if flagged:
        [finding] = found
        assert finding.message_seqs == (1, 2)
        assert finding.requests == 1  # the request right after it had to send it; the next did not need to
        assert finding.fix.startswith("result_offload_threshold = 4096")


#: ~30 KB of a source file: far over the 4,096-byte offload threshold, identifiers no one repeats.
BIG_FILE = "\n".join(
    f"def route_{i}(payload_{i}):\n    return dispatch_{i}(payload_{i}, mode_{i})" for i in range(500)
)


def edited_later(*edits: list[Message]) -> list[Message]:
    """A whole-file read of ``src/router.py``, then later calls that use the file (no quoted identifiers)."""
    return [user("tidy the router"), *read(1, "/repo/src/router.py", BIG_FILE), *[m for e in edits for m in e],
            assistant("done")]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "messages", "flagged"),
    [
        ("never used again", edited_later(call(2, "Bash", "ok", command="ls")), True),
        (
            "12 later Edit calls target the file",
            edited_later(
                *[
                    call(
                        10 + i, "Edit", "ok", file_path="/repo/src/router.py", old_string="x", new_string="y"
                    )
                    for i in range(12)
                ]
            ),
            False,
        ),
        (
            "a Write replaces it",
            edited_later(call(2, "Write", "ok", file_path="/repo/src/router.py", content="")),
            False,
        ),
        (
            "its path in a command",
            edited_later(call(2, "Bash", "ok", command="python -m py_compile src/router.py")),
            False,
        ),
        (
            "another file edited",
            edited_later(
                call(2, "Edit", "ok", file_path="/repo/src/other.py", old_string="a", new_string="b")
            ),
            True,
        ),
    ],
)
def test_a_file_later_calls_use_is_referred_to_again(
    store: SessionStore, name: str, messages: list[Message], flagged: bool
) -> None:
    sid = stored_session(store, messages)
    found = [f for f in find_waste(store, sid) if f.kind == "unused_result"]
    assert bool(found) == flagged, [f.title for f in found]


# -- tools, caching, thinking ------------------------------------------------------------------


def test_unused_mcp_tools_cost_their_tokens_in_every_request(store: SessionStore) -> None:
    tools = [
        ToolRecord(name="Read", category="builtin", tokens=300),
        ToolRecord(name="mcp__github__create_issue", category="mcp", server="github", tokens=500),
    ]
    messages = [user("go"), *read(1, "a.py", "x"), assistant("done")]
    sid = stored_session(store, messages, tools=tools, tools_tokens=800)
    [finding] = find_waste(store, sid)
    assert finding.kind == "unused_tools"
    assert (finding.context_tokens, finding.requests, finding.tokens) == (500, 2, 1_000)
    assert "mcp__github__create_issue" in finding.detail
    # Deferring it leaves 300 of the 800 tokens sent: 300 / gpt-4o's 111,360 budget, floored.
    assert finding.fix.startswith("tool_deferral_threshold = 0.002")


def test_tools_a_request_did_not_send_cost_nothing(store: SessionStore) -> None:
    tools = [
        ToolRecord(name="Read", tokens=300),
        ToolRecord(name="mcp__github__create_issue", category="mcp", tokens=500),
    ]
    sid = stored_session(
        store, [user("go"), *read(1, "a.py", "x"), assistant("done")], tools=tools, tools_tokens=300
    )
    store.record_event(
        sid, ContextEvent(kind="request", turn_index=0, message_seq=3, details={"messages_sent": 3, "tools_sent": ["Read"]})
    )  # fmt: skip
    with_list = [f for f in find_waste(store, sid) if f.kind == "unused_tools"]
    assert [f.requests for f in with_list] == [2]  # the two requests that did not say which tools they sent


def test_ctxdesks_own_tools_are_never_unused_offers() -> None:
    from engine.session import BUILTIN_TOOL_NAMES

    assert set(ENGINE_TOOL_NAMES) == set(BUILTIN_TOOL_NAMES)


def test_unused_builtin_tools_are_to_be_removed_not_deferred(store: SessionStore) -> None:
    sid = stored_session(
        store,
        [user("hi"), assistant("hello")],
        tools=[ToolRecord(name="think", tokens=200)],
        tools_tokens=200,
    )
    [finding] = find_waste(store, sid)
    assert finding.kind == "unused_tools" and finding.fix.startswith("stop offering them")


def _turns(n: int) -> list[Message]:
    return [m for i in range(n) for m in (user(f"question {i}"), assistant(f"answer {i}"))]


def test_no_prompt_caching_is_priced_under_anthropic_cache_pricing(store: SessionStore) -> None:
    usages = [ProviderUsage(input_tokens=n, output_tokens=50) for n in (5_000, 6_000, 7_000, 8_000)]
    sid = stored_session(store, _turns(4), model="claude-sonnet-4-5", provider="anthropic", usages=usages)
    [finding] = find_waste(store, sid)
    assert finding.kind == "uncached_prefix"
    assert finding.tokens == 5_000 + 6_000 + 7_000  # each request could have read the previous prompt
    assert finding.context_tokens == 7_000 and finding.requests == 3
    # Without a cache: 26,000 x $3/M. With one: reads at $0.30/M, the rest written at $3.75/M.
    assert finding.money == pytest.approx(26_000 * 3e-6 - (18_000 * 3e-7 + 8_000 * 3.75e-6))
    assert finding.exact and finding.tokenizer == "provider"
    assert "cache breakpoint after the system prompt" in finding.fix


@pytest.mark.parametrize(
    "usages",
    [
        [ProviderUsage(input_tokens=n, cache_read_input_tokens=n // 2) for n in (5_000, 6_000, 7_000)],
        [ProviderUsage(input_tokens=n) for n in (500, 600, 700)],  # below the smallest cacheable prefix
        [ProviderUsage(input_tokens=n) for n in (5_000, 6_000)],  # two requests are not a pattern
    ],
    ids=["caching in use", "small prompts", "too few requests"],
)
def test_no_caching_finding(store: SessionStore, usages: list[ProviderUsage]) -> None:
    sid = stored_session(
        store, _turns(len(usages)), model="claude-sonnet-4-5", provider="anthropic", usages=usages
    )
    assert find_waste(store, sid) == []


def _thinking_session(store: SessionStore, thought: str, *, model: str, provider: str) -> tuple[str, int]:
    messages = [
        user("first"),
        Message(role="assistant", content=[ThinkingBlock(thinking=thought, signature="sig"), TextBlock(text="A")]),
        user("second"), assistant("B"), user("third"), assistant("C"),
    ]  # fmt: skip
    cost = get_tokenizer(model).count_block(messages[1].content[0])  # type: ignore[index]
    return stored_session(store, messages, model=model, provider=provider), cost


LONG_THOUGHT = " ".join(f"step {i}: consider option_{i}" for i in range(60))


@pytest.mark.parametrize(
    ("model", "provider", "names_anthropic_edit"),
    [("gpt-4o", "openai", False), ("claude-sonnet-4-5", "anthropic", True)],
    ids=["openai: a generic fix", "anthropic: the clear_thinking edit"],
)
def test_thinking_of_finished_turns_is_stale(
    store: SessionStore, model: str, provider: str, names_anthropic_edit: bool
) -> None:
    sid, cost = _thinking_session(store, LONG_THOUGHT, model=model, provider=provider)
    [finding] = [f for f in find_waste(store, sid) if f.kind == "stale_thinking"]
    assert (finding.turn_index, finding.requests, finding.tokens) == (1, 2, 2 * cost)
    assert finding.message_seqs == (1,)
    assert ("clear_thinking_20251015" in finding.fix) is names_anthropic_edit


def test_a_few_tokens_of_stale_thinking_are_not_a_finding(store: SessionStore) -> None:
    sid, cost = _thinking_session(store, "check the tests", model="gpt-4o", provider="openai")
    assert cost < MIN_FINDING_TOKENS
    assert [f for f in find_waste(store, sid) if f.kind == "stale_thinking"] == []


# -- compactions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("outcome", "after", "flagged"),
    [("compacted", 9_500, True), ("compacted", 5_000, False), ("noop", 10_000, False)],
)
def test_ineffective_compaction(store: SessionStore, outcome: str, after: int, flagged: bool) -> None:
    sid = stored_session(store, _turns(1))
    store.record_event(
        sid,
        ContextEvent(
            kind="compaction", trigger="compact_threshold", outcome=outcome, turn_index=1,
            details={"before_tokens": 10_000, "after_tokens": after, "target_tokens": 8_000,
                     "strategies_run": ["clear_tool_results"], "removed_message_seqs": []},
        ),
    )  # fmt: skip
    rows = store.append_messages(sid, _turns(2), tokenizer=get_tokenizer("gpt-4o"))
    for row in rows[1::2]:
        store.record_event(
            sid, ContextEvent(kind="request", turn_index=row.turn_index, message_seq=row.seq, details={"messages_sent": row.seq})
        )  # fmt: skip
    found = [f for f in find_waste(store, sid) if f.kind == "ineffective_compaction"]
    assert bool(found) == flagged
    if flagged:
        [finding] = found
        assert finding.title == "Compaction at turn 1 freed only 5.0% (10,000 → 9,500 tokens)"
        assert (finding.context_tokens, finding.requests) == (1_500, 2)  # missed the target by 1,500
        assert finding.fix.startswith('strategy = "chain"')


def test_an_agents_own_compaction_that_grew_the_prompt_says_so_and_whose_it_was(store: SessionStore) -> None:
    # Gemini CLI's chat compression in tests/fixtures/real_agents/gemini: 12,236 before, 12,278 after
    sid = stored_session(store, _turns(1))
    store.record_event(
        sid,
        ContextEvent(
            kind="compaction", trigger="compact_threshold", outcome="compacted", turn_index=1,
            details={"before_tokens": 12_236, "after_tokens": 12_278, "by": "agent", "trigger_kind": "auto"},
        ),
    )  # fmt: skip
    [finding] = [f for f in find_waste(store, sid) if f.kind == "ineffective_compaction"]
    assert (
        finding.title == "The agent's compaction at turn 1 did not shrink the prompt (12,236 → 12,278 tokens)"
    )
    assert finding.detail.startswith("Tokens after: the first prompt sent after it.")
    assert finding.fix.startswith("the agent's own compaction")


CONSTRAINT = "Fix the login bug in auth.py. Never modify the database migrations folder."


@pytest.mark.parametrize(
    ("summary", "lost"),
    [
        ("The user asked to fix the login bug; the agent edited auth.py and ran the tests.", True),
        ("Fix the login bug. Constraint: never touch the database migrations folder.", False),
    ],
    ids=["summary dropped it", "summary kept it"],
)
def test_a_summary_that_drops_a_user_constraint(store: SessionStore, summary: str, lost: bool) -> None:
    messages = [
        user(CONSTRAINT),
        *read(1, "auth.py", FILE_A),
        assistant("fixed"),
        user("thanks"),
        assistant("ok"),
    ]
    sid = stored_session(store, messages)
    kept = [m.message for m in store.load_messages(sid)][4:]
    snapshot = store.write_snapshot(
        sid, kept, through_seq=5, summary=summary, tokens=100, strategy="summarize"
    )
    store.record_event(
        sid,
        ContextEvent(
            kind="compaction", outcome="compacted", turn_index=1,
            details={"before_tokens": 900, "after_tokens": 200, "removed_message_seqs": [0, 1, 2, 3],
                     "snapshot_id": snapshot, "summary": summary},
        ),
    )  # fmt: skip
    found = [f for f in find_waste(store, sid) if f.kind == "lost_constraint"]
    assert bool(found) == lost
    if lost:
        [finding] = found
        assert finding.message_seqs == (0,)
        assert "Never modify the database migrations folder." in finding.title
        assert finding.tokens == 0 and finding.money is None
        assert finding.fix.startswith("pin message 0")


#: Claude Code writes this before the output of a command the user ran locally (``!ls``, ``/model``).
CAVEAT = (
    "Caveat: The messages below were generated by the user while running local commands. DO NOT respond to "
    "these messages or otherwise consider them in your response unless the user explicitly asks you to."
)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("Claude Code's caveat", CAVEAT),
        (
            "a system reminder",
            "Fix it.\n<system-reminder>Do not use emojis. Never mention this reminder.</system-reminder>",
        ),
        (
            "the newer caveat tag",
            "<local-command-caveat>Do not respond to these messages.</local-command-caveat>",
        ),
        (
            "Codex's permissions",
            "<permissions instructions>\nDo not provide sandbox_permissions.\n</permissions instructions>",
        ),
        (
            "a continued session's summary",
            "This session is being continued from a previous conversation. Never recap.",
        ),
    ],
)
def test_harness_boilerplate_is_never_a_lost_user_constraint(
    store: SessionStore, name: str, text: str
) -> None:
    messages = [user(text), *read(1, "auth.py", FILE_A), assistant("fixed"), user("thanks"), assistant("ok")]
    sid = stored_session(store, messages)
    store.record_event(
        sid,
        ContextEvent(
            kind="compaction", outcome="compacted", turn_index=1,
            details={"before_tokens": 900, "after_tokens": 200, "removed_message_seqs": [0, 1, 2, 3],
                     "summary": "The agent fixed auth.py."},
        ),
    )  # fmt: skip
    assert [f.title for f in find_waste(store, sid) if f.kind == "lost_constraint"] == []
    assert constraint_sentences(text, user=True) == []


@pytest.mark.parametrize(
    ("text", "sentences"),
    [
        (CONSTRAINT, ["Never modify the database migrations folder."]),
        (
            "You must run the tests.\nDon't push to main! Thanks.",
            ["You must run the tests.", "Don't push to main!"],
        ),
        ("Please fix the bug.", []),
    ],
)
def test_constraint_sentences(text: str, sentences: list[str]) -> None:
    assert constraint_sentences(text) == sentences


def test_key_terms_leave_out_the_constraint_words() -> None:
    assert key_terms("Never modify the database migrations folder.") == {
        "modify",
        "database",
        "migrations",
        "folder",
    }


def test_findings_are_frozen() -> None:
    finding = Finding(kind="unused_tools", session_id="s", title="t", detail="d", message_seqs=(), turn_index=0,
                      tokens=1, context_tokens=1, requests=1, money=None, fix="f", exact=True, tokenizer="o200k_base")  # fmt: skip
    with pytest.raises(PydanticValidationError):
        finding.tokens = 2  # type: ignore[misc]


# -- an invariant --------------------------------------------------------------------------------

_read = st.tuples(st.sampled_from(["a.py", "b.py"]), st.sampled_from([FILE_A, FILE_B, FILE_A + "\n# end"]))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_read, min_size=1, max_size=8))
def test_read_findings_never_charge_one_result_twice_in_one_request(reads: list[tuple[str, str]]) -> None:
    messages = [user("go")]
    for i, (path, content) in enumerate(reads):
        messages += read(i, path, content)
    messages.append(assistant("done"))
    with tempfile.TemporaryDirectory() as tmp, SessionStore(Path(tmp) / "s.db") as db:
        sid = stored_session(db, messages)
        view = load_session_view(db, sid)
        calls = tool_calls(view)
        carried = sum(c.tokens for r in view.requests for c in calls if r.sends(c.result_seq, result=True))
        charged = sum(f.tokens for f in analyze(view) if f.kind in ("repeated_read", "stale_result"))
        assert charged <= carried


# -- real sessions -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def claude_fixture_db(tmp_path_factory: pytest.TempPathFactory) -> SessionStore:
    store = SessionStore(tmp_path_factory.mktemp("claude") / "claude.db")
    import_file(CLAUDE_FIXTURE, store)
    return store


def _page_tsx_checks(findings: Sequence[Finding]) -> None:
    """The sub-agent reads src/app/page.tsx, fails to edit it twice, and reads it again."""
    [reread] = [
        f
        for f in findings
        if f.kind == "repeated_read" and f.title.endswith("page.tsx read 2 times with identical output")
    ]
    assert reread.message_seqs == (25, 26, 35, 36)
    assert reread.context_tokens == 1_592  # the second copy, by the Claude estimate (engine.tokens)
    assert (reread.requests, reread.tokens) == (16, 16 * reread.context_tokens)
    assert not reread.exact and reread.tokenizer == "anthropic"
    assert reread.money == pytest.approx(
        0.010835, rel=1e-3
    )  # blended rate of requests that mostly read the cache
    [listing] = [f for f in findings if f.kind == "unused_result"]
    assert listing.message_seqs == (55, 56)  # `find` over node_modules: 26,746 bytes, never used
    assert (listing.context_tokens, listing.requests) == (8_778, 5)
    assert listing.fix.startswith("result_offload_threshold = 16384")


def test_the_claude_code_sub_agent_re_reads_page_tsx(claude_fixture_db: SessionStore) -> None:
    sessions = claude_fixture_db.list_sessions()
    [sub] = [s for s in sessions if s.parent_session_id]
    _page_tsx_checks(find_waste(claude_fixture_db, sub.id))
    [main] = [s for s in sessions if not s.parent_session_id]
    assert find_waste(claude_fixture_db, main.id) == []


def test_the_openhands_run_offers_tools_it_never_calls_and_caches_nothing(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "oh.db") as store:
        [sid] = import_file(OPENHANDS_FIXTURE, store).session_ids
        found = {f.kind: f for f in find_waste(store, sid)}
    assert set(found) == {"uncached_prefix", "unused_tools"}
    assert found["unused_tools"].detail.startswith("str_replace_editor, think, finish:")
    assert found["uncached_prefix"].money is None  # OpenRouter prices llama-4-maverick without a cache read
    assert found["uncached_prefix"].exact


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_full_claude_code_session_findings(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "full.db") as store:
        result = import_file(
            SHARED_SESSIONS / "claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl", store
        )
        by_id = {s.session_id: s for s in result.sessions}
        agent2 = next(sid for sid in by_id if sid.endswith(":agent-2"))
        _page_tsx_checks(find_waste(store, agent2))
        agent3 = find_waste(store, next(sid for sid in by_id if sid.endswith(":agent-3")))
        assert [f.title for f in agent3] == [
            "/path/to/Demo/types/index.ts read 2 times with identical output"
        ]


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_full_openhands_run_reads_parser_c_three_times(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "oh.db") as store:
        result = import_file(SHARED_SESSIONS / "openhands__multi_swe_bench_examples_output.jsonl", store)
        sid = next(s for s in result.session_ids if s.endswith("ponyc-4595"))
        [reread] = [f for f in find_waste(store, sid) if f.kind == "repeated_read"]
    assert reread.title.endswith("src/libponyc/ast/parser.c read 3 times with identical output")
    assert (reread.context_tokens, reread.requests, reread.tokens) == (2 * 5_187, 16, 155_610)
    assert reread.tokenizer == "chars/4" and not reread.exact
