"""The what-if on the Model settings page (#35.4): dashboard.analysis.whatif on real Claude Code sessions
imported from tests/fixtures, and the page itself (AppTest) against engine.replay.replay_session called
directly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import streamlit as st
from hypothesis import given
from hypothesis import strategies as hs
from pydantic import ValidationError
from streamlit.testing.v1 import AppTest

from dashboard import figures
from dashboard.analysis import whatif
from dashboard.data import DB_PATHS_ENV_VAR
from engine.importers.api import import_file
from engine.replay import (
    RecordedSession,
    ReplayedCall,
    SessionReplay,
    VariantReplay,
    cache_rules_for,
    load_recorded_session,
    replay_session,
)
from engine.settings import SETTINGS_ENV_VAR, resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
CLAUDE = ROOT / "tests" / "fixtures" / "real_agents" / "claude-code"
SHARED = ROOT.parent / "shared" / "sessions"
APP = ROOT / "dashboard" / "app.py"
#: Low enough that the fixtures' prompts (23k to 120k tokens) cross it: every edit fires.
LOW = whatif.WhatIfChoices(trigger=1_000, keep=0, provider_compact_trigger=50_000, ctxdesk_compact_share=0.1)


def imported(db: Path, *transcripts: Path) -> tuple[str, RecordedSession]:
    """The transcripts imported as ``ctxdesk import`` does; the main session's id and its recorded calls."""
    with SessionStore(db) as store:
        for path in transcripts:
            import_file(path, store)
        sid = next(s.id for s in store.list_sessions() if ":" not in s.id)
        return sid, load_recorded_session(store, sid)


def replayed(recorded: RecordedSession, choices: whatif.WhatIfChoices) -> SessionReplay:
    """engine.replay.replay_session called directly, as the page's worker calls it."""
    provider = cache_rules_for(recorded.provider, recorded.model).provider
    resolved = resolve_model_settings(recorded.model, recorded.provider)
    return replay_session(
        recorded, whatif.variants_for(provider, choices), tokenizer=get_tokenizer(resolved.tokenizer),
        resolved=resolved,
    )  # fmt: skip


@pytest.fixture(scope="module")
def compact_auto(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, RecordedSession]:
    """A real Claude Code session (4 calls, up to 95,003 prompt tokens, a tool use) imported."""
    db = tmp_path_factory.mktemp("whatif") / "cc.db"
    sid, recorded = imported(db, *sorted((CLAUDE / "compact_auto" / "transcripts").glob("*.jsonl")))
    return db, sid, recorded


VARIANT_CASES = {
    "anthropic: both provider edits, then ctxdesk's": (
        "anthropic", ["as_sent", "clear_tool_uses_20250919", "compact_20260112", "ctxdesk", "ctxdesk"],
    ),
    "openai: no clearing on the provider's side": ("openai", ["as_sent", "compaction", "ctxdesk", "ctxdesk"]),
}  # fmt: skip


@pytest.mark.parametrize("name", VARIANT_CASES)
def test_variants_follow_the_provider_and_carry_the_chosen_parameters(name: str) -> None:
    provider, types = VARIANT_CASES[name]
    choices = whatif.WhatIfChoices(
        trigger=42_000, keep=2, clear_at_least=500, exclude_tools=("Skill",), clear_tool_inputs=True,
        provider_compact_trigger=60_000, ctxdesk_compact_share=0.7, cache_aware="strict",
    )  # fmt: skip
    variants = whatif.variants_for(provider, choices)
    assert [v.type for v in variants] == types
    server = variants[types.index("compact_20260112" if provider == "anthropic" else "compaction")]
    assert server.trigger == 60_000
    clearing, compaction = variants[-2].policies.clear_tool_results, variants[-1].policies.compaction
    assert (clearing.trigger, clearing.keep, clearing.clear_at_least) == (42_000, 2, 500)
    assert (clearing.exclude_tools, clearing.clear_tool_inputs, clearing.cache_aware) == (
        ("Skill",),
        True,
        "strict",
    )
    assert (compaction.trigger, compaction.cache_aware) == (0.7, "strict")
    if provider == "anthropic":
        assert variants[1].model_dump(exclude={"type"}) == {
            "trigger": 42_000, "keep": 2, "clear_at_least": 500, "exclude_tools": ("Skill",),
            "clear_tool_inputs": True,
        }  # fmt: skip


def test_a_compaction_trigger_under_anthropics_minimum_is_refused_not_raised_silently() -> None:
    with pytest.raises(ValidationError, match="50000"):
        whatif.variants_for("anthropic", whatif.WhatIfChoices(provider_compact_trigger=49_999))


def test_the_unedited_variant_sends_the_providers_prompt_tokens_on_every_call(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(recorded, whatif.WhatIfChoices())
    assert replay.recorded is not None
    as_sent = [c.prompt_tokens for c in replay.variants[0].calls]
    assert (
        as_sent
        == [c.usage.prompt_tokens for c in recorded.calls]
        == [c.prompt_tokens for c in replay.recorded.calls]
    )
    reads = int(replay.variants[0].total("cache_read_tokens"))
    provider_reads = sum(c.usage.cache_read_input_tokens for c in recorded.calls)
    assert whatif.fidelity(replay) == (
        f"Unedited, the replay sends the provider's prompt tokens on 4 of 4 calls; its cache reads {reads:,} "
        f"tokens where the provider read {provider_reads:,} ({(reads - provider_reads) / provider_reads:+.1%}), "
        f"and costs ${replay.variants[0].total('cost_usd'):,.2f} where the provider's usage costs "
        f"${replay.recorded.total('cost_usd'):,.2f}."
    )


def test_the_table_holds_each_variants_totals_and_how_it_compares_with_as_sent(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(recorded, LOW)
    table = whatif.totals_table(replay)
    rows = whatif.rows_of(replay)
    assert tuple(table.columns) == whatif.TABLE_ORDER  # every total and comparison, each beside its number
    assert list(table["Context management"]) == [r.label for r in rows]
    assert table.iloc[0]["Context management"] == "Recorded (the provider's usage)"
    assert list(table.iloc[0][list(whatif.VERSUS_COLUMNS)]) == ["", "", ""]
    for (_, line), row in zip(table.iterrows(), rows, strict=True):
        totals = row.totals()
        for key, heading in whatif.TOTAL_COLUMNS.items():
            assert line[heading] == totals[key], (row.label, heading)
    base = replay.variants[0]
    clearing = next(
        i for i, v in enumerate(replay.variants) if v.label.startswith("Provider clear_tool_uses")
    )
    line = table.iloc[clearing + 1]
    assert line["Calls edited"] > 0  # the tool result was cleared once the prompt passed 1,000 tokens
    saved = replay.variants[clearing].total("prompt_tokens") - base.total("prompt_tokens")
    assert saved < 0
    said = re.fullmatch(r"-([\d.]+)%", line["Prompt tokens vs as sent"])
    assert said is not None, line["Prompt tokens vs as sent"]
    decimals = len(said.group(1).partition(".")[2])
    assert float(said.group(1)) == pytest.approx(
        -100 * saved / base.total("prompt_tokens"), abs=0.5 * 10**-decimals
    )
    assert table.iloc[1]["Prompt tokens vs as sent"] == "±0%"  # as sent against itself
    lost = sum(
        v.cache_read_tokens < b.cache_read_tokens
        for v, b in zip(replay.variants[clearing].calls, base.calls, strict=True)
    )
    assert line["Cache lost (calls)"] == str(lost)
    compacted = next(v for v in replay.variants if v.label.startswith("Provider compact_20260112"))
    assert compacted.total("compactions") >= 1  # 95,003 tokens passed its 50,000 trigger


def test_the_headline_names_the_cheapest_edit_with_the_tables_numbers(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(recorded, LOW)
    base = replay.variants[0]
    edited = [v for v in replay.variants[1:] if any(c.edits for c in v.calls)]
    best = min(edited, key=lambda v: (v.total("cost_usd"), v.total("prompt_tokens")))
    sentence = whatif.headline(replay)
    assert best.label in sentence
    fewer = int(base.total("prompt_tokens") - best.total("prompt_tokens"))
    said = re.search(r"would have sent ([\d.]+)% fewer prompt tokens \(([\d,]+)\)", sentence)
    assert said is not None, sentence
    assert int(said.group(2).replace(",", "")) == fewer > 0
    decimals = len(said.group(1).partition(".")[2])
    assert float(said.group(1)) == pytest.approx(
        100 * fewer / base.total("prompt_tokens"), abs=0.5 * 10**-decimals
    )
    saved = base.total("cost_usd") - best.total("cost_usd")
    money = re.search(r"cost \$([\d,.]+) (less|more)", sentence)
    assert money is not None and money.group(2) == ("less" if saved > 0 else "more")
    assert float(money.group(1).replace(",", "")) == pytest.approx(abs(saved), abs=0.005)
    assert sentence.startswith("Over 4 calls") == (saved > 0)


def test_when_no_trigger_is_reached_the_headline_says_so_with_the_largest_prompt(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(
        recorded,
        whatif.WhatIfChoices(trigger=500_000, provider_compact_trigger=500_000, ctxdesk_compact_share=1.0),
    )
    assert whatif.headline(replay) == (
        "Over 4 calls no variant edited anything: the largest prompt was 95,003 tokens, under every trigger chosen."
    )


def test_an_unpriced_model_compares_tokens_and_says_costs_are_not_compared(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(recorded, LOW).model_copy(update={"priced": False, "model": "house-model"})
    sentence = whatif.headline(replay)
    assert "cost" not in sentence.split(".")[0]
    assert sentence.endswith("house-model has no list price in the model table: costs are not compared.")
    assert set(whatif.totals_table(replay)["Cost vs as sent"]) == {""}


def test_the_per_call_frame_and_chart_follow_every_variant_call_by_call(compact_auto) -> None:
    _, _, recorded = compact_auto
    replay = replayed(recorded, LOW)
    frame = whatif.per_call_frame(replay)
    rows = whatif.rows_of(replay)
    assert len(frame) == sum(len(r.calls) for r in rows)
    for row in rows:
        mine = frame[frame["variant"] == row.label]
        assert list(mine["call"]) == list(range(1, len(row.calls) + 1))
        assert list(mine["prompt_tokens"]) == [c.prompt_tokens for c in row.calls]
        assert mine["cost_so_far_usd"].iloc[-1] == pytest.approx(row.total("cost_usd"))
        assert set(mine["role"]) == {
            "recorded" if row is replay.recorded else "as_sent" if row is replay.variants[0] else "variant"
        }
    figure = figures.whatif_figure(frame)
    assert len(figure.data) == len(rows) * len(figures.WHATIF_PANELS)
    assert sum(t.showlegend for t in figure.data) == len(rows)
    # one colour per variant in every panel: the legend names the line in each of them
    by_variant: dict[str, set[str]] = {}
    for trace in figure.data:
        by_variant.setdefault(trace.name, set()).add(trace.line.color)
    assert all(len(colors) == 1 for colors in by_variant.values())
    assert len({next(iter(c)) for c in by_variant.values()}) == len(rows)


SHARE_CASES = {"large: whole percent": (0.314, "31%"), "small: one decimal": (0.024, "2.4%"),
               "tiny: two decimals": (0.0004, "0.04%"), "below that: said so": (0.00001, "under 0.01%")}  # fmt: skip


@pytest.mark.parametrize("name", SHARE_CASES)
def test_a_small_saving_never_reads_as_zero_percent(name: str) -> None:
    share, expected = SHARE_CASES[name]
    base = _variant([100_000], [0], [1.0])
    other = _variant([round(100_000 * (1 - share))], [0], [1.0])
    assert whatif.variant_sentence(other, base, priced=False).startswith(
        f"would have sent {expected} fewer prompt tokens ({round(100_000 * share):,})"
    )


CHANGE_CASES = {"more": (131, 100, "+31%"), "fewer": (97.6, 100, "-2.4%"), "tiny": (99_960, 100_000, "-0.04%"),
                "below 0.01%": (999_999, 1_000_000, "-<0.01%"), "none": (5, 5, "±0%"), "no base": (5, 0, "")}  # fmt: skip


@pytest.mark.parametrize("name", CHANGE_CASES)
def test_a_change_in_the_table_is_signed_and_never_rounds_to_nothing(name: str) -> None:
    value, base, expected = CHANGE_CASES[name]
    assert whatif._change(value, base) == expected


def _variant(prompts: list[int], reads: list[int], costs: list[float]) -> VariantReplay:
    calls = tuple(
        ReplayedCall(event_seq=i, prompt_tokens=p, cache_read_tokens=r, cache_write_tokens=0,
                     billed_input_tokens=p, output_tokens=0, cost_usd=c)
        for i, (p, r, c) in enumerate(zip(prompts, reads, costs, strict=True))
    )  # fmt: skip
    return VariantReplay(label="v", calls=calls)


calls = hs.lists(
    hs.tuples(hs.integers(1, 10**6), hs.integers(0, 10**6), hs.floats(0, 5), hs.integers(0, 10**6),
              hs.integers(0, 10**6), hs.floats(0, 5)),
    min_size=1, max_size=20,
)  # fmt: skip


@given(calls)
def test_the_sentence_says_fewer_or_more_and_less_or_more_as_the_sums_do(rows: list[tuple]) -> None:
    base = _variant([r[0] for r in rows], [min(r[1], r[0]) for r in rows], [r[2] for r in rows])
    other = _variant([r[3] + 1 for r in rows], [min(r[4], r[3] + 1) for r in rows], [r[5] for r in rows])
    text = whatif.variant_sentence(other, base, priced=True)
    tokens, cost = text.split(", ")[0].split(" and ")
    prompt, base_prompt = other.total("prompt_tokens"), base.total("prompt_tokens")
    assert ("fewer" in tokens, "more" in tokens) == (prompt < base_prompt, prompt > base_prompt)
    saved = base.total("cost_usd") - other.total("cost_usd")
    assert ("less" in cost, "more" in cost, "the same" in cost) == (saved > 0, saved < 0, saved == 0)
    lost = whatif.cache_losses(other, base)
    assert text.endswith("never losing the cache") == (lost == 0)


@pytest.mark.shared
@pytest.mark.skipif(not SHARED.exists(), reason="needs ../shared")
def test_on_a_real_ten_call_session_clearing_at_20k_costs_more_for_the_cache_it_loses(tmp_path: Path) -> None:
    _, recorded = imported(
        tmp_path / "cc.db", SHARED / "claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl"
    )
    replay = replayed(recorded, whatif.WhatIfChoices(trigger=20_000))
    table = whatif.totals_table(replay).set_index("Context management")
    assert (
        table.loc["As the agent sent it", "Prompt tokens (sum)"]
        == 216_399
        == replay.recorded.total("prompt_tokens")
    )
    clearing = table.loc["Provider clear_tool_uses_20250919 (trigger 20,000, keep 3)"]
    assert (clearing["Calls edited"], clearing["Cache lost (calls)"]) == (7, "7")
    assert (
        clearing["Prompt tokens (sum)"] < 216_399
        and clearing["Cost (USD)"] > table.loc["As the agent sent it", "Cost (USD)"]
    )
    assert whatif.headline(replay).startswith("No variant costs less than the history as sent ($0.18)")


# -- the page ------------------------------------------------------------------------------------------


@pytest.fixture
def page_db(
    compact_auto, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[Path, str, RecordedSession]:
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(compact_auto[0]))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return compact_auto


def _settings_page(sid: str) -> AppTest:
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["selected_session"] = f"cc::{sid}"
    at.switch_page("views/model_settings.py").run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def _unescape(markdown: object) -> str:
    return re.sub(r"\\(.)", r"\1", str(markdown))


def test_the_page_replays_the_selected_session_as_replay_session_does(page_db) -> None:
    _, sid, recorded = page_db
    at = _settings_page(sid)
    assert "What if" in [s.value for s in at.subheader]
    assert not at.get("plotly_chart") or all(
        c.key != "wi_chart" for c in at.get("plotly_chart")
    )  # off: no replay
    at.toggle(key="wi_on").set_value(True).run()
    at.number_input(key="wi_trigger").set_value(1_000).run()
    at.number_input(key="wi_keep").set_value(0).run()
    at.number_input(key="wi_compact_anthropic").set_value(50_000).run()
    at.number_input(key="wi_share").set_value(0.1).run()
    assert not at.exception, [e.value for e in at.exception]
    direct = replayed(recorded, LOW)
    assert [_unescape(i.value) for i in at.info][-1] == whatif.headline(direct)
    shown = at.dataframe[-1].value
    expected = whatif.totals_table(direct).drop(columns="Calls refused")  # none refused: not shown
    assert list(shown.columns) == list(expected.columns)
    assert shown.to_dict("records") == expected.to_dict("records")
    assert whatif.fidelity(direct) in [_unescape(c.value) for c in at.caption]
    assert shown.loc[
        shown["Context management"] == "As the agent sent it", "Prompt tokens (sum)"
    ].item() == sum(c.usage.prompt_tokens for c in recorded.calls)


def test_a_session_whose_calls_all_failed_says_so_on_the_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "cc.db"
    sid, recorded = imported(db, *sorted((CLAUDE / "provider_error" / "transcripts").glob("*.jsonl")))
    assert not recorded.calls and recorded.failed_calls == 11
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    at = _settings_page(sid)
    at.toggle(key="wi_on").set_value(True).run()
    assert not at.exception, [e.value for e in at.exception]
    assert "No successful call to replay: all 11 calls failed (nothing billed)." in [
        _unescape(i.value) for i in at.info
    ]


def test_a_replay_without_calls_gives_an_empty_frame_and_chart_not_an_error() -> None:
    empty = SessionReplay(
        session_id="s", model=None, priced=False, cache_provider="anthropic", recorded=None,
        variants=(VariantReplay(label="As the agent sent it", calls=()),), failed_calls=3,
    )  # fmt: skip
    frame = whatif.per_call_frame(empty)
    assert frame.empty and tuple(frame.columns) == whatif.FRAME_COLUMNS
    assert not figures.whatif_figure(frame).data
    assert whatif.headline(empty) == "No successful call to replay: all 3 calls failed (nothing billed)."


def test_an_openai_session_offers_the_responses_compaction_and_no_clearing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.importers.batch import import_files
    from engine.importers.locations import folder_files

    db = tmp_path / "codex.db"
    with SessionStore(db) as store:
        import_files(
            folder_files(ROOT / "tests" / "fixtures" / "real_agents" / "codex" / "auto-compact" / "sessions"),
            store,
        )
        sid = next(s.id for s in store.list_sessions() if ":" not in s.id and not s.parent_session_id)
        recorded = load_recorded_session(store, sid)
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(db))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    at = AppTest.from_file(str(APP), default_timeout=120).run()
    at.session_state["selected_session"] = f"codex::{sid}"
    at.switch_page("views/model_settings.py").run()
    at.toggle(key="wi_on").set_value(True).run()
    at.number_input(key="wi_compact_openai").set_value(8_000).run()
    assert not at.exception, [e.value for e in at.exception]
    assert at.number_input(key="wi_compact_openai").label == "OpenAI compaction compact_threshold"
    direct = replayed(recorded, whatif.WhatIfChoices(provider_compact_trigger=8_000))
    shown = at.dataframe[-1].value
    assert list(shown["Context management"]) == [
        "Recorded (the provider's usage)", "As the agent sent it", "Provider compaction (trigger 8,000)",
        "ctxdesk clear_tool_results", "ctxdesk compaction",
    ]  # fmt: skip
    assert shown.to_dict("records") == whatif.totals_table(direct).drop(columns="Calls refused").to_dict(
        "records"
    )
    assert shown.loc[2, "Compactions"] >= 1  # the Codex session's 39,682-token prompt passes 8,000
    assert [_unescape(i.value) for i in at.info][-1] == whatif.headline(direct)
