"""#29: one limit everywhere. Settings that set ``context_window``, ``max_output_tokens``,
``buffer_tokens`` and ``context_budget`` give one number, :data:`EXPECTED`, and every reader uses it:
the resolved settings, the budget, the guard (its decision and its events), the turn check, the
session manager's recorded events, ``ctxdesk report`` (text, JSON, HTML) and ``ctxdesk models``.

The issue's repro (``context_budget = 50_000``: compacting at 50,000, refusing only past 126,720,
recording 126,720 while the session manager recorded 50,000) cannot happen when every check here
reads the same ``EXPECTED``. To extend it to another reader (the proxy, an importer, a roll-up, a
page), build its input with :func:`one_limit_settings` or :func:`settings_file` and assert that
reader's number equals ``EXPECTED``.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import pytest

from engine.budget import ContextBudget, Thresholds, measure_budget, reproject
from engine.cli import main
from engine.clients import ScriptedClient
from engine.compaction import OfflineSummarizer
from engine.events import ComponentTokens
from engine.guard import ContextGuard, GuardTarget
from engine.importers import import_file
from engine.limit import Limit, recorded_limit
from engine.messages import user
from engine.session import SessionManager
from engine.settings import ResolvedModelSettings, Settings, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer
from engine.turns import is_over_context_budget
from tests.conftest import FIXTURES

MODEL = "claude-sonnet-4-6"
WINDOW, MAX_OUTPUT, BUFFER, BUDGET = 200_000, 32_000, 1_000, 50_000
#: The one limit: the window less the reply reserve and the buffer (167,000), capped by the budget.
EXPECTED = 50_000
UNCAPPED = WINDOW - MAX_OUTPUT - BUFFER
LEVEL = {
    "context_window": WINDOW,
    "max_output_tokens": MAX_OUTPUT,
    "buffer_tokens": BUFFER,
    "context_budget": BUDGET,
}
TOKENIZER = get_tokenizer("anthropic")


def one_limit_settings(model: str = MODEL) -> Settings:
    """Settings whose limit for ``model`` is :data:`EXPECTED` (the cap below the uncapped value)."""
    return Settings.from_dict({"models": {model: LEVEL}})


def settings_file(tmp_path: Path) -> Path:
    """The same settings as a TOML file, for the CLI and anything that reads a file."""
    path = tmp_path / "settings.toml"
    path.write_text(
        f'[models."{MODEL}"]\n' + "".join(f"{k} = {v}\n" for k, v in LEVEL.items()), encoding="utf-8"
    )
    return path


def resolved() -> ResolvedModelSettings:
    return resolve_model_settings(MODEL, settings=one_limit_settings())


def test_the_settings_give_one_limit_and_the_old_names_agree() -> None:
    r = resolved()
    assert EXPECTED < UNCAPPED  # the cap is what decides: a reader that forgets it fails here
    assert r.limit == Limit(WINDOW, MAX_OUTPUT, BUFFER, BUDGET, source="settings")
    assert r.limit.tokens == r.effective_window == r.budget_tokens == EXPECTED
    assert r.limit.uncapped == UNCAPPED
    assert (r.note_tokens, r.compact_tokens, r.hard_block_tokens) == tuple(
        r.limit.threshold(s) for s in (r.note_threshold, r.compact_threshold, r.hard_block_threshold)
    )


def test_the_budget_and_a_reprojection_use_it() -> None:
    budget = measure_budget(settings=resolved(), tokenizer=TOKENIZER, messages=[user("hello")])
    assert budget.limit.tokens == budget.effective_window == EXPECTED
    assert budget.remaining == EXPECTED - budget.used
    (point,) = reproject([ComponentTokens(conversation=EXPECTED)], resolved())
    assert point.limit == EXPECTED and point.would_block


@pytest.mark.parametrize(("used", "fits"), [(EXPECTED, True), (EXPECTED + 1, False), (UNCAPPED - 10, False)])
def test_the_guard_judges_and_records_against_it(used: int, fits: bool) -> None:
    target = GuardTarget.from_settings(resolved())
    assert target.limit == EXPECTED
    components = ComponentTokens(system=1_000, conversation=used - 1_000)
    guard = ContextGuard(TOKENIZER, current=used)
    decision = guard.evaluate_request([target], components=components)
    assert (decision.outcome != "forced_final") is fits
    assert decision.events and {e.limit_tokens for e in decision.events} == {EXPECTED}
    assert {recorded_limit(e) for e in decision.events} == {EXPECTED}


def test_the_turn_check_uses_it() -> None:
    messages = [user("word " * 60_000)]  # ~56k tokens: under the window, over the capped limit
    assert is_over_context_budget(messages, tokenizer=TOKENIZER, limit=resolved().limit)
    assert not is_over_context_budget(
        messages, tokenizer=TOKENIZER, limit=Limit(WINDOW, MAX_OUTPUT, BUFFER)
    )  # the same request fits the uncapped value: the cap is what was checked


@pytest.fixture
def recorded_session(tmp_path: Path) -> tuple[Path, str]:
    """A session run by the session manager under the settings, in a database file."""
    db = tmp_path / "sessions.db"
    with SessionStore(db) as store:
        client = ScriptedClient(["Hello.", "Done."], model=MODEL, usage_ratio=1.05)
        manager = SessionManager(
            client, store, settings=one_limit_settings(), system_prompt="You are careful.",
            summarizer=OfflineSummarizer(),
        )  # fmt: skip
        manager.run_turn("hi")
        manager.run_turn("and now?")
        session_id = manager.session_id
    return db, session_id


def test_the_session_managers_events_record_it(recorded_session: tuple[Path, str]) -> None:
    db, session_id = recorded_session
    with SessionStore(db) as store:
        events = [
            e for e in store.list_events(session_id) if e.limit_tokens is not None or e.kind == "request"
        ]
    requests = [e for e in events if e.kind == "request"]
    assert len(requests) == 2
    assert {e.limit_tokens for e in events} == {EXPECTED}
    assert {(e.context_window, e.max_output_tokens, e.buffer_tokens) for e in requests} == {
        (WINDOW, MAX_OUTPUT, BUFFER)
    }
    assert {recorded_limit(e) for e in requests} == {EXPECTED}


def test_a_compaction_records_the_limit_in_force_not_its_own_target(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "sessions.db") as store:
        client = ScriptedClient(["One.", "Two.", "Three."], model=MODEL, usage_ratio=1.05)
        manager = SessionManager(
            client, store, settings=one_limit_settings(), system_prompt="You are careful.",
            summarizer=OfflineSummarizer(),
        )  # fmt: skip
        for text in ("first question " * 50, "second question " * 50, "third"):
            manager.run_turn(text)
        report = manager.compact(target_tokens=100)
        event = next(e for e in store.list_events(manager.session_id) if e.kind == "compaction")
    assert not report.noop
    assert event.limit_tokens == recorded_limit(event) == EXPECTED
    assert event.details["target_tokens"] == 100


def run(argv: list[str]) -> str:
    out = io.StringIO()
    assert main(argv, out=out) == 0
    return out.getvalue()


def test_the_report_says_it_in_text_json_and_html(recorded_session: tuple[Path, str], tmp_path: Path) -> None:
    db, session_id = recorded_session
    target = f"{db}:{session_id}"
    report: dict[str, Any] = json.loads(run(["report", target, "--format", "json"]))
    (session,) = report["sessions"]
    assert session["limit"]["limit_tokens"] == EXPECTED
    assert {r["limit_tokens"] for r in session["requests"]} == {EXPECTED}
    assert f"limit {EXPECTED:,} tokens" in run(["report", target])
    html = tmp_path / "report.html"
    run(["report", target, "--format", "html", "--out", str(html)])
    assert f"limit {EXPECTED:,} tokens" in html.read_text(encoding="utf-8")


def test_ctxdesk_models_shows_it(tmp_path: Path) -> None:
    path = settings_file(tmp_path)
    one = run(["--settings", str(path), "models", MODEL])
    assert re.search(rf"^limit \(capped by context_budget\) +{EXPECTED:,}$", one, re.M)
    assert re.search(rf"^window less reserve and buffer +{UNCAPPED:,}$", one, re.M)
    listing = run(["--settings", str(path), "models"])
    row = next(line for line in listing.splitlines() if line.startswith(MODEL))
    assert f"{EXPECTED:,}" in row.split() and f"{UNCAPPED:,}" not in row


def test_a_budget_built_by_hand_agrees() -> None:
    budget = ContextBudget(
        WINDOW, MAX_OUTPUT, BUFFER, ComponentTokens(), Thresholds.from_settings(resolved()), BUDGET
    )
    assert budget.limit == Limit(WINDOW, MAX_OUTPUT, BUFFER, BUDGET)
    assert budget.limit.tokens == EXPECTED


def test_an_imported_session_records_it(tmp_path: Path) -> None:
    """The settings override applies to imported sessions too (engine.settings.limit_for_model)."""
    transcript = FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl"  # claude-sonnet-4-20250514
    with SessionStore(tmp_path / "imported.db") as store:
        import_file(transcript, store, settings=one_limit_settings("claude-sonnet-4-20250514"))
        requests = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
    assert requests and {recorded_limit(e) for e in requests} == {EXPECTED}
