"""The demo agent: its models and their window settings, its system prompt, skills and tools (data)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from engine.prompt import PromptSection

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
            # room between compaction and the hard block for one large tool output
            "compact_threshold": 0.9,
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
