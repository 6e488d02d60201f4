"""Bad input gets a typed error that names the problem, and nothing stored changes.

Every database case hashes the file (and its WAL) before and after; every settings case hashes
the settings file. Errors are asserted by type and by what their message says.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from bench.corpus import generate_history
from dashboard.data import connect as dashboard_connect
from engine.deferral import ToolRegistry, ToolSpec, deferral_budget
from engine.errors import (
    ConfigError,
    ImportFormatError,
    NotADatabaseError,
    SchemaVersionError,
    StoreError,
    ValidationError,
)
from engine.events import ContextEvent
from engine.guard import ContextGuard
from engine.importers import import_file
from engine.settings import load_settings, resolve_model_settings
from engine.store import SCHEMA_VERSION, SessionStore
from engine.tokens import get_tokenizer
from tests.reliability.checks import file_digest

MODEL = "gpt-4.1"
ROOT = Path(__file__).resolve().parents[1]
TRANSCRIPT = ROOT / "tests" / "fixtures" / "sessions" / "claude-code__5c0375b4__head23.jsonl"
BIG_OUTPUT_BYTES = 100_000_000
#: Offloading may hold a few copies of the output at once (text, UTF-8 bytes, the decoded check),
#: never more than this many times its size.
BIG_OUTPUT_MEMORY_FACTOR = 6


def digest(db: Path) -> str:
    """The database file and its WAL's frames. An empty -wal (and -shm) may appear: SQLite makes
    them when it opens a WAL-mode file read-only to look at it, and they hold nothing."""
    wal = Path(f"{db}-wal")
    return file_digest([db, wal] if wal.exists() and wal.stat().st_size else [db])


@pytest.fixture(scope="module")
def good_db(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A closed, checkpointed database with messages, an event and a snapshot."""
    db = tmp_path_factory.mktemp("good") / "good.db"
    with SessionStore(db) as store:
        session_id = store.create_session(title="good", model=MODEL, tokenizer="chars/4")
        store.append_messages(session_id, generate_history(60), tokenizer=get_tokenizer("chars/4"))
        store.record_event(session_id, ContextEvent(kind="note", details={"ok": True}))
        store.write_snapshot(
            session_id, generate_history(6), through_seq=5, summary="s", tokens=100, strategy="truncate"
        )
    return db, session_id


def copy_db(good_db: tuple[Path, str], tmp_path: Path) -> Path:
    target = tmp_path / "copy.db"
    shutil.copy(good_db[0], target)
    return target


def open_and_read(db: Path, session_id: str, *, read_only: bool) -> None:
    with SessionStore(db, read_only=read_only) as store:
        store.get_session(session_id)
        store.load_transcript(session_id)
        store.list_events(session_id)
        store.latest_snapshot(session_id)


# -- files that are not ctxdesk databases ----------------------------------------------------------

NOT_SQLITE = {
    "text": b"this is a README, not a database\n" * 20,
    "json": b'{"sessions": []}',
    "random": bytes(range(256)) * 64,
    "sqlite_magic_then_junk": b"SQLite format 3\x00" + b"\xff" * 200,
}


@pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])
@pytest.mark.parametrize("content", NOT_SQLITE.values(), ids=NOT_SQLITE.keys())
def test_a_file_that_is_not_sqlite_is_refused_untouched(
    tmp_path: Path, content: bytes, read_only: bool
) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(content)
    before = digest(path)
    with pytest.raises(NotADatabaseError) as err:
        SessionStore(path, read_only=read_only)
    assert "SQLite" in str(err.value) and str(path) in str(err.value)
    assert err.value.path == str(path)
    assert digest(path) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.db"]


def test_the_dashboard_data_layer_refuses_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "notes.db"
    path.write_bytes(NOT_SQLITE["text"])
    before = digest(path)
    with pytest.raises(NotADatabaseError) as err:
        dashboard_connect([path])
    assert str(path) in str(err.value)
    assert digest(path) == before


def test_a_sqlite_file_of_another_application_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
    conn.commit()
    conn.close()
    before = digest(path)
    with pytest.raises(NotADatabaseError, match="without the ctxdesk application id"):
        SessionStore(path)
    assert digest(path) == before


@pytest.mark.parametrize("keep", [0.5, 0.9, 4096, 100], ids=["half", "90pct", "one_page", "header"])
@pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])
def test_a_truncated_database_is_refused_untouched(
    good_db: tuple[Path, str], tmp_path: Path, keep: float, read_only: bool
) -> None:
    db = copy_db(good_db, tmp_path)
    size = db.stat().st_size
    with open(db, "r+b") as fh:
        fh.truncate(int(size * keep) if isinstance(keep, float) else keep)
    before = digest(db)
    with pytest.raises(NotADatabaseError) as err:
        open_and_read(db, good_db[1], read_only=read_only)
    assert "malformed" in str(err.value) and str(db) in str(err.value)
    assert digest(db) == before


@pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])
def test_a_database_from_a_newer_schema_is_refused_untouched(
    good_db: tuple[Path, str], tmp_path: Path, read_only: bool
) -> None:
    db = copy_db(good_db, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 3}")
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(SchemaVersionError) as err:
        SessionStore(db, read_only=read_only)
    assert (err.value.found, err.value.supported) == (SCHEMA_VERSION + 3, SCHEMA_VERSION)
    assert f"version {SCHEMA_VERSION + 3} is newer" in str(err.value)
    assert digest(db) == before


# -- damaged rows ----------------------------------------------------------------------------------

MALFORMED_ROWS = {
    "content_cut_short": (
        'UPDATE messages SET content_json = \'[{"type": "text", "te\' WHERE seq = 7',
        "malformed stored content in messages row 8",
    ),
    "content_unknown_block": (
        'UPDATE messages SET content_json = \'[{"type": "hologram"}]\' WHERE seq = 7',
        "malformed stored content in messages row 8",
    ),
    "message_meta": (
        "UPDATE messages SET meta_json = '{oops' WHERE seq = 3",
        "malformed JSON in messages row 4",
    ),
    "event_details": (
        "UPDATE context_events SET details_json = '{oops'",
        "malformed JSON in context_events row 1",
    ),
    "snapshot_messages": (
        'UPDATE session_snapshots SET messages_json = \'[{"role": "user"\'',
        "malformed JSON in session_snapshots row 1",
    ),
    "snapshot_not_a_list": (
        'UPDATE session_snapshots SET messages_json = \'{"role": "user"}\'',
        "expected a list of messages",
    ),
    "session_settings": (
        "UPDATE sessions SET settings_json = 'nope'",
        "malformed JSON in sessions.settings_json",
    ),
    "invalid_utf8_content": (
        "UPDATE messages SET content_json = CAST(X'22FFFE22' AS TEXT) WHERE seq = 2",
        "text that is not UTF-8 in column content_json",
    ),
}


@pytest.mark.parametrize("read_only", [False, True], ids=["rw", "ro"])
@pytest.mark.parametrize(("sql", "message"), MALFORMED_ROWS.values(), ids=MALFORMED_ROWS.keys())
def test_a_malformed_row_raises_a_store_error_naming_it_and_changes_nothing(
    good_db: tuple[Path, str], tmp_path: Path, sql: str, message: str, read_only: bool
) -> None:
    db = copy_db(good_db, tmp_path)
    conn = sqlite3.connect(db)
    conn.execute(sql)
    conn.commit()
    conn.close()
    before = digest(db)
    with pytest.raises(StoreError) as err:
        open_and_read(db, good_db[1], read_only=read_only)
    assert type(err.value) is StoreError
    assert message in str(err.value)
    assert digest(db) == before


# -- settings --------------------------------------------------------------------------------------

BAD_SETTINGS = {
    "window_as_string": (
        '[defaults]\ncontext_window = "big"\n',
        "defaults.context_window: must be an integer",
    ),
    "negative_window": ("[defaults]\ncontext_window = -5\n", "defaults.context_window: must be > 0, got -5"),
    "zero_model_window": (
        '[models."gpt-4.1"]\ncontext_window = 0\n',
        'models."gpt-4.1".context_window: must be > 0',
    ),
    "negative_buffer": ("[defaults]\nbuffer_tokens = -1\n", "defaults.buffer_tokens"),
    "bool_for_int": (
        "[defaults]\nmax_output_tokens = true\n",
        "defaults.max_output_tokens: must be an integer",
    ),
    "float_for_int": ("[defaults]\ncontext_window = 1.5\n", "defaults.context_window: must be an integer"),
    "share_over_one": ("compact_trigger = 2.0\n", "compact_trigger: must be <= 1"),
    "thresholds_out_of_order": (
        "[defaults]\nnote_threshold = 0.9\ncompact_threshold = 0.5\n",
        "defaults.note_threshold: must be <= compact_threshold",
    ),
    "misspelt_key": ("[defaults]\ncontext_windw = 100\n", "defaults.context_windw: unknown setting"),
    "provider_not_a_table": ("[providers]\nanthropic = 5\n", "providers.anthropic: must be a table"),
    "unknown_tokenizer": ('[defaults]\ntokenizer = "gpt2"\n', "unknown tokenizer 'gpt2'"),
    "toml_syntax": ("[defaults\ncontext_window = 100\n", "invalid TOML"),
    "reply_fills_window": (
        '[models."gpt-4.1"]\ncontext_window = 1000\nmax_output_tokens = 2000\n',
        "max_output_tokens + buffer_tokens must be < context_window",
    ),
}


@pytest.mark.parametrize(("text", "message"), BAD_SETTINGS.values(), ids=BAD_SETTINGS.keys())
def test_a_bad_settings_file_raises_config_error_naming_field_and_file(
    tmp_path: Path, text: str, message: str
) -> None:
    path = tmp_path / "settings.toml"
    path.write_text(text, encoding="utf-8")
    before = file_digest([path])
    with pytest.raises(ConfigError) as err:
        resolve_model_settings(MODEL, settings=load_settings(path))
    assert message in str(err.value)
    assert str(path) in str(err.value) or path.name in str(err.value)
    assert file_digest([path]) == before


def test_a_settings_file_that_is_not_utf8_raises_config_error(tmp_path: Path) -> None:
    path = tmp_path / "settings.toml"
    path.write_bytes(b"[defaults]\ncontext_window = 100 # \xff\xfe\n")
    with pytest.raises(ConfigError, match="not UTF-8 text at byte 34"):
        load_settings(path)


@pytest.mark.parametrize("tokens", [-1, 1.5, True, "5"])
def test_the_guard_refuses_negative_or_non_integer_token_counts(tokens: object) -> None:
    guard = ContextGuard(get_tokenizer("chars/4"))
    with pytest.raises(ValidationError, match="must be an int >= 0"):
        guard.add_new(tokens)  # type: ignore[arg-type]
    assert guard.counters.new == 0


# -- huge tool schema ------------------------------------------------------------------------------


def huge_tool(properties: int = 10_000) -> dict:
    return {
        "name": "configure_everything",
        "description": "Set any of ten thousand options.",
        "input_schema": {
            "type": "object",
            "properties": {
                f"option_{i:05d}": {"type": "string", "description": f"Option number {i}, ünïcode ✓"}
                for i in range(properties)
            },
            "required": ["option_00000"],
        },
    }


@pytest.mark.parametrize("tokenizer_id", ["o200k_base", "cl100k_base", "anthropic", "chars/4"])
def test_a_tool_schema_of_ten_thousand_properties_is_counted(tokenizer_id: str) -> None:
    tokenizer = get_tokenizer(tokenizer_id)
    tool = huge_tool()
    tokens = tokenizer.count_tools([tool])
    assert tokens > 10_000 * 5
    assert tokens == tokenizer.count_tool(tool) < 10_000 * 60


def test_a_tool_schema_of_ten_thousand_properties_is_deferred_and_found_by_search() -> None:
    tokenizer = get_tokenizer("o200k_base")
    huge = huge_tool()
    huge["name"] = "mcp__settings__configure_everything"
    small = [
        ToolSpec.from_definition({"name": "read_file", "description": "Read a file.", "input_schema": {}}),
        ToolSpec.from_definition(
            {"name": "mcp__git__status", "description": "Show git status.", "input_schema": {}}
        ),
    ]
    budget = deferral_budget(168_000)
    registry = ToolRegistry(
        [*small, ToolSpec.from_definition(huge)], tokenizer=tokenizer, budget_tokens=budget
    )
    assert registry.plan.tokens_before > budget >= registry.plan.tokens_after
    assert "mcp__settings__configure_everything" in registry.plan.deferred_names
    assert "read_file" in [spec.name for spec in registry.active]
    found = registry.search("configure options", k=3)
    assert [hit.name for hit in found.hits][:1] == ["mcp__settings__configure_everything"]
    assert "option_09999" in found.text


# -- transcripts that cannot be imported -----------------------------------------------------------


def _bad_transcripts() -> dict[str, tuple[bytes, str]]:
    good = TRANSCRIPT.read_bytes()
    cut = good.index(b"\n", len(good) // 2)
    return {
        "invalid_utf8": (good[:cut] + b"\xff\xfe" + good[cut:], "not UTF-8 text (byte"),
        "not_json": (b"hello world\nnot json at all\n", "not JSON or JSON Lines"),
        "empty": (b"", "empty file"),
        "truncated_line": (good[: cut - 40], "malformed JSON line"),
        "other_json": (b'{"foo": [1, 2, 3]}', "not a transcript"),
    }


@pytest.mark.parametrize("case", ["invalid_utf8", "not_json", "empty", "truncated_line", "other_json"])
def test_a_transcript_that_cannot_be_imported_raises_and_writes_nothing(
    good_db: tuple[Path, str], tmp_path: Path, case: str
) -> None:
    content, message = _bad_transcripts()[case]
    path = tmp_path / f"{case}.jsonl"
    path.write_bytes(content)
    db = copy_db(good_db, tmp_path)
    before = digest(db)
    with SessionStore(db) as store, pytest.raises(ImportFormatError) as err:
        import_file(path, store)
    assert str(path) in str(err.value) and message in str(err.value)
    assert digest(db) == before


# -- a huge tool output ----------------------------------------------------------------------------


@pytest.mark.slow
def test_a_100_mb_tool_output_is_offloaded_whole_with_bounded_memory(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.reliability.big_output",
            str(tmp_path / "big.db"),
            str(BIG_OUTPUT_BYTES),
        ],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    size = report["utf8_bytes"]
    assert size > 0.99 * BIG_OUTPUT_BYTES and report["stored_sha_matches"]
    assert report["offload_peak_growth"] < BIG_OUTPUT_MEMORY_FACTOR * size, report["offload_peak_growth"]
    assert f"{size:,} bytes" in report["reference_text"] and len(report["reference_text"]) < 1_000
    assert report["tokens_estimated"] and report["tokens_inline"] > size // 8
    assert "next offset=" in report["page_head"] and report["page_body_chars"] == 2_000
    assert "showing the first 50" in report["grep_head"] and report["grep_lines"] == 51
