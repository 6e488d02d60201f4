"""The demo's long coding session: an agent makes refund creation idempotent, in 46 user turns.

:class:`RefundsWorkspace` is the repository the agent works in: real file contents that its
edits change (an edit whose snippet does not match fails, as it would), a regex grep over them,
a unified diff of what changed, and the test logs each run prints. :func:`script_refunds`
writes the session: the user's requests and constraints, and the agent's replies and tool calls.
Both are deterministic for a seed; :mod:`engine.demo` plays them through the session manager.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import random
import re
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from engine.demo.refunds_files import FILES, GENERATED
from engine.demo.refunds_script import STEPS
from engine.errors import ValidationError

if TYPE_CHECKING:
    from engine.demo.repo import FakeRepo
    from engine.demo.script import Script


# -- test runs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Failure:
    """One failing test in a pytest log: its id, the traceback lines, and the summary error."""

    test: str
    lines: tuple[str, ...]
    error: str


def pytest_run(passed: int, failures: Sequence[Failure] = (), *, seconds: float = 2.0) -> str:
    """``pytest -q`` output of a small run."""
    marks = "." * passed + "F" * len(failures)
    out = [f"{marks:<72} [100%]"]
    if failures:
        out.append("=================================== FAILURES ===================================")
        for f in failures:
            name = f.test.split("::")[-1]
            out += [f"{'_' * 20} {name} {'_' * 20}", "", *f.lines, ""]
        out.append("=========================== short test summary info ============================")
        out += [f"FAILED {f.test} - {f.error}" for f in failures]
        out.append(f"{len(failures)} failed, {passed} passed in {seconds:.2f}s")
    else:
        out.append(f"{passed} passed in {seconds:.2f}s")
    return "\n".join(out) + "\n"


SUITE_MODULES = (
    "api/test_refunds", "api/test_payouts", "api/test_balances", "ledger/test_writer", "ledger/test_sync",
    "workers/test_payout_retry", "workers/test_refunds_worker", "workers/test_settle", "workers/test_cleanup",
    "clients/test_bank", "test_money", "test_retry", "test_flags",
)  # fmt: skip
SUITE_VERBS = ("posts", "rejects", "retries", "settles", "rounds", "replays", "skips", "expires")
SUITE_NOUNS = ("refund", "payout", "ledger_entry", "settlement", "webhook", "idempotency_key", "batch")


def suite_log(rng: random.Random, failures: Sequence[Failure] = (), *, size: int = 25_000) -> str:
    """``pytest -v`` of the whole suite: a line per test (so it is stored, not shown), then failures."""
    lines = ["============================= test session starts ==============================",
             "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0", "rootdir: /home/dev/payments-platform",
             "configfile: pyproject.toml", "plugins: anyio-4.6.0, cov-5.0.0, xdist-3.6.1", ""]  # fmt: skip
    count = 0
    while sum(len(line) + 1 for line in lines) < size - 1_500:
        module = rng.choice(SUITE_MODULES)
        case = f"test_{rng.choice(SUITE_VERBS)}_{rng.choice(SUITE_NOUNS)}_{count}"
        pad = max(1, 66 - len(module) - len(case))
        lines.append(f"tests/{module}.py::{case} PASSED{'':>{pad}}[{min(99, count // 7):3d}%]")
        count += 1
    for f in failures:
        lines.append(f"{f.test} FAILED{'':>12}[ 99%]")
    if failures:
        lines += ["", "=================================== FAILURES ==================================="]
        for f in failures:
            lines += [f"{'_' * 20} {f.test.split('::')[-1]} {'_' * 20}", "", *f.lines, ""]
        lines.append("=========================== short test summary info ============================")
        lines += [f"FAILED {f.test} - {f.error}" for f in failures]
        lines.append(
            f"=================== {len(failures)} failed, {count} passed in 58.31s ==================="
        )
    else:
        lines.append(f"============================ {count} passed in 57.94s =============================")
    return "\n".join(lines) + "\n"


# -- the workspace ---------------------------------------------------------------------------------


class RefundsWorkspace:
    """The files of the refunds task, as the agent's tools see and change them."""

    def __init__(self, repo: FakeRepo) -> None:
        self.repo = repo
        self.original = dict(FILES)
        self.files = dict(FILES)
        self.test_logs: deque[str] = deque()

    def rng(self, *key: Any) -> random.Random:
        digest = hashlib.sha256(json.dumps([self.repo.seed, "refunds", *key]).encode()).digest()
        return random.Random(int.from_bytes(digest[:8], "big"))

    def handlers(self) -> dict[str, Any]:
        return {
            "read_file": self.read_file,
            "edit_file": self.edit_file,
            "grep": self.grep,
            "run_tests": self.run_tests,
            "git_diff": self.git_diff,
            "git_log": self.git_log,
            "mcp__github__create_pull_request": lambda a: {
                "number": 537,
                "url": "https://github.example/payments/pull/537",
                "state": "open",
            },
            "mcp__github__add_issue_comment": lambda a: {
                "id": 90417,
                "url": f"https://github.example/payments/pull/{a.get('number')}#issuecomment-90417",
            },
        }

    def read_file(self, args: dict[str, Any]) -> str:
        path = args["path"]
        if path in self.files:
            return self.files[path]
        if path in GENERATED:
            return self.repo.read_file(path, size=GENERATED[path])
        raise FileNotFoundError(f"{path} does not exist")

    def edit_file(self, args: dict[str, Any]) -> str:
        path, old, new = args["path"], args["old"], args["new"]
        if path not in self.files:
            raise FileNotFoundError(f"{path} does not exist")
        found = self.files[path].count(old)
        if found != 1:
            raise ValueError(
                f"old text must occur exactly once in {path}, found {found} times; read the file again "
                "and copy the snippet exactly (whitespace included)"
            )
        self.files[path] = self.files[path].replace(old, new)
        return f"Edited {path}: 1 replacement ({old.count(chr(10)) + 1} -> {new.count(chr(10)) + 1} lines)."

    def grep(self, args: dict[str, Any]) -> str:
        pattern = re.compile(args["pattern"], re.IGNORECASE)
        where = args.get("path") or ""
        hits = [
            f"{path}:{n}: {line.strip()}"
            for path, text in sorted(self.files.items())
            if path.startswith(where)
            for n, line in enumerate(text.splitlines(), start=1)
            if pattern.search(line)
        ]
        if args["pattern"].lower() == "idempotency" and not where:
            hits += self._idempotency_hits()
        return "\n".join(hits) + "\n" if hits else f"no matches for {args['pattern']!r}\n"

    def _idempotency_hits(self) -> list[str]:
        """The payout worker and its tests, where the store is used today (a large result)."""
        rng = self.rng("grep-idempotency")
        places = ("src/payments/workers/payouts.py", "tests/workers/test_payout_retry.py",
                  "tests/workers/test_idempotency.py", "src/payments/api/payouts.py", "docs/runbooks/payouts.md")  # fmt: skip
        snippets = (
            'store = IdempotencyStore(session, scope="payout")',
            "claim = store.claim(batch.idempotency_key, ttl_seconds=PAYOUT_KEY_TTL)",
            'store.complete(batch.idempotency_key, {"payout_id": payout.id, "status": payout.status})',
            'idempotency_key = f"payout:{batch.id}:{attempt}"',
            'assert store.claim("k-1", ttl_seconds=60).response == {"payout_id": "po_1"}',
            "with pytest.raises(KeyConflict):  # same idempotency key while the first run is in flight",
            "Payout retries reuse the batch's idempotency key so the bank never pays twice.",
        )
        hits = [f"{rng.choice(places)}:{rng.randint(12, 420)}: {rng.choice(snippets)}" for _ in range(64)]
        return sorted(set(hits))

    def run_tests(self, args: dict[str, Any]) -> str:
        if not self.test_logs:
            raise RuntimeError("the demo script has no test log queued for this run")
        return self.test_logs.popleft()

    def git_diff(self, args: dict[str, Any]) -> str:
        out: list[str] = []
        for path in sorted(self.files):
            if not path.startswith(args.get("path") or "") or self.files[path] == self.original[path]:
                continue
            out.append(f"diff --git a/{path} b/{path}")
            out += difflib.unified_diff(
                self.original[path].splitlines(), self.files[path].splitlines(),
                f"a/{path}", f"b/{path}", lineterm="", n=2,
            )  # fmt: skip
        return "\n".join(out) + "\n" if out else "no changes\n"

    def git_log(self, args: dict[str, Any]) -> str:
        """The repository's log, with the reverted first attempt at idempotency keys in it."""
        log = self.repo.git_log(path=args.get("path"))
        entries = log.split("\ncommit ")
        history = [
            "commit 5f0c2a9e41d7b8c3a6e2f19d0b47c85e3a1f6d20\nAuthor: Lukas Berg <lukas@payments.example>\n"
            'Date:   2025-01-14 16:02\n\n    Revert "feat(api): idempotency keys for refunds"\n\n'
            "    Reverts 2b71e0c. The keys were stored without an expiry, so idempotency_keys grew by\n"
            "    ~40k rows a day and the unique index made refund inserts slow (p99 1.8 s). Bring it\n"
            "    back with a TTL and a cleanup job. See INC-2291.\n\n    M src/payments/api/refunds.py\n",
            "commit 2b71e0c5d9a3f6b8e1c4a7d2f0b95e8c3d6a1f47\nAuthor: Mei Chen <mei@payments.example>\n"
            "Date:   2025-01-09 11:37\n\n    feat(api): idempotency keys for refunds\n\n"
            "    Store the first response under the Idempotency-Key header and replay it.\n\n"
            "    M src/payments/api/refunds.py\n    A src/payments/api/idempotency.py\n",
        ]
        cut = len(entries) // 2
        merged = [*entries[:cut], *(h.removeprefix("commit ") for h in history), *entries[cut:]]
        return "\ncommit ".join(merged)


def _log(spec: tuple[Any, ...], rng: random.Random) -> str:
    kind, *rest = spec
    if kind == "pytest":
        passed, seconds, failures = rest
        return pytest_run(passed, [Failure(*f) for f in failures], seconds=seconds)
    (failures,) = rest
    return suite_log(rng, [Failure(*f) for f in failures])


def script_refunds(s: Script, ws: RefundsWorkspace) -> None:
    """Write the long session (:data:`engine.demo.refunds_script.STEPS`) into ``s``; the test logs
    its runs print are queued on ``ws`` in order."""
    rng = ws.rng("suite")
    for kind, *args in STEPS:
        if kind == "user":
            s.user(args[0])
        elif kind == "say":
            text, calls = args
            s.say(text, *(s.call(name, **tool_input) for name, tool_input in calls))
        elif kind == "read":
            path, text = args
            s.say(text, s.call("read_file", path=path))
        elif kind == "grep":
            pattern, text, path = args
            s.say(text, s.call("grep", pattern=pattern, **({"path": path} if path else {})))
        elif kind == "edit":
            path, old, new, text = args
            s.say(text, s.call("edit_file", path=path, old=old, new=new))
        elif kind == "tests":
            test_args, log, text = args
            ws.test_logs.append(_log(log, rng))
            s.say(text, s.call("run_tests", args=test_args))
        elif kind == "log":
            ws.test_logs.append(_log(args[0], rng))
        elif kind == "read_result":
            pattern, text, options = args
            s.read_result(pattern, text, **options)
        else:
            raise ValidationError(f"unknown step {kind!r} in the refunds script", field="script")
