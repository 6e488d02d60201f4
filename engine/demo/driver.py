"""Writes the demo databases: each scenario of :data:`SCENARIOS` in its database, then VACUUM and
checkpoint so the .db file alone holds every row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from engine.demo.agent import DEFAULT_SEED, DEMO_SETTINGS, SETTINGS_FILE
from engine.demo.context import DemoContext, DemoStore
from engine.demo.repo import FakeRepo
from engine.demo.scenarios import SCENARIOS
from engine.settings import Settings, save_settings
from engine.store import settle_database


def generate_demo(out_dir: str | Path, *, seed: int = DEFAULT_SEED) -> list[Path]:
    """Write the demo databases (replacing earlier ones) and the settings file that made them."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    settings = Settings.from_dict(DEMO_SETTINGS, source=str(out / SETTINGS_FILE))
    written = [save_settings(settings, out / SETTINGS_FILE)]
    for name, scenarios in SCENARIOS.items():
        path = out / name
        for stale in _db_files(path):
            stale.unlink()
        repo = FakeRepo(seed)
        with DemoStore(path, seed) as store:
            ctx = DemoContext(store, settings, repo, seed)
            for scenario in scenarios:
                scenario(ctx)
        settle_database(path)
        written.append(path)
    return written


def _db_files(path: Path) -> Iterator[Path]:
    for suffix in ("", "-wal", "-shm"):
        candidate = path.with_name(path.name + suffix)
        if candidate.exists():
            yield candidate
