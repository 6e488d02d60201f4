"""The dashboard reads a large offloaded output a page at a time: pages cover it exactly (whole
lines, characters intact), search finds what is there, and opening a 200 MB output in a fresh
process grows its memory by a few MB, not by the output's size. The page itself is driven with
AppTest over a real database holding an output past the read-whole limit."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from dashboard.data import DB_PATHS_ENV_VAR, blob_pages, connect
from engine.messages import user
from engine.settings import SETTINGS_ENV_VAR
from engine.store import SessionStore
from engine.tokens import get_tokenizer

ROOT = Path(__file__).resolve().parents[1]
MB = 1 << 20
LINE = "2025-03-14T12:00:00Z INFO [worker-3] ok ✓ naïve café {n}\n"


def _text(lines: int) -> str:
    return "".join(LINE.format(n=n) for n in range(lines))


def _db_with_blob(path: Path, content: str) -> tuple[str, str]:
    with SessionStore(path) as store:
        session_id = store.create_session(model="gpt-4o", title="big output")
        store.append_messages(session_id, [user("run it")], tokenizer=get_tokenizer("gpt-4o"))
        ref = store.put_blob(
            session_id, content, tool_name="bash", tool_use_id="toolu_1", preview=content[:200]
        )
    return session_id, ref.ref_id


def test_pages_cover_the_output_exactly_with_whole_lines(tmp_path):
    content = _text(40_000)  # ~2.4 MB, several pages, multi-byte characters
    _, ref_id = _db_with_blob(tmp_path / "s.db", content)
    con = connect([tmp_path / "s.db"])
    reader = blob_pages.open_blob(con, "s", ref_id)
    assert reader.size == len(content.encode()) and reader.pages > 5
    pages = [reader.page(n) for n in range(1, reader.pages + 1)]
    assert "".join(p.text for p in pages) == content
    assert all(p.text.endswith("\n") for p in pages)
    assert [p.start for p in pages[1:]] == [p.end for p in pages[:-1]]
    hits = reader.search("café 39999")
    assert len(hits) == 1 and hits[0][1] == LINE.format(n=39999).rstrip("\n")
    assert "café 39999" in reader.page(reader.page_at(hits[0][0])).text
    assert len(reader.search("INFO", limit=7)) == 7 and reader.search("absent needle") == []


def test_a_200mb_output_is_opened_without_loading_it(tmp_path):
    db = tmp_path / "big.db"
    make = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT)!r})
        from engine.messages import user
        from engine.store import SessionStore
        from engine.tokens import get_tokenizer
        line = {LINE!r}
        content = "".join(line.format(n=n) for n in range(3_500_000)) + "needle at the end\\n"
        with SessionStore({str(db)!r}) as store:
            sid = store.create_session(title="big")
            store.append_messages(sid, [user("go")], tokenizer=get_tokenizer("gpt-4o"))
            print(json.dumps(store.put_blob(sid, content, tool_name="bash").ref_id))
    """)
    made = subprocess.run(
        [sys.executable, "-c", make], capture_output=True, text=True, timeout=600, check=True
    )
    ref_id = json.loads(made.stdout)
    assert db.stat().st_size > 200 * MB
    probe = textwrap.dedent(f"""
        import json, resource, sys
        sys.path.insert(0, {str(ROOT)!r})
        from dashboard.data import blob_pages
        from dashboard.data import connect
        con = connect([{str(db)!r}])
        def peak():
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        before = peak()
        reader = blob_pages.open_blob(con, "big", {ref_id!r})
        first, middle, last = reader.page(1), reader.page(reader.pages // 2), reader.page(reader.pages)
        hits = reader.search("needle at the end", limit=5)
        print(json.dumps({{"growth": peak() - before, "size": reader.size, "last": last.text[-40:],
                          "hits": len(hits), "first": first.text[:30], "middle": len(middle.text)}}))
    """)
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=600, check=True
    )
    figures = json.loads(result.stdout)
    assert figures["size"] > 200 * MB and figures["hits"] == 1
    assert figures["last"].endswith("needle at the end\n") and figures["first"].startswith("2025-03-14")
    assert figures["growth"] < 48 * MB, (
        f"opening a 200 MB output grew memory by {figures['growth'] / MB:.0f} MB"
    )


@pytest.fixture
def big_blob_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, str]:
    content = _text(blob_pages.WHOLE_LIMIT // len(LINE.encode()) + 5_000)
    session_id, _ = _db_with_blob(tmp_path / "s.db", content)
    monkeypatch.setenv(DB_PATHS_ENV_VAR, str(tmp_path / "s.db"))
    monkeypatch.setenv(SETTINGS_ENV_VAR, str(tmp_path / "config" / "settings.toml"))
    st.cache_data.clear()
    st.cache_resource.clear()
    return tmp_path / "s.db", f"s::{session_id}"


def test_the_offloaded_page_pages_an_output_past_the_read_whole_limit(big_blob_db):
    _, selected = big_blob_db
    at = AppTest.from_file(str(ROOT / "dashboard" / "app.py"), default_timeout=60).run()
    at.session_state["selected_session"] = selected
    at.switch_page("views/offloaded.py").run()
    assert not at.exception, [e.value for e in at.exception]
    captions = " ".join(str(c.value) for c in at.caption)
    assert "never whole" in captions and "Bytes 0-" in captions
    assert any("worker-3" in c.value for c in at.code)
    at.number_input(key="blob_page").set_value(3).run()
    assert not at.exception
    assert "Bytes " in " ".join(str(c.value) for c in at.caption)
    at.text_input(key="blob_search").set_value("café 7").run()
    assert not at.exception
    assert "match(es)" in " ".join(str(c.value) for c in at.caption)
