"""A stored tool result's bytes: written and checked in pieces (never copied whole), the columns of its
``tool_result_blobs`` row. Both databases insert a blob from these (SQLite through incremental blob
I/O, PostgreSQL as one bytea); the store describes it (size, hash, text or not) in one pass.
"""

from __future__ import annotations

import codecs
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

#: Piece size for writing and checking large blobs without copying them whole.
BLOB_CHUNK_BYTES = 1 << 20
#: Bytes of a blob's head kept for its preview.
HEAD_BYTES = 4096


@dataclass(frozen=True)
class BlobStats:
    """What one pass over a blob's pieces found (:func:`blob_stats`)."""

    size: int
    sha256: str
    is_text: bool
    line_count: int | None
    head: bytes


def blob_pieces(content: str | bytes | bytearray | memoryview) -> Iterator[bytes | memoryview]:
    """The blob's bytes in pieces: text is encoded (UTF-8, lone surrogates kept) a piece at a time."""
    if isinstance(content, str):
        step = BLOB_CHUNK_BYTES // 4
        for start in range(0, len(content), step):
            yield content[start : start + step].encode("utf-8", "surrogatepass")
        return
    view = memoryview(content).cast("B")
    for start in range(0, len(view), BLOB_CHUNK_BYTES):
        yield view[start : start + BLOB_CHUNK_BYTES]


def blob_stats(pieces: Iterable[bytes | memoryview]) -> BlobStats:
    """Size, sha256, UTF-8 validity and line count in one pass, never holding the whole blob twice."""
    digest, decoder = hashlib.sha256(), codecs.getincrementaldecoder("utf-8")()
    size, newlines, is_text, head, last = 0, 0, True, b"", b""
    for piece in pieces:
        digest.update(piece)
        if is_text:
            try:
                decoder.decode(piece)
            except UnicodeDecodeError:
                is_text = False
        raw = bytes(piece[:HEAD_BYTES]) if len(head) < HEAD_BYTES else b""
        head = (head + raw)[:HEAD_BYTES]
        newlines += bytes(piece).count(b"\n") if isinstance(piece, memoryview) else piece.count(b"\n")
        size += len(piece)
        if len(piece):
            last = bytes(piece[-1:])
    if is_text:
        try:
            decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            is_text = False
    lines = newlines + (0 if last == b"\n" or size == 0 else 1) if is_text else None
    return BlobStats(size=size, sha256=digest.hexdigest(), is_text=is_text, line_count=lines, head=head)


#: tool_result_blobs' columns but ``content`` (last: see m004), in the order a database's ``insert_blob`` takes them.
BLOB_COLUMNS = (
    "ref_id", "session_id", "tool_use_id", "tool_name", "size_bytes", "is_text", "line_count", "sha256",
    "preview", "tokens", "created_utc",
)  # fmt: skip
