"""Shared test set-up: paths to real data, and where the heavier checks may run.

- ``shared``-marked tests read the full files in ../shared; they run where it exists (CI
  always has it) and are deselected on a user's fresh clone, which has only tests/fixtures.
- ``browser``-marked tests need Debian's chromium at /usr/bin/chromium. Under CI
  (``CI=true``) a missing browser is a failure, never a silent skip.
- Lanes: ``browser``, ``apptest`` (Streamlit's AppTest, found by the module using it) and ``peer`` tests are
  also ``slow``, and so is every test named in ``SLOW_TESTS`` (measured over ~2 s); ``pytest -m "not slow"``
  is the fast lane for the inner loop, the README's command runs all. ``full_walk`` marks the AppTest walk over
  the imported real sessions beyond the representatives (tests/test_dashboard_app.py; CI runs it).
- Parallel: pyproject's addopts run the tests on pytest-xdist workers (``-n auto --dist loadgroup``; ``-n 0``
  for one process, e.g. with ``--pdb``); browser and peer tests each stay on one worker, and every other
  module's tests go to one worker together (``xdist_group``).
- ``peer("NAME")``-marked tests need a pinned peer tool of bench/peers.py (an agent CLI, ccusage,
  claude-cache-audit): skipped where it is not installed, a failure under CI (.ci/run installs them).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from bench.peers import NPM_PEERS, VENV_PEERS, npm_bin, venv_bin

# Property tests judge the product's answers, not the machine's speed: generation time is no failure
# (a loaded CI box made "input generation is slow" health checks fail on correct code).
settings.register_profile("ctxdesk", suppress_health_check=[HealthCheck.too_slow], deadline=None)
settings.load_profile("ctxdesk")

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
SHARED = Path(os.environ.get("CTXDESK_SHARED_DIR", ROOT.parent / "shared"))
SHARED_SESSIONS = SHARED / "sessions"
CHROMIUM = Path(os.environ.get("CTXDESK_CHROMIUM", "/usr/bin/chromium"))
IN_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


#: Tests that each took over ~2 s (``--durations`` of the fast lane on the 2-core dev box, 2026-11-28: 3 s
#: and more there under load), by module and function (every parametrized case): slow, so the fast lane stays
#: under 5 minutes. CI still runs them; tests/test_lanes.py checks that every name here is a test.
SLOW_TESTS: dict[str, frozenset[str]] = {
    "test_architecture.py": frozenset({"test_no_module_or_class_is_past_one_concept_without_saying_why"}),
    "test_budget.py": frozenset({"test_history_totals_equal_count_messages"}),
    "test_cli.py": frozenset(
        {"test_dashboard_serves_on_localhost", "test_help_and_version_work_as_a_subprocess"}
    ),
    "test_compaction_linear.py": frozenset(
        {
            "test_a_prefiltered_pattern_finds_what_its_regex_finds",
            "test_pinned_tokens_before_is_pinned_in_at_every_cut",
            "test_searching_the_sentences_of_a_text_finds_what_the_regex_finds",
        }
    ),
    "test_components.py": frozenset({"test_running_totals_measure_as_the_messages_do"}),
    "test_convert.py": frozenset(
        {
            "test_anthropic_dicts_survive_a_round_trip",
            "test_anthropic_meta_is_plain_json",
            "test_anthropic_native_messages_survive_a_round_trip",
            "test_openai_dicts_survive_a_round_trip",
            "test_openai_messages_convert_to_anthropic_and_back_keeping_content",
            "test_openai_native_messages_survive_a_round_trip",
        }
    ),
    "test_dashboard_actions.py": frozenset(
        {
            "test_preview_writes_nothing_and_apply_writes_a_snapshot",
            "test_restore_and_findings_cross_the_process_boundary",
        }
    ),
    "test_dashboard_data.py": frozenset(
        {
            "test_session_findings_phrase_fixes_against_the_users_settings",
            "test_session_findings_read_the_database_read_only",
        }
    ),
    "test_dashboard_process.py": frozenset({"test_sigterm_stops_the_server_it_started"}),
    "test_findings.py": frozenset({"test_read_findings_never_charge_one_result_twice_in_one_request"}),
    "test_fuzz_importers.py": frozenset(
        {"test_hostile_transcripts_fail_typed_naming_the_file_and_leave_no_partial_database"}
    ),
    "test_import_pipeline.py": frozenset(
        {"test_a_folder_with_a_file_that_cannot_be_read_imports_the_rest_and_says_why"}
    ),
    "test_import_real_clients.py": frozenset(
        {"test_a_damaged_codex_or_gemini_line_imports_or_says_what_is_wrong"}
    ),
    "test_import_scale.py": frozenset(
        {
            "test_dashboard_from_opens_at_once_imports_in_the_background_then_follows",
            "test_parallel_import_of_every_real_agent_fixture_equals_the_serial_one",
        }
    ),
    "test_limit.py": frozenset({"test_the_sql_rule_equals_the_python_rule_in_sqlite_and_duckdb"}),
    "test_messages.py": frozenset({"test_messages_survive_a_json_round_trip"}),
    "test_offload.py": frozenset(
        {"test_a_twenty_megabyte_output_is_stored_once_and_previewed_from_its_head"}
    ),
    "test_otel_cli.py": frozenset({"test_a_second_run_on_the_same_database_adds_to_it"}),
    "test_proxy.py": frozenset({"test_the_command_prints_where_it_listens_and_the_environment_line"}),
    "test_proxy_edges.py": frozenset(
        {"test_a_settings_file_rewritten_badly_keeps_the_last_good_settings_and_no_request_is_dropped"}
    ),
    "test_proxy_policies_openai.py": frozenset({"test_responses_offloaded_output_is_read_back_by_the_proxy"}),
    "test_proxy_relay.py": frozenset(
        {"test_an_upstream_that_refuses_a_large_body_early_still_gets_the_agent_an_answer"}
    ),
    "test_proxy_websocket.py": frozenset({"test_an_agent_leaving_mid_answer_is_an_interrupted_call"}),
    "test_proxy_wire.py": frozenset(
        {
            "test_any_request_body_is_read_without_raising",
            "test_the_policies_plan_any_request_body_without_raising",
            "test_the_recorder_writes_any_exchange_without_raising",
        }
    ),
    "test_reliability_output.py": frozenset(
        {
            "test_a_full_disk_leaves_the_old_report_and_no_temporary_file",
            "test_dash_means_stdout",
            "test_non_regular_files_are_refused_and_left_alone",
        }
    ),
    "test_reliability_report_stream.py": frozenset({"test_the_streamed_json_is_the_whole_reports_json"}),
    "test_reliability_request_cache.py": frozenset(
        {"test_cached_requests_equal_requests_built_from_scratch"}
    ),
    "test_reliability_scale.py": frozenset(
        {"test_a_1gb_file_that_is_no_transcript_is_refused_from_its_head"}
    ),
    "test_sent.py": frozenset({"test_the_dashboard_and_the_engine_agree_on_what_each_bundled_request_sent"}),
    "test_store.py": frozenset(
        {
            "test_messages_round_trip_exactly",
            "test_provider_messages_survive_the_store",
            "test_snapshots_round_trip_exactly",
            "test_turn_indices_continue_across_appends",
        }
    ),
    "test_store_pg_dashboard.py": frozenset({"test_compaction_from_the_dashboard_writes_through_the_engine"}),
    "test_store_postgres.py": frozenset(
        {"test_a_server_restart_mid_session_loses_nothing_committed_and_the_store_reconnects"}
    ),
    # A refused connection waits out the pool"s 10 s connect timeout, twice.
    "test_store_urls.py": frozenset({"test_a_connection_error_quoting_the_dsn_hides_its_password"}),
    "test_turns.py": frozenset(
        {
            "test_a_safe_boundary_never_orphans_a_tool_result",
            "test_every_safe_cut_is_a_turn_start",
            "test_safe_cut_points_are_exactly_the_safe_cuts",
        }
    ),
    "test_why.py": frozenset({"test_any_session_gets_an_ending_in_the_vocabulary_and_valid_json"}),
    "test_why_cli.py": frozenset({"test_no_fixture_session_ends_unknown"}),
}


def is_listed_slow(item: pytest.Item) -> bool:
    """Whether ``item`` is one of the ``SLOW_TESTS`` (any of its parametrized cases)."""
    names = SLOW_TESTS.get(Path(str(getattr(item, "fspath", ""))).name, frozenset())
    return getattr(item, "originalname", item.name) in names


def xdist_group(item: pytest.Item) -> str:
    """The pytest-xdist group whose tests one worker runs one after another (``--dist loadgroup``).

    A test shares a group with the tests it shares a module-scoped fixture with, and no wider: a worker
    handed a module's tests one by one interleaves them with other modules' and tears the module's fixtures
    down between them (tests/test_bench.py's 7-minute quick bench run was built once per test).

    - ``browser`` tests: the dashboard server they share (a ``served*`` module fixture: one group per
      server, so the two workers share the browser tests); a test that starts its own server is its own
      group. Each server runs on a free port over its own temporary folder: nothing is shared between groups.
    - A test marked ``xdist_group(name)`` itself: that group (the parts of the long browser walk, each over
      its own server, so the two workers share it).
    - Any other test, ``peer`` tests included: its module. A real agent CLI run uses a fixed scratch folder
      per scenario under /tmp/ctxdesk-real-agents (the paths recorded in its files must not vary); the
      scenarios a module runs are its own (tests/test_lanes.py checks no two modules run the same one).
    """
    module = item.nodeid.split("::", 1)[0]
    own = item.get_closest_marker("xdist_group")
    if own is not None:  # the test's own group (a part of the browser walk)
        return str(own.args[0] if own.args else own.kwargs["name"])
    if "browser" in item.keywords:
        servers = sorted(name for name in item.fixturenames if name.startswith("served"))
        return f"browser:{servers[0]}" if servers else f"browser:{item.nodeid}"
    return module


#: A rough cost of one test by lane, in seconds (the durations of the 2-core box, 2026-11-28): only the
#: order of the groups depends on it.
LANE_COST_S = {"browser": 60.0, "apptest": 10.0, "peer": 60.0, "slow": 5.0}
FAST_TEST_S = 0.2


def item_cost(item: pytest.Item) -> float:
    """A test's expected seconds by its lane (the most expensive lane it is in)."""
    return max((cost for lane, cost in LANE_COST_S.items() if lane in item.keywords), default=FAST_TEST_S)


def declared_cost(item: pytest.Item) -> float:
    """The seconds a ``cost(seconds)`` mark says the test's group takes (0 without one): a fixture shared by
    the group (the quick bench run) or one long walk that the lane's cost does not foresee."""
    mark = item.get_closest_marker("cost")
    return float(mark.args[0]) if mark else 0.0


def longest_groups_first(items: list[pytest.Item], groups: list[str]) -> list[pytest.Item]:
    """``items`` with whole groups in order of their expected cost, longest first (each group's tests in
    their own order). With pyproject's ``--no-loadscope-reorder`` the workers take groups in this order: a
    long group started last (the browser walk, the quick bench run) left one worker alone for its length
    while the other sat idle (xdist's own order is by number of tests)."""
    summed: dict[str, float] = {}
    declared: dict[str, float] = {}
    for item, group in zip(items, groups, strict=True):
        summed[group] = summed.get(group, 0.0) + item_cost(item)
        declared[group] = max(declared.get(group, 0.0), declared_cost(item))
    cost = {group: max(summed[group], declared[group]) for group in summed}
    first_seen = {group: i for i, group in reversed(list(enumerate(groups)))}
    order = sorted(range(len(items)), key=lambda i: (-cost[groups[i]], first_seen[groups[i]], i))
    return [items[i] for i in order]


@pytest.fixture(autouse=True)
def _no_real_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never talk to a real provider: drop any key from the developer's environment."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("CONTEXT_DEBUG", raising=False)


@pytest.fixture
def shared_sessions() -> Path:
    return SHARED_SESSIONS


@pytest.fixture
def fixtures_dir() -> Path:
    return FIXTURES


# First: pytest-xdist's own hook (registered after this file) reads the xdist_group marks set here.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_shared = pytest.mark.skipif(
        True, reason=f"../shared not found at {SHARED} (fresh clone): full-file check"
    )
    browser_missing = not (CHROMIUM.exists() and shutil.which(str(CHROMIUM)))
    apptest_modules: dict[str, bool] = {}
    groups: list[str] = []
    for item in items:
        module = str(getattr(item, "fspath", ""))
        if module not in apptest_modules:
            apptest_modules[module] = module.endswith(".py") and "AppTest" in Path(module).read_text(
                encoding="utf-8"
            )
        if apptest_modules[module]:
            item.add_marker(pytest.mark.apptest)
        if any(m in item.keywords for m in ("browser", "apptest", "peer")) or is_listed_slow(item):
            item.add_marker(pytest.mark.slow)
        groups.append(xdist_group(item))
        item.add_marker(pytest.mark.xdist_group(groups[-1]))
        if "shared" in item.keywords and not SHARED_SESSIONS.is_dir():
            if IN_CI:
                raise pytest.UsageError(f"CI must have ../shared at {SHARED}")
            item.add_marker(no_shared)
        if "browser" in item.keywords and browser_missing:
            if IN_CI:
                raise pytest.UsageError(f"CI must have chromium at {CHROMIUM} (.ci/run installs it)")
            item.add_marker(
                pytest.mark.skipif(True, reason=f"no chromium at {CHROMIUM}: apt-get install -y chromium")
            )
        for marker in item.iter_markers("peer"):
            (name,) = marker.args
            if name not in NPM_PEERS and name not in VENV_PEERS:
                raise pytest.UsageError(f"{item.nodeid}: unknown peer {name!r} (bench/peers.py lists them)")
            if (npm_bin(name) if name in NPM_PEERS else venv_bin(name)) is None:
                if IN_CI:
                    raise pytest.UsageError(
                        f"CI must have {name} (.ci/run runs python -m bench.peers install)"
                    )
                item.add_marker(
                    pytest.mark.skipif(True, reason=f"{name} not installed: python -m bench.peers install")
                )
    items[:] = longest_groups_first(items, groups)
