"""engine.textfmt's words around numbers."""

from __future__ import annotations

import pytest

from engine.textfmt import article


@pytest.mark.parametrize(
    ("number", "said"),
    [(8_700, "an"), (11_000, "an"), (18_500, "an"), (80_000, "an"), (800, "an"), (8, "an"),
     (111_360, "a"), (1_800, "a"), (180_000, "a"), (100, "a"), (0, "a")],
)  # fmt: skip
def test_the_article_before_a_number_as_it_is_read(number: int, said: str) -> None:
    assert article(number) == said
