"""SessionStore keeps to the SessionStoreBackend interface a server-backed store would implement."""

from __future__ import annotations

import inspect
from pathlib import Path

from engine.store import SessionStore, SessionStoreBackend


def test_the_sqlite_store_is_a_session_store_backend(tmp_path: Path) -> None:
    with SessionStore(tmp_path / "s.db") as store:
        assert isinstance(store, SessionStoreBackend)


def test_every_public_store_method_is_part_of_the_interface() -> None:
    ours = {n for n, f in inspect.getmembers(SessionStore, inspect.isfunction) if not n.startswith("_")}
    interface = {n for n in dir(SessionStoreBackend) if not n.startswith("_")}
    assert ours == interface, f"keep engine/store/backend.py in step: {sorted(ours ^ interface)}"
