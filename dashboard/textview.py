"""Paging, searching and hex-dumping stored outputs for display (pure; no streamlit)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Page:
    text: str
    number: int
    pages: int
    first_line: int
    last_line: int
    total_lines: int


def decode(content: bytes) -> str | None:
    """The content as text, or None when it is not UTF-8."""
    try:
        return content.decode("utf-8")
    except UnicodeDecodeError:
        return None


def page_of(text: str, number: int, size: int) -> Page:
    """Lines of page ``number`` (1-based, clamped into range) of ``size`` lines each."""
    if size <= 0:
        raise ValueError(f"page size must be > 0, got {size}")
    lines = text.splitlines()
    pages = max(1, -(-len(lines) // size))
    number = min(max(number, 1), pages)
    start = (number - 1) * size
    chunk = lines[start : start + size]
    return Page("\n".join(chunk), number, pages, start + 1, start + len(chunk), len(lines))


def search_lines(
    text: str, needle: str, *, limit: int = 200, ignore_case: bool = True
) -> list[tuple[int, str]]:
    """(1-based line number, line) of the first ``limit`` lines containing ``needle``."""
    if not needle:
        return []
    wanted = needle.lower() if ignore_case else needle
    hits = []
    for number, line in enumerate(text.splitlines(), start=1):
        if wanted in (line.lower() if ignore_case else line):
            hits.append((number, line))
            if len(hits) >= limit:
                break
    return hits


def page_for_line(line: int, size: int) -> int:
    return (max(line, 1) - 1) // size + 1


def hexdump(content: bytes, *, offset: int = 0, length: int = 4096, width: int = 16) -> str:
    """Classic offset / hex / ASCII dump of ``content[offset:offset + length]``."""
    chunk = content[offset : offset + length]
    rows = []
    for i in range(0, len(chunk), width):
        part = chunk[i : i + width]
        hexes = " ".join(f"{b:02x}" for b in part).ljust(width * 3 - 1)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in part)
        rows.append(f"{offset + i:08x}  {hexes}  {text}")
    return "\n".join(rows)
