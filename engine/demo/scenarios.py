"""The demo's sessions, one function each (a :class:`Script` played in a :class:`DemoContext`), and
which database each is written to."""

from __future__ import annotations

from collections.abc import Callable

from engine.clients import ScriptedClient
from engine.demo.agent import (
    CODING_DB,
    CODING_TOOLS,
    FALLBACK_MODEL,
    GATEWAY_MODEL,
    GIT_DIFF_TOOL,
    LIMITS_DB,
    LONG_MODEL,
    PRIMARY_MODEL,
    SMALL_MODEL,
    mcp_tools,
)
from engine.demo.context import DemoContext
from engine.demo.refunds_workspace import RefundsWorkspace, script_refunds
from engine.demo.repo import FakeRepo
from engine.demo.script import Script
from engine.errors import ValidationError


def _read(s: Script, *modules: str) -> None:
    for module in modules:
        s.say(f"Reading src/payments/{module}.", s.call("read_file", path=f"src/payments/{module}"))


def flaky_test_session(ctx: DemoContext) -> str:
    """Coding agent: finds a flaky test through offloaded logs; chain compaction at the threshold."""
    s = Script("flaky")
    s.user("test_sync_retries_on_timeout is flaky on CI. Can you find out why?")
    s.say(
        "I'll start by finding the test and running it.",
        s.call("grep", pattern="def test_sync_retries_on_timeout"),
    )
    s.say("", s.call("read_file", path="tests/test_ledger_sync.py"))
    s.say(
        "Now the test suite, to see the failure.",
        s.call("run_tests", args="tests/test_ledger_sync.py -p no:randomly --count=20"),
    )
    s.read_result("FAILED|Error|assert", "The log is long; I'll read the failures only.")
    s.say(
        "The retry loop made 7 bank calls instead of 3. Let me check recent changes to the ledger.",
        s.call("git_log", path="src/payments/ledger"),
    )
    s.read_result("retry|ledger")
    s.say(
        "The failure comes from an unbounded `while not done` retry in `sync_ledger`: under two timeouts it "
        "calls the bank 7 times. It was introduced by a recent `fix(ledger): retry sync on timeouts` commit."
    )
    s.user("Show me the retry code.")
    _read(s, "ledger/sync.py", "ledger/retry.py", "retry.py")
    s.say(
        "`sync_ledger` should use `payments.retry.backoff(3, base=0.1)` like the other workers; that bounds the "
        "attempts and adds full jitter."
    )
    s.user("OK, fix it the way the project rules say.")
    s.say(
        "",
        s.call(
            "edit_file",
            path="src/payments/ledger/sync.py",
            old="while not done:  # retry until the bank answers",
            new="for attempt in backoff(3, base=0.1):",
        ),
    )
    s.say("", s.call("run_tests", args="tests/test_ledger_sync.py -p no:randomly --count=20"))
    s.read_result("passed|failed", "Checking the summary line.")
    s.say("Fixed: the retry loop is bounded (3 attempts) with jitter; 20 repeated runs pass.")
    s.user("Are there other places with the same bug?")
    _read(s, "workers/settle.py", "workers/reconcile.py", "clients/bank.py", "ledger/writer.py")
    s.say("", s.call("grep", pattern="while not done"))
    s.say("Two more unbounded loops: workers/settle.py and clients/bank.py. Both should use backoff().")
    s.user("Check the API modules too.")
    _read(s, "api/refunds.py", "api/payouts.py", "money.py", "audit.py")
    s.say(
        "None of the API modules retry on their own; they call the bank client, which is fixed with the rest."
    )
    return ctx.play(s, "flaky-ledger-sync", "Flaky ledger sync test", model=PRIMARY_MODEL, usage_ratio=1.06)


def mcp_triage_session(ctx: DemoContext) -> str:
    """MCP-heavy triage: 34 deferred tools found through tool_search; sandwich compaction."""
    s = Script("triage")
    s.user("Triage the open GitHub issues labelled payments and check Sentry for related errors.")
    s.say("I need the GitHub tools first.", s.call("tool_search", query="list github issues"))
    s.say(
        "", s.call("mcp__github__list_issues", repo="acme/payments-platform", state="open", labels="payments")
    )
    s.read_result("flaky-test|incident", "Twelve issues; I'll pick out the incidents and flaky tests.")
    for number in (403, 409, 415):
        s.say(
            f"Reading issue #{number}.",
            s.call("mcp__github__get_issue", repo="acme/payments-platform", number=number),
        )
    s.say("Let me check Sentry for the timeouts.", s.call("tool_search", query="list sentry issues"))
    s.say("", s.call("mcp__sentry__list_issues", project="payments-api", query="TimeoutError"))
    s.say(
        "#403 and #409 are the ledger retry bug (Sentry shows TimeoutError in sync_ledger); #415 is a perf issue."
    )
    s.user("Which ledger entries are stuck?")
    s.say("I'll query the database.", s.call("tool_search", query="run sql query postgres"))
    s.say(
        "",
        s.call(
            "mcp__postgres__query",
            sql="SELECT entry_id, status, attempts FROM ledger_entries WHERE status = 'pending' AND attempts > 5",
        ),
    )
    s.say("Eighteen entries are pending with 7+ attempts, matching the unbounded retry.")
    s.user("Tell the team in #payments-eng.")
    s.say("", s.call("tool_search", query="post slack message channel"))
    s.say(
        "",
        s.call(
            "mcp__slack__post_message",
            channel="#payments-eng",
            text="Triage: #403/#409 are the ledger retry bug (fix in review); #415 is a perf issue; 18 ledger entries stuck pending.",
        ),
    )
    s.say("Posted the summary to #payments-eng.")
    s.user("Prepare the fix and open a PR.")
    _read(s, "ledger/sync.py", "workers/settle.py", "clients/bank.py", "workers/reconcile.py")
    s.say("", s.call("tool_search", query="create a pull request"))
    s.say(
        "",
        s.call(
            "mcp__github__create_pull_request",
            repo="acme/payments-platform",
            title="fix(ledger): bound sync retries with backoff",
            head="fix/ledger-retry",
            base="main",
            body="Fixes #403 and #409.",
        ),
    )
    s.say("Opened PR #512 with the fix; it links #403 and #409.")
    s.user("Anything else we should look at before rollout?")
    _read(s, "api/refunds.py", "api/payouts.py", "config.py", "flags.py")
    s.say("The refund and payout APIs are fine; the flag `ledger_backoff` should gate the rollout.")
    s.user("What does Sentry say about the refund webhooks?")
    s.say("", s.call("mcp__sentry__list_issues", project="payments-api", query="refund webhook"))
    _read(s, "workers/refunds.py", "clients/webhooks.py", "ledger/models.py")
    s.say(
        "The refund webhook errors are retries of the same TimeoutError; they will stop with the ledger fix."
    )
    return ctx.play(
        s, "mcp-triage", "Triage payments issues with MCP tools", model=PRIMARY_MODEL, usage_ratio=1.05,
        compaction="sandwich",
    )  # fmt: skip


def refactor_session(ctx: DemoContext) -> str:
    """Long refactor: the model calls compact_context, the user compacts by hand, and
    sliding_window compaction runs at the threshold."""
    s = Script("refactor")
    s.user("Audit how amounts are represented across the payments code.")
    _read(s, "money.py", "ledger/models.py", "ledger/writer.py")
    s.say("Amounts are already integer cents in the ledger; the API layer converts floats in two places.")
    s.user("Read the API layer.")
    _read(s, "api/refunds.py", "api/payouts.py", "audit.py")
    s.say("", s.call("grep", pattern="float\\(amount"))
    s.say("`api/refunds.py` and `api/payouts.py` call float(amount) before building Cents.")
    s.user("Fix the float conversions.")
    s.say(
        "I'll free some context before the edits.",
        s.call("compact_context", instructions="keep the list of float conversions and file names"),
    )
    s.say(
        "Compacted. Now the edits.",
        s.call(
            "edit_file", path="src/payments/api/refunds.py", old="float(amount)", new="Cents.parse(amount)"
        ),
    )
    s.say(
        "",
        s.call(
            "edit_file", path="src/payments/api/payouts.py", old="float(amount)", new="Cents.parse(amount)"
        ),
    )
    s.say("Both API modules now parse amounts into Cents.")
    s.compact_by_hand("summarize", "keep the decisions about Cents and the files changed")
    s.user("Check the workers and the bank client too.")
    _read(
        s,
        "workers/settle.py",
        "workers/reconcile.py",
        "clients/bank.py",
        "ledger/sync.py",
        "config.py",
        "flags.py",
        "workers/payouts.py",
    )
    s.say("The workers and the bank client already pass Cents around; nothing to change there.")
    s.user("Now the reports and the remaining API modules, then run the money tests.")
    _read(
        s,
        "workers/refunds.py",
        "clients/webhooks.py",
        "ledger/retry.py",
        "retry.py",
        "ledger/reports.py",
        "api/statements.py",
        "api/balances.py",
        "ledger/exports.py",
    )
    s.say("", s.call("run_tests", args="-k money"))
    s.read_result("passed|failed")
    s.say("All money tests pass; the workers already use Cents.")
    return ctx.play(
        s, "cents-refactor", "Refactor: money as integer cents", model=PRIMARY_MODEL, usage_ratio=1.04,
        compaction={"type": "sliding_window", "keep_messages": 12},
    )  # fmt: skip


def emergency_session(ctx: DemoContext) -> str:
    """The provider counts more than our estimate and rejects a prompt: emergency path, one retry."""
    s = Script("gateway")
    s.user("Read the ledger, worker and client code and tell me where retries happen.")
    _read(s, "ledger/sync.py", "ledger/retry.py", "ledger/writer.py", "workers/settle.py", "workers/reconcile.py",
          "clients/bank.py", "api/refunds.py", "api/payouts.py")  # fmt: skip
    s.say(
        "Retries happen in ledger/sync.py (unbounded), workers/settle.py and clients/bank.py (both via backoff)."
    )
    s.user("Read the remaining modules and summarise.")
    _read(
        s,
        "money.py",
        "audit.py",
        "config.py",
        "flags.py",
        "retry.py",
        "ledger/models.py",
        "workers/payouts.py",
        "workers/refunds.py",
    )
    s.say("The retry helper is used in four places; the ledger sync is the only unbounded loop.")
    return ctx.play(
        s, "gateway-overflow", "Provider rejects a prompt our estimate let through", model=GATEWAY_MODEL,
        usage_ratio=1.22, provider_window=24_000, tools=CODING_TOOLS,
    )  # fmt: skip


def forced_final_session(ctx: DemoContext) -> str:
    """A 16k-window model: a large inline file tips the context and the turn is forced final."""
    s = Script("small")
    s.user("Why does the ledger sync retry so much?")
    _read(s, "ledger/sync.py", "ledger/retry.py", "retry.py", "ledger/writer.py")
    s.say("The ledger retries are unbounded; the shared helper is fine.")
    s.user("Check the worker, the bank client and the legacy sync as well.")
    _read(s, "workers/settle.py", "clients/bank.py")
    s.say("", s.call("read_file", path="src/payments/ledger/legacy_sync.py"))
    s.final_report(
        "Cause: sync_ledger retries in an unbounded loop without jitter (src/payments/ledger/sync.py:57), so two "
        "bank timeouts turn into 7 calls. Fix: use payments.retry.backoff(3, base=0.1). The same loop exists in "
        "workers/settle.py and clients/bank.py. Not done: legacy_sync.py was too large to read in this context."
    )
    ctx.repo.read_file("src/payments/ledger/legacy_sync.py", size=16_000)  # too large for what is left
    return ctx.play(
        s, "small-window-final", "16k model: a large file forces the final turn", model=SMALL_MODEL,
        usage_ratio=1.08, tools=CODING_TOOLS,
    )  # fmt: skip


def skipped_fallback_session(ctx: DemoContext) -> str:
    """A fallback target whose window is too small for even the system prompt: skipped_provider."""
    s = Script("fallback")
    s.user("How is the ledger_backoff flag read?")
    s.say("", s.call("read_file", path="src/payments/flags.py"))
    s.say("The `ledger_backoff` flag is read through payments.flags.enabled(); it defaults to off.")
    s.user("Where is it checked?")
    s.say("", s.call("grep", pattern='enabled\\("ledger_backoff"\\)'))
    s.say("It is checked once, in ledger/sync.py. Turning it on in config/flags.yaml enables the fix.")
    fallback = ScriptedClient([], model=FALLBACK_MODEL, provider="groq")
    return ctx.play(
        s, "fallback-skipped", "Fallback model skipped: window too small", model=PRIMARY_MODEL, usage_ratio=1.05,
        tools=CODING_TOOLS, fallbacks=[fallback],
    )  # fmt: skip


def long_refunds_session(ctx: DemoContext) -> str:
    """46 turns on a 32k window: the context climbs past the note and is compacted at the
    threshold again and again (a sawtooth), with offloaded logs, failed edits and their fixes."""
    workspace = RefundsWorkspace(FakeRepo(ctx.seed))  # its own: file sizes independent of the sessions before
    s = Script("refunds")
    script_refunds(s, workspace)
    session_id = ctx.play(
        s, "refund-idempotency", "Long session: idempotent refunds on a 32k window", model=LONG_MODEL,
        usage_ratio=1.03, tools=[*CODING_TOOLS, GIT_DIFF_TOOL, *mcp_tools()],
        tool_handlers={**ctx.handlers(), **workspace.handlers()},
    )  # fmt: skip
    if workspace.test_logs:
        raise ValidationError(
            f"the refunds script queued {len(workspace.test_logs)} test logs that no run_tests call used",
            field="script",
        )
    return session_id


SCENARIOS: dict[str, tuple[Callable[[DemoContext], str], ...]] = {
    CODING_DB: (flaky_test_session, mcp_triage_session, refactor_session, long_refunds_session),
    LIMITS_DB: (emergency_session, forced_final_session, skipped_fallback_session),
}
