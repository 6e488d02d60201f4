"""Long sessions built from real agent transcripts, with facts planted in each agent's dialect.

Sources: the real sessions in ``../shared/sessions`` (Claude Code, OpenHands, SWE-agent), the
real-client fixtures under ``tests/fixtures/real_agents`` (Codex, Gemini CLI, Claude Code), and,
where no real transcript of a dialect is long enough, real transcripts rewritten into that
dialect (Cline from Claude Code; Codex and Gemini from OpenHands): the tool calls, outputs and
text are the real ones, only the tool names, argument keys and output wrappers change. Without
``../shared`` the small derived copies in ``tests/fixtures/sessions`` stand in.

Facts come in 8 categories, each phrased several ways. Every fact's match keys (strings that
must all survive, lower-cased) are fixed here, before any run. Phrasings are split in two:
``dev`` (seen while the summarizer was worked on), ``held_out`` (never in a unit test; but its
losses were seen while tuning, so it is not blind), ``blind`` (written after the tuning and first
run untuned: 64.6% / 56.2% for chain at 4x / 10x; a later rule for changes the agent reports
was written knowing its phrasing, so it is no longer blind) and ``blind 2`` (written after that,
run against a summarizer not changed since; its losses then named the shapes the 2026-11-24
changes read: tables, bare versions, key/value listings) and ``blind 3`` (written before those
changes, keys fixed, first run untuned: 81.2% / 52.1%; after: 93.8% / 64.6%; its author knew
which shapes were about to be read, so it is less blind than its name): the benchmark reports each.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.compaction.result import pair_safe_positions
from engine.importers.api import parse_file
from engine.messages import (
    Message,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    assistant,
    tool_result,
    tool_use,
    user,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "sessions"
FIXTURES = ROOT / "tests" / "fixtures"
CATEGORIES = (
    "decision",
    "file path",
    "error + fix",
    "constraint",
    "tool output",
    "todo",
    "number/config",
    "name",
)

#: How each fact's phrasing relates to the summarizer's tuning (see the module docstring).
SPLITS = ("dev", "held_out", "blind", "blind 2", "blind 3")

# -- facts ------------------------------------------------------------------------------------------
# Each template: (split, text pieces...) filled from one value tuple; keys say what must survive.


@dataclass(frozen=True)
class Fact:
    category: str
    split: str  # "dev" or "held_out"
    keys: tuple[str, ...]
    messages: tuple[Message, ...]


Dialect = dict[str, Callable[..., tuple[Message, ...]]]


def _claude(n: str) -> Dialect:
    return {
        "edit": lambda p, old, new: (
            assistant("", tool_use(n, "Edit", file_path=p, old_string=old, new_string=new)),
            tool_result(
                n, f"The file {p} has been updated. Here's the result of running `cat -n` on a snippet."
            ),
        ),
        "shell": lambda cmd, out, code: (
            assistant("", tool_use(n, "Bash", command=cmd, description="run")),
            tool_result(n, f"Exit code {code}\n{out}" if code else out, is_error=bool(code)),
        ),
    }


def _openhands(n: str) -> Dialect:
    return {
        "edit": lambda p, old, new: (
            assistant(
                "", tool_use(n, "str_replace_editor", command="str_replace", path=p, old_str=old, new_str=new)
            ),
            tool_result(
                n, f"The file {p} has been edited. Review the changes and make sure they are as expected."
            ),
        ),
        "shell": lambda cmd, out, code: (
            assistant("", tool_use(n, "execute_bash", command=cmd)),
            tool_result(n, f"{out}\n[The command completed with exit code {code}.]"),
        ),
    }


def _codex(n: str) -> Dialect:
    return {
        "edit": lambda p, old, new: (
            assistant("", tool_use(n, "apply_patch", input=_patch(p, old, new))),
            tool_result(
                n,
                f"Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated the following files:\nM {p}\n",
            ),
        ),
        "shell": lambda cmd, out, code: (
            assistant("", tool_use(n, "exec_command", cmd=cmd)),
            tool_result(n, _codex_output(out, code)),
        ),
    }


def _cline(n: str) -> Dialect:
    return {
        "edit": lambda p, old, new: (
            assistant("", tool_use(n, "replace_in_file", absolutePath=p, diff=_cline_diff(old, new))),
            tool_result(n, f"The content was successfully saved to {p}."),
        ),
        "shell": lambda cmd, out, code: (
            assistant("", tool_use(n, "execute_command", command=cmd, requires_approval=False)),
            tool_result(n, f"Command executed.\nOutput:\n{out}"),
        ),
    }


def _gemini(n: str) -> Dialect:
    return {
        "edit": lambda p, old, new: (
            assistant("", tool_use(n, "replace", file_path=p, old_string=old, new_string=new)),
            tool_result(n, f"Successfully modified file: {p} (1 replacements)."),
        ),
        "shell": lambda cmd, out, code: (
            assistant("", tool_use(n, "run_shell_command", command=cmd)),
            tool_result(n, _gemini_output(cmd, out, code)),
        ),
    }


DIALECTS: dict[str, Callable[[str], Dialect]] = {
    "claude-code": _claude,
    "openhands": _openhands,
    "swe-agent": _openhands,
    "codex": _codex,
    "cline": _cline,
    "gemini": _gemini,
}


def _patch(path: str, old: str, new: str) -> str:
    return f"*** Begin Patch\n*** Update File: {path}\n@@\n-{old}\n+{new}\n*** End Patch\n"


def _cline_diff(old: str, new: str) -> str:
    return f"------- SEARCH\n{old}\n=======\n{new}\n+++++++ REPLACE"


def _codex_output(out: str, code: int) -> str:
    return (
        f"Chunk ID: 5e1f0a\nWall time: 0.4120 seconds\nProcess exited with code {code}\n"
        f"Original token count: {len(out) // 4}\nOutput:\n{out}"
    )


def _gemini_output(cmd: str, out: str, code: int) -> str:
    return (
        f"Command: {cmd}\nDirectory: (root)\nOutput: {out}\nError: (none)\nExit Code: {code}\n"
        "Signal: (none)\nBackground PIDs: (none)\nProcess Group PGID: 20470"
    )


_LIBS = ("orjson", "msgspec", "structlog", "tenacity", "httpx", "polars", "argon2-cffi", "zstandard", "apsw")
_AREAS = ("the export cache", "audit logging", "password hashing", "retry handling", "the HTTP client",
          "the report pipeline", "snapshot compression", "the job queue")  # fmt: skip
_DIRS = ("billing", "ledger", "webhooks", "exporter", "scheduler", "tenants", "search", "quota")
_MODULES = ("reconcile", "invoice_renderer", "quota_guard", "retry_budget", "token_bucket", "audit_trail",
            "rate_window", "cursor_pager")  # fmt: skip
_PEOPLE = (
    "Priya Raman",
    "Tomasz Wierzbicki",
    "Aiko Tanabe",
    "Olumide Bakare",
    "Ines Carvalho",
    "Rafael Okonjo",
)
_SERVICES = ("orca-east", "heron-staging", "lynx-eu", "kestrel-prod", "marten-qa", "ibis-canary")


def _facts_for(rng: random.Random, dialect: str, session: int) -> list[Fact]:
    """Four facts per category (dev, held-out, blind and blind 2), each a small exchange in ``dialect``."""
    facts: list[Fact] = []
    k = 0

    def tid() -> str:
        nonlocal k
        k += 1
        return f"fact_{session}_{k}"

    def calls() -> Dialect:
        return DIALECTS[dialect](tid())

    libs = rng.sample(_LIBS, 2)
    areas = rng.sample(_AREAS, 2)
    facts.append(Fact("decision", "dev", (libs[0], areas[0].split()[-1]), (
        user(f"What should we use for {areas[0]}?"),
        assistant(f"I compared the options. We decided to use {libs[0]} for {areas[0]} instead of the stdlib."),
    )))  # fmt: skip
    facts.append(Fact("decision", "held_out", (libs[1],), (
        user(f"{areas[1].capitalize()} is slow, any idea?"),
        assistant(f"Benchmarks favour {libs[1]}: it is 4x faster here, so {libs[1]} it is for {areas[1]}."),
    )))  # fmt: skip

    paths = [
        f"src/{rng.choice(_DIRS)}/{m}_{session}{rng.randint(10, 99)}.py" for m in rng.sample(_MODULES, 2)
    ]
    facts.append(Fact("file path", "dev", (paths[0],), (
        user("Apply the change we discussed."),
        *calls()["edit"](paths[0], "return total", "return round(total, 2)"),
        assistant("Done."),
    )))  # fmt: skip
    facts.append(Fact("file path", "held_out", (paths[1],), (
        *calls()["edit"](paths[1], "limit = 10", "limit = settings.page_limit"),
        assistant("Page limit now comes from settings."),
    )))  # fmt: skip

    n1, n2 = rng.randint(1000, 9999), rng.randint(1000, 9999)
    facts.append(Fact("error + fix", "dev", (f"ix_tenant_{n1}", "backfill"), (
        *calls()["shell"](
            "python -m app.jobs.nightly --shard 3",
            'Traceback (most recent call last):\n  File "app/jobs/nightly.py", line 88, in run\n'
            f'sqlalchemy.exc.IntegrityError: duplicate key value violates unique constraint "ix_tenant_{n1}"',
            1,
        ),
        assistant(f"Fixed the ix_tenant_{n1} violation by running the backfill before the nightly job."),
    )))  # fmt: skip
    facts.append(Fact("error + fix", "held_out", (f"E{n2}", "cachedir"), (
        *calls()["shell"](
            "npm run build",
            f"src/report.ts(41,9): error TS2322: Type 'string' is not assignable to type 'number'. E{n2}\n"
            "Found 1 error in src/report.ts:41",
            2,
        ),
        assistant(f"The E{n2} build error came from a stale cachedir; clearing it made the build green."),
    )))  # fmt: skip

    v = rng.randint(10, 99)
    facts.append(Fact("constraint", "dev", ("vendored", f"v{v}"), (
        user(f"Never modify anything under vendored/v{v}/ - it is synced from upstream."),
        assistant("Understood."),
    )))  # fmt: skip
    py = rng.choice(("3.7", "3.8", "3.9"))
    facts.append(Fact("constraint", "held_out", (f"python {py}",), (
        user(f"Heads up: this library still ships to Python {py} users, so nothing newer than Python {py} syntax."),
        assistant("Noted."),
    )))  # fmt: skip

    port, pool = rng.randint(8000, 8999), rng.randint(11, 63)
    facts.append(Fact("tool output", "dev", (f"pool_size = {pool}",), (
        *calls()["shell"](
            "grep -rn POOL config/",
            f"config/db.toml:3:# connection pool\nconfig/db.toml:4:pool_size = {pool}\nconfig/db.toml:5:echo = false",
            0,
        ),
        assistant("Found the pool settings."),
    )))  # fmt: skip
    facts.append(Fact("tool output", "held_out", (str(port),), (
        *calls()["shell"](
            "docker compose logs api | tail -3",
            f"api-1  | INFO  booting worker pid=41\napi-1  | INFO  Uvicorn running on http://0.0.0.0:{port} "
            "(Press CTRL+C to quit)\napi-1  | INFO  Application startup complete.",
            0,
        ),
        assistant("The API is up."),
    )))  # fmt: skip

    area = rng.choice(_DIRS)
    facts.append(Fact("todo", "dev", (f"{area} changelog",), (
        assistant(f"Main fix is in. TODO: write the {area} changelog entry before the release."),
    )))  # fmt: skip
    metric = rng.choice(("p99 latency", "cold start time", "peak RSS"))
    facts.append(Fact("todo", "held_out", (metric,), (
        user(f"Once this lands we still owe the team a {metric} comparison against last week's build."),
        assistant("Will do after the tests."),
    )))  # fmt: skip

    timeout, batch = rng.randint(31, 89), rng.choice((384, 768, 1536, 3072))
    facts.append(Fact("number/config", "dev", ("timeout", f"{timeout} seconds"), (
        user(f"Set the webhook timeout to {timeout} seconds, the default is too short."),
        assistant(f"I'll set the webhook timeout to {timeout} seconds."),
    )))  # fmt: skip
    facts.append(Fact("number/config", "held_out", (str(batch),), (
        user(f"Embedding batches of {batch} rows worked best on the staging box."),
        assistant("Good to know."),
    )))  # fmt: skip

    person, service = rng.choice(_PEOPLE), rng.choice(_SERVICES)
    facts.append(Fact("name", "dev", (person.lower(),), (
        user(f"The reviewer for this change is {person}; please mention them in the PR."),
        assistant(f"Will mention {person}."),
    )))  # fmt: skip
    facts.append(Fact("name", "held_out", (service,), (
        user(f"We deploy this to the {service} cluster first."),
        assistant("Okay."),
    )))  # fmt: skip
    facts += _blind_facts(rng, calls, session)
    facts += _blind_facts_2(rng, calls, session)
    facts += _blind_facts_3(rng, calls, session)
    return facts


def _blind_facts_3(rng: random.Random, calls: Callable[[], Dialect], session: int) -> list[Fact]:
    """A third blind set (2026-11-24), written with its keys before any run and before the
    extraction changes of that day; first run untuned, then run once more at the end."""
    lib, area, service = rng.choice(_LIBS), rng.choice(_AREAS), rng.choice(_SERVICES)
    folder, module, person = rng.choice(_DIRS), rng.choice(_MODULES), rng.choice(_PEOPLE)
    moved = f"lib/{folder}/{module}_v{session}{rng.randint(10, 99)}.rb"
    n, chunk = rng.randint(100, 999), rng.randint(1200, 4800)
    version = f"{rng.randint(2, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)}"
    setting = f"{module}_{rng.randint(10, 99)}"
    return [
        Fact("decision", "blind 3", (lib,), (
            assistant(f"After weighing both, I'm going ahead with {lib} for {area}; callers keep the same API."),
        )),
        Fact("file path", "blind 3", (moved,), (
            *calls()["shell"](f"git mv lib/{folder}/{module}.rb {moved}", "", 0),
            assistant("Moved it."),
        )),
        Fact("error + fix", "blind 3", (f"test_rollover_{n}", "settings loader"), (
            *calls()["shell"](
                f"pytest tests/test_{module}.py -q",
                f"F.\nFAILED tests/test_{module}.py::test_rollover_{n} - KeyError: '{setting}'\n"
                "1 failed, 1 passed in 0.31s",
                1,
            ),
            assistant(f"test_rollover_{n} broke on a missing '{setting}' default in the settings loader; "
                      "gave it one and the suite is green."),
        )),
        Fact("constraint", "blind 3", (f"dependencies to {folder}",), (
            user(f"Please don't add new dependencies to {folder}: security only cleared the current set."),
        )),
        Fact("tool output", "blind 3", (version,), (
            *calls()["shell"](
                f"pip list 2>/dev/null | grep -i {lib}",
                f"Package      Version\n------------ -------\n{lib:<12} {version}",
                0,
            ),
            assistant("That's what is installed."),
        )),
        Fact("todo", "blind 3", (f"{folder} docs page",), (
            user(f"Before we call it done, the {folder} docs page needs a refresh too."),
        )),
        Fact("number/config", "blind 3", (f"{chunk} kib",), (
            user(f"Upload chunks of {chunk} KiB keep {service} under its rate limit."),
            assistant("Right."),
        )),
        Fact("name", "blind 3", (person.lower(),), (
            *calls()["shell"]("git log -1 --format='%an <%ae>'",
                              f"{person} <{person.split()[0].lower()}@example.org>", 0),
        )),
    ]  # fmt: skip


def _blind_facts_2(rng: random.Random, calls: Callable[[], Dialect], session: int) -> list[Fact]:
    """A second blind set, written after the first had been seen (and so stopped being blind),
    run once against a summarizer not changed afterwards."""
    lib, service, person = rng.choice(_LIBS), rng.choice(_SERVICES), rng.choice(_PEOPLE)
    path = f"scripts/{rng.choice(_DIRS)}_{rng.choice(_MODULES)}_{session}{rng.randint(10, 99)}.sh"
    folder, metric, slo = (
        rng.choice(_DIRS),
        rng.choice(("p99 latency", "cold start", "peak RSS")),
        rng.randint(120, 900),
    )
    version = f"3.{rng.randint(10, 13)}.{rng.randint(1, 9)}"
    return [
        Fact("decision", "blind 2", (lib,), (
            assistant(f"Between the two, {lib} is the keeper - the other one leaks file handles."),
        )),
        Fact("file path", "blind 2", (path,), (*calls()["shell"](f"sed -i 's/--fast/--safe/' {path}", "", 0),)),
        Fact("error + fix", "blind 2", (service, "vault"), (
            *calls()["shell"]("make deploy", f"Error: 403 Forbidden: token for {service} expired", 2),
            assistant(f"Rotated the {service} token through vault; deploy is green again."),
        )),
        Fact("constraint", "blind 2", (f"{folder}/legacy",), (
            user(f"Whatever you do, leave the {folder}/legacy shim alone."),
        )),
        Fact("tool output", "blind 2", (version,), (
            *calls()["shell"]("python -c 'import sys; print(sys.version)'",
                              f"{version} (main, Jun  6 2024, 18:26:44) [GCC 12.2.0]", 0),
        )),
        Fact("todo", "blind 2", (f"{metric} regression test",), (
            assistant(f"Parked: the {metric} regression test - it needs a fixture we don't have yet."),
        )),
        Fact("number/config", "blind 2", (f"{slo} ms",), (user(f"Our SLO is {slo} ms at p95."),)),
        Fact("name", "blind 2", (person.lower(),), (assistant(f"Release manager this sprint is {person}."),)),
    ]  # fmt: skip


def _blind_facts(rng: random.Random, calls: Callable[[], Dialect], session: int) -> list[Fact]:
    """One more fact per category, written after the summarizer was tuned and run once, untuned:
    phrasings and output shapes nothing in the code was shaped for."""
    lib, area = rng.choice(_LIBS), rng.choice(_AREAS)
    path = f"internal/{rng.choice(_DIRS)}/{rng.choice(_MODULES)}_{session}{rng.randint(10, 99)}.go"
    repo, pod = f"infra-{rng.randint(100, 999)}", f"{rng.choice(_SERVICES)}-{rng.randint(1000, 9999)}"
    migration, conns, handle = (
        f"m{rng.randint(100, 999)}_split_ledger",
        rng.randint(120, 480),
        f"@{rng.choice(_PEOPLE).split()[0].lower()}",
    )
    return [
        Fact("decision", "blind", (lib,), (
            assistant(f"After weighing both, the {lib} route wins for {area}; the stdlib version stays as a fallback."),
        )),
        Fact("file path", "blind", (path,), (*calls()["edit"](path, "return nil", "return ErrClosed"),)),
        Fact("error + fix", "blind", (repo, "git_ssl_cainfo"), (
            *calls()["shell"]("git fetch origin", f"fatal: unable to access 'https://git.internal/{repo}.git/': "
                              "SSL certificate problem: unable to get local issuer certificate", 128),
            assistant(f"Pointed GIT_SSL_CAINFO at the corporate bundle and the fetch of {repo} went through."),
        )),
        Fact("constraint", "blind", ("utc", area.split()[-1]), (
            user(f"Timestamps in {area} are UTC end to end, no local times anywhere."),
        )),
        Fact("tool output", "blind", (pod, "2/3"), (
            *calls()["shell"]("kubectl get pods", f"NAME              READY   STATUS    RESTARTS   AGE\n{pod}   2/3     Running   4          41d", 0),
        )),
        Fact("todo", "blind", (migration,), (
            user(f"Remind me: the {migration} migration still has to be rolled back on staging."),
        )),
        Fact("number/config", "blind", ("max_connections", str(conns)), (
            assistant(f"Raised max_connections from 100 to {conns} on the replica."),
        )),
        Fact("name", "blind", (handle,), (user(f"Loop in {handle} from the data team when the export is ready."),)),
    ]  # fmt: skip


# -- real sessions ------------------------------------------------------------------------------------


def _load(path: Path) -> list[list[Message]]:
    """Every thread of a transcript (main thread and sub-agents), each as a message list."""
    _, sessions = parse_file(path)
    return [[pm.message for pm in s.messages] for s in sessions if s.messages]


def _map_blocks(messages: Sequence[Message], change: Callable[[Any], Any | None]) -> list[Message]:
    """Each message with ``change`` applied to its blocks (None drops a block); a text message as
    it is, a message left without blocks dropped."""
    out: list[Message] = []
    for message in messages:
        if isinstance(message.content, str):
            out.append(message)
            continue
        blocks = [b for b in map(change, message.content) if b is not None]
        if blocks:
            out.append(message.with_content(blocks))
    return out


def _renamed(messages: Sequence[Message], prefix: str) -> list[Message]:
    """Tool ids made unique across joined transcripts; unanswered uses and unmatched results dropped."""
    uses = {b.id for m in messages for b in m.blocks if isinstance(b, ToolUseBlock)}
    answered = {b.tool_use_id for m in messages for b in m.blocks if isinstance(b, ToolResultBlock)}

    def rename(block: Any) -> Any | None:
        if isinstance(block, ToolUseBlock):
            return (
                ToolUseBlock(id=prefix + block.id, name=block.name, input=block.input)
                if block.id in answered
                else None
            )
        if isinstance(block, ToolResultBlock):
            if block.tool_use_id not in uses:
                return None
            return ToolResultBlock(
                tool_use_id=prefix + block.tool_use_id, content=block.content, is_error=block.is_error
            )
        return block

    return _map_blocks(messages, rename)


def _rewrite(messages: Sequence[Message], dialect: str) -> list[Message]:
    """Real messages with their tool calls and outputs rewritten into ``dialect``."""
    names: dict[str, ToolUseBlock] = {}

    def rewrite(block: Any) -> Any:
        if isinstance(block, ToolUseBlock):
            names[block.id] = block
            return _rewrite_use(block, dialect)
        if isinstance(block, ToolResultBlock) and block.tool_use_id in names:
            return _rewrite_result(block, names[block.tool_use_id], dialect)
        return block

    return _map_blocks(messages, rewrite)


def _command(block: ToolUseBlock) -> str | None:
    value = block.input.get("command")
    if block.name in ("Bash", "execute_bash", "bash") and isinstance(value, str):
        return value
    return None


def _edit(block: ToolUseBlock) -> tuple[str, str, str] | None:
    """(path, old, new) of an edit call in Claude Code or OpenHands form."""
    if block.name in ("Edit", "Write", "MultiEdit"):
        return (
            block.input.get("file_path", "file"),
            str(block.input.get("old_string", "")),
            str(block.input.get("new_string", block.input.get("content", ""))),
        )
    if block.name == "str_replace_editor" and block.input.get("command") in (
        "str_replace",
        "create",
        "insert",
    ):
        new = block.input.get("new_str", block.input.get("file_text", ""))
        return block.input.get("path", "file"), str(block.input.get("old_str", "")), str(new)
    return None


def _rewrite_use(block: ToolUseBlock, dialect: str) -> ToolUseBlock:
    command, edit = _command(block), _edit(block)
    if dialect == "cline":
        if command is not None:
            return ToolUseBlock(id=block.id, name="execute_command", input={"command": command})
        if edit is not None:
            path, old, new = edit
            diff = _cline_diff(old, new)
            name, args = (
                ("write_to_file", {"content": new}) if not old else ("replace_in_file", {"diff": diff})
            )
            return ToolUseBlock(id=block.id, name=name, input={"absolutePath": path, **args})
        if block.name in ("Read",) or block.input.get("command") == "view":
            path = block.input.get("file_path", block.input.get("path"))
            return ToolUseBlock(id=block.id, name="read_file", input={"path": path})
    if dialect == "codex":
        if command is not None:
            return ToolUseBlock(id=block.id, name="exec_command", input={"cmd": command})
        if edit is not None:
            return ToolUseBlock(id=block.id, name="apply_patch", input={"input": _patch(*edit)})
    if dialect == "gemini":
        if command is not None:
            return ToolUseBlock(id=block.id, name="run_shell_command", input={"command": command})
        if edit is not None:
            path, old, new = edit
            return ToolUseBlock(id=block.id, name="replace", input={"file_path": path, "old_string": old,
                                                                    "new_string": new})  # fmt: skip
    return block


_OPENHANDS_EXIT = "\n[The command completed with exit code "


def _rewrite_result(block: ToolResultBlock, use: ToolUseBlock, dialect: str) -> ToolResultBlock:
    if _command(use) is None or not isinstance(block.content, str):
        return block
    text, code = block.content, 1 if block.is_error else 0
    if _OPENHANDS_EXIT in text:
        text, _, tail = text.rpartition(_OPENHANDS_EXIT)
        code = int("".join(c for c in tail.split(".")[0] if c.isdigit() or c == "-") or 0)
    if dialect == "codex":
        text = _codex_output(text, code)
    elif dialect == "gemini":
        text = _gemini_output(use.input.get("command", ""), text, code)
    elif dialect == "cline":
        text = f"Command executed.\nOutput:\n{text}"
    return ToolResultBlock(tool_use_id=block.tool_use_id, content=text, is_error=block.is_error)


@dataclass(frozen=True)
class Source:
    name: str
    dialect: str
    #: (path under ../shared/sessions or tests/fixtures, fallback under tests/fixtures, rewrite to dialect?)
    files: tuple[tuple[str, str | None], ...]
    rewrite: bool = False


def _real_agent(folder: str) -> str | None:
    base = FIXTURES / "real_agents" / folder
    found = sorted(p for p in base.rglob("*.jsonl") if p.name != "requests.jsonl") if base.is_dir() else []
    return str(found[0].relative_to(FIXTURES)) if found else None


SOURCES = (
    Source("claude-code (real)", "claude-code", (
        ("shared:claude-code__d-kimuson_claude-code-viewer__fe5e1c67.jsonl", "sessions/claude-code__fe5e1c67__head37.jsonl"),
    )),
    Source("openhands (real)", "openhands", (
        ("shared:openhands__multi_swe_bench_examples_output.jsonl", "sessions/openhands__ponyc-4595__head12.jsonl"),
    )),
    Source("swe-agent (real)", "swe-agent", (
        ("shared:swe-agent__pydicom__pydicom-1458.traj", "sessions/swe-agent__pydicom-1458__head9.traj"),
        ("shared:swe-agent__6e44b9__sweagenttestrepo-1c2844.traj", "sessions/swe-agent__sweagenttestrepo-1c2844.traj"),
        ("shared:openhands__tests_runtime_trajs_basic_gui_mode.json", "sessions/openhands__basic_gui_mode.json"),
    )),
    Source("cline (derived from Claude Code)", "cline", (
        ("shared:claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl", "sessions/claude-code__5c0375b4__head23.jsonl"),
        ("real_agents:claude-code", None),
    ), rewrite=True),
    Source("codex (real + derived from OpenHands)", "codex", (
        ("real_agents:codex", None),
        ("shared:openhands__multi_swe_bench_examples_output.jsonl#0", "sessions/openhands__ponyc-4595__head12.jsonl"),
    ), rewrite=True),
    Source("gemini (real + derived from OpenHands)", "gemini", (
        ("real_agents:gemini", None),
        ("shared:openhands__multi_swe_bench_examples_output.jsonl#2", "sessions/openhands__basic_gui_mode.json"),
    ), rewrite=True),
)  # fmt: skip


def _resolve(spec: str, fallback: str | None) -> tuple[Path | None, int | None]:
    kind, _, rest = spec.partition(":")
    rest, _, pick = rest.partition("#")
    if kind == "shared":
        path: Path | None = SHARED / rest
        if not path.exists():
            path = FIXTURES / fallback if fallback else None
            pick = ""
    else:
        found = _real_agent(rest)
        path = FIXTURES / found if found else None
    return path, int(pick) if pick else None


def real_messages(source: Source) -> list[Message]:
    """The source's real transcripts joined (tool ids made unique), rewritten to its dialect."""
    out: list[Message] = []
    for n, (spec, fallback) in enumerate(source.files):
        path, pick = _resolve(spec, fallback)
        if path is None or not path.exists():
            continue
        threads = _load(path)
        if pick is not None:
            threads = threads[pick : pick + 1]
        for t, thread in enumerate(threads):
            messages = _renamed(thread, f"s{n}t{t}_")
            out += _rewrite(messages, source.dialect) if source.rewrite else messages
    return out


def build_session(source: Source, seed: int) -> tuple[list[Message], list[Fact]]:
    """The source's real messages with the facts inserted at pair-safe points spread over its
    first 90% (the last tenth stays real, so keeping the tail keeps no fact)."""
    rng = random.Random(seed)
    real = real_messages(source)
    facts = _facts_for(rng, source.dialect, seed)
    rng.shuffle(facts)
    safe = pair_safe_positions(real)
    points = [p for p in range(1, int(len(real) * 0.9)) if safe[p]] or [0]
    slots = sorted(rng.choices(points, k=len(facts)))
    out: list[Message] = []
    previous = 0
    for slot, fact in zip(slots, facts, strict=True):
        out.extend(real[previous:slot])
        out.extend(fact.messages)
        previous = slot
    out.extend(real[previous:])
    return out, facts


def context_text(summary: str | None, messages: Sequence[Message]) -> str:
    """Everything a model would see after compaction, lower-cased."""
    parts = [summary or ""]
    for message in messages:
        for block in message.blocks:
            if isinstance(block, TextBlock | ToolResultBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                parts.append(json.dumps(block.input, ensure_ascii=False))
    return "\n".join(parts).lower()


def is_kept(fact: Fact, text: str) -> bool:
    return all(key.lower() in text for key in fact.keys)
