"""Reading agents' tool calls and outputs: which files a call changed, which command it ran,
whether its output reports a failure, and the line that tells what failed.

Agents speak different dialects for the same acts: Claude Code (Edit, Write, Bash, TodoWrite),
Codex (shell/exec_command with argv lists, apply_patch, update_plan, "Process exited with code
N"), Cline (write_to_file with absolutePath, replace_in_file, execute_command), OpenHands and
SWE-agent (str_replace_editor with a ``command`` sub-command, execute_bash), Gemini CLI
(write_file, replace, run_shell_command, "Exit Code: N"). ``describe_call`` maps each to one shape.

The pieces live in ``failures``, ``tool_calls`` and ``tool_facts``; this module is their one
import path.
"""

from __future__ import annotations

from engine.compaction.failures import (
    COMMAND_CHARS,
    FAILURE_TAIL_LINES,
    LINE_CHARS,
    SHORT_ERROR_CHARS,
    Prefiltered,
    error_line,
    exit_code,
    is_failure_line,
    is_failure_output,
)
from engine.compaction.tool_calls import (
    CHANGES,
    DELETED,
    EDITED,
    READ,
    SEARCHED,
    WRITTEN,
    ToolCall,
    describe_call,
    find_paths,
    looks_like_path,
    patch_files,
    result_payload,
)
from engine.compaction.tool_facts import (
    FACT_LINE_CHARS,
    FACT_LINES_PER_OUTPUT,
    FACT_MIN_SCORE,
    FACT_SCAN_LINES,
    SHORT_VALUE_CHARS,
    SHORT_VERSION_LINE_CHARS,
    salient_lines,
)

__all__ = [
    "CHANGES",
    "COMMAND_CHARS",
    "DELETED",
    "EDITED",
    "FACT_LINES_PER_OUTPUT",
    "FACT_LINE_CHARS",
    "FACT_MIN_SCORE",
    "FACT_SCAN_LINES",
    "FAILURE_TAIL_LINES",
    "LINE_CHARS",
    "READ",
    "SEARCHED",
    "SHORT_ERROR_CHARS",
    "SHORT_VALUE_CHARS",
    "SHORT_VERSION_LINE_CHARS",
    "WRITTEN",
    "Prefiltered",
    "ToolCall",
    "describe_call",
    "error_line",
    "exit_code",
    "find_paths",
    "is_failure_line",
    "is_failure_output",
    "looks_like_path",
    "patch_files",
    "result_payload",
    "salient_lines",
]
