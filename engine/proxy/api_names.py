"""The names of the APIs the proxy understands, and which provider serves each (imported by
:mod:`engine.proxy.apis` and :mod:`engine.proxy.responses`)."""

ANTHROPIC_MESSAGES = "anthropic_messages"
ANTHROPIC_COUNT_TOKENS = "anthropic_count_tokens"
OPENAI_CHAT = "openai_chat"
OPENAI_RESPONSES = "openai_responses"
PASSTHROUGH = "passthrough"

#: Model-call APIs (count_tokens and passthrough are recorded, but are not model calls).
MODEL_CALL_APIS = (ANTHROPIC_MESSAGES, OPENAI_CHAT, OPENAI_RESPONSES)
PROVIDERS = {
    ANTHROPIC_MESSAGES: "anthropic",
    ANTHROPIC_COUNT_TOKENS: "anthropic",
    OPENAI_CHAT: "openai",
    OPENAI_RESPONSES: "openai",
}
