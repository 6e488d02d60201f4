"""A realistic catalog of MCP tool definitions (github, filesystem, slack, postgres, browser, ...),
modelled on the reference MCP servers, for the deferral and tool_search tests."""

from __future__ import annotations

from typing import Any

from engine.deferral import ToolSpec


def _tool(server: str, name: str, description: str, /, **params: tuple[str, str]) -> dict[str, Any]:
    """An Anthropic-shape definition; each param is (JSON type, description), all required
    except those whose description starts with "Optional"."""
    return {
        "name": f"mcp__{server}__{name}",
        "description": description,
        "input_schema": {
            "type": "object",
            "properties": {p: {"type": t, "description": d} for p, (t, d) in params.items()},
            "required": [p for p, (_, d) in params.items() if not d.startswith("Optional")],
        },
    }


OWNER = ("string", "Repository owner (user or organization)")
REPO = ("string", "Repository name")

MCP_TOOLS: list[dict[str, Any]] = [
    # github
    _tool("github", "create_pull_request", "Create a new pull request in a GitHub repository",
          owner=OWNER, repo=REPO, title=("string", "Pull request title"),
          head=("string", "The branch containing the changes"), base=("string", "The branch to merge into"),
          body=("string", "Optional pull request description"), draft=("boolean", "Optional: open as a draft")),
    _tool("github", "list_pull_requests", "List and filter repository pull requests",
          owner=OWNER, repo=REPO, state=("string", "Optional: open, closed or all"),
          sort=("string", "Optional: created, updated, popularity")),
    _tool("github", "get_pull_request", "Get details of a specific pull request",
          owner=OWNER, repo=REPO, pull_number=("integer", "Pull request number")),
    _tool("github", "merge_pull_request", "Merge a pull request",
          owner=OWNER, repo=REPO, pull_number=("integer", "Pull request number"),
          merge_method=("string", "Optional: merge, squash or rebase")),
    _tool("github", "get_pull_request_comments", "Get the pull request review comments left on lines of the diff",
          owner=OWNER, repo=REPO, pull_number=("integer", "Pull request number")),
    _tool("github", "create_pull_request_review", "Create a review on a pull request: approve, request changes or comment",
          owner=OWNER, repo=REPO, pull_number=("integer", "Pull request number"),
          event=("string", "APPROVE, REQUEST_CHANGES or COMMENT"), body=("string", "Optional review text")),
    _tool("github", "create_issue", "Create a new issue in a GitHub repository",
          owner=OWNER, repo=REPO, title=("string", "Issue title"), body=("string", "Optional issue body"),
          labels=("array", "Optional labels to apply")),
    _tool("github", "list_issues", "List issues in a GitHub repository with filtering options",
          owner=OWNER, repo=REPO, state=("string", "Optional: open, closed or all"),
          labels=("array", "Optional labels to filter by")),
    _tool("github", "update_issue", "Update an existing issue: title, body, state, labels or assignees",
          owner=OWNER, repo=REPO, issue_number=("integer", "Issue number")),
    _tool("github", "add_issue_comment", "Add a comment to an existing issue",
          owner=OWNER, repo=REPO, issue_number=("integer", "Issue number"), body=("string", "Comment text")),
    _tool("github", "search_repositories", "Search for GitHub repositories",
          query=("string", "Search query (GitHub search syntax)"), page=("integer", "Optional page number")),
    _tool("github", "create_repository", "Create a new GitHub repository in your account",
          name=("string", "Repository name"), private=("boolean", "Optional: make it private")),
    _tool("github", "get_file_contents", "Get the contents of a file or directory from a GitHub repository",
          owner=OWNER, repo=REPO, path=("string", "Path to the file or directory"),
          branch=("string", "Optional branch to read from")),
    _tool("github", "push_files", "Push multiple files to a GitHub repository in a single commit",
          owner=OWNER, repo=REPO, branch=("string", "Branch to push to"), files=("array", "Files to push"),
          message=("string", "Commit message")),
    _tool("github", "create_branch", "Create a new branch in a GitHub repository",
          owner=OWNER, repo=REPO, branch=("string", "Name for the new branch"),
          from_branch=("string", "Optional source branch")),
    _tool("github", "list_commits", "Get the list of commits of a branch in a GitHub repository",
          owner=OWNER, repo=REPO, sha=("string", "Optional branch name or commit SHA")),
    _tool("github", "search_code", "Search for code across GitHub repositories",
          q=("string", "Search query using GitHub code search syntax")),
    # filesystem
    _tool("filesystem", "read_file", "Read the complete contents of a file from the file system",
          path=("string", "Path of the file")),
    _tool("filesystem", "write_file", "Create a new file or completely overwrite an existing file with new content",
          path=("string", "Path of the file"), content=("string", "Content to write")),
    _tool("filesystem", "edit_file", "Make line-based edits to a text file; returns a git-style diff",
          path=("string", "Path of the file"), edits=("array", "Edits: oldText and newText pairs"),
          dryRun=("boolean", "Optional: preview changes without writing")),
    _tool("filesystem", "list_directory", "Get a detailed listing of all files and directories in a specified path",
          path=("string", "Directory path")),
    _tool("filesystem", "directory_tree", "Get a recursive tree view of files and directories as JSON",
          path=("string", "Root directory")),
    _tool("filesystem", "move_file", "Move or rename files and directories",
          source=("string", "Source path"), destination=("string", "Destination path")),
    _tool("filesystem", "search_files", "Recursively search for files and directories matching a pattern",
          path=("string", "Directory to search from"), pattern=("string", "Glob pattern to match")),
    _tool("filesystem", "get_file_info", "Retrieve detailed metadata about a file or directory: size, times, permissions",
          path=("string", "Path of the file or directory")),
    _tool("filesystem", "create_directory", "Create a new directory or ensure a directory exists",
          path=("string", "Directory path")),
    # slack
    _tool("slack", "list_channels", "List public channels in the Slack workspace",
          limit=("integer", "Optional maximum number of channels"), cursor=("string", "Optional pagination cursor")),
    _tool("slack", "post_message", "Post a new message to a Slack channel",
          channel_id=("string", "ID of the channel"), text=("string", "Message text")),
    _tool("slack", "reply_to_thread", "Reply to a specific message thread in Slack",
          channel_id=("string", "ID of the channel"), thread_ts=("string", "Timestamp of the parent message"),
          text=("string", "Reply text")),
    _tool("slack", "add_reaction", "Add an emoji reaction to a Slack message",
          channel_id=("string", "ID of the channel"), timestamp=("string", "Message timestamp"),
          reaction=("string", "Emoji name without colons")),
    _tool("slack", "get_channel_history", "Get recent messages from a Slack channel",
          channel_id=("string", "ID of the channel"), limit=("integer", "Optional number of messages")),
    _tool("slack", "get_thread_replies", "Get all replies in a Slack message thread",
          channel_id=("string", "ID of the channel"), thread_ts=("string", "Timestamp of the parent message")),
    _tool("slack", "get_users", "Get a list of all users in the Slack workspace with their basic profile information",
          cursor=("string", "Optional pagination cursor")),
    _tool("slack", "get_user_profile", "Get detailed profile information for a specific Slack user",
          user_id=("string", "ID of the user")),
    # postgres
    _tool("postgres", "query", "Run a read-only SQL query against the PostgreSQL database",
          sql=("string", "The SQL statement to run")),
    _tool("postgres", "list_tables", "List the tables of the PostgreSQL database schema",
          schema=("string", "Optional schema name, default public")),
    _tool("postgres", "describe_table", "Describe a database table: columns, types, indexes and constraints",
          table=("string", "Table name")),
    # browser
    _tool("playwright", "browser_navigate", "Navigate the browser to a URL",
          url=("string", "The URL to navigate to")),
    _tool("playwright", "browser_take_screenshot", "Take a screenshot of the current page or an element",
          element=("string", "Optional element description"), fullPage=("boolean", "Optional full page")),
    _tool("playwright", "browser_click", "Click an element on the web page",
          element=("string", "Human-readable element description"), ref=("string", "Element reference")),
    _tool("playwright", "browser_type", "Type text into an editable element of the web page",
          element=("string", "Element description"), ref=("string", "Element reference"),
          text=("string", "Text to type"), submit=("boolean", "Optional: press Enter after")),
    _tool("playwright", "browser_evaluate", "Evaluate a JavaScript expression on the page or an element",
          function=("string", "JavaScript function source")),
    _tool("playwright", "browser_snapshot", "Capture an accessibility snapshot of the current page",),
    # memory, fetch, time
    _tool("memory", "create_entities", "Create multiple new entities in the knowledge graph",
          entities=("array", "Entities with name, entityType and observations")),
    _tool("memory", "search_nodes", "Search for nodes in the knowledge graph based on a query",
          query=("string", "Text matched against entity names, types and observations")),
    _tool("fetch", "fetch", "Fetch a URL from the internet and extract its contents as markdown",
          url=("string", "URL to fetch"), max_length=("integer", "Optional maximum characters to return")),
    _tool("time", "convert_time", "Convert time between timezones",
          source_timezone=("string", "IANA timezone name"), time=("string", "Time in 24-hour format HH:MM"),
          target_timezone=("string", "IANA timezone name")),
]  # fmt: skip

BUILTIN_TOOLS: list[dict[str, Any]] = [
    {
        "name": "shell_exec",
        "description": "Run a shell command in the workspace and return its output.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    },
    {
        "name": "edit",
        "description": "Replace text in a file of the workspace.",
        "input_schema": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
        },
    },
]

SKILL_TOOLS: list[dict[str, Any]] = [
    {
        "name": "skill_release_notes",
        "description": "Draft release notes from merged pull requests and the changelog.",
        "input_schema": {"type": "object", "properties": {"version": {"type": "string"}}},
    },
    {
        "name": "skill_pdf_forms",
        "description": "Fill in PDF forms from structured data.",
        "input_schema": {
            "type": "object",
            "properties": {"form_path": {"type": "string"}, "data": {"type": "object"}},
        },
    },
]


def catalog_specs() -> list[ToolSpec]:
    """Builtin, MCP and skill tools as specs, categories as the session manager would set them."""
    return [
        *(ToolSpec(definition=d) for d in BUILTIN_TOOLS),
        *(ToolSpec.from_definition(d) for d in MCP_TOOLS),
        *(ToolSpec(definition=d, category="skill") for d in SKILL_TOOLS),
    ]


def test_catalog_has_forty_plus_uniquely_named_mcp_tools_from_several_servers():
    names = [d["name"] for d in MCP_TOOLS]
    assert len(names) >= 40
    assert len(set(names)) == len(names)
    specs = [ToolSpec.from_definition(d) for d in MCP_TOOLS]
    assert {s.category for s in specs} == {"mcp"}
    assert {"github", "filesystem", "slack", "postgres", "playwright"} <= {s.server for s in specs}
