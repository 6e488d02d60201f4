"""One vocabulary for failed calls: the cause from each provider's error shape, the counts, redaction."""

from __future__ import annotations

import pytest

from engine.call_failures import classify_failure, failure_details, failure_of, prompt_too_long_counts


@pytest.mark.parametrize(
    ("status", "error_type", "message", "cause"),
    [
        pytest.param(400, "invalid_request_error", "prompt is too long: 212301 tokens > 200000 maximum",
                     "prompt_too_long", id="anthropic too long"),
        pytest.param(400, "context_length_exceeded", "This model's maximum context length is 128000 tokens",
                     "prompt_too_long", id="openai too long"),
        pytest.param(400, "INVALID_ARGUMENT", "The input token count (1200000) exceeds the maximum number of "
                     "tokens allowed (1048576).", "prompt_too_long", id="gemini too long"),
        pytest.param(429, "rate_limit_error", "Number of request tokens has exceeded your per-minute rate limit",
                     "rate_limited", id="anthropic rate limit"),
        pytest.param(429, "RESOURCE_EXHAUSTED", "Quota exceeded", "rate_limited", id="gemini quota"),
        pytest.param(529, "overloaded_error", "Overloaded", "overloaded", id="anthropic overloaded"),
        pytest.param(503, "UNAVAILABLE", "The model is overloaded. Please try again later.", "overloaded",
                     id="gemini unavailable"),
        pytest.param(500, "api_error", "Internal server error", "provider_error", id="a plain 500"),
        pytest.param(None, None, None, "provider_error", id="nothing known"),
    ],
)  # fmt: skip
def test_each_providers_error_gets_its_cause(status, error_type, message, cause) -> None:
    assert classify_failure(status, error_type, message) == cause


def test_a_stream_cut_short_is_interrupted_whatever_the_status() -> None:
    assert classify_failure(200, None, None, interrupted=True) == "interrupted"


@pytest.mark.parametrize(
    ("message", "counts"),
    [
        ("prompt is too long: 212301 tokens > 200000 maximum", (212_301, 200_000)),
        ("The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).",
         (1_200_000, 1_048_576)),
        ("Overloaded", None),
    ],
)  # fmt: skip
def test_the_counts_of_a_prompt_too_long_message(message: str, counts) -> None:
    assert prompt_too_long_counts(message) == counts


def test_failure_details_redact_an_echoed_key_and_round_trip() -> None:
    details = {"failure": failure_details("provider_error", status=401,
                                          message="invalid x-api-key sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345")}  # fmt: skip
    assert "abcdefghijklmnop" not in details["failure"]["message"]
    assert failure_of(details) == details["failure"]
    assert failure_of({}) is None
    with pytest.raises(ValueError, match="unknown failure cause"):
        failure_details("boom")  # type: ignore[arg-type]
