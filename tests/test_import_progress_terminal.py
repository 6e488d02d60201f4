"""`ctxdesk import` in a real terminal (#33.4): a tmux pane, a real pty, as a user sees it.

The import of every real-agent fixture runs in a detached tmux session; everything written to the
pane is also piped to a file. On a terminal the progress is one line redrawn in place (carriage
return and erase, no scrolling list of files): it counts the files up with a bar, says the rate
and the time left while running and "done" at the end, and the pane then holds the one finished
bar followed by the per-session summary. Under CI a missing tmux is a failure (.ci/run installs it).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import IN_CI

REAL_AGENTS = Path(__file__).parent / "fixtures" / "real_agents"
ROOT = Path(__file__).resolve().parents[1]
#: '[#####-----]  40% 12/188 files · 3.1/14.3 MB · 2.0 MB/s · 6 s left · imported x.jsonl'
BAR = re.compile(r"\[([#-]{24})\]\s+(\d+)% ([\d,]+)/([\d,]+) files · ([\d.,]+)/([\d.,]+) MB")

pytestmark = pytest.mark.slow


@pytest.fixture
def tmux(tmp_path: Path) -> Iterator[list[str]]:
    """A private tmux server (its own socket), killed afterwards."""
    if shutil.which("tmux") is None:
        if IN_CI:
            pytest.fail("CI must have tmux (.ci/run installs it)")
        # deliberate: a user's machine without tmux cannot run a terminal test; CI fails above instead
        pytest.skip("tmux is not installed")
    command = ["tmux", "-S", str(tmp_path / "tmux.sock")]
    yield command
    subprocess.run([*command, "kill-server"], capture_output=True, check=False)


def test_a_long_import_draws_one_bar_in_place_on_a_real_terminal(tmux: list[str], tmp_path: Path) -> None:
    db, raw, done = tmp_path / "agents.db", tmp_path / "pane.raw", tmp_path / "exit-code"
    script = (
        f"cd {shlex.quote(str(ROOT))} && {shlex.quote(sys.executable)} -m engine.cli import "
        f"{shlex.quote(str(REAL_AGENTS))} --db {shlex.quote(str(db))}; echo $? > {shlex.quote(str(done))}; "
        "sleep 600"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("TMUX")}
    env["PYTHONPATH"] = str(ROOT)
    subprocess.run(
        [*tmux, "new-session", "-d", "-s", "import", "-x", "200", "-y", "50", "bash", "--norc"],
        check=True, env=env,
    )  # fmt: skip
    subprocess.run([*tmux, "pipe-pane", "-t", "import", "-o", f"cat >> {shlex.quote(str(raw))}"], check=True)
    subprocess.run([*tmux, "send-keys", "-t", "import", script, "Enter"], check=True)
    deadline = time.monotonic() + 600
    while not done.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert done.exists(), "the import did not end within 10 minutes"
    assert done.read_text().strip() == "0"
    time.sleep(0.5)  # the pipe to the raw file catches up
    pane = subprocess.run(
        [*tmux, "capture-pane", "-p", "-t", "import", "-S", "-200"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    stream = raw.read_bytes().decode("utf-8", "replace")

    # What was drawn: frames redrawn in place (carriage return + erase line), counting up.
    frames = [BAR.search(f) for f in stream.split("\r\x1b[K")]
    counts = [(int(m.group(3).replace(",", "")), int(m.group(4).replace(",", ""))) for m in frames if m]
    total = len([p for p in REAL_AGENTS.rglob("*") if p.is_file()])
    assert len(counts) >= 3, stream[-2000:]
    assert all(t == counts[0][1] for _, t in counts) and counts[-1][0] == counts[-1][1]
    assert [d for d, _ in counts] == sorted(d for d, _ in counts)  # never goes back
    assert counts[0][1] >= 100 and counts[0][1] <= total
    running = [f for f in stream.split("\r\x1b[K") if BAR.search(f) and " left" in f]
    assert running, "no frame said the time left while the import ran"
    assert "MB/s" in running[-1]

    # What the user is left with: one finished bar (not a line per file), then the summary.
    bars = [line for line in pane if BAR.search(line)]
    assert len(bars) == 1, pane
    (finished,) = bars
    assert "100% " in finished and " done" in finished and finished.startswith("[" + "#" * 24 + "]")
    assert not any(line.startswith("[1/") for line in pane)  # the plain per-file lines are for pipes
    after = pane[pane.index(finished) + 1 :]
    assert any("file(s) imported or updated" in line for line in after), pane
