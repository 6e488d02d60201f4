"""A value computed once per object: the memo the import's hot loops share when the same objects come
back again and again (a Claude Code session's requests each send its whole history, the same dicts).

The memo keeps each object with its value, so the object's ``id`` names it for as long as the memo
lives (an id is reused only once its object is gone), and an equal but other object is computed afresh.
One memo holds one kind of value: a loop that computes two things of the same objects keeps two memos.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: A memo: the object's id -> (the object, its value).
PerObject = dict[int, tuple[Any, Any]]


def once_per_object(memo: PerObject, value: Any, make: Callable[..., T], *args: Any) -> T:
    """``make(*args)`` the first time this very ``value`` is seen in ``memo``; that result after (a
    call per object of a hot loop: no closure to build, one lookup)."""
    known = memo.get(id(value))
    if known is not None and known[0] is value:
        result: T = known[1]
        return result
    made = make(*args)
    memo[id(value)] = (value, made)
    return made
