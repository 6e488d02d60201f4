"""#29 on every real-CLI fixture: each imported call with the provider's count has components that
add up to it, the first call after each compaction included, and that first call's own measure is
not inflated by what was measured before the compaction (the issue's repro: a system prompt
measured before it carried across gave 54,242 against the provider's 36,541).

The fixtures are what real agent CLIs wrote running offline against the scripted model server
(tests/fixtures/real_agents, ../shared/REAL-AGENTS.md); imported as a user would (a folder import).
The full ../shared sessions are held to the same rule in tests/test_importers_shared.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from engine.events import COMPONENTS
from engine.importers import import_files
from engine.importers.locations import folder_files
from engine.store import SessionStore
from tests.conftest import FIXTURES

REAL_AGENTS = FIXTURES / "real_agents"
AGENTS = sorted(p.name for p in REAL_AGENTS.iterdir() if p.is_dir())
#: Agents whose fixtures hold a compaction followed by a counted call (the check below must see them).
COMPACTING = {"claude-code", "codex", "copilot", "gemini", "kilo", "opencode", "qwen"}
#: Our measure of a first call after a compaction may exceed the provider's count by at most this
#: share (the issue's worst: 3%); a measure carried across the compaction overshoots by far more.
OVERSHOOT = 0.03


@dataclass
class Calls:
    """The counted calls of one agent's fixtures: (provider, stored total) and first-after-compaction ones."""

    counted: list[tuple[int, int]] = field(default_factory=list)
    after_compaction: list[tuple[str, int, int]] = field(
        default_factory=list
    )  # (session, provider, measured)
    problems: list[str] = field(default_factory=list)


def counted_calls(store: SessionStore, session_ids: list[str]) -> Calls:
    calls = Calls()
    for sid in session_ids:
        compacted = False
        for event in store.list_events(sid):
            if event.kind == "compaction" and event.outcome == "compacted":
                compacted = True
                continue
            provider = event.usage.prompt_tokens if event.kind == "request" and event.usage else 0
            if not provider:
                continue
            c = event.components
            calls.counted.append((provider, c.total))
            if event.components_basis not in ("exact", "reconciled"):
                calls.problems.append(
                    f"{sid} #{event.seq}: basis {event.components_basis!r} with a provider count"
                )
            if any(getattr(c, name) < 0 for name in COMPONENTS):
                calls.problems.append(f"{sid} #{event.seq}: a negative component {c}")
            if compacted:
                measured = sum(event.details["measured"].values())
                calls.after_compaction.append((sid, provider, measured))
                compacted = False
    return calls


@pytest.mark.parametrize("agent", AGENTS)
def test_every_counted_call_adds_up_and_nothing_is_carried_across_a_compaction(
    agent: str, tmp_path: Path
) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        results = import_files(folder_files(REAL_AGENTS / agent), store, on_error=lambda _path, _error: None)
        calls = counted_calls(store, [sid for r in results for sid in r.session_ids])
    assert calls.counted, f"{agent}: no call with the provider's count imported"
    assert not calls.problems, calls.problems
    errors = [abs(total - provider) / provider for provider, total in calls.counted]
    assert max(errors) == 0, f"{agent}: components do not add up to the provider's count: {errors}"
    assert bool(calls.after_compaction) is (agent in COMPACTING), calls.after_compaction
    for sid, provider, measured in calls.after_compaction:
        assert measured <= provider * (1 + OVERSHOOT), (sid, provider, measured)


@pytest.mark.parametrize("agent", ["opencode", "kilo"])
def test_a_summarizer_call_does_not_set_the_framing_of_the_calls_after_it(agent: str, tmp_path: Path) -> None:
    """OpenCode's summarizer sends another system prompt and no tools (~700 tokens of framing against
    ~8,400): measured at it, the framing of the calls after the compaction left ~90% of each one
    "unattributed". Each call's unlogged framing is now its own segment's, the summarizer's its own."""
    with SessionStore(tmp_path / "s.db") as store:
        results = import_files(
            folder_files(REAL_AGENTS / agent / "compact"), store, on_error=lambda _path, _error: None
        )
        (sid,) = [sid for r in results for sid in r.session_ids]
        events = store.list_events(sid, kind="request")
    summarizers = [e for e in events if e.details.get("compaction_call")]
    after = [e for e in events if e.details["segment"] == 1 and not e.details.get("compaction_call")]
    assert summarizers and after
    framing = after[0].details["unlogged_prefix_tokens"]
    for event in summarizers:  # its own framing: what the provider counted beyond its messages
        assert event.components.system == event.details["unlogged_prefix_tokens"] < framing / 5, (
            event.components
        )
    for event in after:
        assert event.components.unattributed <= 0.01 * event.usage.prompt_tokens, event.components
        assert event.components.system > 0.9 * event.usage.prompt_tokens, event.components


def test_qwen_codes_first_call_after_a_compression_is_framed_apart(tmp_path: Path) -> None:
    """Qwen Code sends its first call after a compression without the <system-reminder> texts (skills,
    tools) that its later calls carry again (~2,400 tokens here, requests 3 and 4 of the server's log):
    measured at that call, every later call left them "unattributed". That call's framing is its own."""
    with SessionStore(tmp_path / "s.db") as store:
        results = import_files(
            folder_files(REAL_AGENTS / "qwen" / "compress"), store, on_error=lambda _path, _error: None
        )
        (sid,) = [sid for r in results for sid in r.session_ids]
        after = [e for e in store.list_events(sid, kind="request") if e.details["segment"] == 1]
    first, *later = after
    assert first.details.get("own_framing") and later
    assert first.details["unlogged_prefix_tokens"] + 2_000 < later[0].details["unlogged_prefix_tokens"]
    for event in [first, *later]:
        assert event.components.unattributed <= 0.01 * event.usage.prompt_tokens, event.components


@pytest.mark.parametrize("agent", sorted(COMPACTING))
def test_every_agents_compaction_keeps_the_summary_it_went_on_from(agent: str, tmp_path: Path) -> None:
    """The snapshot an agent's compaction leaves holds its summary (Claude Code's summary line, Codex's
    and Gemini CLI's compacted item, Copilot CLI's summaryContent, Qwen Code's state snapshot turn,
    OpenCode's and Kilo CLI's summarizer reply): the Compaction page and "what it kept and dropped"
    read it. Copilot's and Qwen's, OpenCode's and Kilo's were empty."""
    with SessionStore(tmp_path / "s.db") as store:
        results = import_files(folder_files(REAL_AGENTS / agent), store, on_error=lambda _path, _error: None)
        snapshots = [n for r in results for sid in r.session_ids for n in store.list_snapshots(sid)]
    assert snapshots, agent
    assert all(n.summary.strip() for n in snapshots), [(n.session_id, n.summary) for n in snapshots]


def test_a_gemini_prompt_may_use_the_whole_window(tmp_path: Path) -> None:
    """Gemini models count their output apart from their input window (gemini-3.1-pro: 1,048,576 in,
    65,536 out) and Gemini CLI lets a prompt use all of the window (its tokenLimit): no reply reserve
    comes off a Gemini CLI session's limit, which was 982,784."""
    with SessionStore(tmp_path / "s.db") as store:
        results = import_files(
            folder_files(REAL_AGENTS / "gemini"), store, on_error=lambda _path, _error: None
        )
        events = [e for r in results for sid in r.session_ids for e in store.list_events(sid, kind="request")]
    assert events
    assert {(e.limit_tokens, e.context_window, e.max_output_tokens) for e in events} == {
        (1_048_576, 1_048_576, 0)
    }
