"""Every command that takes a database also takes a ``postgresql://`` URL, and $CTXDESK_DB (or the
settings' ``database``) names a team's store when no database is given."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main
from engine.store.copy import copy_database
from engine.store.factory import configured_database, open_store
from tests.pg_server import PG_MISSING_REASON, SKIP_UNLESS_PG, fresh_url

pytestmark = pytest.mark.skipif(SKIP_UNLESS_PG, reason=PG_MISSING_REASON)
ROOT = Path(__file__).resolve().parents[1]
DEMO_DB = ROOT / "data" / "demo-guard-limits.db"
FIXTURES = ROOT / "tests" / "fixtures" / "sessions"


@pytest.fixture(scope="module")
def team() -> tuple[str, str]:
    """(URL, a session id) of a store holding the bundled demo sessions."""
    url = fresh_url()
    with open_store(url) as store:
        copy_database(DEMO_DB, store)
        sid = max(store.list_sessions(), key=lambda s: store.message_count(s.id)).id
    return url, sid


def test_inspect_and_compact_take_a_url(team: tuple[str, str], capsys: pytest.CaptureFixture[str]) -> None:
    url, sid = team
    assert main(["inspect", url]) == 0
    assert sid in capsys.readouterr().out
    assert main(["inspect", url, sid]) == 0
    assert main(["compact", url, sid, "--strategy", "truncate", "--dry-run"]) == 0
    with open_store(url, read_only=True) as store:
        before = len(store.list_events(sid, kind="compaction"))
    assert main(["compact", url, sid, "--strategy", "truncate"]) == 0
    with open_store(url, read_only=True) as store:  # compacted or a noop: recorded either way
        assert len(store.list_events(sid, kind="compaction")) == before + 1


def test_report_and_diff_take_a_url_or_ctxdesk_db(
    team: tuple[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url, sid = team
    capsys.readouterr()
    assert main(["report", sid, "--db", url, "--format", "json"]) == 0
    by_db = json.loads(capsys.readouterr().out)
    monkeypatch.setenv("CTXDESK_DB", url)
    assert main(["report", sid, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out) == by_db
    assert "s3cret" not in json.dumps(by_db)
    assert main(["diff", "--db", url, sid, "--snapshots"]) == 0
    assert capsys.readouterr().out


def test_import_writes_into_a_url_named_by_the_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = fresh_url()
    settings = tmp_path / "settings.toml"
    settings.write_text(f'database = "{url}"\n')
    monkeypatch.delenv("CTXDESK_DB", raising=False)
    assert configured_database(settings) == url
    files = sorted(str(p) for p in FIXTURES.glob("claude-code__*.jsonl"))
    assert main(["--settings", str(settings), "import", *files]) == 0
    assert "postgresql://" in capsys.readouterr().out
    with open_store(url, read_only=True) as store:
        assert len(store.list_sessions()) >= len(files)
