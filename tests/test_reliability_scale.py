"""Memory stays bounded on huge inputs, measured on real processes (peak RSS of the child itself, its
own VmHWM through bench.child_peak): a 1 GB file that is not a transcript is refused from its head."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.child_peak import run_python
from engine.errors import ImportFormatError
from engine.importers.api import detect_format

GB = 1 << 30
MB = 1 << 20


def _run_measured(*args: str, cwd: Path) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in bytes) of ``python -m engine.cli ARGS``: the child's own peak
    (bench.child_peak; ``os.wait4`` would report this pytest process's, carried over the exec)."""
    run = run_python("-m", "engine.cli", *args, cwd=cwd)
    return run.code, run.stderr, run.peak


def _sparse(path: Path, head: bytes, size: int) -> Path:
    with path.open("wb") as fh:
        fh.write(head)
        fh.truncate(size)  # the rest reads as NUL bytes and takes no disk
    return path


@pytest.mark.parametrize(
    "head",
    [b"2025-03-14T12:00:00Z INFO [worker-3] request ok\n" * 2000, b"", b"\xff\xfe\x00binary" * 10_000],
    ids=["log-text", "nul-bytes", "binary"],
)
def test_a_1gb_file_that_is_no_transcript_is_refused_from_its_head(tmp_path, head):
    big = _sparse(tmp_path / "big.jsonl", head, GB)
    with pytest.raises(ImportFormatError, match=r"big\.jsonl"):
        detect_format(big)
    code, stderr, peak = _run_measured("import", str(big), "--db", str(tmp_path / "s.db"), cwd=tmp_path)
    assert code == 1 and stderr.startswith("ctxdesk: error:") and "Traceback" not in stderr, stderr
    assert "big.jsonl" in stderr
    assert peak < 400 * MB, f"peak RSS {peak / MB:.0f} MB refusing a 1 GB file"
    assert not (tmp_path / "s.db").exists()


def test_a_large_json_lines_transcript_is_still_read(tmp_path):
    line = b'{"role": "user", "content": "' + b"x" * 1000 + b'"}\n'
    path = tmp_path / "chat.jsonl"
    path.write_bytes(line * 100 + b'{"role": "assistant", "content": "ok"}\n')
    assert path.stat().st_size > 64 * 1024
    assert detect_format(path)


@pytest.mark.parametrize("name", ["demo-coding-agent.db", "demo-guard-limits.db"])
def test_sent_counts_by_bisection_equal_asking_every_request_about_every_message(tmp_path, name):
    import shutil

    from engine.findings import load_session_view
    from engine.report import read_store, sent_counts

    path = shutil.copy(Path(__file__).resolve().parents[1] / "data" / name, tmp_path / name)
    compacted = False
    with read_store(path) as store:
        for session in store.list_sessions():
            view = load_session_view(store, session.id)
            naive = {
                r.event_seq: sum(1 for m in view.messages if r.sends(m.seq))
                for r in view.requests
                if r.event_seq >= 0
            }
            assert sent_counts(view) == naive
            compacted = compacted or any(r.removed for r in view.requests)
    assert compacted or name != "demo-coding-agent.db"  # removed messages are in the comparison
