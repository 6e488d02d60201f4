"""Sample session databases made by the real session manager around a scripted model.

``generate_demo(out_dir, seed=7)`` runs coding-agent sessions through :class:`SessionManager`
with a :class:`ScriptedClient`, so every event in the files is one the engine really recorded:
offloaded 40 KB git logs and 25 KB test logs, 34 deferred MCP tools found with tool_search,
compactions by chain, sandwich, sliding_window and by hand, a provider context-length error
and its emergency retry, a forced final turn on a 16k-window model, and a fallback skipped for
its small window; and one long session (46 turns on a 32k window, :mod:`engine.demo_refunds`)
whose context climbs past the 80% note and is compacted at the threshold again and again. The
same seed gives the same sessions (ids, messages, tokens, events).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import sqlite3
import textwrap
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.clients import ModelRequest, ScriptedClient
from engine.compaction import OfflineSummarizer
from engine.demo_refunds import RefundsWorkspace, script_refunds
from engine.errors import StoreError, ValidationError
from engine.messages import Message, ToolUseBlock, assistant, tool_use
from engine.prompt import PromptSection
from engine.session import SessionManager
from engine.settings import Settings, save_settings
from engine.store import BlobRecord, SessionStore

DEFAULT_SEED = 7
CODING_DB = "demo-coding-agent.db"
LIMITS_DB = "demo-guard-limits.db"
SETTINGS_FILE = "demo-settings.toml"

PRIMARY_MODEL = "claude-sonnet-4-6"
SMALL_MODEL = "claude-haiku-4-5"
GATEWAY_MODEL = "claude-opus-4-7"
FALLBACK_MODEL = "llama-3.1-8b-instant"
LONG_MODEL = "claude-sonnet-4-5"

#: The demo's settings file: a cost cap for the coding agent, a 16k model, a gateway whose
#: window is pinned, a local fallback that reserves most of its 8k window for output, and a
#: 32k window for the long session, so that it fills and is compacted several times.
DEMO_SETTINGS: dict[str, Any] = {
    "models": {
        PRIMARY_MODEL: {"context_budget": 20_000},
        LONG_MODEL: {
            "context_window": 32_000,
            "max_output_tokens": 4_096,
            "result_offload_threshold": 16_384,
        },
        SMALL_MODEL: {
            "context_window": 16_000,
            "max_output_tokens": 4_096,
            "result_offload_threshold": 16_384,
        },
        GATEWAY_MODEL: {"context_window": 24_000, "max_output_tokens": 4_096},
        FALLBACK_MODEL: {"context_window": 8_192, "max_output_tokens": 6_656},
    }
}


# -- the agent's prompt ------------------------------------------------------------------------

BASE_INSTRUCTIONS = """\
You are a senior software engineer working as a coding agent in the user's repository. You can
read files, search the code, run the test suite, look at the git history and edit files. Work in
small, verifiable steps: read before you change anything, run the relevant tests after every
change, and say plainly what you did and what you found. Prefer the smallest change that fixes
the problem; do not reformat unrelated code. When a tool output is stored instead of shown, read
the part you need with read_result (a pattern is usually enough). If the context is nearly full,
call compact_context before starting a large new subtask. Never invent file contents, test
results or command output: if you did not see it, say so. When you are done, give a short
summary: the cause, the fix, the tests that prove it, and anything left to do.

How to use the tools:
- read_file reads one file; read only what you need, and prefer grep to find the right file first.
- grep takes a regular expression; escape parentheses and dots; narrow it with a path when the
  repository is large. Results are `path:line: text`, at most a few hundred lines.
- run_tests runs pytest with the arguments you give; pass a test id or a -k expression to run a
  subset. The full suite takes about a minute and prints a line per test, so its log is usually
  stored rather than shown: read the failures with read_result and a pattern such as FAILED|Error.
- git_log shows commits, newest first; pass a path to see the history of one module.
- edit_file replaces an exact snippet; read the file first so the snippet matches byte for byte,
  and keep edits small. After editing, run the tests that cover the change.
- tool_search finds tools that are available but not loaded (GitHub, Slack, Postgres, Linear,
  Sentry, Datadog, PagerDuty). Describe the action in a few words, then call the tool it returns.
- compact_context frees context by clearing old tool results and summarizing earlier turns; the
  full transcript stays stored. Use it before a large new subtask when the context is filling up.

Working agreement:
- Explain your plan in one or two sentences before a multi-step change, then do it.
- If a request is ambiguous, state the interpretation you chose and why, and continue.
- Report failures honestly: a failing test, a command that did not run, a file you could not
  read. Do not retry the same failing command more than twice without changing something.
- Keep secrets out of code, logs and messages: tokens, keys, passwords and customer data
  (account numbers, emails, card numbers) must never be printed or committed.
- Ask before anything destructive or hard to undo: deleting files or branches, force pushes,
  database writes, changing CI configuration, or touching production settings.
- When you touch money, ledger or settlement code, say which invariants you checked (amounts
  in cents, ledger balance, idempotency of retries) and how.

Code review checklist (apply it to your own changes before you say you are done):
1. The change does one thing, and the diff shows only that thing.
2. New behaviour has a test that fails without the change and passes with it.
3. Errors are handled where they can be handled, and surfaced with context where they cannot.
4. No new blocking call inside an async path; no unbounded loop or retry; timeouts everywhere
   the code waits on the network.
5. Names say what things are; comments say why, not what.
6. Logs are useful at 3 a.m.: they name the entity (batch id, entry id) and the decision made.
7. Public behaviour changes are noted for the changelog and, if needed, behind a feature flag.
8. Database access goes through the repository layer; queries are parameterised; new queries
   on hot paths have an index (check with EXPLAIN)."""

PROJECT_RULES = """\
Repository conventions (payments-platform):
- Python 3.11, FastAPI services under src/payments/, workers under src/payments/workers/.
- Money is integer minor units (cents) everywhere; never use float for amounts.
- Every ledger write goes through LedgerWriter; never write ledger rows directly.
- Tests: pytest, fixtures in tests/conftest.py; integration tests are marked `integration` and
  need the postgres service (docker compose up db).
- Retries: use payments.retry.backoff() (exponential with full jitter, bounded attempts); a bare
  while-loop retry is a review blocker.
- Commits: conventional commits (fix:, feat:, refactor:), one logical change per commit.
- Feature flags live in config/flags.yaml and are read through payments.flags.enabled(name).
- Do not touch migrations/ without asking; schema changes need a migration review."""

MEMORIES = """\
Notes from earlier sessions:
- The ledger sync worker runs every 30 s in production and in CI runs against a real postgres.
- test_ledger_sync.py::test_sync_retries_on_timeout has been flaky since early March.
- The on-call channel is #payments-oncall; the team channel is #payments-eng.
- Maintainers: Dana Whitfield (ledger), Omar Haddad (workers), Priya Raman (API).
- CI runs `pytest -x -q -m "not slow"` on every push, the full suite nightly."""

SKILLS = [
    """\
Skill: debugging flaky tests. Reproduce with `pytest -p no:randomly --count=20` first; look for
shared state between tests, wall-clock sleeps, unbounded retries and ordering assumptions; read
the failing assertion and the last log lines before the failure; check the git history of the
test and the code under test for recent changes; fix the cause, not the symptom.""",
    """\
Skill: writing pull requests. Title in conventional-commit form; the body says what changed,
why, and how it was tested; link the issue; keep the diff focused; mention follow-ups.""",
]

FINAL_TURN_REPLY = "final_report"


def prompt_sections() -> list[PromptSection]:
    return [
        PromptSection("base_instructions", BASE_INSTRUCTIONS),
        PromptSection("project_rules", PROJECT_RULES, title="Project rules"),
        PromptSection("memories", MEMORIES, title="Memories"),
    ]


# -- tool definitions ------------------------------------------------------------------------


def _tool(
    name: str, description: str, required: Sequence[str] = (), props: dict[str, tuple[str, str]] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {k: {"type": t, "description": d} for k, (t, d) in (props or {}).items()},
            "required": list(required),
        },
    }


CODING_TOOLS = [
    _tool("read_file", "Read a file of the repository (UTF-8 text).", ["path"],
          {"path": ("string", "Repository-relative path.")}),
    _tool("grep", "Search the repository with a regular expression; returns path:line: text.", ["pattern"],
          {"pattern": ("string", "Regular expression."), "path": ("string", "Folder to search (default: all).")}),
    _tool("run_tests", "Run pytest and return its output.", [],
          {"args": ("string", "Extra pytest arguments, e.g. a test id or -k expression.")}),
    _tool("git_log", "Show the commit log.", [],
          {"path": ("string", "Limit to commits touching this path."), "max_count": ("integer", "How many commits.")}),
    _tool("edit_file", "Replace an exact snippet of a file with new text.", ["path", "old", "new"],
          {"path": ("string", "File to edit."), "old": ("string", "Exact text to replace."), "new": ("string", "Replacement.")}),
]  # fmt: skip
GIT_DIFF_TOOL = _tool("git_diff", "Show the uncommitted changes of the working tree as a unified diff.", [],
                      {"path": ("string", "Limit the diff to this path.")})  # fmt: skip

_MCP_SPECS: dict[str, list[tuple[str, str, dict[str, tuple[str, str]]]]] = {
    "github": [
        ("list_issues", "List issues of a repository, filtered by state and labels.",
         {"repo": ("string", "owner/name"), "state": ("string", "open, closed or all"), "labels": ("string", "Comma-separated labels.")}),
        ("get_issue", "Get one issue with its body and comments.", {"repo": ("string", "owner/name"), "number": ("integer", "Issue number.")}),
        ("create_issue", "Open a new issue.", {"repo": ("string", "owner/name"), "title": ("string", "Title."), "body": ("string", "Markdown body.")}),
        ("add_issue_comment", "Comment on an issue or pull request.", {"repo": ("string", "owner/name"), "number": ("integer", "Issue number."), "body": ("string", "Markdown.")}),
        ("create_pull_request", "Open a pull request from a branch.", {"repo": ("string", "owner/name"), "title": ("string", "Title."), "head": ("string", "Branch with the changes."), "base": ("string", "Target branch."), "body": ("string", "Description.")}),
        ("list_pull_requests", "List pull requests of a repository.", {"repo": ("string", "owner/name"), "state": ("string", "open, closed or all")}),
        ("merge_pull_request", "Merge a pull request.", {"repo": ("string", "owner/name"), "number": ("integer", "PR number."), "method": ("string", "merge, squash or rebase")}),
        ("search_code", "Search code across repositories.", {"query": ("string", "GitHub code search query.")}),
        ("get_file_contents", "Read a file at a ref.", {"repo": ("string", "owner/name"), "path": ("string", "File path."), "ref": ("string", "Branch, tag or sha.")}),
        ("create_branch", "Create a branch from a ref.", {"repo": ("string", "owner/name"), "branch": ("string", "New branch."), "from_ref": ("string", "Source ref.")}),
    ],
    "slack": [
        ("post_message", "Post a message to a channel.", {"channel": ("string", "Channel name or id."), "text": ("string", "Message (mrkdwn).")}),
        ("reply_to_thread", "Reply in a thread.", {"channel": ("string", "Channel."), "thread_ts": ("string", "Parent message timestamp."), "text": ("string", "Reply.")}),
        ("list_channels", "List public channels.", {"limit": ("integer", "How many.")}),
        ("get_channel_history", "Recent messages of a channel.", {"channel": ("string", "Channel."), "limit": ("integer", "How many.")}),
        ("add_reaction", "Add an emoji reaction to a message.", {"channel": ("string", "Channel."), "timestamp": ("string", "Message ts."), "name": ("string", "Emoji name.")}),
        ("get_user_profile", "Profile of a workspace member.", {"user_id": ("string", "Member id.")}),
    ],
    "postgres": [
        ("query", "Run a read-only SQL query and return rows as JSON.", {"sql": ("string", "SELECT statement."), "params": ("array", "Bind parameters.")}),
        ("list_tables", "List tables of a schema.", {"schema": ("string", "Schema name.")}),
        ("describe_table", "Columns, types and indexes of a table.", {"table": ("string", "schema.table")}),
        ("explain_query", "EXPLAIN ANALYZE a query.", {"sql": ("string", "Statement to explain.")}),
        ("list_slow_queries", "Slowest statements from pg_stat_statements.", {"limit": ("integer", "How many.")}),
    ],
    "linear": [
        ("create_issue", "Create a Linear issue.", {"team": ("string", "Team key."), "title": ("string", "Title."), "description": ("string", "Markdown.")}),
        ("update_issue", "Change state, assignee or priority of an issue.", {"id": ("string", "Issue id."), "state": ("string", "New state."), "assignee": ("string", "User.")}),
        ("search_issues", "Full-text search over issues.", {"query": ("string", "Search words.")}),
        ("list_cycles", "Cycles of a team.", {"team": ("string", "Team key.")}),
    ],
    "sentry": [
        ("list_issues", "Unresolved Sentry issues of a project.", {"project": ("string", "Project slug."), "query": ("string", "Search query.")}),
        ("get_issue_events", "Latest events (stack traces) of an issue.", {"issue_id": ("string", "Issue id."), "limit": ("integer", "How many.")}),
        ("resolve_issue", "Mark an issue resolved.", {"issue_id": ("string", "Issue id.")}),
    ],
    "datadog": [
        ("query_metrics", "Query a metric over a time range.", {"query": ("string", "Metric query."), "from": ("string", "Start (e.g. now-1h).")}),
        ("list_monitors", "Monitors and their states.", {"tags": ("string", "Comma-separated tags.")}),
        ("search_logs", "Search logs.", {"query": ("string", "Log query."), "from": ("string", "Start.")}),
    ],
    "pagerduty": [
        ("list_incidents", "Open incidents.", {"service": ("string", "Service id.")}),
        ("acknowledge_incident", "Acknowledge an incident.", {"incident_id": ("string", "Incident id.")}),
        ("get_oncall", "Who is on call for a schedule.", {"schedule": ("string", "Schedule id.")}),
    ],
}  # fmt: skip


def mcp_tools() -> list[dict[str, Any]]:
    """34 MCP tool definitions (github, slack, postgres, linear, sentry, datadog, pagerduty)."""
    tools = []
    for server, specs in _MCP_SPECS.items():
        for name, description, props in specs:
            long = f"{description} Provided by the {server} MCP server; results are JSON. " + (
                "Authentication uses the server's configured token; rate limits apply per workspace."
            )
            tools.append(_tool(f"mcp__{server}__{name}", long, list(props)[:1], props))
    return tools


# -- a fake repository ---------------------------------------------------------------------------

AUTHORS = ("Dana Whitfield", "Omar Haddad", "Priya Raman", "Lukas Berg", "Mei Chen", "Sam Okafor")
MODULES = (
    "ledger/sync.py", "ledger/retry.py", "ledger/writer.py", "ledger/models.py", "workers/settle.py",
    "workers/reconcile.py", "api/refunds.py", "api/payouts.py", "clients/bank.py", "config.py",
    "retry.py", "flags.py", "money.py", "audit.py",
)  # fmt: skip
COMMIT_SUBJECTS = (
    "fix(ledger): retry sync on {err}", "feat(api): add {thing} endpoint", "refactor(workers): split {thing} job",
    "fix(bank): handle {err} from the bank client", "chore(deps): bump {dep}", "test(ledger): cover {thing}",
    "perf(reconcile): batch {thing} lookups", "fix(api): validate {thing} amounts in cents", "docs: explain {thing}",
)  # fmt: skip
WORDS = ("payout", "refund", "ledger entry", "settlement", "webhook", "idempotency key", "batch", "currency")
ERRORS = ("timeouts", "409 conflicts", "connection resets", "stale reads", "deadlocks")
DEPS = ("httpx to 0.27.2", "sqlalchemy to 2.0.36", "pydantic to 2.9.2", "pytest to 8.3.3")


class FakeRepo:
    """Deterministic file contents and command outputs of the demo's payments repository."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self.files: dict[str, str] = {}
        self.edited: set[str] = set()

    @property
    def is_fixed(self) -> bool:
        return "src/payments/ledger/sync.py" in self.edited

    def edit_file(self, args: dict[str, Any]) -> str:
        self.edited.add(args["path"])
        return f"Edited {args['path']}: 1 replacement ({len(args['old'])} -> {len(args['new'])} characters)."

    def _rng(self, *key: Any) -> random.Random:
        digest = hashlib.sha256(json.dumps([self.seed, *key]).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def read_file(self, path: str, *, size: int = 3_000) -> str:
        if path not in self.files:
            self.files[path] = self._module(path, size)
        return self.files[path]

    def _module(self, path: str, size: int) -> str:
        rng = self._rng("file", path)
        stem = Path(path).stem
        lines = [f'"""{stem.replace("_", " ").title()}: part of the payments platform."""', "",
                 "from __future__ import annotations", "", "import logging", "from dataclasses import dataclass", "",
                 "from payments.retry import backoff", "from payments.money import Cents", "",
                 "logger = logging.getLogger(__name__)", ""]  # fmt: skip
        n = 0
        while sum(len(line) + 1 for line in lines) < size:
            n += 1
            name = f"{rng.choice(('sync', 'apply', 'load', 'settle', 'check', 'flush', 'record'))}_{rng.choice(WORDS).replace(' ', '_')}_{n}"
            lines += [
                "",
                f"def {name}(session, entry_id: int, *, attempts: int = {rng.randint(2, 6)}) -> Cents:",
                f'    """{rng.choice(("Apply", "Load", "Check", "Settle"))} one {rng.choice(WORDS)} and return its amount in cents."""',
                f"    for attempt in backoff(attempts, base={rng.choice((0.05, 0.1, 0.2))}):",
                "        row = session.get(entry_id)",
                "        if row is not None and row.status == 'posted':",
                "            return Cents(row.amount_cents)",
                f"        logger.info('{name}: entry %s not posted yet (attempt %s)', entry_id, attempt)",
                f"    raise LookupError(f'{stem}: entry {{entry_id}} still pending after {{attempts}} attempts')",
            ]
        return "\n".join(lines) + "\n"

    def git_log(self, *, size: int = 40_000, path: str | None = None) -> str:
        rng = self._rng("git", path)
        out: list[str] = []
        total = 0
        day = 28
        while total < size:
            sha = f"{rng.getrandbits(160):040x}"
            author = rng.choice(AUTHORS)
            subject = rng.choice(COMMIT_SUBJECTS).format(
                err=rng.choice(ERRORS), thing=rng.choice(WORDS), dep=rng.choice(DEPS)
            )
            files = rng.sample(MODULES, rng.randint(1, 3))
            entry = (
                f"commit {sha}\nAuthor: {author} <{author.split()[0].lower()}@payments.example>\n"
                f"Date:   2025-{3 - (day < 0):02d}-{abs(day) % 28 + 1:02d} {rng.randint(8, 19):02d}:{rng.randint(0, 59):02d}\n\n"
                f"    {subject}\n\n" + "".join(f"    M src/payments/{f}\n" for f in files) + "\n"
            )  # fmt: skip
            day -= 1
            out.append(entry)
            total += len(entry)
        return "".join(out)

    def pytest_log(self, *, size: int = 25_000, failing: str | None = "test_sync_retries_on_timeout") -> str:
        rng = self._rng("pytest", failing)
        lines = ["============================= test session starts ==============================",
                 "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0", "rootdir: /work/payments-platform",
                 "configfile: pyproject.toml", "plugins: anyio-4.6.0, cov-5.0.0, xdist-3.6.1", ""]  # fmt: skip
        count = 0
        while sum(len(line) + 1 for line in lines) < size - 1_500:
            module = rng.choice(MODULES).replace("/", "_").removesuffix(".py")
            case = f"test_{rng.choice(('posts', 'rejects', 'retries', 'settles', 'rounds', 'skips'))}_{rng.choice(WORDS).replace(' ', '_')}_{count}"
            lines.append(
                f"tests/test_{module}.py::{case} PASSED{'':>{max(1, 60 - len(module) - len(case))}}[{min(99, count // 6):3d}%]"
            )
            count += 1
        if failing:
            lines += [
                f"tests/test_ledger_sync.py::{failing} FAILED                     [ 99%]", "",
                "=================================== FAILURES ===================================",
                f"________________________ {failing} _________________________", "",
                "    def test_sync_retries_on_timeout(ledger, bank_stub):",
                "        bank_stub.fail_next(2, with_=TimeoutError)",
                ">       result = sync_ledger(ledger, batch_id=42)", "",
                "tests/test_ledger_sync.py:88: ",
                "src/payments/ledger/sync.py:57: in sync_ledger",
                "    while not done:  # retry until the bank answers",
                "E   AssertionError: expected 3 bank calls, got 7 (retry loop is unbounded and not jittered)",
                "=========================== short test summary info ============================",
                f"FAILED tests/test_ledger_sync.py::{failing} - AssertionError: expected 3 bank calls, got 7",
                f"========================= 1 failed, {count} passed in 41.27s =========================",
            ]  # fmt: skip
        else:
            lines.append(
                f"============================ {count} passed in 39.84s ============================="
            )
        return "\n".join(lines) + "\n"

    def grep(self, pattern: str) -> str:
        rng = self._rng("grep", pattern)
        hits = [
            f"src/payments/{rng.choice(MODULES)}:{rng.randint(10, 240)}:    {pattern.strip('^$')}(session, entry_id)  # {rng.choice(WORDS)}"
            for _ in range(rng.randint(6, 14))
        ]
        return "\n".join(sorted(set(hits))) + "\n"

    def issues_json(self, count: int = 12) -> str:
        rng = self._rng("issues")
        issues = []
        for n in range(count):
            issues.append(
                {
                    "number": 400 + n * 3,
                    "title": rng.choice(("Ledger sync double-posts", "Refund webhook times out", "Payout batch stuck",
                                         "Reconcile job slow on Mondays", "Currency rounding off by one cent")),
                    "state": "open",
                    "labels": ["payments", rng.choice(("bug", "flaky-test", "perf", "incident"))],
                    "assignee": rng.choice(AUTHORS),
                    "comments": rng.randint(0, 14),
                    "body": textwrap.shorten(" ".join(rng.choice(WORDS) for _ in range(60)), 320),
                }
            )  # fmt: skip
        return json.dumps(issues, indent=2)


# -- scripted sessions ---------------------------------------------------------------------------


@dataclass
class Script:
    """Scripted assistant steps; tool ids are numbered so every run is the same."""

    prefix: str
    steps: list[Any] = field(default_factory=list)
    turns: list[str | Callable[[SessionManager], Any]] = field(default_factory=list)
    _n: int = 0

    def user(self, text: str) -> None:
        """Start a turn: the steps after it, up to a text-only reply, answer ``text``."""
        self.turns.append(text)

    def compact_by_hand(self, strategy: str, instructions: str) -> None:
        """Between turns, the user compacts the session (trigger ``manual``)."""
        self.turns.append(lambda manager: manager.compact(strategy, instructions=instructions))

    def call(self, name: str, **tool_input: Any) -> ToolUseBlock:
        self._n += 1
        return tool_use(f"toolu_{self.prefix}_{self._n:03d}", name, **tool_input)

    def say(self, text: str = "", *calls: ToolUseBlock) -> None:
        self.steps.append(assistant(text, *calls))

    def then(self, step: Callable[[ModelRequest], Message | str]) -> None:
        self.steps.append(step)

    def raise_(self, error: BaseException) -> None:
        self.steps.append(error)

    def read_result(self, pattern: str, text: str = "", **options: Any) -> None:
        """A read_result call on the reference in the last tool result, found at run time."""

        def step(request: ModelRequest) -> Message:
            call = self.call("read_result", ref_id=last_ref(request), pattern=pattern, **options)
            return assistant(text, call)

        self.then(step)

    def final_report(self, report: str, otherwise: str = "Done.") -> None:
        """Call final_report when the guard restricted the tools to it, else answer in text."""

        def step(request: ModelRequest) -> Message:
            if request.tool_names == [FINAL_TURN_REPLY]:
                return assistant("", self.call(FINAL_TURN_REPLY, report=report))
            return assistant(otherwise)

        self.then(step)


def last_ref(request: ModelRequest) -> str:
    for message in reversed(request.messages):
        found = re.findall(r"\bres_[0-9a-f]{6,}\b", message.text)  # not the "res_at" of expires_at
        if found:
            return found[-1]
    raise LookupError("no stored result reference in the context")


class _DemoStore(SessionStore):
    """A store whose offloaded results get ref ids derived from the seed (uuid4 otherwise)."""

    def __init__(self, path: Path, seed: int) -> None:
        super().__init__(path)
        self._refs = (
            f"res_{hashlib.sha256(f'{seed}:{n}'.encode()).hexdigest()[:16]}" for n in range(1 << 30)
        )

    def put_blob(self, session_id: str, content: bytes, **kwargs: Any) -> BlobRecord:
        kwargs["ref_id"] = kwargs.get("ref_id") or next(self._refs)
        return super().put_blob(session_id, content, **kwargs)


@dataclass
class _Ctx:
    store: SessionStore
    settings: Settings
    repo: FakeRepo
    seed: int

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], Any]]:
        repo = self.repo
        return {
            "read_file": lambda a: repo.read_file(a["path"]),
            "grep": lambda a: repo.grep(a["pattern"]),
            "run_tests": lambda a: repo.pytest_log(failing=None if repo.is_fixed else "test_sync_retries_on_timeout"),
            "git_log": lambda a: repo.git_log(path=a.get("path")),
            "edit_file": repo.edit_file,
            "mcp__github__list_issues": lambda a: repo.issues_json(),
            "mcp__github__get_issue": lambda a: repo.issues_json(1).replace("400", str(a.get("number", 400))),
            "mcp__github__create_pull_request": lambda a: {"number": 512, "url": "https://github.example/payments/pull/512", "state": "open"},
            "mcp__slack__post_message": lambda a: {"ok": True, "channel": a.get("channel"), "ts": "1741870000.000200"},
            "mcp__postgres__query": lambda a: [{"entry_id": 9000 + i, "status": "pending", "attempts": 7 + i % 3} for i in range(18)],
            "mcp__sentry__list_issues": lambda a: [{"id": f"PAY-{i}", "title": "TimeoutError in sync_ledger", "count": 40 + i} for i in range(5)],
        }  # fmt: skip

    def play(
        self, script: Script, name: str, title: str, *, model: str, usage_ratio: float,
        provider_window: int | None = None, **kwargs: Any,
    ) -> str:  # fmt: skip
        """Run a scripted session through the session manager; returns its id."""
        client = ScriptedClient(
            script.steps, model=model, usage_ratio=usage_ratio, context_window=provider_window
        )
        session_id = _session_id(self.seed, name)
        with self.manager(client, session_id, title, **kwargs) as manager:
            _run(manager, script.turns)
        return session_id

    def manager(self, client: ScriptedClient, session_id: str, title: str, **kwargs: Any) -> SessionManager:
        kwargs.setdefault("tools", [*CODING_TOOLS, *mcp_tools()])
        kwargs.setdefault("tool_handlers", self.handlers())
        return SessionManager(
            client,
            self.store,
            session_id=session_id,
            title=title,
            sections=prompt_sections(),
            skills=SKILLS,
            settings=self.settings,
            summarizer=OfflineSummarizer(),
            metadata={"demo": True, "seed": self.seed},
            **kwargs,
        )


def _session_id(seed: int, name: str) -> str:
    return f"demo-{name}-{hashlib.sha256(f'{seed}:{name}'.encode()).hexdigest()[:8]}"


def _run(manager: SessionManager, turns: Sequence[str | Callable[[SessionManager], Any]]) -> None:
    for turn in turns:
        if manager.status == "final":
            break
        if callable(turn):
            turn(manager)
        else:
            manager.run_turn(turn)


def _read(s: Script, *modules: str) -> None:
    for module in modules:
        s.say(f"Reading src/payments/{module}.", s.call("read_file", path=f"src/payments/{module}"))


def flaky_test_session(ctx: _Ctx) -> str:
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


def mcp_triage_session(ctx: _Ctx) -> str:
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


def refactor_session(ctx: _Ctx) -> str:
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


def emergency_session(ctx: _Ctx) -> str:
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


def forced_final_session(ctx: _Ctx) -> str:
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


def skipped_fallback_session(ctx: _Ctx) -> str:
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


def long_refunds_session(ctx: _Ctx) -> str:
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


SCENARIOS: dict[str, tuple[Callable[[_Ctx], str], ...]] = {
    CODING_DB: (flaky_test_session, mcp_triage_session, refactor_session, long_refunds_session),
    LIMITS_DB: (emergency_session, forced_final_session, skipped_fallback_session),
}


def generate_demo(out_dir: str | Path, *, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write the demo databases (replacing earlier ones) and the settings file that made them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_dict(DEMO_SETTINGS, source=str(out / SETTINGS_FILE))
    written = [save_settings(settings, out / SETTINGS_FILE)]
    for name, scenarios in SCENARIOS.items():
        path = out / name
        for stale in _db_files(path):
            stale.unlink()
        repo = FakeRepo(seed)
        with _DemoStore(path, seed) as store:
            ctx = _Ctx(store, settings, repo, seed)
            for scenario in scenarios:
                scenario(ctx)
        settle_database(path)
        written.append(path)
    return written


def settle_database(path: Path) -> None:
    """VACUUM and checkpoint ``path`` so the .db file alone holds every row: the -wal and -shm
    files are not committed with the sample data."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("VACUUM")
        busy, _, _ = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    finally:
        conn.close()
    wal = path.with_name(path.name + "-wal")
    if busy or (wal.exists() and wal.stat().st_size):
        raise StoreError("cannot checkpoint the demo database (another process has it open?)", path=str(path))


def _db_files(path: Path) -> Iterator[Path]:
    for suffix in ("", "-wal", "-shm"):
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            yield candidate
