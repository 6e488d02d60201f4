"""The offline summarizer: sectioned, deterministic, extractive, and within its token budget."""

from __future__ import annotations

import pytest

from engine.compaction import OfflineSummarizer, Summarizer
from engine.compaction.offline import SECTIONS, error_line, find_paths, is_failure_output
from engine.compaction.result import summary_message
from engine.errors import ValidationError
from engine.messages import (
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

TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "src/billing/invoice.py", line 41, in total\n'
    "    raise ValueError(msg)\n"
    "ValueError: invoice total mismatch 1043.20 != 1043.02\n"
)

SESSION = [
    user(
        "Fix the failing invoice test in tests/test_invoice.py. "
        "Never modify anything under db/migrations/legacy/. Always run ruff before committing."
    ),
    assistant(
        "Let me run the tests first.", tool_use("t1", "bash", command="pytest tests/test_invoice.py -x")
    ),
    tool_result("t1", TRACEBACK, is_error=True),
    assistant("The issue was caused by float rounding in src/billing/invoice.py."),
    assistant(
        "We decided to use Decimal instead of float for money.",
        tool_use("t2", "edit_file", path="src/billing/invoice.py", old_str="float(", new_str="Decimal("),
    ),
    tool_result("t2", "Edited src/billing/invoice.py"),
    assistant("", tool_use("t3", "bash", command="pytest tests/test_invoice.py -x")),
    tool_result("t3", "4 passed in 0.31s"),
    assistant("All tests pass now. Next step: update CHANGELOG.md with the rounding fix."),
]


def section(summary: str, title: str) -> str:
    """The body of one ``## title`` section ('' when absent)."""
    parts = summary.split(f"## {title}\n", 1)
    return parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""


@pytest.fixture(scope="module")
def summary() -> str:
    return OfflineSummarizer().summarize(SESSION)


def test_satisfies_the_summarizer_protocol():
    assert isinstance(OfflineSummarizer(), Summarizer)
    assert OfflineSummarizer().name == "offline"


def test_sections_appear_in_their_fixed_order(summary):
    positions = [summary.index(f"## {title}") for title in SECTIONS if f"## {title}" in summary]
    assert len(positions) >= 6
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("title", "expected"),
    [
        ("Constraints", "Never modify anything under db/migrations/legacy/"),
        ("Constraints", "Always run ruff before committing"),
        ("Decisions", "We decided to use Decimal instead of float for money."),
        ("Files", "src/billing/invoice.py (mentioned; edited by edit_file)"),
        ("Files", "tests/test_invoice.py"),
        ("Commands run", "`pytest tests/test_invoice.py -x` ×2 → failed, then ok"),
        ("Errors and resolutions", "ValueError: invoice total mismatch 1043.20 != 1043.02"),
        ("Errors and resolutions", "→ The issue was caused by float rounding in src/billing/invoice.py."),
        ("Open tasks", "Next step: update CHANGELOG.md with the rounding fix."),
    ],
    ids=["constraint-never", "constraint-always", "decision", "edited-file", "user-file", "command-outcomes",
         "error-line", "error-resolution", "next-step"],
)  # fmt: skip
def test_extracts_each_kind_of_fact_into_its_section(summary, title, expected):
    assert expected in section(summary, title)


def test_does_not_copy_tool_output_wholesale(summary):
    assert "line 41, in total" not in summary
    assert "4 passed in 0.31s" not in summary


def test_is_deterministic():
    assert OfflineSummarizer().summarize(SESSION) == OfflineSummarizer().summarize(list(SESSION))


def test_an_error_fixed_by_rerunning_is_marked_resolved():
    messages = [
        user("run the build"),
        assistant("", tool_use("a", "bash", command="make build")),
        tool_result("a", "make: *** [build] Error 2\nfatal: cannot find libfoo", is_error=True),
        assistant("", tool_use("b", "bash", command="make build")),
        tool_result("b", "build ok"),
    ]
    errors = section(OfflineSummarizer().summarize(messages), "Errors and resolutions")
    assert "`make build`:" in errors
    assert "→ re-ran successfully" in errors


def test_an_error_nobody_addressed_is_marked_unresolved():
    messages = [
        user("deploy it"),
        assistant("", tool_use("a", "bash", command="./deploy.sh")),
        tool_result("a", "Permission denied: /srv/app", is_error=True),
    ]
    assert "→ unresolved" in section(OfflineSummarizer().summarize(messages), "Errors and resolutions")


def test_an_unanswered_last_request_becomes_an_open_task():
    messages = [user("Add a --json flag to the export command.")]
    tasks = section(OfflineSummarizer().summarize(messages), "Open tasks")
    assert "answer the last request: Add a --json flag to the export command." in tasks


def test_an_earlier_summary_is_merged_not_lost():
    earlier = OfflineSummarizer().summarize(SESSION)
    later = [user("Now also support EUR in the invoice header."), assistant("Going with ISO 4217 codes.")]
    merged = OfflineSummarizer().summarize([summary_message(earlier), *later])
    assert "Never modify anything under db/migrations/legacy/" in merged
    assert "Now also support EUR in the invoice header." in section(merged, "User requests")
    assert "Going with ISO 4217 codes." in section(merged, "Decisions")
    assert f"({len(SESSION) + len(later)} messages" in merged


def test_media_is_referenced_without_its_data():
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "A" * 4000})
    messages = [
        Message(role="user", content=[TextBlock(text="Here is the screenshot of the bug."), image]),
        assistant("", tool_use("s", "screenshot", url="http://localhost:8000")),
        Message(role="user", content=[ToolResultBlock(tool_use_id="s", content=[image])]),
    ]
    text = OfflineSummarizer().summarize(messages)
    assert "image (inline image/png, 3,000 bytes) sent by user" in text
    assert "returned by screenshot" in text
    assert "AAAA" not in text


@pytest.mark.parametrize("budget", [40, 80, 150, 400])
def test_stays_within_max_tokens(budget):
    tokenizer = get_tokenizer("o200k_base")
    long_session = SESSION * 8
    text = OfflineSummarizer(tokenizer).summarize(long_session, max_tokens=budget)
    assert tokenizer.count(text) <= budget


def test_trimming_drops_commands_before_user_requirements():
    text = OfflineSummarizer().summarize(SESSION, max_tokens=90)
    assert "Never modify anything under db/migrations/legacy/" in text
    assert "## Commands run" not in text


def test_instructions_keep_matching_lines_when_trimming():
    messages = [
        user("Refactor the exporter."),
        assistant("We decided to rename the API endpoint /v1/export to /v2/export."),
        assistant("We decided to reformat the docstrings in the helper module."),
    ]
    plain = OfflineSummarizer().summarize(messages, max_tokens=60)
    focused = OfflineSummarizer().summarize(messages, instructions="focus on the API changes", max_tokens=60)
    assert "/v2/export" not in plain
    assert "/v2/export" in focused


@pytest.mark.parametrize(("messages", "max_tokens"), [([], 100), (SESSION, 0)], ids=["empty", "zero-budget"])
def test_bad_input_raises_validation_error(messages, max_tokens):
    with pytest.raises(ValidationError):
        OfflineSummarizer().summarize(messages, max_tokens=max_tokens)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("edit src/app/main.py and ./run.sh", ["src/app/main.py", "./run.sh"]),
        ("see /etc/hosts or ~/notes/todo.md", ["/etc/hosts", "~/notes/todo.md"]),
        ("and/or input/output", []),
        ("docs at https://example.com/a/b.html", []),
        ("update README.md, then pyproject.toml.", ["README.md", "pyproject.toml"]),
        ("never touch db/migrations/legacy/", ["db/migrations/legacy/"]),
    ],
)
def test_find_paths(text, expected):
    assert find_paths(text) == expected


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        (TRACEBACK, "ValueError: invoice total mismatch 1043.20 != 1043.02"),
        ("compiling\nerror: linker `cc` not found\nnote: more", "error: linker `cc` not found"),
        ("FAILED tests/test_x.py::test_y - assert 1 == 2", "FAILED tests/test_x.py::test_y - assert 1 == 2"),
    ],
)
def test_error_line_picks_the_telling_line(output, expected):
    assert error_line(output) == expected


@pytest.mark.parametrize(
    ("output", "failed"),
    [
        (TRACEBACK, True),
        ('def parse(x):\n    raise ValueError(f"bad {x}")\n', False),
        ("12:00 ERROR worker-3 retrying\n" + "12:01 INFO ok\n" * 40, False),
        ("collected 3 items\nFAILED tests/test_x.py::test_y - assert 1 == 2", True),
        ("bash: rg: command not found", True),
        ("error[E0425]: cannot find value `x` in this scope", True),
        ("all good", False),
    ],
    ids=["traceback", "code-mentioning-an-error", "log-with-old-errors", "pytest-failed", "missing-command",
         "rustc-error", "success"],
)  # fmt: skip
def test_is_failure_output(output, failed):
    assert is_failure_output(output) is failed


def test_a_long_history_is_read_in_full_only_at_its_end_but_keeps_the_first_request_and_old_constraints(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from engine.compaction import offline as offline_module

    monkeypatch.setattr(offline_module, "FULL_READ_MESSAGES", 4)
    messages = [
        user("Port the billing service to Go."),
        assistant("Looking at the code."),
        user("Never touch the ledger schema."),
        assistant("We decided to use sqlc for the queries."),  # old assistant text: not read
        user("Carry on."),
        assistant("Done with the handlers."),
        user("Now the tests."),
        assistant("Writing them."),
    ]
    summary = OfflineSummarizer(get_tokenizer("o200k_base")).summarize(messages)
    assert "Port the billing service to Go." in summary
    assert "Never touch the ledger schema." in summary
    assert "sqlc" not in summary
    assert "Now the tests." in summary
    assert "(8 messages" in summary
