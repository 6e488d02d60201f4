"""The dashboard's pure modules: stop explanations, re-projection, text paging, settings form, figures."""

from __future__ import annotations

import json
import math
from typing import Any

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dashboard import analysis, figures, settings_form, textview
from engine import FileChangeWatcher
from engine.errors import ConfigError
from engine.events import COMPONENT_LABELS
from engine.findings import FINDING_KINDS, Finding
from engine.settings import ModelSettings, Settings, resolve_model_settings
from tests.dashboard_fixture import HOSTILE_TEXT

# -- why did it stop -------------------------------------------------------------------------


def _guard(**over: object) -> dict[str, object]:
    event = {
        "outcome": "forced_final", "turn_index": 5, "model": "m", "provider": "p", "context_window": 13_500,
        "max_output_tokens": 1024, "buffer_tokens": 256, "limit_tokens": 12_220, "projected_tokens": 12_083,
        "system_tokens": 900, "skills_tokens": 240, "tools_tokens": 1440, "summary_tokens": 27,
        "conversation_tokens": 300, "tool_results_tokens": 9176, "message_seq": 22,
        "details": {"sources": {"context_window": "model:m (settings.toml)", "buffer_tokens": "builtin"}},
    }  # fmt: skip
    event.update(over)
    return event


PREVIOUS = {"system_tokens": 900, "skills_tokens": 240, "tools_tokens": 1440, "summary_tokens": 27,
            "conversation_tokens": 280, "tool_results_tokens": 6739}  # fmt: skip


def test_explain_stop_names_sources_growth_and_the_tipping_component() -> None:
    x = analysis.explain_stop(_guard(), PREVIOUS, tipping_bytes=6_400)
    lines = {line.field: line for line in x.limit_lines}
    assert lines["context_window"].value == 13_500
    assert lines["context_window"].source == "model:m (settings.toml)"
    assert lines["max_output_tokens"].source == "not recorded"
    assert x.formula == "limit = context_window 13,500 - max_output_tokens 1,024 - buffer_tokens 256 = 12,220"
    assert x.growth[0].component == "tool_results"
    assert x.growth[0].delta == 9176 - 6739
    assert x.tipping_component == "tool_results"
    assert x.tipping_seq == 22
    assert x.over_by == 12_083 - math.floor(12_220 * 0.98)


@pytest.mark.parametrize(
    ("limit", "source"),
    [
        (12_220, "context_window - max_output_tokens - buffer_tokens"),
        (10_000, "context_window - max_output_tokens - buffer_tokens (capped by context_budget)"),
    ],
)
def test_the_limit_says_it_was_capped_only_when_it_was(limit: int, source: str) -> None:
    x = analysis.explain_stop(_guard(limit_tokens=limit), PREVIOUS)
    assert {line.field: line for line in x.limit_lines}["limit_tokens"].source == source
    assert x.formula.endswith("= 12,220" if limit == 12_220 else "(capped by context_budget to 10,000)")


def _number_after(text: str, name: str) -> float:
    rest = text.split(name, 1)[1].split("(")[0]
    return float(rest.strip(" ≥≤").split()[0].replace(",", ""))


def test_suggested_window_and_output_reserve_would_have_avoided_the_stop() -> None:
    x = analysis.explain_stop(_guard(), PREVIOUS, tipping_bytes=6_400)
    by_name = {s.split()[0]: s for s in x.suggestions}
    window = int(_number_after(by_name["context_window"], "context_window"))
    assert math.floor(0.98 * (window - 1024 - 256)) > 12_083
    assert math.floor(0.98 * (window - 1 - 1024 - 256)) <= 12_083  # and it is the smallest such window
    max_out = int(_number_after(by_name["max_output_tokens"], "max_output_tokens"))
    assert math.floor(0.98 * (13_500 - max_out - 256)) > 12_083
    offload = int(_number_after(by_name["result_offload_threshold"], "result_offload_threshold"))
    assert offload < 6_400
    assert (
        by_name["compact_threshold"].startswith("compact_threshold 0.")
        and "previous request" in by_name["compact_threshold"]
    )


def test_explain_stop_without_recorded_values_suggests_nothing() -> None:
    x = analysis.explain_stop({"outcome": "skipped_provider", "details": {}}, None)
    assert x.suggestions == ()
    assert x.formula == "limit not recorded"
    assert x.over_by is None


def test_project_timeline_marks_where_edited_settings_compact_and_block() -> None:
    turns = pd.DataFrame(
        {"turn": [0, 1, 2], "system": [100] * 3, "skills": [0] * 3, "tools": [0] * 3, "summary": [0] * 3,
         "conversation": [100, 860, 900], "tool_results": [0] * 3}
    )  # fmt: skip
    settings = Settings(
        models={"m": ModelSettings(context_window=1_300, max_output_tokens=200, buffer_tokens=100)}
    )
    resolved = resolve_model_settings("m", "p", settings)
    p = analysis.project_timeline(turns, resolved)
    assert p is not None
    assert p.limit == 1_000
    assert p.compact_turns == (1,)  # 960 >= 95%
    assert p.block_turns == (2,)  # 1,000 >= 98%: the final turn (not listed as a compaction)
    assert "would compact at turn 1" in p.headline
    # What the guard saw before a compaction counts, not only what was sent after it.
    before_compaction = analysis.project_timeline(turns.iloc[:2], resolved, demand=[None, 990])
    assert before_compaction.block_turns == (1,)
    roomy = resolve_model_settings("m", "p", Settings(models={"m": ModelSettings(context_window=100_000)}))
    assert analysis.project_timeline(turns, roomy).headline.endswith(
        "would not compact, no forced final turn"
    )


# -- charts ----------------------------------------------------------------------------------


def _turns() -> pd.DataFrame:
    return pd.DataFrame(
        {"turn": [0, 1], "system": [10, 10], "skills": [0, 0], "tools": [5, 5], "summary": [0, 0],
         "conversation": [20, 40], "tool_results": [0, 100], "limit_tokens": [200, 200], "requests": [1, 2],
         "provider_input_tokens": [30, 40], "provider_cache_read_tokens": [0, 30],
         "provider_cache_creation_tokens": [5, 60], "provider_output_tokens": [10, 12]}
    )  # fmt: skip


def test_timeline_figure_stacks_components_with_limit_thresholds_markers_and_usage() -> None:
    marks = pd.DataFrame(
        {"turn": [1, 1], "kind": ["guard", "guard"], "outcome": ["rejected", "forced_final"],
         "projected_tokens": [13_470, 7_809]}
    )  # fmt: skip
    fig = figures.timeline_figure(_turns(), marks)
    names = [t.name for t in fig.data]
    present = [label for name, label in COMPONENT_LABELS.items() if name in _turns() and _turns()[name].any()]
    assert names[: len(present)] == present
    assert all(t.stackgroup == "components" for t in fig.data[: len(present)])
    assert {"Effective limit", "80% / 95% / 98% of limit", figures.PROVIDER_PARTS_LABEL} <= set(names)
    # One legend entry per group: the three thresholds, the provider's four parts.
    assert sum(t.showlegend is not False for t in fig.data) <= 12
    assert [a.text for a in fig.layout.annotations].count("Forced final turn") == 1
    refused = next(t for t in fig.data if t.name == "Refused: projected tokens")
    assert list(refused.y) == [13_470, 7_809]


def test_timeline_figure_marks_policy_edits_and_compactions_with_their_reasons() -> None:
    marks = pd.DataFrame(
        {"turn": [0, 1, 1], "kind": ["compaction", "compaction", "guard"],
         "outcome": ["compacted", "compacted", "forced_final"], "trigger": ["proxy_policy", "auto", "threshold"],
         "reason": ["2 more tool result(s) cleared: <prompt> over the trigger", "summarized 12 messages", "final"],
         "projected_tokens": [30, 150, 150]}
    )  # fmt: skip
    fig = figures.timeline_figure(_turns(), marks)
    labels = [a.text for a in fig.layout.annotations]
    assert labels.count(figures.POLICY_EDIT) == 1 and labels.count("Compaction") == 1
    (why,) = [t for t in fig.data if t.name == "Edits and compactions (hover for why)"]
    assert list(why.x) == [0, 1] and list(why.y) == [35, 155]  # on each step's total; the guard has its line
    assert "Policy edit · proxy_policy<br>2 more tool result(s) cleared: &lt;prompt&gt;" in why.text[0]
    assert "summarized 12 messages" in why.text[1]


def test_timeline_figure_leaves_out_components_a_session_never_had() -> None:
    turns = _turns().assign(skills=0, summary=0)
    names = [t.name for t in figures.timeline_figure(turns).data]
    assert COMPONENT_LABELS["skills"] not in names
    assert COMPONENT_LABELS["summary"] not in names


def test_timeline_figure_shows_the_projection_headline() -> None:
    p = analysis.Projection(limit=100, thresholds=(0.8, 0.95, 0.98), compact_turns=(1,), block_turns=())
    fig = figures.timeline_figure(_turns(), None, projection=p)
    texts = [a.text for a in fig.layout.annotations]
    assert "would compact (turn 1)" in texts
    assert any("Under edited settings: limit 100" in t for t in texts)


def test_session_strings_are_escaped_in_hover_text_and_titles() -> None:
    sessions = pd.DataFrame({"title": [HOSTILE_TEXT], "session_id": ["s"], "turns": [1], "peak_usage_pct": [5.0],
                             "forced_final": [0]})  # fmt: skip
    payload = (
        figures.sessions_scatter(sessions).to_json()
        + figures.timeline_figure(_turns(), title=HOSTILE_TEXT).to_json()
    )
    assert "<script>" not in payload
    assert "<img" not in payload
    assert "&lt;script&gt;" in payload
    tools = pd.DataFrame(
        {"name": ["<b>x</b>"], "category": ["mcp"], "server": ["<i>s</i>"], "tokens": [3], "calls": [0]}
    )
    assert "<b>" not in json.dumps(figures.tools_bar(tools).to_plotly_json(), default=str)


# -- text view -------------------------------------------------------------------------------


def test_page_of_clamps_and_reports_line_ranges() -> None:
    text = "\n".join(f"line {i}" for i in range(1, 26))
    page = textview.page_of(text, 3, 10)
    assert (page.number, page.pages, page.first_line, page.last_line, page.total_lines) == (3, 3, 21, 25, 25)
    assert page.text.splitlines()[0] == "line 21"
    assert textview.page_of(text, 99, 10).number == 3
    assert textview.page_of("", 1, 10).pages == 1
    with pytest.raises(ValueError, match="page size"):
        textview.page_of(text, 1, 0)


@given(st.lists(st.text(alphabet="ab\n", max_size=5), max_size=30), st.integers(1, 7))
def test_pages_cover_every_line_once(lines: list[str], size: int) -> None:
    text = "\n".join(lines)
    first = textview.page_of(text, 1, size)
    pages = [textview.page_of(text, n, size) for n in range(1, first.pages + 1)]
    assert "\n".join(p.text for p in pages) == "\n".join(text.splitlines())
    assert sum(p.last_line - p.first_line + 1 for p in pages) == len(text.splitlines())


def test_search_lines_and_page_for_line() -> None:
    text = "alpha\nBeta\ngamma beta"
    assert textview.search_lines(text, "beta") == [(2, "Beta"), (3, "gamma beta")]
    assert textview.search_lines(text, "beta", ignore_case=False) == [(3, "gamma beta")]
    assert textview.search_lines(text, "") == []
    assert textview.search_lines(text, "a", limit=1) == [(1, "alpha")]
    assert textview.page_for_line(21, 10) == 3


def test_hexdump_and_decode() -> None:
    dump = textview.hexdump(bytes(range(20)))
    assert dump.splitlines()[0].startswith("00000000  00 01 02")
    assert dump.splitlines()[1].startswith("00000010  10 11 12 13")
    assert textview.decode(b"\xff\xfe") is None
    assert textview.decode("é".encode()) == "é"


# -- settings form ---------------------------------------------------------------------------


def test_form_field_lists_cover_every_model_setting() -> None:
    assert {*settings_form.INT_FIELDS, *settings_form.FLOAT_FIELDS, "tokenizer"} == set(
        ModelSettings.model_fields
    )
    assert set(settings_form.EDITABLE_FIELDS) == set(ModelSettings.model_fields)


@pytest.mark.parametrize(
    ("field", "text", "value"),
    [("context_window", " 200_000 ", 200_000), ("context_window", "1,000", 1000), ("compact_threshold", "0.9", 0.9),
     ("context_window", "", None), ("tokenizer", "cl100k_base", "cl100k_base")],
)  # fmt: skip
def test_parse_field(field: str, text: str, value: object) -> None:
    assert settings_form.parse_field(field, text) == value


@pytest.mark.parametrize(("field", "text"), [("context_window", "12k"), ("compact_threshold", "high")])
def test_parse_field_names_the_field_it_rejects(field: str, text: str) -> None:
    with pytest.raises(ConfigError, match=field):
        settings_form.parse_field(field, text)


def test_with_level_sets_and_clears_levels_and_validate_reports_config_errors() -> None:
    draft = settings_form.with_level({}, "models", "gpt-4o", {"context_window": 5000, "buffer_tokens": None})
    assert draft == {"models": {"gpt-4o": {"context_window": 5000}}}
    assert settings_form.validate(draft).settings.models["gpt-4o"].context_window == 5000
    assert settings_form.with_level(draft, "models", "gpt-4o", {"context_window": None}) == {}
    bad = settings_form.with_level(
        draft, "defaults", None, {"compact_threshold": 0.99, "hard_block_threshold": 0.5}
    )
    result = settings_form.validate(bad, source="s.toml")
    assert result.settings is None
    assert "compact_threshold" in str(result.error)
    with pytest.raises(ConfigError, match="name is required"):
        settings_form.with_level({}, "providers", "", {"context_window": 1})
    assert settings_form.draft_of(settings_form.validate(draft).settings) == draft


def test_stop_events_prefer_the_refused_tool_result_that_forced_the_final_turn() -> None:
    guards = pd.DataFrame(
        {
            "seq": [1, 2, 3, 4, 5],
            "turn_index": [0, 1, 1, 2, 3],
            "outcome": ["ok", "rejected", "forced_final", "skipped_provider", "forced_final"],
            "details": [{}, {"final_forced": True, "tipping": {"tokens": 4891}}, {}, {}, {}],
        }
    )
    assert list(analysis.stop_events(guards)["seq"]) == [2, 4, 5]
    assert analysis.stop_events(guards.iloc[0:0]).empty


def test_a_refused_output_gets_an_offload_suggestion_from_its_estimated_size() -> None:
    event = _guard(
        outcome="rejected", projected_tokens=13_470, limit_tokens=11_648, context_window=16_000,
        max_output_tokens=4096, details={"tipping": {"tool_name": "read_file", "tokens": 4891}},
    )  # fmt: skip
    x = analysis.explain_stop(event, PREVIOUS)
    assert x.tipping_component == "tool_results"
    offload = next(s for s in x.suggestions if s.startswith("result_offload_threshold"))
    assert "about 19,564 bytes" in offload


def test_per_call_numbers_calls_and_moves_markers_to_the_next_call() -> None:
    calls = pd.DataFrame({"event_seq": [2, 5, 9], "turn": [0, 0, 1], "system": [1, 1, 1]})
    marks = pd.DataFrame({"event_seq": [6, 20], "turn": [0, 1], "kind": ["compaction", "guard"]})
    frame, moved = analysis.per_call(calls, marks)
    assert list(frame["turn"]) == [1, 2, 3]  # calls counted from 1, as the cost report counts them
    assert list(frame["real_turn"]) == [0, 0, 1]
    assert list(moved["turn"]) == [3, 3]


# -- the settings in force at a stop ---------------------------------------------------------

RECORDED = {
    "model": "m", "tokenizer": "anthropic", "note_threshold": 0.8, "tool_response_max_bytes": None,
    "result_offload_threshold": 4096, "context_window": 13_500,
    "fallbacks": [{"model": "small", "tokenizer": "chars/4", "tool_response_max_bytes": 2048}],
}  # fmt: skip


def _sources(*names: str) -> dict[str, object]:
    return {"details": {"sources": dict.fromkeys(names, "builtin"), "thresholds": {"note": 0.75}}}


def test_limit_lines_show_the_recorded_value_of_every_setting_the_guard_names() -> None:
    event = _guard(**_sources("tokenizer", "note_threshold", "tool_response_max_bytes", "result_offload_threshold", "context_budget"))  # fmt: skip
    lines = {
        line.field: line for line in analysis.explain_stop(event, PREVIOUS, settings=RECORDED).limit_lines
    }
    assert lines["tokenizer"].text == "anthropic"
    assert lines["note_threshold"].text == "0.75"  # the event's own threshold wins over the session's
    assert lines["tool_response_max_bytes"].text == "not set"
    assert lines["result_offload_threshold"].text == "4,096"
    assert lines["context_budget"].text == "not recorded"  # named as a source, but no value anywhere
    assert {line.source for line in lines.values() if line.field == "tokenizer"} == {"builtin"}


def test_a_stop_on_a_fallback_model_shows_the_fallbacks_settings() -> None:
    event = _guard(
        model="small", **_sources("tokenizer", "tool_response_max_bytes", "result_offload_threshold")
    )
    lines = {
        line.field: line for line in analysis.explain_stop(event, PREVIOUS, settings=RECORDED).limit_lines
    }
    assert lines["tokenizer"].text == "chars/4"
    assert lines["tool_response_max_bytes"].text == "2,048"
    assert lines["result_offload_threshold"].text == "not recorded"
    assert analysis.settings_for_model(RECORDED, "other") == {}
    assert analysis.settings_for_model(RECORDED, None) is RECORDED


@pytest.mark.parametrize(
    ("value", "unset", "text"),
    [(12_000, False, "12,000"), (0.95, False, "0.95"), ("o200k_base", False, "o200k_base"), (None, True, "not set"),
     (None, False, "not recorded"), (True, False, "true")],
)  # fmt: skip
def test_limit_line_text(value: object, unset: bool, text: str) -> None:
    assert analysis.LimitLine("f", value, "s", unset=unset).text == text


def test_a_refused_output_without_a_breakdown_grows_tool_results_by_the_output() -> None:
    no_breakdown = {
        f"{n}_tokens": None for n in ("system", "skills", "tools", "summary", "conversation", "tool_results")
    }
    event = _guard(outcome="rejected", details={"tipping": {"tool_name": "read_file", "tokens": 4891}}, **no_breakdown)  # fmt: skip
    x = analysis.explain_stop(event, PREVIOUS)
    assert x.growth_estimated
    assert x.growth[0].component == "tool_results"
    assert (x.growth[0].before, x.growth[0].after) == (6739, 6739 + 4891)
    assert all(g.delta == 0 for g in x.growth[1:])
    assert not analysis.explain_stop(_guard(), PREVIOUS).growth_estimated


def test_a_stop_at_the_first_request_names_no_tipping_message() -> None:
    x = analysis.explain_stop(_guard(outcome="skipped_provider"), None)
    assert x.first_request
    assert (x.tipping_seq, x.tipping_component, x.tipping_tokens) == (None, None, None)
    assert not analysis.explain_stop(_guard(), PREVIOUS).first_request


# -- findings --------------------------------------------------------------------------------


def _finding(kind: str, turn: int, tokens: int, title: str = "t", money: float | None = 0.01) -> Finding:
    return Finding(
        kind=kind, session_id="s", title=title, detail="d", message_seqs=(turn * 2,), turn_index=turn,
        tokens=tokens, context_tokens=tokens, requests=2, money=money, fix="clear_tool_results keep=3",
        exact=True, tokenizer="o200k_base",
    )  # fmt: skip


def test_every_finding_kind_has_a_label() -> None:
    assert set(analysis.FINDING_LABELS) == set(FINDING_KINDS)


def test_findings_frame_is_largest_savings_first_and_markers_group_by_turn() -> None:
    found = [
        _finding("stale_result", 1, 50),
        _finding("repeated_read", 3, 900),
        _finding("unused_result", 1, 400),
    ]
    frame = analysis.findings_frame(found)
    assert list(frame["tokens"]) == [900, 400, 50]
    assert list(frame["kind"]) == ["Repeated read", "Unused result", "Stale result"]
    assert tuple(frame.columns) == analysis.FINDING_COLUMNS
    marks = analysis.findings_markers(frame)
    assert list(marks["turn"]) == [1, 3]
    assert list(marks["count"]) == [2, 1]
    assert list(marks["tokens"]) == [450, 900]
    assert marks.iloc[0]["titles"] == ["t", "t"]
    assert analysis.findings_markers(analysis.findings_frame([])).empty


def test_findings_move_to_the_first_call_of_their_turn_on_the_call_axis() -> None:
    calls, _ = analysis.per_call(
        pd.DataFrame({"event_seq": [2, 5, 9, 11], "turn": [0, 0, 1, 3], "system": [1] * 4}), pd.DataFrame()
    )
    marks = analysis.findings_markers(
        analysis.findings_frame([_finding("stale_result", 1, 5), _finding("stale_result", 2, 5)])
    )
    moved = analysis.findings_per_call(marks, calls)
    assert list(moved["turn"]) == [3]  # turn 1 is call 3; turn 2 made no call


@pytest.mark.parametrize(
    ("finding", "text"),
    [
        (_finding("repeated_read", 1, 1234, money=0.0123), "Would save 1,234 input tokens over 2 request(s), about $0.0123"),
        (_finding("repeated_read", 1, 1234, money=None), "Would save 1,234 input tokens over 2 request(s)"),
        (_finding("lost_constraint", 1, 0, money=None), "Nothing to save in tokens: the fix keeps more in context"),
    ],
    ids=["priced", "unpriced", "lost-constraint"],
)  # fmt: skip
def test_savings_text(finding: Finding, text: str) -> None:
    assert analysis.savings_text(finding) == text


def test_timeline_marks_turns_with_findings_and_escapes_their_titles() -> None:
    found = [
        _finding("repeated_read", 1, 300, title=HOSTILE_TEXT),
        _finding("stale_result", 1, 20, title='cat "a.py"'),
    ]
    marks = analysis.findings_markers(analysis.findings_frame(found))
    fig = figures.timeline_figure(_turns(), None, findings=marks)
    trace = next(t for t in fig.data if t.name.startswith("Findings"))
    assert list(trace.x) == [1]
    assert trace.yaxis == "y2"
    hover = trace.text[0]
    assert hover.startswith("2 finding(s), 320 tokens to save")
    assert "<script>" not in hover and "&lt;script&gt;" in hover
    assert 'cat "a.py"' in hover  # plotly draws &quot; literally, so quotes stay quotes
    assert fig.layout.yaxis.range[1] > max(_turns()["limit_tokens"])  # headroom above the limit line
    assert not any(t.name.startswith("Findings") for t in figures.timeline_figure(_turns(), None).data)


def test_provider_usage_shows_the_whole_prompt_with_its_parts_one_click_away() -> None:
    fig = figures.timeline_figure(_turns(), None)
    by_name = {t.name: t for t in fig.data}
    assert list(by_name[figures.PROVIDER_PROMPT_LABEL].y) == [35, 130]
    parts = [t for t in fig.data if t.legendgroup == "provider_parts"]
    assert [t.visible for t in parts] == ["legendonly"] * len(parts) and len(parts) >= 2
    assert [t.showlegend is not False for t in parts].count(True) == 1


def test_components_bar_leaves_out_components_that_are_zero_everywhere() -> None:
    fig = figures.components_bar(
        {"before": {"conversation": 5, "tool_results": 9}, "after": {"conversation": 2}}
    )
    assert list(fig.data[0].x) == ["Conversation", "Tool results"]
    assert len(figures.components_bar({"before": {}}).data[0].x) == len(COMPONENT_LABELS)


# -- the what-if under the settings a session ran with ---------------------------------------


def _bundled_sessions() -> list[tuple[str, str]]:
    from dashboard import data

    paths = sorted(data.DEFAULT_DATA_DIR.glob("*.db"))
    if not paths:
        return []
    con = data.connect(paths)
    return [(str(r.db), str(r.session_id)) for r in data.sessions_overview(con).itertuples()]


@pytest.mark.skipif(not _bundled_sessions(), reason="no bundled sample data in data/ (ctxdesk demo)")
@pytest.mark.parametrize("unit", ["turn", "call"])
def test_reprojecting_under_the_recorded_settings_reproduces_what_every_bundled_session_did(
    unit: str,
) -> None:
    from dashboard import data

    con = data.connect(sorted(data.DEFAULT_DATA_DIR.glob("*.db")))
    checked = 0
    for db, sid in _bundled_sessions():
        steps, marks = data.timeline(con, db, sid), data.markers(con, db, sid)
        if unit == "call":
            steps, marks = analysis.per_call(data.requests(con, db, sid), marks)
        recorded = analysis.recorded_budget(data.session_settings(con, db, sid))
        assert recorded is not None, sid
        checks = data.events(con, db, sid, ("guard", "request"))
        projection = analysis.project_timeline(
            steps, recorded, unit=unit, demand=analysis.step_demand(checks, steps, unit)
        )
        happened = analysis.recorded_stops(marks)
        assert projection.compact_turns == happened.threshold_compactions, (sid, unit)
        # a step at the hard block compacts there (or forces the final turn when that cannot help)
        assert projection.block_turns[:1] == happened.hard_block_turns[:1], (sid, unit)
        checked += bool(happened.threshold_compactions or happened.hard_block_turns)
    assert checked >= 4  # compactions and a forced final turn are among the bundled sessions


# -- the settings file: last valid settings, merged disk edits, a Save that loses nothing -------

SETTINGS_TEXT = """
[defaults]
buffer_tokens = 512

[providers.anthropic]
max_output_tokens = 8000

[models."gpt-4o"]
context_window = 128000

[models."claude-sonnet-4"]
context_window = 200000

[models.m3]
context_window = 30000
"""


def test_an_invalid_edit_keeps_the_last_valid_settings_and_says_why(tmp_path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(SETTINGS_TEXT)
    first = settings_form.read_file(path)
    assert first.error is None and set(first.draft["models"]) == {"gpt-4o", "claude-sonnet-4", "m3"}
    path.write_text(SETTINGS_TEXT + "\n[models.broken\n")
    broken = settings_form.read_file(path, first)
    assert broken.error is not None and "invalid TOML" in str(broken.error)
    assert broken.draft == first.draft
    assert settings_form.read_file(path, broken) is broken  # unchanged file: not re-read


def test_save_writes_only_what_was_edited_and_keeps_every_other_entry(tmp_path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(SETTINGS_TEXT)
    loaded = settings_form.read_file(path)
    draft = settings_form.with_level(
        loaded.draft, "models", "m3", {"context_window": 32000, "buffer_tokens": 100}
    )
    outcome = settings_form.save_draft(draft, loaded)
    assert outcome.written, outcome.problem
    saved = settings_form.read_file(path).draft
    assert saved["models"]["m3"] == {"context_window": 32000, "buffer_tokens": 100}
    assert saved["models"]["gpt-4o"] == {"context_window": 128000}
    assert saved["models"]["claude-sonnet-4"] == {"context_window": 200000}
    assert saved["providers"] == {"anthropic": {"max_output_tokens": 8000}}
    assert saved["defaults"] == {"buffer_tokens": 512}


def test_save_refuses_a_file_changed_on_disk_and_names_the_change(tmp_path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(SETTINGS_TEXT)
    loaded = settings_form.read_file(path)
    draft = settings_form.with_level(loaded.draft, "models", "m3", {"context_window": 32000})
    path.write_text(SETTINGS_TEXT.replace("128000", "64000"))
    outcome = settings_form.save_draft(draft, loaded)
    assert not outcome.written
    assert outcome.changes == ("models.gpt-4o.context_window: 128000 -> 64000",)
    assert "64000" in path.read_text()  # not overwritten
    # Reloaded under the edit: the disk change and the unsaved edit are both kept.
    rebased = settings_form.rebase(draft, loaded.draft, settings_form.read_file(path).draft)
    assert rebased["models"]["gpt-4o"] == {"context_window": 64000}
    assert rebased["models"]["m3"] == {"context_window": 32000}


def test_save_refuses_to_replace_an_invalid_file(tmp_path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("[models.broken\n")
    loaded = settings_form.read_file(path)
    assert loaded.error is not None and loaded.draft == {}
    outcome = settings_form.save_draft({"models": {"m": {"context_window": 1000}}}, loaded)
    assert not outcome.written and "invalid" in outcome.problem
    assert path.read_text() == "[models.broken\n"


def test_a_cleared_field_is_an_edit_too() -> None:
    base = {"models": {"m": {"context_window": 1000, "buffer_tokens": 10}}}
    draft = settings_form.with_level(base, "models", "m", {"context_window": 1000})
    assert settings_form.edits_of(draft, base) == {("models", "m", "buffer_tokens"): None}
    assert settings_form.apply_edits(base, settings_form.edits_of(draft, base)) == draft


# -- recorded text on the page ---------------------------------------------------------------


@pytest.mark.parametrize(
    "hostile",
    [
        "![i](http://127.0.0.2:9/x.png)",
        "$x^2$",
        ":red[red]",
        ":material/home:",
        "**b** _i_ `c`",
        "<img src=x>",
    ],
)
def test_recorded_text_is_escaped_for_markdown(hostile: str) -> None:
    from dashboard import display

    escaped = display.md(hostile)
    unescaped = escaped.replace("\\", "").replace("\u200b", "")
    assert unescaped == hostile  # the same characters, each markup one escaped
    for mark in "![]$:*_`<":
        assert mark not in escaped.replace("\\" + mark, "")
    # No bare URL or address left for GFM to link: a zero-width space breaks each.
    plain = escaped.replace("\\", "")
    assert "://" not in plain and "www." not in plain.lower() and "e@" not in plain


@pytest.mark.parametrize("missing", [None, float("nan"), pd.NA, ""])
def test_missing_values_never_read_none_or_nan(missing: object) -> None:
    from dashboard import display

    assert display.text(missing) == display.MISSING
    assert display.number(missing) == "n/a"
    assert "nan" not in display.session_line("t", "sid", missing, "db")
    assert "None" not in display.session_line(missing, "sid", missing, "db")


def test_no_suggestion_asks_for_an_offload_threshold_already_in_force() -> None:
    common = {
        "projected": 13_473, "context_window": 16_000, "max_output_tokens": 4_096, "buffer_tokens": 256,
        "limit": 11_648, "hard_block_threshold": 0.98, "compact_threshold": 0.95, "previous_total": 8_551,
        "tipping_component": "tool_results", "tipping_tokens": 4_891, "tipping_bytes": None,
    }  # fmt: skip
    free = analysis.suggest_settings(**common)
    assert any(s.startswith("result_offload_threshold ≤ 19,563 bytes") for s in free)
    in_force = analysis.suggest_settings(**common, result_offload_threshold=16_384)
    offload = [s for s in in_force if s.startswith("result_offload_threshold")]
    assert offload == [
        "result_offload_threshold below 16,384 bytes (now 16,384): the output of about 4,891 tokens stayed "
        "under it; offloaded, it would have saved about 4,851 tokens"
    ]


def test_the_now_bar_fills_the_window_with_components_free_space_headroom_buffer_and_reserve() -> None:
    components = {"system": 1_000, "tools": 2_000, "conversation": 5_000, "tool_results": 1_000}
    fig = figures.context_now_bar(
        components, context_window=16_000, max_output_tokens=4_096, buffer_tokens=256, limit=11_648,
        compact_at=int(11_648 * 0.95),
    )  # fmt: skip
    parts = {t.name: t.x[0] for t in fig.data}
    assert sum(parts.values()) == 16_000
    assert parts["Free space"] == int(11_648 * 0.95) - 9_000
    assert parts["Auto-compact headroom"] == 11_648 - int(11_648 * 0.95)
    assert parts["Output reserve"] == 4_096 and parts["Safety buffer"] == 256
    assert fig.layout.title.text == "9,000 of the 11,648-token limit (77.3%) · window 16,000"
    unknown = figures.context_now_bar(
        components, context_window=None, max_output_tokens=None, buffer_tokens=None, limit=None,
        compact_at=None,
    )  # fmt: skip
    assert "no limit recorded" in unknown.layout.title.text
    assert {t.name for t in unknown.data} == {COMPONENT_LABELS[c] for c in components}


@pytest.mark.parametrize(
    ("window", "reserve", "buffer", "limit", "title", "total", "capped"),
    [
        pytest.param(None, None, None, 155_979, "9,000 of the 155,979-token limit (5.8%)", 155_979, 0,
                     id="a limit without a window is still the limit (#29: not 'no window')"),
        pytest.param(1_000_000, 4_096, 256, 20_000, "9,000 of the 20,000-token limit (45.0%) · window 1,000,000",
                     1_000_000, 1_000_000 - 4_096 - 256 - 20_000,
                     id="a context budget caps the limit: the share is of the limit, not the window"),
    ],
)  # fmt: skip
def test_the_now_bar_says_the_share_of_the_one_limit_every_page_shows(
    window, reserve, buffer, limit, title, total, capped
) -> None:
    components = {"system": 1_000, "tools": 2_000, "conversation": 5_000, "tool_results": 1_000}
    fig = figures.context_now_bar(
        components, context_window=window, max_output_tokens=reserve, buffer_tokens=buffer, limit=limit,
        compact_at=int(limit * 0.8),
    )  # fmt: skip
    parts = {t.name: t.x[0] for t in fig.data}
    assert fig.layout.title.text == title and sum(parts.values()) == total
    assert parts.get("Beyond the context budget", 0) == capped
    assert parts["Free space"] + parts["Auto-compact headroom"] + 9_000 == limit


def test_the_settings_file_watcher_counts_each_edit_replace_and_delete(tmp_path) -> None:
    path = tmp_path / "settings.toml"
    path.write_text("[defaults]\ncontext_window = 1000\n")

    def replace() -> None:  # how editors and save_settings write: a new file renamed over it
        (tmp_path / "new.toml").write_text("x = 1\n")
        (tmp_path / "new.toml").replace(path)

    with FileChangeWatcher(path) as watcher:
        assert watcher.generation == 0
        seen = 0
        for change in (
            lambda: path.write_text("[defaults]\ncontext_window = 2000\n"),  # edited in place
            replace,
            path.unlink,
        ):
            change()
            now = watcher.wait(seen, timeout=30)
            assert now > seen, "a change of the file was not counted"
            seen = watcher.wait(now + 1, timeout=0.2)  # the rest of the same burst
        (tmp_path / "other.toml").write_text("x = 1\n")  # another file in the folder is not ours
        assert watcher.wait(seen, timeout=0.5) == seen


@pytest.mark.parametrize(
    ("a", "b", "kind", "shown", "delta"),
    [
        (1000, 1500, "tokens", ("1,000", "1,500"), "+500, +50%"),
        (None, 1500, "tokens", ("—", "1,500"), "only one recorded"),
        (None, float("nan"), "tokens", ("—", "—"), ""),
        (0.01, 0.0125, "usd", ("$0.0100", "$0.0125"), "+0.0025"),
        (40.0, 55.5, "pct", ("40.0%", "55.5%"), "+15.5 pts"),
        ("gpt-4o", "gpt-4o", "text", ("gpt-4o", "gpt-4o"), ""),
    ],
)
def test_a_comparison_shows_both_values_the_difference_and_never_none(a, b, kind, shown, delta) -> None:
    result = analysis.compare({"x": a}, {"x": b}, (("x", "X", kind),))
    row = result.table.iloc[0]
    assert (row["A"], row["B"], row["difference (B − A)"], row["differs"]) == (*shown, delta, bool(delta))
    assert len(result.differences) == (1 if delta else 0)


def test_component_differences_are_told_largest_first_and_empty_components_left_out() -> None:
    result = analysis.compare_components(
        {"system": 900, "tool_results": 6000, "summary": 0},
        {"system": 1000, "tool_results": 2000, "summary": 0},
    )
    assert list(result.table["component"]) == ["System prompt", "Tool results"]
    assert result.differences[0].startswith(COMPONENT_LABELS["tool_results"])
    assert "-4,000, -67%" in result.differences[0]


def test_session_figures_price_and_cache_from_the_calls_and_leave_unknowns_missing() -> None:
    requests = pd.DataFrame({"seq": [1, 2], "projected_tokens": [100, 300], "tool_results_tokens": [0, 200]})
    calls = pd.DataFrame(
        {"event_seq": [1, 2], "input_tokens": [100, 20], "cache_read_tokens": [0, 280],
         "cache_write_5m_tokens": [100, 0], "cache_write_1h_tokens": [0, 0], "output_tokens": [10, 10],
         "total_usd": [0.01, 0.002], "lost_usd": [0.0, 0.0], "cache_cause": ["cold_start", None]}
    )  # fmt: skip
    figures = analysis.session_figures({"model": "m", "turns": 2}, requests, calls)
    assert (
        figures["calls"] == 2 and figures["cache_read_tokens"] == 280 and figures["cache_write_tokens"] == 100
    )
    assert figures["cache_hit_pct"] == round(100 * 280 / 500, 1) and figures["cache_rebuilds"] == 0
    assert figures["total_usd"] == pytest.approx(0.012)
    unpriced = analysis.session_figures({"model": "m"}, requests, calls.iloc[0:0])
    assert (
        unpriced["total_usd"] is None
        and unpriced["cache_hit_pct"] is None
        and unpriced["peak_tokens"] is None
    )
    assert analysis.components_of(analysis.peak_request(requests))["tool_results"] == 200


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({"a": "x", "b": "y"}, {"a": "x", "b": "y"}, id="distinct labels stay"),
        pytest.param(
            {"a": "x", "b": "x", "c": "y"}, {"a": "x · a", "b": "x · b", "c": "y"}, id="shared: key told"
        ),
        pytest.param(
            {"a": "x · a", "b": "x", "c": "x"}, {"a": "x · a", "b": "x · b", "c": "x · c"}, id="told once"
        ),
    ],
)
def test_distinct_labels_tell_apart_options_that_share_a_label(labels, expected) -> None:
    from dashboard import display

    assert display.distinct_labels(labels) == expected


def test_distinct_labels_number_what_even_the_key_cannot_tell_apart() -> None:
    from dashboard import display

    out = display.distinct_labels({1: "x", 2: "x", 3: "x"}, lambda _key: "same")
    assert out == {1: "x · same", 2: "x · same (2)", 3: "x · same (3)"} and len(set(out.values())) == 3


def test_the_harness_residual_is_its_own_labelled_component_and_each_step_says_its_basis() -> None:
    turns = _turns().assign(unattributed=[0, 1_500], components_basis=["estimate", "reconciled"])
    fig = figures.timeline_figure(turns)
    (residual,) = [t for t in fig.data if t.name == "Harness, unattributed"]
    assert list(residual.y) == [0, 1_500] and residual.stackgroup == "components"
    (steps,) = [t for t in fig.data if t.name == "Turn (click to inspect)"]
    assert [c[2] for c in steps.customdata] == ["estimate", "reconciled to the provider"]
    assert list(steps.y) == [35 + 0, 155 + 1_500]  # the residual counts in what was sent


def test_a_call_compared_is_measured_against_the_limit_the_timeline_shows() -> None:
    call = {"seq": 3, "limit_tokens": None, "context_window": 200_000, "max_output_tokens": 8_000,
            "buffer_tokens": 2_000, "projected_tokens": 1_000}  # fmt: skip
    assert analysis.call_figures(call, None)["limit_tokens"] == 190_000
    assert analysis.call_figures({**call, "limit_tokens": 50_000}, None)["limit_tokens"] == 50_000


def test_a_call_without_an_auto_compact_point_has_free_space_up_to_its_limit() -> None:
    """Codex before 0.49 had no point of its own (dashboard.analysis.compaction_point gives None)."""
    components = {"system": 1_000, "tools": 2_000, "conversation": 5_000, "tool_results": 1_000}
    fig = figures.context_now_bar(
        components, context_window=272_000, max_output_tokens=None, buffer_tokens=None, limit=272_000,
        compact_at=None,
    )  # fmt: skip
    parts = {t.name: t.x[0] for t in fig.data}
    assert parts["Free space"] == 272_000 - 9_000 and "Auto-compact headroom" not in parts


@pytest.mark.parametrize(
    ("agent", "window", "limit", "tokens", "rule"),
    [
        ({"source": "import:codex", "cli_version": "0.40.0"}, 272_000, 272_000, None,
         "Codex's own: Codex 0.40.0 compacts only at model_auto_compact_token_limit (not set)"),
        ({"source": "import:codex", "cli_version": "0.169.0"}, 258_400, 258_400, 244_800,
         "Codex's own: Codex's default: 90% of the window 272,000 (the file records 95% of it, 258,400)"),
        ({"source": "import:codex", "cli_version": "0.169.0", "agent_settings": {"model_auto_compact_token_limit": 20_000}},
         60_800, 60_800, 20_000, "Codex's own: model_auto_compact_token_limit = 20,000"),
        ({"source": "engine"}, 200_000, 180_000, 171_000, "ctxdesk's compact_threshold 0.95 × limit 180,000"),
        ({"source": "import:aider"}, 128_000, 128_000, 121_600,
         "Aider has no rule ctxdesk knows; ctxdesk's compact_threshold 0.95 × limit 128,000"),
    ],
)  # fmt: skip
def test_the_compaction_point_is_the_agents_own_else_ctxdesks(
    agent: dict[str, Any], window: int, limit: int, tokens: int | None, rule: str
) -> None:
    point = analysis.compaction_point(agent, window=window, limit=limit, compact_threshold=0.95)
    assert (point.tokens, point.rule) == (tokens, rule)
