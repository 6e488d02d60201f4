"""What a demo scenario runs in: the store (seeded blob ids), the settings, the fake repository, and
:meth:`DemoContext.play`, which plays a :class:`Script` through the real session manager."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.calibration import Calibration
from engine.clients import ScriptedClient
from engine.compaction import OfflineSummarizer
from engine.demo.agent import CODING_TOOLS, SKILLS, mcp_tools, prompt_sections
from engine.demo.repo import FakeRepo
from engine.demo.script import Script
from engine.session import SessionManager
from engine.settings import Settings
from engine.store import BlobRecord, SessionStore


class DemoStore(SessionStore):
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
class DemoContext:
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
            calibration=Calibration(),  # the static estimator: the sample data never depends on a user's calibration
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
