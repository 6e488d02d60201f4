"""Shared test set-up: paths to real data, and where the heavier checks may run.

- ``shared``-marked tests read the full files in ../shared; they run where it exists (CI
  always has it) and are deselected on a user's fresh clone, which has only tests/fixtures.
- ``browser``-marked tests need Debian's chromium at /usr/bin/chromium. Under CI
  (``CI=true``) a missing browser is a failure, never a silent skip.
- Lanes: ``browser``, ``apptest`` (Streamlit's AppTest, found by the module using it) and ``peer`` tests are
  also ``slow``; ``pytest -m "not slow"`` is the fast lane for the inner loop, the README's command runs all.
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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    no_shared = pytest.mark.skipif(
        True, reason=f"../shared not found at {SHARED} (fresh clone): full-file check"
    )
    browser_missing = not (CHROMIUM.exists() and shutil.which(str(CHROMIUM)))
    apptest_modules: dict[str, bool] = {}
    for item in items:
        module = str(getattr(item, "fspath", ""))
        if module not in apptest_modules:
            apptest_modules[module] = module.endswith(".py") and "AppTest" in Path(module).read_text(
                encoding="utf-8"
            )
        if apptest_modules[module]:
            item.add_marker(pytest.mark.apptest)
        if any(m in item.keywords for m in ("browser", "apptest", "peer")):
            item.add_marker(pytest.mark.slow)
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
