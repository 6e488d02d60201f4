"""OpenAIClient: a :class:`~engine.clients.ModelClient` for OpenAI-compatible servers.

Speaks Chat Completions (``api="chat"``: OpenAI, vLLM, Ollama, a LiteLLM proxy, ctxdesk's own
proxy) or Responses (``api="responses"``, streamed and read to ``response.completed``) at any
``base_url``, through the ``openai`` SDK. The body is built from the request's system prompt,
messages and tools (``request.payload`` is another provider's shape and is not used).
Failures map to the same typed errors as AnthropicClient's; no key is kept on the object.
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from engine.clients import (
    ModelRequest,
    ModelResponse,
    OwnedSdkClient,
    provider_error_from_status,
    provider_unreachable,
)
from engine.convert import from_openai, to_openai
from engine.errors import ContextLengthExceededError, ProviderError, ValidationError
from engine.events import ProviderUsage
from engine.messages import Message, TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from engine.tokens import tool_parts
from engine.wire_requests import OPENAI_CHAT, OPENAI_RESPONSES, WireRequest

OpenAIApi = Literal["chat", "responses"]
#: OpenAI's own phrasing of a prompt over the window (code ``context_length_exceeded``).
CONTEXT_LENGTH = re.compile(r"context_length_exceeded|maximum context length|context window", re.IGNORECASE)


class OpenAIClient(OwnedSdkClient):
    """Calls an OpenAI-compatible API; ``client`` may be a ready ``openai.OpenAI`` (tests)."""

    def __init__(
        self,
        model: str,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        *,
        api: OpenAIApi = "chat",
        provider: str = "openai",
        max_tokens_param: str | None = None,
        max_retries: int = 2,
        timeout: float = 600.0,
    ) -> None:
        if not model:
            raise ValidationError("model must be a non-empty string", field="model", value=model)
        if api not in ("chat", "responses"):
            raise ValidationError(f"api must be 'chat' or 'responses', got {api!r}", field="api", value=api)
        self.model = model
        self.api = api
        self.provider = provider
        self._use_client(client, "openai", "OpenAI", api_key=api_key, base_url=base_url,
                         max_retries=max_retries, timeout=timeout)  # fmt: skip
        official = "api.openai.com" in str(getattr(self._client, "base_url", ""))
        #: Chat Completions' output cap: OpenAI's reasoning models want max_completion_tokens,
        #: many compatible servers only know max_tokens.
        self.max_tokens_param = max_tokens_param or ("max_completion_tokens" if official else "max_tokens")

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, api={self.api!r})"

    def complete(self, request: ModelRequest) -> ModelResponse:
        import openai

        try:
            if self.api == "chat":
                return self._chat(request)
            return self._responses(request)
        except openai.APIStatusError as exc:
            detail = _detail(exc)
            if exc.status_code in (400, 413) and CONTEXT_LENGTH.search(detail):
                raise ContextLengthExceededError(
                    f"{self.provider} rejected the prompt as too long (HTTP {exc.status_code}: {detail})",
                    provider=self.provider,
                    status=exc.status_code,
                ) from exc
            raise provider_error_from_status(exc.status_code, detail, provider=self.provider) from exc
        except openai.APIConnectionError as exc:  # includes APITimeoutError
            raise provider_unreachable(self.provider, exc) from exc

    def wire_request(self, request: ModelRequest) -> WireRequest:
        """The call :meth:`complete` makes for ``request`` (the Responses API streams)."""
        if self.api == "chat":
            return WireRequest(OPENAI_CHAT, "/v1/chat/completions", self.chat_body(request))
        return WireRequest(
            OPENAI_RESPONSES, "/v1/responses", {**self.responses_body(request), "stream": True}
        )

    # -- Chat Completions ----------------------------------------------------------------------
    def chat_body(self, request: ModelRequest) -> dict[str, Any]:
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": request.system}] if request.system else []
        )
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "messages": messages + to_openai(request.messages),
            self.max_tokens_param: request.max_output_tokens,
        }
        if request.tools:
            body["tools"] = [{"type": "function", "function": _function(t)} for t in request.tools]
        return body

    def _chat(self, request: ModelRequest) -> ModelResponse:
        response = self._client.chat.completions.create(**self.chat_body(request))
        choice = response.choices[0]
        raw = choice.message.model_dump(exclude_none=True)
        message = from_openai([raw])[0]
        return ModelResponse(
            message=message.model_copy(update={"id": response.id}),
            usage=usage_from_openai(response.usage),
            stop_reason=choice.finish_reason,
            model=response.model,
        )

    # -- Responses ------------------------------------------------------------------------------
    def responses_body(self, request: ModelRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model or self.model,
            "input": responses_input(request.messages),
            "max_output_tokens": request.max_output_tokens,
            "store": False,
        }
        if request.system:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = [{"type": "function", **_function(t)} for t in request.tools]
        return body

    def _responses(self, request: ModelRequest) -> ModelResponse:
        final = None
        for event in self._client.responses.create(**self.responses_body(request), stream=True):
            if event.type in ("response.completed", "response.incomplete"):
                final = event.response
            elif event.type in ("response.failed", "error"):
                error = getattr(getattr(event, "response", None), "error", None) or event
                raise ProviderError(
                    f"{self.provider} response failed: {getattr(error, 'message', error)}",
                    provider=self.provider,
                    retryable=False,
                )
        if final is None:
            raise ProviderError(
                f"{self.provider} stream ended without a final response",
                provider=self.provider,
                retryable=True,
            )
        return ModelResponse(
            message=message_from_responses(final.output, response_id=final.id),
            usage=usage_from_openai(final.usage),
            stop_reason="tool_use" if any(i.type == "function_call" for i in final.output) else final.status,
            model=final.model,
        )


def _function(tool: dict[str, Any]) -> dict[str, Any]:
    name, description, schema = tool_parts(tool)
    out: dict[str, Any] = {"name": name, "parameters": schema or {"type": "object", "properties": {}}}
    if description:
        out["description"] = description
    return out


def _detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            parts = [str(error.get(k)) for k in ("code", "message") if error.get(k)]
            if parts:
                return ": ".join(parts)
    return str(getattr(exc, "message", "") or exc)


def usage_from_openai(usage: Any) -> ProviderUsage | None:
    """ProviderUsage from Chat Completions or Responses usage: input counts uncached input only."""
    if usage is None:
        return None
    data = usage if isinstance(usage, dict) else usage.model_dump()
    prompt = int(data.get("prompt_tokens", data.get("input_tokens")) or 0)
    details = data.get("prompt_tokens_details") or data.get("input_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    output = int(data.get("completion_tokens", data.get("output_tokens")) or 0)
    return ProviderUsage.from_prompt_total(prompt, output, cache_read=cached)


def responses_input(messages: Any) -> list[dict[str, Any]]:
    """Our messages as Responses input items (messages, function calls and their outputs)."""
    items: list[dict[str, Any]] = []
    for message in messages:
        blocks = [TextBlock(text=message.content)] if isinstance(message.content, str) else message.content
        role = "assistant" if message.role == "assistant" else "user"
        text: list[str] = []

        def flush(role: str = role, text: list[str] = text) -> None:
            if text:
                items.append({"role": role, "content": "\n".join(text)})
                text.clear()

        for block in blocks:
            if isinstance(block, TextBlock):
                text.append(block.text)
            elif isinstance(block, ToolUseBlock):
                flush()
                items.append(
                    {
                        "type": "function_call",
                        "call_id": block.id,
                        "name": block.name,
                        "arguments": json.dumps(block.input),
                    }
                )
            elif isinstance(block, ToolResultBlock):
                flush()
                content = block.content if isinstance(block.content, str) else _result_text(block.content)
                items.append(
                    {"type": "function_call_output", "call_id": block.tool_use_id, "output": content}
                )
        flush()
    return items


def _result_text(content: list[Any]) -> str:
    return "\n".join(getattr(part, "text", "") for part in content if getattr(part, "text", None))


def message_from_responses(output: Any, *, response_id: str | None = None) -> Message:
    """Our assistant message from Responses output items (SDK objects or dicts)."""
    blocks: list[Any] = []
    for item in output or []:
        data = item if isinstance(item, dict) else item.model_dump()
        kind = data.get("type")
        if kind == "message":
            for part in data.get("content") or []:
                if part.get("type") in ("output_text", "text"):
                    blocks.append(TextBlock(text=part.get("text", "")))
        elif kind == "function_call":
            try:
                arguments = json.loads(data.get("arguments") or "{}")
            except json.JSONDecodeError:
                arguments = {"arguments": data.get("arguments")}
            blocks.append(ToolUseBlock(id=data["call_id"], name=data["name"], input=arguments))
        elif kind == "reasoning":
            summary = "\n".join(s.get("text", "") for s in data.get("summary") or [])
            if summary:
                blocks.append(ThinkingBlock(thinking=summary))
    return Message(role="assistant", content=blocks, id=response_id)
