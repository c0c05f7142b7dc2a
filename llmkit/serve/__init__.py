"""HTTP -> chat: the gateway (keys, limits) and the continuous-batching engine behind the
Anthropic Messages and OpenAI Chat Completions APIs (``llmkit serve``)."""
