"""Result offloading: the size decision, the reference text, read_result, and the inline fallback."""

from __future__ import annotations

import re
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import ResultStoreError, ValidationError
from engine.events import ContextEvent
from engine.offload import (
    DEFAULT_READ_CHARS,
    DEFAULT_THRESHOLD_BYTES,
    MAX_PATTERN_MATCHES,
    MAX_READ_CHARS,
    PREVIEW_CHARS,
    READ_RESULT_TOOL,
    ResultStore,
    offload_or_inline,
    plan_offload,
    run_read_result_tool,
)
from engine.store import SessionStore
from engine.tokens import get_tokenizer

REFERENCE = re.compile(
    r'\A\[Tool result stored — (?P<size>[\d,]+) bytes(?P<what>[^"]*) from "(?P<tool>[^"]+)"\.\n'
    r"(?P<shown>First [^\n]*)\]\n"
    r'Use the "read_result" tool with ref_id="(?P<ref>res_[0-9a-f]+)" to read specific portions\.\Z'
)


@pytest.fixture
def store(tmp_path: Path) -> SessionStore:
    db = SessionStore(tmp_path / "sessions.db")
    db.create_session(session_id="s1")
    db.create_session(session_id="s2")
    yield db
    db.close()


@pytest.fixture
def results(store: SessionStore) -> ResultStore:
    return ResultStore(store, "s1", tokenizer=get_tokenizer("cl100k_base"))


def numbered_lines(n: int, *, marker_every: int = 0) -> str:
    return "\n".join(
        f"line {i}: build step ERROR in module_{i}"
        if marker_every and i % marker_every == 0
        else f"line {i}: ok"
        for i in range(1, n + 1)
    )


def offload(
    results: ResultStore, content: str | bytes, tool_name: str = "shell_exec"
) -> tuple[str, ContextEvent]:
    text, events = offload_or_inline(results, content, tool_name=tool_name)
    assert len(events) == 1, events
    return text, events[0]


# -- plan_offload ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "kwargs", "offload", "limit"),
    [
        ("small text stays", "ok", {}, False, DEFAULT_THRESHOLD_BYTES),
        ("exactly the threshold stays", "x" * 4096, {}, False, 4096),
        ("one byte over is offloaded", "x" * 4097, {}, True, 4096),
        ("bytes count as bytes", b"\x00" * 5000, {}, True, 4096),
        ("non-ASCII counts UTF-8 bytes, not characters", "é" * 3000, {}, True, 4096),
        ("lower tool_response_max_bytes binds", "x" * 2000, {"tool_response_max_bytes": 1000}, True, 1000),
        ("higher tool_response_max_bytes does not raise the threshold", "x" * 5000,
         {"tool_response_max_bytes": 100_000}, True, 4096),
        ("custom threshold", "x" * 5000, {"threshold_bytes": 10_000}, False, 10_000),
        ("zero threshold offloads anything non-empty", "x", {"threshold_bytes": 0}, True, 0),
    ],
)  # fmt: skip
def test_plan_offload_compares_utf8_size_with_the_binding_limit(name, content, kwargs, offload, limit):
    decision = plan_offload(content, tool_name="t", **kwargs)
    assert decision.offload is offload, name
    assert decision.limit_bytes == limit
    expected_size = len(content) if isinstance(content, bytes) else len(content.encode())
    assert decision.size_bytes == expected_size
    assert f"{expected_size:,} bytes" in decision.reason


def test_plan_offload_reason_names_tool_response_max_bytes_when_it_binds():
    decision = plan_offload("x" * 2000, tool_name="t", tool_response_max_bytes=1000)
    assert decision.reason == "2,000 bytes > 1,000-byte tool_response_max_bytes"


@pytest.mark.parametrize("kwargs", [{"threshold_bytes": -1}, {"tool_response_max_bytes": -5}])
def test_plan_offload_rejects_negative_limits(kwargs):
    with pytest.raises(ValidationError, match="must be >= 0"):
        plan_offload("x", tool_name="t", **kwargs)


@given(st.text(max_size=300), st.integers(0, 400), st.none() | st.integers(0, 400))
def test_plan_offload_offloads_exactly_when_over_the_lower_limit(text, threshold, tool_max):
    decision = plan_offload(text, tool_name="t", threshold_bytes=threshold, tool_response_max_bytes=tool_max)
    limit = threshold if tool_max is None else min(threshold, tool_max)
    size = len(text.encode("utf-8", "surrogatepass"))
    assert (decision.size_bytes, decision.limit_bytes, decision.offload) == (size, limit, size > limit)


# -- the reference -----------------------------------------------------------------------------


def test_reference_is_three_lines_naming_size_tool_preview_and_ref(results: ResultStore, store: SessionStore):
    output = numbered_lines(4000)
    text, event = offload(results, output)
    match = REFERENCE.match(text)
    assert match, text
    assert text.count("\n") == 2
    assert match["size"] == f"{len(output.encode()):,}"
    assert match["what"] == ""
    assert match["tool"] == "shell_exec"
    assert match["shown"] == "First 200 chars: " + output[:PREVIEW_CHARS].replace("\n", "\\n")
    assert match["ref"] == event.details["ref_id"]
    assert store.get_blob(match["ref"]).content == output.encode()


def test_reference_first_line_reads_as_specified(results: ResultStore):
    text, _ = offload(results, "a" * 48_231)
    assert text.splitlines()[0] == '[Tool result stored — 48,231 bytes from "shell_exec".'


def test_offload_event_records_ref_sizes_and_token_savings(results: ResultStore, store: SessionStore):
    output = numbered_lines(3000)
    text, event = offload(results, output)
    assert (event.kind, event.outcome) == ("offload", "offloaded")
    details = event.details
    assert details["tool_name"] == "shell_exec"
    assert details["size_bytes"] == len(output.encode())
    assert details["tokens_inline"] == get_tokenizer("cl100k_base").count(output)
    assert details["tokens_inline_estimated"] is False
    assert details["tokens_reference"] == get_tokenizer("cl100k_base").count(text)
    assert details["tokens_reference"] < details["tokens_inline"] / 50
    # The event is what the session manager persists: it must go into context_events as is.
    store.record_event("s1", event)
    (stored,) = store.list_events("s1", kind="offload")
    assert stored.details["ref_id"] == details["ref_id"]


@pytest.mark.parametrize(
    ("content", "what", "kind", "shown"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 40, " of binary data", "binary",
         "First 32 bytes (hex): 89 50 4e 47 0d 0a 1a 0a 00 00 00 0d 49 48 44 52 00 01 02 03"),
        ("Grüße aus Köln, ".encode("latin-1") * 400,
         " of non-UTF-8 text, decoded with replacement for preview,", "non-utf8-text", "First 200 chars: Gr\ufffd\ufffde"),
        ("Grüße aus Köln, ".encode() * 400, "", "text", "First 200 chars: Grüße aus Köln, Grüße"),
    ],
)  # fmt: skip
def test_bytes_are_stored_losslessly_and_described_by_kind(results, store, content, what, kind, shown):
    text, event = offload(results, content, tool_name="fetch")
    match = REFERENCE.match(text)
    assert match, text
    assert match["what"] == what
    assert match["shown"].startswith(shown)
    assert event.details["content_kind"] == kind
    blob = store.get_blob(event.details["ref_id"])
    assert blob.content == content
    assert blob.size_bytes == len(content)


def test_a_twenty_megabyte_output_is_stored_once_and_previewed_from_its_head(results, store):
    head = "HEAD-MARKER " + "the quick brown fox jumps over the lazy dog\n" * 4
    output = head + "".join(f"row {i:08d} value={i * 7 % 1000}\n" for i in range(900_000))
    assert len(output) > 20_000_000
    tracemalloc.start()
    try:
        text, event = offload(results, output, tool_name="dump_table")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # One UTF-8 copy for the store and the store's own validity check; no per-line or
    # tokenizer-sized copies on top.
    assert peak < 3 * len(output), f"peak {peak:,} bytes for a {len(output):,}-byte output"
    assert REFERENCE.match(text)["shown"].startswith("First 200 chars: HEAD-MARKER the quick")
    assert event.details["tokens_inline_estimated"] is True
    exact = get_tokenizer("cl100k_base").count(output[:2_000_000]) * len(output) / 2_000_000
    assert event.details["tokens_inline"] == pytest.approx(exact, rel=0.05)
    assert store.get_blob(event.details["ref_id"], with_content=False).size_bytes == len(output)
    middle = results.read(event.details["ref_id"], offset=10_000_000, limit=100)
    assert middle.splitlines()[1:] and output[10_000_000:10_000_100] in middle


# -- read_result: slices -----------------------------------------------------------------------


def test_read_returns_the_slice_with_a_header_stating_range_and_total(results: ResultStore):
    output = numbered_lines(3000)
    _, event = offload(results, output)
    ref = event.details["ref_id"]
    page = results.read(ref, offset=100, limit=50)
    header, body = page.split("\n", 1)
    assert header == f'[ref_id="{ref}": characters 100 to 150 of {len(output):,}; next offset=150]'
    assert body == output[100:150]


def test_read_defaults_and_caps_the_limit(results: ResultStore):
    output = "z" * 30_000
    _, event = offload(results, output)
    ref = event.details["ref_id"]
    assert len(results.read(ref).split("\n", 1)[1]) == DEFAULT_READ_CHARS
    capped = results.read(ref, limit=1_000_000)
    assert f"limit capped at {MAX_READ_CHARS:,}" in capped.split("\n", 1)[0]
    assert len(capped.split("\n", 1)[1]) == MAX_READ_CHARS


def test_paging_with_next_offsets_reads_back_the_whole_output(results: ResultStore):
    output = "".join(f"{i}: ünïcödé ✓\n" for i in range(2500))
    _, event = offload(results, output)
    ref, offset, pieces = event.details["ref_id"], 0, []
    while True:
        header, body = results.read(ref, offset=offset, limit=MAX_READ_CHARS).split("\n", 1)
        pieces.append(body)
        found = re.search(r"next offset=(\d+)", header)
        if not found:
            assert header.endswith("end of result]")
            break
        offset = int(found[1])
    assert "".join(pieces) == output


def test_binary_results_read_as_a_hex_dump(results: ResultStore):
    content = bytes(range(256)) * 30
    _, event = offload(results, content, tool_name="download")
    page = results.read(event.details["ref_id"], offset=16, limit=32)
    lines = page.splitlines()
    assert "bytes 16 to 48 of 7,680 (binary data, hex dump)" in lines[0]
    assert lines[1].startswith("00000010  10 11 12 13")
    assert len(lines) == 3


def test_a_hex_dump_ends_at_the_limit_mid_line(results: ResultStore):
    _, event = offload(results, bytes(range(256)) * 30, tool_name="download")
    lines = results.read(event.details["ref_id"], offset=0, limit=20).splitlines()
    assert lines[2] == "00000010  10 11 12 13" + " " * 38 + "...."


def test_non_utf8_text_reads_decoded_with_replacement(results: ResultStore):
    content = "Grüße aus Köln\n".encode("latin-1") * 600
    _, event = offload(results, content, tool_name="legacy")
    ref = event.details["ref_id"]
    header, body = results.read(ref, limit=15).split("\n", 1)
    assert "non-UTF-8 text, decoded with replacement" in header
    assert body == "Gr\ufffd\ufffde aus K\ufffdln\n"
    found = results.read(ref, pattern="k.ln").splitlines()
    assert "(non-UTF-8 text, decoded with replacement)" in found[0]
    assert found[1] == "1:Gr\ufffd\ufffde aus K\ufffdln"


def test_binary_results_cannot_be_searched_with_a_pattern(results: ResultStore):
    _, event = offload(results, bytes(range(256)) * 40, tool_name="download")
    with pytest.raises(ResultStoreError, match="is binary data: read it as a hex dump"):
        results.read(event.details["ref_id"], pattern="x")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"offset": -1}, "offset must be >= 0"),
        ({"offset": 10**9}, "offset 1,000,000,000 is beyond the end"),
        ({"limit": 0}, "limit must be >= 1"),
        ({"pattern": "("}, "invalid regex pattern '\\('"),
        ({"pattern": "x", "context_lines": 99}, "context_lines must be"),
    ],
)
def test_bad_read_arguments_raise_naming_the_ref(results: ResultStore, kwargs, message):
    _, event = offload(results, numbered_lines(1000))
    ref = event.details["ref_id"]
    with pytest.raises(ResultStoreError, match=message) as info:
        results.read(ref, **kwargs)
    assert ref in str(info.value)
    assert info.value.ref_id == ref


def test_unknown_ref_raises_naming_it(results: ResultStore):
    with pytest.raises(ResultStoreError, match="unknown ref_id 'res_0000'") as info:
        results.read("res_0000")
    assert info.value.ref_id == "res_0000"


def test_refs_of_another_session_are_refused(store: SessionStore, results: ResultStore):
    other = ResultStore(store, "s2")
    _, event = offload(other, numbered_lines(1000))
    ref = event.details["ref_id"]
    with pytest.raises(ResultStoreError, match=f"ref_id '{ref}' belongs to another session"):
        results.read(ref)
    assert other.read(ref, limit=10).endswith("line 1: ok")


# -- read_result: patterns ---------------------------------------------------------------------


def test_pattern_lists_matching_lines_with_one_based_numbers_case_insensitively(results: ResultStore):
    output = numbered_lines(2000, marker_every=500)
    _, event = offload(results, output)
    ref = event.details["ref_id"]
    found = results.read(ref, pattern=r"error in module_\d+")
    lines = found.splitlines()
    assert lines[0] == f'[ref_id="{ref}": 4 of 2,000 lines match /error in module_\\d+/ (case-insensitive)]'
    assert lines[1:] == [f"{n}:line {n}: build step ERROR in module_{n}" for n in (500, 1000, 1500, 2000)]


def test_pattern_with_context_lines_marks_context_and_separates_groups(results: ResultStore):
    _, event = offload(results, numbered_lines(2000, marker_every=500))
    found = results.read(event.details["ref_id"], pattern="ERROR", context_lines=1)
    assert found.splitlines()[1:5] == [
        "499-line 499: ok",
        "500:line 500: build step ERROR in module_500",
        "501-line 501: ok",
        "--",
    ]


def test_pattern_caps_the_matches_and_says_how_many_more(results: ResultStore):
    _, event = offload(results, numbered_lines(3000, marker_every=10))
    found = results.read(event.details["ref_id"], pattern="error")
    lines = found.splitlines()
    assert len(lines) == 1 + MAX_PATTERN_MATCHES
    assert (
        f"300 of 3,000 lines match /error/ (case-insensitive); showing the first {MAX_PATTERN_MATCHES}"
        in lines[0]
    )
    assert f"{300 - MAX_PATTERN_MATCHES} more not shown" in lines[0]


def test_pattern_matching_nothing_says_so(results: ResultStore):
    _, event = offload(results, numbered_lines(1000))
    found = results.read(event.details["ref_id"], pattern="segfault")
    assert found.splitlines() == [
        f'[ref_id="{event.details["ref_id"]}": 0 of 1,000 lines match /segfault/ (case-insensitive)]'
    ]


# -- the tool ----------------------------------------------------------------------------------


def test_read_result_tool_definition_describes_its_inputs():
    assert READ_RESULT_TOOL["name"] == "read_result"
    schema = READ_RESULT_TOOL["input_schema"]
    assert set(schema["properties"]) == {"ref_id", "offset", "limit", "pattern", "context_lines"}
    assert schema["required"] == ["ref_id"]
    assert schema["properties"]["limit"]["maximum"] == MAX_READ_CHARS
    assert get_tokenizer("cl100k_base").count_tool(READ_RESULT_TOOL) < 400


def test_tool_handler_returns_the_read_for_good_input(results: ResultStore):
    output = numbered_lines(1000)
    _, event = offload(results, output)
    ref = event.details["ref_id"]
    assert run_read_result_tool(results, {"ref_id": ref, "offset": 0, "limit": 20}) == results.read(
        ref, 0, 20
    )
    assert run_read_result_tool(results, {"ref_id": ref, "pattern": "line 7:"}).endswith("7:line 7: ok")


@pytest.mark.parametrize(
    ("tool_input", "message"),
    [
        ({"ref_id": "res_missing"}, "Error: unknown ref_id 'res_missing'"),
        ({}, "Error: ref_id must be a non-empty string"),
        ({"ref_id": "REF", "offset": -3}, "Error: offset must be >= 0"),
        ({"ref_id": "REF", "offset": "10"}, "Error: offset must be an integer"),
        ({"ref_id": "REF", "limit": True}, "Error: limit must be an integer"),
        ({"ref_id": "REF", "pattern": "[unclosed"}, "Error: invalid regex pattern '[unclosed'"),
        ({"ref_id": "REF", "pattern": 5}, "Error: pattern must be a string"),
        ({"ref_id": "REF", "whence": 1}, "Error: read_result got unknown arguments ['whence']"),
    ],
)
def test_tool_handler_returns_errors_as_text_for_the_model(results: ResultStore, tool_input, message):
    _, event = offload(results, numbered_lines(1000))
    tool_input = {k: (event.details["ref_id"] if v == "REF" else v) for k, v in tool_input.items()}
    assert run_read_result_tool(results, tool_input).startswith(message)


# -- fallback ----------------------------------------------------------------------------------


def test_small_outputs_stay_inline_without_events(results: ResultStore, store: SessionStore):
    assert offload_or_inline(results, "total 0\n", tool_name="ls") == ("total 0\n", [])
    assert offload_or_inline(results, b"caf\xe9", tool_name="ls") == ("caf\ufffd", [])
    assert store.list_blobs("s1") == []


def test_read_only_store_keeps_the_result_inline_and_records_degraded(tmp_path: Path, store: SessionStore):
    read_only = SessionStore(store.path, read_only=True)
    output = numbered_lines(2000)
    text, events = offload_or_inline(ResultStore(read_only, "s1"), output, tool_name="shell_exec")
    read_only.close()
    assert text == output
    (event,) = events
    assert (event.kind, event.outcome) == ("degraded", "inline")
    assert event.details["subsystem"] == "offload"
    assert re.search(r"read-?only", event.details["error"])
    assert event.details["size_bytes"] == len(output)
    assert store.list_blobs("s1") == []


def test_closed_store_keeps_the_result_inline_and_records_degraded(tmp_path: Path):
    db = SessionStore(tmp_path / "closed.db")
    db.create_session(session_id="s1")
    db.close()
    text, events = offload_or_inline(ResultStore(db, "s1"), b"\x00" * 9000, tool_name="download")
    assert text == "\x00" * 9000
    assert [(e.kind, e.details["subsystem"]) for e in events] == [("degraded", "offload")]
    assert "closed" in events[0].details["error"]


def test_offload_into_a_missing_session_degrades_with_the_store_error(store: SessionStore):
    text, events = offload_or_inline(ResultStore(store, "no-such-session"), "x" * 5000, tool_name="t")
    assert text == "x" * 5000
    assert events[0].kind == "degraded"
    assert "StoreError" in events[0].details["error"]
