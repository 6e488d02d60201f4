"""Model clients: the protocol the session manager calls, an Anthropic client and a scripted one.

A client takes a :class:`ModelRequest` (our messages plus the provider body built with cache
breakpoints) and returns a :class:`ModelResponse` with the provider's own usage numbers.
Provider failures become typed errors: a prompt the provider finds too long raises
:class:`ContextLengthExceededError`; overload, 5xx and connection failures raise
:class:`ProviderError` with ``retryable=True``. No client keeps or logs an API key.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, Self, runtime_checkable

from engine.convert import anthropic_error_detail, sent_system_text
from engine.errors import ContextLengthExceededError, ProviderError, ValidationError
from engine.events import ProviderUsage
from engine.messages import (
    Message,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    assistant,
)
from engine.tokens import Tokenizer, get_tokenizer
from engine.wire_requests import ANTHROPIC_MESSAGES, WireRequest

logger = logging.getLogger(__name__)

#: Phrases of Anthropic's 400 errors for a prompt that does not fit the window.
PROMPT_TOO_LONG_PATTERNS = (
    re.compile(r"prompt is too long", re.IGNORECASE),
    re.compile(r"input length and `?max_tokens`? exceed context limit", re.IGNORECASE),
    re.compile(r"context[ _-]?(window|length).*exceed", re.IGNORECASE),
)


@dataclass(frozen=True)
class ModelRequest:
    """One model call as the session manager assembled it.

    ``payload`` is the provider body (for Anthropic: the keyword arguments of
    ``messages.create`` with cache breakpoints); the other fields are the same request in our
    own terms, used for token estimates and by scripted clients.
    """

    model: str
    system: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] = ()
    max_output_tokens: int = 4096
    payload: Mapping[str, Any] = field(default_factory=dict)
    estimated_prompt_tokens: int = 0
    turn_index: int | None = None
    #: count_cache_breakpoints(payload) when the builder kept it (None: walk the payload).
    cache_breakpoints: int | None = None

    @property
    def tool_names(self) -> list[str]:
        return [str(t.get("name", "")) for t in self.tools]

    @property
    def has_cache_breakpoints(self) -> bool:
        return "cache_control" in json.dumps(self.payload, default=str)


@dataclass(frozen=True)
class ModelResponse:
    """The assistant's reply and the provider's own usage for the call."""

    message: Message
    usage: ProviderUsage | None
    stop_reason: str | None = None
    model: str | None = None


@runtime_checkable
class ModelClient(Protocol):
    """What the session manager needs of a model: a provider name, a model, one call."""

    provider: str
    model: str

    def complete(self, request: ModelRequest) -> ModelResponse: ...


class OwnedSdkClient:
    """The lifecycle of an object wrapping a provider SDK client (``_client``): ``close()``, or a
    ``with`` block, closes the SDK client's connections only when this object made it
    (``_owns_client``); a client passed in stays its owner's to close."""

    _client: Any
    _owns_client: bool

    def _use_client(self, client: Any, sdk: str, sdk_class: str, **options: Any) -> None:
        """Wrap ``client``, or one built as ``sdk.sdk_class(**options)`` (then closed by ``close``)."""
        self._owns_client = client is None
        self._client = (
            getattr(importlib.import_module(sdk), sdk_class)(**options) if client is None else client
        )

    def close(self) -> None:
        """Close the SDK client's connections, when this object created it."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- Anthropic -------------------------------------------------------------------------------


class AnthropicClient(OwnedSdkClient):
    """Calls Anthropic's Messages API through the ``anthropic`` SDK.

    ``client`` may be a ready ``anthropic.Anthropic`` (tests, custom transports); otherwise one
    is built from ``api_key`` (default: the SDK's own lookup, $ANTHROPIC_API_KEY) and
    ``base_url``. The key is handed to the SDK and never kept on this object.
    """

    provider = "anthropic"

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        *,
        max_retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        if not model:
            raise ValidationError("model must be a non-empty string", field="model", value=model)
        self.model = model
        self._use_client(client, "anthropic", "Anthropic", api_key=api_key, base_url=base_url,
                         max_retries=max_retries, timeout=timeout)  # fmt: skip

    def __repr__(self) -> str:
        return f"AnthropicClient(model={self.model!r})"

    def wire_request(self, request: ModelRequest) -> WireRequest:
        """The Messages API call :meth:`complete` makes for ``request``."""
        return anthropic_wire_request(request, self.model)

    def complete(self, request: ModelRequest) -> ModelResponse:
        import anthropic

        try:
            response = self._client.messages.create(**self.wire_request(request).body)
        except anthropic.APIStatusError as exc:
            raise provider_error_from_status(
                exc.status_code, _error_detail(exc), provider=self.provider
            ) from exc
        except anthropic.APIConnectionError as exc:  # includes APITimeoutError
            raise provider_unreachable(self.provider, exc) from exc
        return ModelResponse(
            message=message_from_anthropic(response),
            usage=usage_from_anthropic(getattr(response, "usage", None)),
            stop_reason=getattr(response, "stop_reason", None),
            model=getattr(response, "model", None),
        )


def provider_error_from_status(status: int, detail: str, *, provider: str) -> ProviderError:
    """The typed error for an HTTP error status from a provider."""
    if status in (400, 413) and any(p.search(detail) for p in PROMPT_TOO_LONG_PATTERNS):
        return ContextLengthExceededError(
            f"{provider} rejected the prompt as too long (HTTP {status}: {detail})",
            provider=provider,
            status=status,
        )
    retryable = status in (408, 409, 429) or status >= 500
    kind = {429: "rate limited", 529: "overloaded"}.get(status, "error")
    return ProviderError(
        f"{provider} API {kind} (HTTP {status}: {detail})",
        provider=provider,
        status=status,
        retryable=retryable,
    )


def provider_unreachable(provider: str, exc: Exception) -> ProviderError:
    """The typed (retryable) error for a provider that could not be reached or timed out."""
    return ProviderError(
        f"cannot reach the {provider} API ({type(exc).__name__})", provider=provider, retryable=True
    )


def _error_detail(exc: Any) -> str:
    """The provider's ``type: message`` (from the JSON body), else the exception text."""
    return anthropic_error_detail(getattr(exc, "body", None), str(getattr(exc, "message", "") or exc))


def usage_from_anthropic(usage: Any) -> ProviderUsage | None:
    if usage is None:
        return None

    def get(name: str) -> int:
        value = usage.get(name) if isinstance(usage, dict) else getattr(usage, name, None)
        return int(value or 0)

    return ProviderUsage(
        input_tokens=get("input_tokens"),
        output_tokens=get("output_tokens"),
        cache_read_input_tokens=get("cache_read_input_tokens"),
        cache_creation_input_tokens=get("cache_creation_input_tokens"),
    )


def message_from_anthropic(response: Any) -> Message:
    """Our assistant message from an Anthropic Messages response (SDK object or dict)."""

    def get(obj: Any, name: str, default: Any = None) -> Any:
        return obj.get(name, default) if isinstance(obj, dict) else getattr(obj, name, default)

    blocks: list[Any] = []
    for block in get(response, "content", None) or []:
        kind = get(block, "type")
        if kind == "text":
            blocks.append(TextBlock(text=get(block, "text", "")))
        elif kind == "thinking":
            blocks.append(
                ThinkingBlock(thinking=get(block, "thinking", ""), signature=get(block, "signature"))
            )
        elif kind == "redacted_thinking":
            blocks.append(ThinkingBlock(redacted=True, data=get(block, "data")))
        elif kind in ("tool_use", "server_tool_use"):
            blocks.append(
                ToolUseBlock(
                    id=get(block, "id"), name=get(block, "name"), input=dict(get(block, "input") or {})
                )
            )
        else:
            logger.debug("ignoring anthropic content block of type %r", kind)
    meta = {k: v for k in ("id", "stop_reason", "model") if (v := get(response, k)) is not None}
    return Message(role="assistant", content=blocks, id=get(response, "id"), meta=meta)


def anthropic_wire_request(request: ModelRequest, model: str) -> WireRequest:
    """The Messages API call for ``request``: its prepared payload, else one built from it."""
    body = dict(request.payload) if request.payload else anthropic_body(request)
    body["model"] = body.get("model") or model
    body.setdefault("max_tokens", request.max_output_tokens)
    return WireRequest(ANTHROPIC_MESSAGES, "/v1/messages", body)


def anthropic_body(request: ModelRequest) -> dict[str, Any]:
    """A Messages API body for a request that came without one (system prompt as one section)."""
    from engine.prompt import PromptBuilder, to_anthropic_request

    prompt = PromptBuilder(get_tokenizer(request.model)).add("base_instructions", request.system).build()
    return to_anthropic_request(
        prompt, request.messages, request.tools, model=request.model, max_tokens=request.max_output_tokens
    )


# -- scripted --------------------------------------------------------------------------------

ScriptStep = Message | str | BaseException | Callable[[ModelRequest], "Message | str"]


class ScriptedClient:
    """Plays back scripted assistant turns; for demos and tests.

    Each step is an assistant :class:`Message`, a string (a plain text reply), an exception
    instance (raised, e.g. a ContextLengthExceededError once), or a callable that receives the
    :class:`ModelRequest` and returns a message or string (to answer with data only known at
    run time, such as an offloaded result's ref id). Usage is simulated from our own counts,
    times ``usage_ratio`` (the provider never counts quite like us); with cache breakpoints in
    the request, the prefix shared with the previous request is reported as cache reads.
    ``context_window`` makes the client reject, like a provider, prompts whose simulated count
    plus ``max_output_tokens`` does not fit (so a ratio above 1 rejects what our estimate let through).
    """

    def __init__(
        self,
        steps: Iterable[ScriptStep],
        *,
        model: str = "claude-sonnet-4-6",
        provider: str = "anthropic",
        tokenizer: Tokenizer | str | None = None,
        usage_ratio: float = 1.0,
        context_window: int | None = None,
    ) -> None:
        self.model = model
        self.provider = provider
        self._steps: deque[ScriptStep] = deque(steps)
        self._tokenizer = (
            get_tokenizer(tokenizer or model) if not isinstance(tokenizer, Tokenizer) else tokenizer
        )
        self.usage_ratio = usage_ratio
        self.context_window = context_window
        self.requests: list[ModelRequest] = []
        self._previous: tuple[str, tuple[str, ...], tuple[str, ...]] | None = None

    def __repr__(self) -> str:
        return f"ScriptedClient(model={self.model!r}, {len(self._steps)} steps left)"

    @property
    def remaining(self) -> int:
        return len(self._steps)

    def add(self, *steps: ScriptStep) -> None:
        """Append more scripted steps."""
        self._steps.extend(steps)

    def wire_request(self, request: ModelRequest) -> WireRequest | None:
        """What an Anthropic provider would be sent; None when it imitates another provider."""
        return anthropic_wire_request(request, self.model) if self.provider == "anthropic" else None

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        prompt = request.estimated_prompt_tokens or self._count_prompt(request)
        counted = round(prompt * self.usage_ratio)  # what the simulated provider counts
        if self.context_window is not None and counted + request.max_output_tokens > self.context_window:
            raise ContextLengthExceededError(
                f"prompt is too long: {counted} tokens + {request.max_output_tokens} max_tokens > "
                f"{self.context_window} maximum",
                provider=self.provider,
                status=400,
            )
        if not self._steps:
            raise ValidationError(
                f"scripted client has no step left for request {len(self.requests)}", field="steps"
            )
        step = self._steps.popleft()
        if isinstance(step, BaseException):
            raise step
        if callable(step) and not isinstance(step, Message):
            step = step(request)
        message = assistant(step) if isinstance(step, str) else step
        if not isinstance(message, Message) or message.role != "assistant":
            raise ValidationError(
                f"scripted step must give an assistant message, got {message!r}", field="steps"
            )
        usage = self._simulate_usage(request, prompt, message)
        stop = "tool_use" if message.tool_use_ids else "end_turn"
        return ModelResponse(message=message, usage=usage, stop_reason=stop, model=self.model)

    def _count_prompt(self, request: ModelRequest) -> int:
        t = self._tokenizer
        return (
            t.count(request.system) + t.count_tools(list(request.tools)) + t.count_messages(request.messages)
        )

    def _simulate_usage(self, request: ModelRequest, prompt: int, message: Message) -> ProviderUsage:
        t = self._tokenizer
        total = round(prompt * self.usage_ratio)
        output = round(t.count_message(message) * self.usage_ratio)
        # What a provider caches is what it was sent: the payload's system prompt when there is one
        # (the context status travels after the conversation there), else the request's own.
        sent = sent_system_text(dict(request.payload)) if request.payload else None
        system = request.system if sent is None else sent
        key = (system, tuple(json.dumps(x, sort_keys=True) for x in request.tools),
               tuple(m.content_hash for m in request.messages))  # fmt: skip
        previous, self._previous = self._previous, key
        if not request.has_cache_breakpoints:
            return ProviderUsage(input_tokens=total, output_tokens=output)
        cached = 0
        if previous is not None and previous[0] == key[0] and previous[1] == key[1]:
            shared = _common_prefix(previous[2], key[2])
            if shared:
                cached = t.count(system) + t.count_tools(list(request.tools))
                cached += sum(t.count_message(m) for m in request.messages[:shared])
        cached = min(round(cached * self.usage_ratio), total)
        last = round(t.count_message(request.messages[-1]) * self.usage_ratio) if request.messages else 0
        uncached = min(last, total - cached)
        return ProviderUsage(
            input_tokens=uncached,
            cache_read_input_tokens=cached,
            cache_creation_input_tokens=total - cached - uncached,
            output_tokens=output,
        )


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n
