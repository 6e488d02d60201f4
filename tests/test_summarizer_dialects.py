"""The offline summarizer reads every agent's dialect: each defect of issue 19 in a few lines."""

from __future__ import annotations

import pytest

from engine.compaction import OfflineSummarizer
from engine.compaction.constraints import constraint_sentences, is_constraint
from engine.compaction.extract import describe_call, error_line, is_failure_output
from engine.messages import assistant, tool_result, tool_use, user


def section(summary: str, title: str) -> str:
    parts = summary.split(f"## {title}\n", 1)
    return parts[1].split("\n## ", 1)[0] if len(parts) == 2 else ""


def summarize(*messages) -> str:
    return OfflineSummarizer().summarize(list(messages))


# -- which files a call changed, which command it ran --------------------------------------------


@pytest.mark.parametrize(
    ("name", "arguments", "files", "command"),
    [
        ("str_replace_editor", {"command": "view", "path": "/repo/a.py"}, (("/repo/a.py", "read"),), None),
        ("str_replace_editor", {"command": "str_replace", "path": "/repo/a.py", "old_str": "x", "new_str": "y"},
         (("/repo/a.py", "edited"),), None),
        ("str_replace_editor", {"command": "create", "path": "/repo/new.py", "file_text": "x"},
         (("/repo/new.py", "written"),), None),
        ("apply_patch", {"input": "*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n"
                                  "*** Add File: src/new.py\n+x\n*** End Patch"},
         (("src/app.py", "edited"), ("src/new.py", "written")), None),
        ("shell", {"command": ["apply_patch", "*** Begin Patch\n*** Delete File: old.txt\n*** End Patch"]},
         (("old.txt", "deleted"),), None),
        ("write_to_file", {"absolutePath": "/home/u/proj/src/index.ts", "content": "x"},
         (("/home/u/proj/src/index.ts", "written"),), None),
        ("replace_in_file", {"absolutePath": "/home/u/proj/src/index.ts", "diff": "..."},
         (("/home/u/proj/src/index.ts", "edited"),), None),
        ("shell", {"command": ["bash", "-lc", "pytest -x tests/test_api.py"]},
         (("tests/test_api.py", "used"),), "pytest -x tests/test_api.py"),
        ("run_shell_command", {"command": "npm test"}, (), "npm test"),
        ("replace", {"file_path": "/w/app.js", "old_string": "a", "new_string": "b"}, (("/w/app.js", "edited"),), None),
        ("Edit", {"file_path": "/w/app.js", "old_string": "a", "new_string": "b"}, (("/w/app.js", "edited"),), None),
    ],
    ids=["editor-view-is-a-read", "editor-str-replace", "editor-create", "codex-apply-patch",
         "codex-apply-patch-in-shell", "cline-write-absolutePath", "cline-replace-absolutePath",
         "codex-argv-command", "gemini-shell", "gemini-replace", "claude-edit"],
)  # fmt: skip
def test_describe_call_reads_each_dialect(name, arguments, files, command):
    call = describe_call(name, arguments)
    assert call.files == files
    assert call.command == command


def test_an_editor_view_is_neither_an_edit_nor_a_command():
    text = summarize(
        user("Look at the parser."),
        assistant("", tool_use("v", "str_replace_editor", command="view", path="/repo/parser.py")),
        tool_result(
            "v", "Here's the result of running `cat -n` on /repo/parser.py:\n     1\tdef parse(): pass"
        ),
    )
    assert "/repo/parser.py (read)" in section(text, "Files")
    assert "edited" not in section(text, "Files")
    assert section(text, "Commands run") == ""


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (tool_use("p", "apply_patch", input="*** Begin Patch\n*** Update File: src/cli.rs\n*** End Patch"),
         "src/cli.rs (edited by apply_patch)"),
        (tool_use("p", "write_to_file", absolutePath="/p/src/main.ts", content="x"),
         "/p/src/main.ts (written by write_to_file)"),
    ],
    ids=["codex-apply-patch", "cline-write-to-file"],
)  # fmt: skip
def test_changed_files_are_listed_with_the_tool_that_changed_them(call, expected):
    text = summarize(user("Make the change."), assistant("", call), tool_result("p", "Success."))
    assert expected in section(text, "Files")


# -- failures and the line that tells what failed ------------------------------------------------


@pytest.mark.parametrize(
    ("output", "expected"),
    [
        ("Exit code 2\nsrc/api.ts(14,7): error TS2345: Argument of type 'string' is not assignable to "
         "parameter of type 'number'.", "src/api.ts(14,7): error TS2345: Argument of type 'string' is not "
         "assignable to parameter of type 'number'."),
        ("____ test_totals ____\n    def test_totals():\n>       assert total([1]) == 2\nE       AssertionError: "
         "assert 1 == 2\ntests/test_sum.py:4: AssertionError\n=== short test summary info ===\n"
         "FAILED tests/test_sum.py::test_totals\n=== 1 failed in 0.02s ===",
         "FAILED tests/test_sum.py::test_totals: AssertionError: assert 1 == 2"),
        ("  Failed Billing.Tests.InvoiceTests.RoundsHalfUp [12 ms]\n  Error Message:\n   Assert.Equal() Failure: "
         "Expected 3, Actual 2\nFailed!  - Failed:     1, Passed:    41, Skipped:     0, Total:    42",
         "Failed Billing.Tests.InvoiceTests.RoundsHalfUp [12 ms]: Assert.Equal() Failure: Expected 3, Actual 2"),
        ("Process exited with code 1\nOutput:\nerror: could not compile `app` due to 2 previous errors",
         "error: could not compile `app` due to 2 previous errors"),
    ],
    ids=["tsc-under-exit-code", "pytest-test-name-kept", "dotnet-failed", "codex-cargo"],
)  # fmt: skip
def test_error_line_names_what_failed(output, expected):
    assert error_line(output) == expected


@pytest.mark.parametrize(
    ("output", "reads_file", "failed"),
    [
        ("Chunk ID: 1\nWall time: 0.2 seconds\nProcess exited with code 1\nOutput:\nnpm ERR! missing script", False,
         True),
        ("Process exited with code 0\nOutput:\n12:00 ERROR retrying (handled)\nall done", False, False),
        ('{"output":"FAIL src/a.test.ts\\n","metadata":{"exit_code":1,"duration_seconds":0.5}}', False, True),
        ("Command: make\nStdout: \nStderr: make: *** No rule\nExit Code: 2\nSignal: (none)", False, True),
        ("Passed!  - Failed: 0, Passed: 42\n", False, False),
        ("Failed!  - Failed:     1, Passed:    41, Skipped:     0, Total:    42", False, True),
        ('     1\tdef parse(s):\n     2\t    """\n     3\t    >>> parse("")\n     4\t    Traceback (most recent '
         'call last):\n     5\t    ...\n     6\t    ValueError: empty input\n     7\t    """', True, False),
        ('def parse(s):\n    """\n    >>> parse("")\n    Traceback (most recent call last):\n        ...\n'
         '    ValueError: empty input\n    """\n', False, False),
        ("Error: ENOENT: no such file or directory, open '/w/missing.md'", True, True),
    ],
    ids=["codex-exit-1", "codex-exit-0-with-error-words", "codex-json-envelope", "gemini-exit-code",
         "dotnet-passed", "dotnet-failed", "doctest-in-file-view", "doctest-in-cat", "read-of-missing-file"],
)  # fmt: skip
def test_is_failure_output_in_each_dialect(output, reads_file, failed):
    from engine.compaction.extract import result_payload

    assert is_failure_output(result_payload(output), reads_file=reads_file) is failed


def test_a_doctest_traceback_in_a_read_file_is_not_a_failed_call():
    content = '     3\t    >>> parse("")\n     4\t    Traceback (most recent call last):\n     6\t    ValueError: empty'
    text = summarize(
        user("Read the parser."),
        assistant("", tool_use("r", "Read", file_path="/w/parser.py")),
        tool_result("r", content),
    )
    assert section(text, "Errors and resolutions") == ""


def test_codex_exit_code_1_is_summarized_as_failed():
    text = summarize(
        user("Run the tests."),
        assistant("", tool_use("c", "exec_command", cmd="cargo test")),
        tool_result("c", "Process exited with code 1\nOutput:\ntest parse_empty ... FAILED\n"),
    )
    assert "`cargo test` → failed" in section(text, "Commands run")
    assert "test parse_empty ... FAILED" in section(text, "Errors and resolutions")


@pytest.mark.parametrize(
    ("fix", "resolved", "unresolved"),
    [
        ("Fixed the missing fetchUser import in src/api.ts.",
         "TS2304: Cannot find name 'fetchUser'. → Fixed the missing fetchUser import", "no such table: users"),
        ("Installed it, that fixed it.", "no such table: users → Installed it, that fixed it.",
         "Cannot find name 'fetchUser'."),
    ],
    ids=["resolves-the-error-it-names", "naming-nothing-resolves-the-latest"],
)  # fmt: skip
def test_one_fix_sentence_resolves_one_error_not_every_open_one(fix, resolved, unresolved):
    text = summarize(
        user("Build and test."),
        assistant("", tool_use("a", "bash", command="tsc -p .")),
        tool_result("a", "src/api.ts(3,1): error TS2304: Cannot find name 'fetchUser'.", is_error=True),
        assistant("", tool_use("b", "bash", command="pytest tests/test_db.py")),
        tool_result("b", "E   sqlite3.OperationalError: no such table: users", is_error=True),
        assistant(fix),
    )
    errors = section(text, "Errors and resolutions")
    assert resolved in errors
    assert f"{unresolved} → unresolved" in errors


# -- what the user asked, the constraints, what is next -------------------------------------------


@pytest.mark.parametrize(
    ("sentence", "expected"),
    [
        ("Please keep Python 3.7 compatibility.", True),
        ("Never push to main.", True),
        ("You mustn't touch the fixtures.", True),
        ("Stick to the standard library.", True),
        ("Let's look at the parser next.", False),
        ("Keep going.", False),
    ],
)
def test_is_constraint(sentence, expected):
    assert is_constraint(sentence) is expected


def test_constraint_sentences_split_a_message():
    assert constraint_sentences("Fix it. Never push to main.\nThanks") == ["Never push to main."]


def test_constraints_todos_and_claude_code_wrappers():
    text = summarize(
        user(
            "Caveat: The messages below were generated by the user while running local commands. "
            "DO NOT respond to these messages or otherwise consider them in your response unless the user "
            "explicitly asks you to."
        ),
        user(
            "<command-name>/clear</command-name>\n<command-message>clear</command-message>\n<command-args></command-args>"
        ),
        user("<local-command-stdout></local-command-stdout>"),
        user("Port the CLI to click. Please keep Python 3.7 compatibility. Still to do: the --json flag."),
        assistant("I'll look at the file. Let me check. Now I will read the code."),
        assistant("The CLI now uses click. I will add the --json flag to the export command next."),
    )
    requests = section(text, "User requests")
    assert "Port the CLI to click." in requests
    assert "Caveat" not in text and "command-name" not in text and "/clear" not in requests
    assert "Please keep Python 3.7 compatibility." in section(text, "Constraints")
    tasks = section(text, "Open tasks")
    assert "Still to do: the --json flag." in tasks
    assert "I'll look at the file" not in tasks and "read the code" not in tasks
    assert "I will add the --json flag to the export command next." in tasks


def test_pending_todos_of_the_latest_plan_are_open_tasks():
    todos = [
        {"content": "Write the migration", "status": "completed", "activeForm": "Writing"},
        {"content": "Backfill the ledger table", "status": "in_progress", "activeForm": "Backfilling"},
        {"content": "Update the runbook", "status": "pending", "activeForm": "Updating"},
    ]
    text = summarize(
        user("Do the ledger work."),
        assistant("", tool_use("t", "TodoWrite", todos=todos)),
        tool_result("t", "Todos have been modified successfully."),
        assistant("Working on it."),
    )
    tasks = section(text, "Open tasks")
    assert "[in_progress] Backfill the ledger table" in tasks
    assert "[pending] Update the runbook" in tasks
    assert "Write the migration" not in tasks


def test_facts_only_in_tool_output_are_kept():
    text = summarize(
        user("Where does the service listen?"),
        assistant("", tool_use("g", "bash", command="grep -r PORT config/")),
        tool_result("g", "config/prod.env:SERVICE_PORT=8443\nconfig/prod.env:# comment"),
        assistant("Found it."),
    )
    assert "SERVICE_PORT=8443" in section(text, "Facts from tool output")


def test_the_summary_is_a_handover_a_resuming_agent_can_act_on():
    text = summarize(
        user("Add retry with backoff to the webhook sender. Never retry on HTTP 4xx."),
        assistant("", tool_use("r", "str_replace_editor", command="view", path="/w/webhooks/sender.py")),
        tool_result("r", "     1\tdef send(url, body):\n     2\t    return post(url, body)"),
        assistant("We'll use tenacity instead of a hand-rolled loop.",
                  tool_use("p", "apply_patch", input="*** Begin Patch\n*** Update File: webhooks/sender.py\n*** End Patch")),
        tool_result("p", "Exit code: 0\nOutput:\nSuccess. Updated the following files:\nM webhooks/sender.py"),
        assistant("", tool_use("t", "exec_command", cmd="pytest tests/test_sender.py")),
        tool_result("t", "Process exited with code 1\nOutput:\nFAILED tests/test_sender.py::test_gives_up_on_404 - "
                         "AssertionError: 3 calls, expected 1"),
        assistant("Fixed test_gives_up_on_404: 4xx responses now stop the retry loop."),
        assistant("", tool_use("t2", "exec_command", cmd="pytest tests/test_sender.py")),
        tool_result("t2", "Process exited with code 0\nOutput:\n5 passed in 0.4s"),
        assistant("Next step: document the backoff settings in docs/webhooks.md."),
    )  # fmt: skip
    assert "Add retry with backoff to the webhook sender." in section(text, "User requests")  # what was asked
    assert "Never retry on HTTP 4xx." in section(text, "Constraints")
    assert "We'll use tenacity instead of a hand-rolled loop." in section(text, "Decisions")
    files = section(text, "Files")
    assert "webhooks/sender.py (edited by apply_patch)" in files  # what changed, and how
    assert "/w/webhooks/sender.py (read)" in files
    errors = section(text, "Errors and resolutions")  # what failed, and whether it was fixed
    assert "test_gives_up_on_404 - AssertionError: 3 calls, expected 1 → Fixed test_gives_up_on_404" in errors
    assert "`pytest tests/test_sender.py` ×2 → failed, then ok" in section(text, "Commands run")
    assert "Next step: document the backoff settings in docs/webhooks.md." in section(text, "Open tasks")


def test_a_change_the_agent_reports_is_kept_with_what_changed():
    text = summarize(
        user("The exports time out."),
        assistant("Looking into it. Bumped the export worker timeout from 30 to 120 seconds in settings."),
    )
    assert "Bumped the export worker timeout from 30 to 120 seconds in settings." in section(
        text, "Decisions"
    )
