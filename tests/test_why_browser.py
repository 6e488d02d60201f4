"""The "Why did it stop?" page in a real browser (Debian chromium through Playwright against `streamlit
run`) on real agents' sessions imported by ctxdesk: a Claude Code auto-compaction, a reactive one
after the provider's 400, and a Codex compaction. Each shows its one sentence first, then the
evidence (the compaction's facts, what it kept and dropped, the failed call). Screenshots go to
tests/artifacts/screenshots/why-*.png. The helpers are tests/browser/test_dashboard_browser.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.explain import explain_store
from engine.importers import import_file
from engine.store import SessionStore
from tests.browser.test_dashboard_browser import (  # noqa: F401 - browser and page are fixtures used here
    _check_page,
    _open,
    _serve,
    _shot_whole_page,
    browser,
    page,
)

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
CODEX_COMPACTED = next(
    (ROOT / "tests" / "fixtures" / "real_agents" / "codex" / "auto-compact" / "sessions").rglob(
        "rollout-*.jsonl"
    )
)


@pytest.fixture(scope="module")
def served_agents(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, object]]:
    """The app over one database of real agents' sessions, and what `ctxdesk why` says of each."""
    base = tmp_path_factory.mktemp("why_browser")
    db = base / "agents.db"
    with SessionStore(db) as store:
        for scenario in ("compact_auto", "compact_reactive"):
            for transcript in sorted((CLAUDE / scenario / "transcripts").glob("*.jsonl")):
                import_file(transcript, store)
        import_file(CODEX_COMPACTED, store)
        report = explain_store(store)
    with _serve([db], base) as server:
        yield {**server, "db": db, "why": {s.session_id: s for s in report.sessions}}


def _pick(served: dict[str, object], agent: str, trigger: str) -> object:
    return next(
        s for s in served["why"].values()
        if s.agent == agent and any(c.trigger == trigger for c in s.compactions)
    )  # fmt: skip


@pytest.mark.parametrize(
    ("agent", "trigger", "first", "evidence"),
    [
        ("claude-code", "auto", "Claude Code compacted itself at call 2: its estimate reached 95,049 of 167,000 tokens",
         ["threshold in force", "167,000", "auto-compact at limit 180,000 − 13,000", "What it kept and dropped", "app.py"]),
        ("claude-code", "reactive", "The provider refused call 3: prompt is too long; Claude Code then compacted reactively",
         ["Failed calls", "compacted reactively after call 3 was refused as too long", "after failed call",
          "What it kept and dropped"]),
        ("codex", "auto", "Codex compacted itself at call 1: its estimate reached 39,731 tokens, past its compaction point of 20,000",
         ["model_auto_compact_token_limit = 20,000", "threshold in force", "20,000", "What it kept and dropped"]),
    ],
    ids=["claude-code-auto", "claude-code-reactive", "codex"],
)  # fmt: skip
def test_the_page_says_why_first_then_shows_the_evidence(
    served_agents: dict[str, object],
    page: object,  # noqa: F811 - the imported fixture
    agent: str,
    trigger: str,
    first: str,
    evidence: list[str],
) -> None:
    why = _pick(served_agents, agent, trigger)
    _open(page, f"{served_agents['url']}/why_stop?session=agents::{why.session_id}")
    main = page.locator("[data-testid='stMain']")
    heading = main.locator("[data-testid='stHeading']").nth(1)  # after the page title
    assert heading.inner_text().startswith(first), heading.inner_text()
    assert heading.inner_text() == why.headline
    _shot_whole_page(page, f"why-{agent}-{trigger}")
    text = main.inner_text()
    for words in evidence:
        assert words in text, (words, text[:3000])
    # the sentence comes before the evidence on the page
    assert text.index(why.headline[:60]) < text.index("What it kept and dropped")
    _check_page(page, f"why_stop {agent} {trigger}", allowed=[why.title or ""])
    _shot_whole_page(page, f"why-{agent}-{trigger}")
