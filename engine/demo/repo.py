"""A fake payments repository for the short demo sessions: file contents, git logs, test logs, grep
hits and issues made up deterministically from a seed."""

from __future__ import annotations

import hashlib
import json
import random
import textwrap
from pathlib import Path
from typing import Any

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
                 "platform linux -- Python 3.11.9, pytest-8.3.3, pluggy-1.5.0", "rootdir: /home/dev/payments-platform",
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
