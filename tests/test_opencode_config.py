"""OpenCode's and Kilo CLI's model limits read from their config (engine.importers.formats.opencode.config):
the window their automatic compaction worked with, on the real fixtures (the config each run used is kept
beside its database) and on config files written here."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from engine.importers import import_file
from engine.importers.formats.opencode.config import (
    ModelLimit,
    config_folder,
    jsonc_loads,
    model_limits,
)
from engine.store import SessionStore

REAL = Path(__file__).parent / "fixtures" / "real_agents"


def _limit(context: int, output: int, input_: int | None = None, reserved: int | None = None) -> ModelLimit:
    return ModelLimit(context=context, output=output, input=input_, reserved=reserved, path="x")


@pytest.mark.parametrize(
    ("limit", "usable"),
    [
        (_limit(10_700, 2_000), 8_700),  # the compact fixture's: it compacted at 8,728, not at 8,688
        (_limit(200_000, 64_000), 168_000),  # the reserve is capped at OUTPUT_TOKEN_MAX
        (_limit(200_000, 0), 168_000),  # no output limit: the cap itself
        (_limit(400_000, 128_000, input_=272_000), 252_000),  # an input limit less the compaction buffer
        (_limit(400_000, 128_000, input_=272_000, reserved=10_000), 262_000),
        (_limit(0, 2_000), 0),  # context 0: OpenCode never compacts
    ],
)
def test_the_point_opencode_compacts_at(limit: ModelLimit, usable: int) -> None:
    assert limit.usable_tokens() == usable


def test_jsonc_allows_comments_and_trailing_commas_but_not_inside_strings() -> None:
    text = (
        '{ // the provider\n "url": "http://x//y", /* a note */ "list": [1, 2, ], "o": {"s": "a,}\\"b",},\n}'
    )
    assert jsonc_loads(text) == {"url": "http://x//y", "list": [1, 2], "o": {"s": 'a,}"b'}}


def _config(folder: Path, name: str, limit: dict[str, int], model: str = "gpt-4o") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    body = {"provider": {"local": {"models": {model: {"limit": limit}}}}}
    (folder / name).write_text(json.dumps(body), encoding="utf-8")
    return folder / name


def test_the_config_folder_of_the_users_own_database_and_of_copied_ones(tmp_path: Path) -> None:
    home = tmp_path / "home"
    own = home / ".local" / "share" / "opencode" / "opencode.db"
    own.parent.mkdir(parents=True)
    own.touch()
    (home / ".config" / "opencode").mkdir(parents=True)
    assert config_folder(own, "opencode", env={}, home=home) == home / ".config" / "opencode"
    xdg = {"XDG_DATA_HOME": str(tmp_path / "d"), "XDG_CONFIG_HOME": str(tmp_path / "c")}
    moved = tmp_path / "d" / "opencode" / "opencode.db"
    moved.parent.mkdir(parents=True)
    moved.touch()
    (tmp_path / "c" / "opencode").mkdir(parents=True)
    assert config_folder(moved, "opencode", env=xdg, home=home) == tmp_path / "c" / "opencode"
    copied_home = tmp_path / "backup" / ".local" / "share" / "kilo" / "kilo.db"
    copied_home.parent.mkdir(parents=True)
    copied_home.touch()
    (tmp_path / "backup" / ".config" / "kilo").mkdir(parents=True)
    assert config_folder(copied_home, "kilo", env={}, home=home) == tmp_path / "backup" / ".config" / "kilo"
    side_by_side = REAL / "opencode" / "compact" / "data" / "opencode" / "opencode.db"
    assert (
        config_folder(side_by_side, "opencode", env={}, home=home)
        == side_by_side.parents[2] / "config" / "opencode"
    )
    assert config_folder(tmp_path / "lone" / "x" / "opencode.db", "opencode", env={}, home=home) is None


def test_a_projects_config_is_merged_over_the_global_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / ".local" / "share" / "opencode" / "opencode.db"
    db.parent.mkdir(parents=True)
    _config(home / ".config" / "opencode", "opencode.json", {"context": 50_000, "output": 4_000})
    project = tmp_path / "repo"
    (project / ".git").mkdir(parents=True)
    _config(project, "opencode.jsonc", {"context": 30_000, "output": 4_000})
    (project / "src").mkdir()
    alone = model_limits(db, "opencode", [], env={}, home=home)
    assert alone[("local", "gpt-4o")].usable_tokens() == 46_000
    assert alone[("local", "gpt-4o")].path.endswith("opencode.json")
    both = model_limits(db, "opencode", [str(project / "src")], env={}, home=home)
    assert both[("local", "gpt-4o")].usable_tokens() == 26_000
    assert both[("local", "gpt-4o")].path == str(project / "opencode.jsonc")


def test_an_unreadable_config_leaves_the_model_tables_limits(tmp_path: Path) -> None:
    home = tmp_path / "home"
    db = home / ".local" / "share" / "opencode" / "opencode.db"
    db.parent.mkdir(parents=True)
    folder = home / ".config" / "opencode"
    folder.mkdir(parents=True)
    (folder / "opencode.json").write_text('{"provider": ', encoding="utf-8")
    (folder / "config.json").write_text("[1, 2]", encoding="utf-8")
    assert model_limits(db, "opencode", [], env={}, home=home) == {}


def _limits_of(db_path: Path) -> dict[str, set[tuple[int | None, int | None]]]:
    conn = sqlite3.connect(db_path)
    try:
        rows = conn.execute(
            "SELECT kind, limit_tokens, context_window FROM context_events WHERE kind IN ('request', 'compaction')"
        ).fetchall()
    finally:
        conn.close()
    out: dict[str, set[tuple[int | None, int | None]]] = {}
    for kind, limit, window in rows:
        out.setdefault(kind, set()).add((limit, window))
    return out


@pytest.mark.parametrize(("app", "limit", "window"), [("opencode", 8_700, 10_700), ("kilo", 13_745, 15_745)])
def test_a_real_compaction_happens_at_the_limit_the_apps_config_set(
    tmp_path: Path, app: str, limit: int, window: int
) -> None:
    """The compact fixture's run set a small window in the app's config: every call's limit is its point
    (the call it compacted after passed it, the one before did not), not the 111,616 OpenCode would
    take from the model table."""
    source = REAL / app / "compact"
    with SessionStore(tmp_path / "kept.db") as store:
        import_file(source / "data" / app / f"{app}.db", store)
    limits = _limits_of(tmp_path / "kept.db")
    assert limits == {"request": {(limit, window)}, "compaction": {(limit, window)}}
    answers = json.loads((source / "answers.json").read_text(encoding="utf-8"))
    before, at = (answers[str(n)]["total_tokens"] for n in (2, 3))
    assert before < limit <= at  # the app compacted after call 3, not after call 2

    # the same database without its config: the model table's window, as before
    alone = tmp_path / "alone" / "x" / f"{app}.db"
    alone.parent.mkdir(parents=True)
    shutil.copyfile(source / "data" / app / f"{app}.db", alone)
    with SessionStore(tmp_path / "alone.db") as store:
        import_file(alone, store)
    # OpenCode's own point from the model table's gpt-4o: 128,000 - min(16,384, 32,000)
    assert _limits_of(tmp_path / "alone.db")["request"] == {(111_616, 128_000)}


def test_without_a_config_limit_the_point_is_opencodes_rule_on_the_model_tables_window(
    tmp_path: Path,
) -> None:
    """A Claude model that may write 64,000 tokens: OpenCode keeps at most 32,000 below its 200,000-token
    window (168,000), where the table's own reserve would make the limit 135,744."""
    from engine.importers.formats.opencode import apply_config_limits
    from engine.importers.formats.opencode.database import Rows
    from engine.importers.parsing.parsed import ParsedSession
    from engine.settings import limit_for_model

    session = ParsedSession(key="ses_1", messages=[], model="claude-sonnet-4-5")
    apply_config_limits(
        [session], Rows([], [], [], []), tmp_path / "x" / "opencode" / "opencode.db", "opencode"
    )
    assert session.context_window is None and session.output_reserve == 32_000
    limit = limit_for_model(session.model, file_output_reserve=session.output_reserve)
    assert limit is not None and limit.tokens == 168_000
    assert limit_for_model(session.model).tokens == 135_744  # the table's own reserve, as before


@pytest.mark.parametrize(
    ("app", "scenario", "far_below"),
    [("opencode", "overflow", True), ("kilo", "overflow", True), ("opencode", "compact", False)],
)
def test_the_why_of_a_compaction_far_below_the_limit_says_the_window_was_smaller(
    tmp_path: Path, app: str, scenario: str, far_below: bool
) -> None:
    """The overflow runs' provider refused ~8,600 tokens (its window: 8,000) while OpenCode's rule on the
    model table gives 111,616: the compaction's sentence says the window in force was smaller; the
    compact run, whose window the app's config gives, came to its limit and says nothing of the kind."""
    from engine.explain import explain_store

    with SessionStore(tmp_path / "s.db") as store:
        import_file(REAL / app / scenario / "data" / app / f"{app}.db", store)
        (session,) = store.list_sessions()
        (compaction,) = explain_store(store, [session.id]).sessions[0].compactions
    assert ("smaller window than that" in compaction.sentence) is far_below, compaction.sentence
    if far_below:
        assert "of the 111,616-token limit held for this model" in compaction.sentence
