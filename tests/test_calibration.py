"""The self-calibrating estimator (engine.calibration, engine.calibration_pairs): content kinds,
features that cover exactly what the estimator counts, a robust non-negative fit, held-out error by
conversation, never used when not better than the static estimator, and the per-user file."""

from __future__ import annotations

import io
import itertools
import json
import math
import os
import random
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.calibration import (
    CALIBRATION_ENV_VAR,
    FEATURES,
    Calibration,
    FeatureCounter,
    GrowthPair,
    calibrate,
    calibrated_tokenizer,
    calibration_path,
    classify_text,
    estimator_for,
    fit_key,
    fit_weights,
    load_calibration,
    model_family,
    save_calibration,
    static_weights,
)
from engine.calibration_pairs import source_growth_pairs, store_growth_pairs
from engine.cli import main
from engine.errors import ConfigError
from engine.importers import import_file
from engine.messages import assistant, tool_result, tool_use, user
from engine.session.targets import session_estimator
from engine.settings import resolve_model_settings
from engine.store import SessionStore
from engine.tokens import get_tokenizer
from tests.conftest import FIXTURES, SHARED_SESSIONS

CLAUDE_CODE = FIXTURES / "sessions" / "claude-code__fe5e1c67__head37.jsonl"
OPENHANDS = FIXTURES / "sessions" / "openhands__ponyc-4595__head12.jsonl"

KIND_CASES = [
    ("a sentence", "The user asked for a summary of the retry logic and its tests.", "prose"),
    ("Claude Code's numbered file lines", "     1\u2192import os\n     2\u2192\n     3\u2192print(os.getcwd())\n", "code"),
    ("python", "def sync(ledger):\n    return ledger.flush()\n\nclass Ledger:\n    pass\n", "code"),
    ("a JSON object", '{"path": "config.toml", "port": 8080, "hosts": ["a", "b"]}', "json"),
    ("a test log", "tests/a.py::test_1 PASSED\ntests/a.py::test_2 FAILED\ntests/a.py::test_3 PASSED\n", "logs"),
    ("ls -la", "total 0\ndrwxr-xr-x 2 kaito staff 64 .\ndrwxr-xr-x 7 kaito staff 224 ..\n", "logs"),
    ("Japanese", "リポジトリの構成を確認してから、テストを実行します。", "non_ascii"),
    ("empty", "", "prose"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "text", "kind"), KIND_CASES, ids=[c[0] for c in KIND_CASES])
def test_content_kinds(name: str, text: str, kind: str) -> None:
    assert classify_text(text) == kind


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5", "claude"),
        ("meta-llama/llama-4-maverick", "llama"),
        ("gpt-4o", "gpt"),
        (None, "unknown"),
    ],
)
def test_model_families(model: str | None, family: str) -> None:
    assert model_family(model) == family
    assert fit_key("anthropic", model) == f"anthropic:{family}"


def test_features_cover_exactly_what_the_static_estimator_counts() -> None:
    """framing + the static weights over the features == the estimator's own count (each text
    rounded up, hence at most one token per text apart)."""
    counter = FeatureCounter("anthropic")
    static = get_tokenizer("anthropic")
    weights = np.array([static_weights("anthropic")[f] for f in FEATURES])
    messages = [
        user("Read the config and tell me the port."),
        assistant("Reading it.", tool_use("toolu_01", "Read", file_path="/repo/config.toml")),
        tool_result("toolu_01", "     1\u2192[server]\n     2\u2192port = 8080\n" * 20),
    ]
    for message in messages:
        framing, features = counter.message(message)
        texts = 5  # at most: text, tool_use id, name, arguments, tool_result id + body
        assert 0 <= static.count_message(message) - (framing + float(features @ weights)) <= texts
    assert counter.message(messages[2])[1][FEATURES.index("tokens_code")] > 0


def synthetic_pairs(
    weights: dict[str, float], *, n: int = 240, groups: int = 4, outliers: float = 0.0, seed: int = 7
):
    """Growth pairs whose provider count follows ``weights`` exactly, a share of them with ~90
    tokens of unlogged harness text added (as Claude Code's transcripts show)."""
    rng = random.Random(seed)
    static = static_weights("anthropic")
    pairs = []
    for i in range(n):
        kind = rng.randrange(5)
        features = [0.0] * len(FEATURES)
        features[kind] = float(rng.randint(40, 900))
        features[-1] = features[kind] * rng.uniform(3.2, 4.4)
        framing = 20.0
        provider = framing + sum(weights[f] * x for f, x in zip(FEATURES, features, strict=True))
        if rng.random() < outliers:
            provider += 90
        ours = framing + sum(static[f] * x for f, x in zip(FEATURES, features, strict=True))
        pairs.append(
            GrowthPair(
                group=f"file{i % groups}", features=tuple(features), static=ours, provider=round(provider)
            )
        )
    return pairs


TRUE = {
    "tokens_prose": 1.05,
    "tokens_code": 1.30,
    "tokens_json": 1.10,
    "tokens_logs": 1.20,
    "tokens_non_ascii": 1.60,
    "chars": 0.0,
}


@pytest.mark.parametrize("outliers", [0.0, 0.25], ids=["clean", "a quarter with unlogged harness text"])
def test_the_fit_recovers_per_kind_weights_and_beats_the_static_estimator_held_out(outliers: float) -> None:
    fit = calibrate(synthetic_pairs(TRUE, outliers=outliers), "anthropic", "claude")
    for feature in ("tokens_prose", "tokens_code", "tokens_json", "tokens_logs"):
        assert fit.weights[feature] + 4 * fit.weights["chars"] == pytest.approx(TRUE[feature], rel=0.08)
    assert all(w >= 0 for w in fit.weights.values())
    held = fit.held_out
    assert held is not None and held.groups == 4 and held.pairs == 240
    assert held.calibrated_pct < held.static_pct / 2 and fit.usable


def test_a_fit_that_is_not_better_held_out_is_never_used() -> None:
    pairs = synthetic_pairs(static_weights("anthropic"), outliers=0.25)  # the static estimator is right
    fit = calibrate(pairs, "anthropic", "claude")
    assert not fit.usable
    book = Calibration().with_fit(fit)
    assert estimator_for("anthropic", "claude-sonnet-4-5", book) is get_tokenizer("anthropic")


def kind_pairs(kind: str, weight: float, n: int, *, seed: int) -> list[GrowthPair]:
    """``n`` pairs adding only text of ``kind``, whose provider count follows ``weight`` tokens per
    base-encoding token (the static estimator's characters weight kept)."""
    rng = random.Random(seed)
    static = static_weights("anthropic")
    column = FEATURES.index(f"tokens_{kind}")
    pairs = []
    for i in range(n):
        features = [0.0] * len(FEATURES)
        features[column] = float(rng.randint(200, 900))
        features[-1] = features[column] * 3.8
        ours = sum(static[f] * x for f, x in zip(FEATURES, features, strict=True))
        provider = ours + (weight - static[FEATURES[column]]) * features[column]
        pairs.append(GrowthPair(group=f"file{i % 3}", features=tuple(features), static=ours,
                                provider=round(provider)))  # fmt: skip
    return pairs


SHRINK_CASES = [
    # (name, pairs of the rare kind, how far its fitted weight may be from the static one's, toward the truth)
    ("fewer pairs than the prior: the static weight holds", 3, (0.0, 0.1)),
    ("several times the prior: the data's weight", 40, (0.9, 1.0)),
]  # fmt: skip


@pytest.mark.parametrize(("name", "seen", "moved"), SHRINK_CASES, ids=[c[0] for c in SHRINK_CASES])
def test_the_prior_weighs_as_many_pairs_of_a_kind_as_it_says(name: str, seen: int, moved: tuple) -> None:
    """SHRINK_PAIRS pseudo-pairs per kind, each as large as a pair that has the kind, in the same
    absolute error as the data: a kind in 3 pairs keeps the static weight however common the other
    kinds are, a kind in 40 pairs gets the weight its pairs show."""
    static = static_weights("anthropic")["tokens_non_ascii"]
    true = 1.6
    pairs = kind_pairs("prose", static, 300, seed=1) + kind_pairs("non_ascii", true, seen, seed=2)
    weights = fit_weights(pairs, "anthropic")
    share = (weights["tokens_non_ascii"] - static) / (true - static)
    assert moved[0] <= share <= moved[1] + 1e-6, (weights, share)
    assert weights["tokens_prose"] == pytest.approx(static, abs=0.01)


#: A pair's features: base-encoding tokens of each kind and characters, counts as the counter makes them.
pair_features = st.lists(st.integers(0, 5_000).map(float), min_size=len(FEATURES), max_size=len(FEATURES))


@given(
    st.lists(
        st.tuples(pair_features, st.integers(1, 20_000), st.floats(-2_000, 2_000)), min_size=1, max_size=30
    )
)
@settings(max_examples=40, deadline=None)
def test_the_fit_is_non_negative_and_finite_whatever_the_pairs(rows: list) -> None:
    pairs = [
        GrowthPair(group=f"g{i % 2}", features=tuple(f), static=provider + off, provider=provider)
        for i, (f, provider, off) in enumerate(rows)
    ]
    weights = fit_weights(pairs, "anthropic")
    assert set(weights) == set(FEATURES)
    assert all(math.isfinite(w) and w >= 0 for w in weights.values()), weights


@given(st.lists(st.tuples(pair_features, st.integers(1, 20_000)), min_size=1, max_size=30))
@settings(max_examples=40, deadline=None)
def test_pairs_the_static_estimator_counts_exactly_leave_its_weights(rows: list) -> None:
    """Data and prior agree: nothing pulls a weight away from the static one."""
    pairs = [GrowthPair(group="g", features=tuple(f), static=float(p), provider=p) for f, p in rows]
    weights = fit_weights(pairs, "anthropic")
    assert weights == pytest.approx(static_weights("anthropic"), abs=1e-4)


def test_one_conversation_has_nothing_to_hold_out_so_it_is_not_used() -> None:
    fit = calibrate(synthetic_pairs(TRUE, groups=1), "anthropic", "claude")
    assert fit.held_out is None and not fit.usable


def test_a_usable_fit_counts_with_its_weights_for_that_family_only() -> None:
    fit = calibrate(synthetic_pairs(TRUE), "anthropic", "claude")
    book = Calibration().with_fit(fit)
    tokenizer = estimator_for("anthropic", "claude-sonnet-4-5", book)
    assert tokenizer is not get_tokenizer("anthropic") and tokenizer.id == "anthropic" and not tokenizer.exact
    assert "calibrated" in tokenizer.info.description
    code = "def sync(ledger):\n    return ledger.flush()\n" * 30
    features = FeatureCounter("anthropic").text(code)
    assert tokenizer.count(code) == math.ceil(float(features @ np.array([fit.weights[f] for f in FEATURES])))
    assert estimator_for("anthropic", "some-other-model", book) is get_tokenizer("anthropic")  # other family
    assert estimator_for("o200k_base", "gpt-4o", book) is get_tokenizer(
        "o200k_base"
    )  # exact: never calibrated
    assert calibrated_tokenizer(fit).count(code) == tokenizer.count(code)


# -- pairs from real stored sessions ------------------------------------------------------------


def test_growth_pairs_of_a_real_claude_code_session_are_its_consecutive_calls(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        import_file(CLAUDE_CODE, store)
        pairs = store_growth_pairs([store])[("anthropic", "claude")]
        events = [e for s in store.list_sessions() for e in store.list_events(s.id, kind="request")]
        by_session = {}
        for s in store.list_sessions():
            calls = [e for e in store.list_events(s.id, kind="request") if e.usage and e.usage.prompt_tokens]
            by_session[s.id] = [
                (
                    b.usage.prompt_tokens - a.usage.prompt_tokens,
                    b.details["estimate_total"] - a.details["estimate_total"],
                )
                for a, b in itertools.pairwise(calls)
                if b.usage.prompt_tokens > a.usage.prompt_tokens
            ]
    expected = [pair for found in by_session.values() for pair in found]
    assert len(events) > len(pairs) == len(expected) > 5
    assert sorted((p.provider, p.static) for p in pairs) == sorted(expected)
    assert {p.group for p in pairs} == {f"{CLAUDE_CODE.name}:fe5e1c67-53e7-4862-81ae-d0e013e3270b"}
    assert all(sum(p.features) > 0 for p in pairs)


def test_a_compaction_between_two_calls_makes_no_pair(tmp_path: Path) -> None:
    from engine.events import ContextEvent, ProviderUsage

    tokenizer = get_tokenizer("anthropic")
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(
            model="claude-sonnet-4-5", provider="anthropic", tokenizer="anthropic", tokens_exact=False
        )
        store.append_messages(
            sid, [user("one"), assistant("two"), user("three"), assistant("four")], tokenizer=tokenizer
        )

        def call(sent: int, estimate: int, provider: int) -> None:
            store.record_event(sid, ContextEvent(kind="request", projected_tokens=estimate,
                                                 usage=ProviderUsage(input_tokens=provider),
                                                 details={"messages_sent": sent, "estimate_total": estimate}))  # fmt: skip

        call(1, 100, 110)
        call(3, 130, 145)
        store.record_event(sid, ContextEvent(kind="compaction", outcome="compacted"))
        call(3, 60, 70)
        pairs = store_growth_pairs([store])[("anthropic", "claude")]
    assert [(p.provider, p.static) for p in pairs] == [(35, 30)]


def test_calibrate_from_the_cli_stores_the_fit_and_shows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "calibration.json"
    monkeypatch.setenv(CALIBRATION_ENV_VAR, str(path))
    out = io.StringIO()
    assert main(["models", "--calibrate", str(CLAUDE_CODE), str(OPENHANDS)], out=out) == 0
    stored = load_calibration()
    assert path.is_file() and set(stored.fits) == {"anthropic:claude", "chars/4:llama"}
    assert stored.fits["anthropic:claude"].pairs > 5
    out = io.StringIO()
    assert main(["models", "--calibration"], out=out) == 0
    shown = out.getvalue()
    assert f"calibration file: {path}" in shown and "anthropic:claude" in shown and "tokens_code" in shown
    assert "no second conversation to hold out" in shown  # one file each: nothing held out, nothing used
    out = io.StringIO()
    assert main(["models", "claude-sonnet-4-5"], out=out) == 0
    assert "counted before the provider answers with: estimate for Claude" in out.getvalue()
    assert "calibrated" not in out.getvalue().rsplit("counted before", 1)[1]


def test_growth_pairs_come_from_databases_and_transcripts_alike(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    with SessionStore(db) as store:
        import_file(CLAUDE_CODE, store)
    from_db = source_growth_pairs([db])
    from_file = source_growth_pairs([CLAUDE_CODE])
    assert from_db.keys() == from_file.keys()
    assert [(p.provider, p.static, p.features) for p in from_db[("anthropic", "claude")]] == [
        (p.provider, p.static, p.features) for p in from_file[("anthropic", "claude")]
    ]


# -- the file ------------------------------------------------------------------------------------


def test_the_file_is_found_by_env_then_beside_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CALIBRATION_ENV_VAR, raising=False)
    settings = tmp_path / "conf" / "settings.toml"
    settings.parent.mkdir()
    settings.write_text("", encoding="utf-8")
    monkeypatch.setenv("CTXDESK_SETTINGS", str(settings))
    assert calibration_path() == settings.parent / "calibration.json"
    monkeypatch.setenv(CALIBRATION_ENV_VAR, str(tmp_path / "mine.json"))
    assert calibration_path() == tmp_path / "mine.json"


def test_a_round_trip_and_a_bad_file_is_a_typed_error_that_keeps_it(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    assert load_calibration(path) == Calibration()  # none yet
    book = Calibration().with_fit(calibrate(synthetic_pairs(TRUE), "anthropic", "claude"))
    save_calibration(book, path)
    assert load_calibration(path) == book
    path.write_text('{"version": 1, "fits": {"x": {"estimator": 3}}}', encoding="utf-8")
    with pytest.raises(ConfigError, match="invalid calibration file") as raised:
        load_calibration(path)
    assert raised.value.source == str(path)
    assert json.loads(path.read_text(encoding="utf-8"))["fits"]["x"] == {"estimator": 3}


def test_a_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "calibration.json"
    book = Calibration().with_fit(calibrate(synthetic_pairs(TRUE), "anthropic", "claude"))
    save_calibration(book, path)
    before = path.read_bytes()

    def full_disk(src: str, dst: str) -> None:  # the OS failing the write, not the code under test
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", full_disk)
    with pytest.raises(ConfigError, match="No space left on device"):
        save_calibration(Calibration(), path)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["calibration.json"], "no temp file left behind"


def test_the_session_manager_counts_with_the_usable_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "calibration.json"
    monkeypatch.setenv(CALIBRATION_ENV_VAR, str(path))
    settings = resolve_model_settings("claude-sonnet-4-5")
    assert session_estimator(settings) == (get_tokenizer("anthropic"), None)  # no file: static
    save_calibration(Calibration().with_fit(calibrate(synthetic_pairs(TRUE), "anthropic", "claude")), path)
    tokenizer, problem = session_estimator(settings)
    assert problem is None and "calibrated" in tokenizer.info.description
    path.write_text("not json", encoding="utf-8")
    tokenizer, problem = session_estimator(settings)
    assert tokenizer is get_tokenizer("anthropic")
    assert problem is not None and problem.kind == "degraded" and problem.outcome == "static estimator"
    out = io.StringIO()
    assert main(["models", "claude-sonnet-4-5"], out=out) == 0  # the model's settings still shown
    assert "the calibration is not used: invalid calibration file" in out.getvalue()


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_on_the_real_sessions_a_calibration_is_used_only_where_it_is_better_held_out() -> None:
    pairs = source_growth_pairs([SHARED_SESSIONS])
    llama = calibrate(pairs[("chars/4", "llama")], "chars/4", "llama")  # OpenHands on Llama 4 Maverick
    assert llama.held_out is not None and llama.held_out.groups == 3
    assert llama.held_out.calibrated_pct < 0.6 * llama.held_out.static_pct and llama.usable
    claude = calibrate(pairs[("anthropic", "claude")], "anthropic", "claude")
    assert claude.held_out is not None and claude.held_out.pairs >= 180
    book = Calibration().with_fit(claude).with_fit(llama)
    chosen = estimator_for("anthropic", "claude-sonnet-4-5", book)
    assert (chosen is get_tokenizer("anthropic")) is (not claude.usable)  # never worse than the static one


def test_calibrate_without_sources_fits_every_call_of_the_default_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "sessions.db"
    with SessionStore(db) as store:
        import_file(CLAUDE_CODE, store)
    monkeypatch.setenv("CTXDESK_DB", str(db))
    monkeypatch.setenv(CALIBRATION_ENV_VAR, str(tmp_path / "calibration.json"))
    assert main(["models", "--calibrate"], out=io.StringIO()) == 0
    assert load_calibration().fits["anthropic:claude"].pairs == len(
        source_growth_pairs([db])[("anthropic", "claude")]
    )


def test_a_session_manager_can_be_given_its_calibration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from engine.clients import ScriptedClient
    from engine.session import SessionManager

    path = tmp_path / "calibration.json"
    monkeypatch.setenv(CALIBRATION_ENV_VAR, str(path))
    usable = Calibration().with_fit(calibrate(synthetic_pairs(TRUE), "anthropic", "claude"))
    save_calibration(usable, path)
    with SessionStore(tmp_path / "s.db") as store:
        users = SessionManager(ScriptedClient(["hi"]), store)  # the user's file
        pinned = SessionManager(
            ScriptedClient(["hi"]), store, calibration=Calibration()
        )  # static, whatever the file
        users.run_turn("hello")
    assert "calibrated" in users.tokenizer.info.description
    assert pinned.tokenizer is get_tokenizer("anthropic")


def test_a_call_without_messages_sent_is_paired_by_the_reply_it_produced(tmp_path: Path) -> None:
    """As the proxy records calls: no ``messages_sent``, the reply's seq (engine.sent's rule)."""
    from engine.events import ContextEvent, ProviderUsage

    tokenizer = get_tokenizer("anthropic")
    with SessionStore(tmp_path / "s.db") as store:
        sid = store.create_session(
            model="claude-sonnet-4-5", provider="anthropic", tokenizer="anthropic", tokens_exact=False
        )
        messages = [user("one"), assistant("two"), user("three " * 50), assistant("four")]
        store.append_messages(sid, messages, tokenizer=tokenizer)
        for reply, estimate, provider in ((1, 100, 110), (3, 260, 290)):
            store.record_event(sid, ContextEvent(kind="request", projected_tokens=estimate, message_seq=reply,
                                                 usage=ProviderUsage(input_tokens=provider)))  # fmt: skip
        (pair,) = store_growth_pairs([store])[("anthropic", "claude")]
    counter = FeatureCounter("anthropic")
    added = counter.message(messages[1])[1] + counter.message(messages[2])[1]  # what the second call added
    assert (pair.provider, pair.static) == (180, 160) and pair.features == tuple(float(x) for x in added)


@pytest.mark.shared
@pytest.mark.skipif(not SHARED_SESSIONS.is_dir(), reason="../shared not found (fresh clone)")
def test_a_multiedit_of_box_drawing_lines_grows_the_claude_estimate_as_the_provider_counted(
    tmp_path: Path,
) -> None:
    """5c0375b4's MultiEdit of CLAUDE.md (an ``edits`` array with 303 box-drawing characters): the
    provider's count grew by 2,959; counted unescaped our estimate grew by 1,758 (41% short)."""
    path = SHARED_SESSIONS / "claude-code__d-kimuson_claude-code-viewer__5c0375b4.jsonl"
    with SessionStore(tmp_path / "s.db") as store:
        main_session = import_file(path, store).session_ids[0]
        rows = store.load_messages(main_session)
        (edit_seq,) = [
            r.seq for r in rows for b in r.message.blocks if b.type == "tool_use" and b.name == "MultiEdit"
        ]
        calls = [
            e for e in store.list_events(main_session, kind="request") if e.usage and e.usage.prompt_tokens
        ]
    before, after = next(
        (a, b)
        for a, b in itertools.pairwise(calls)
        if a.details["messages_sent"] <= edit_seq < b.details["messages_sent"]
    )
    provider = after.usage.prompt_tokens - before.usage.prompt_tokens
    ours = after.details["estimate_total"] - before.details["estimate_total"]
    assert provider == 2_959
    assert abs(ours - provider) / provider < 0.15, (ours, provider)
