"""The rows an import writes stay the same while its write path is made faster (#32.9, #33): every
table of a real-fixture import and of a generated many-line Claude Code session, compared with the
rows the code wrote before (tests/fixtures/import_rows.json, from tests/import_rows.py).

After a change that means to alter what an import stores, write the file again with
``python -m tests.test_import_rows`` and say in the commit why those rows changed."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_reliability import claude_code_lines
from engine.importers import folder_files, import_files
from engine.importers.utc_times import rebuilt_utc_text, utc_text
from engine.store.factory import open_store
from tests.import_rows import table_digests

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = FIXTURES / "import_rows.json"
#: Lines of the generated session: enough for several batches of held event rows and cost chunks.
LINES = 3_000


#: The copied fixtures' modification time (2026-01-01T00:00:00Z): the same in every checkout.
FIXED_MTIME_NS = 1_767_225_600_000_000_000

#: The inputs: the real fixtures, and the generated session.
INPUTS = ("real_agents", "lines")


def imported_digests(folder: Path, name: str) -> dict[str, str]:
    """{table: digest} of input ``name`` imported under ``folder``."""
    root = folder / "fx"
    if name == "real_agents":
        shutil.copytree(FIXTURES / "real_agents", root / "real_agents")
        for path in (root / "real_agents").rglob("*"):  # a checkout's file times are when it was made:
            os.utime(path, ns=(FIXED_MTIME_NS, FIXED_MTIME_NS))  # the companions' digests hold them
        paths = folder_files(root / "real_agents")
    else:
        root.mkdir(parents=True)
        claude_code_lines(root / "lines.jsonl", LINES)
        paths = [root / "lines.jsonl"]
    db = folder / f"{name}.db"
    with open_store(db) as store, local_zone("UTC"):  # Aider's local times read alike on every machine
        import_files(paths, store, on_error=lambda p, e: None)
    return table_digests(db, root)


@contextmanager
def local_zone(name: str) -> Iterator[None]:
    """This process's local time zone ``name`` (``TZ``) while the block runs; the one before after it."""
    before = os.environ.get("TZ")
    os.environ["TZ"] = name
    time.tzset()
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("TZ", None)
        else:
            os.environ["TZ"] = before
        time.tzset()


@pytest.mark.parametrize("name", INPUTS)
def test_import_writes_the_rows_it_wrote_before(tmp_path: Path, name: str) -> None:
    expected = json.loads(EXPECTED.read_text())[name]
    assert imported_digests(tmp_path, name) == expected


if __name__ == "__main__":  # write the expectations again (see the module's docstring)
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        digests = {name: imported_digests(Path(folder) / name, name) for name in INPUTS}
        EXPECTED.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}", file=sys.stderr)


@settings(max_examples=300, deadline=None)
@given(
    st.one_of(
        st.datetimes(timezones=st.just(UTC)).map(
            lambda t: t.isoformat(timespec="milliseconds").replace("+00:00", "Z")
        ),
        st.from_regex(r"\A[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z\Z"),
        st.text(max_size=30),
    )
)
def test_a_time_already_in_utc_text_form_is_checked_as_a_rebuilt_one_would_be(value: str) -> None:
    assert utc_text(value) == rebuilt_utc_text(value)
