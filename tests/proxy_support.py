"""Shared by the proxy tests: SDK clients closed when each test ends.

Import ``opened`` and the autouse fixture ``close_sdk_clients`` into a test module; an unclosed
client's sockets would otherwise surface as a ResourceWarning in some later test.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

_OPEN: list[Any] = []


def opened(client: Any) -> Any:
    """``client``, closed when the test ends."""
    _OPEN.append(client)
    return client


@pytest.fixture(autouse=True)
def close_sdk_clients() -> Iterator[None]:
    yield
    while _OPEN:
        _OPEN.pop().close()
