"""HTTP -> chat: the gateway (keys, limits) and the continuous-batching engine behind the
Anthropic Messages and OpenAI Chat Completions APIs (``llmkit serve``).

The public names, by module (imported from there, so ``import llmkit.serve.paged`` stays light):

    llmkit.serve.command        main (llmkit serve), BackgroundServer and ServerProcess (a server in a
                                thread or a process, for tests and notebooks), sdk_lines
    llmkit.serve.app            the FastAPI app: both APIs' routes, /v1/models, /v1/stats
    llmkit.serve.gateway        API keys and per-key request and token rate limits
    llmkit.serve.engine         the engine: one thread decodes every running request together
    llmkit.serve.paged          the KV block pool, block tables and the forward pass that reads them
    llmkit.serve.packed         linear layers whose weights are laid out once for the CPU's matrix kernel

Behind the routes: ``anthropic_api`` and ``openai_api`` (each API's request and reply shapes),
``requests`` (the checks both share), ``errors`` (each API's error shape and status),
``sequence`` (one request inside the engine) and ``relay`` (a request's events to the event loop).
"""
