"""The names of the APIs the proxy understands (each a :class:`engine.proxy.wire.WireApi`), as
recorded in ``model_requests.api``."""

ANTHROPIC_MESSAGES = "anthropic_messages"
ANTHROPIC_COUNT_TOKENS = "anthropic_count_tokens"
OPENAI_CHAT = "openai_chat"
OPENAI_RESPONSES = "openai_responses"
OPENAI_RESPONSES_COMPACT = "openai_responses_compact"
PASSTHROUGH = "passthrough"
